//! Chain names: kube-proxy's stable hashes (sha256, base32) — 16 characters for the iptables
//! mode's `KUBE-SVC-<hash>`, 8 plus the readable service port for the nftables mode's
//! `service-<hash>-<ns>/<name>/<proto>/<port>`.

use crate::model::{Endpoint, ServicePort};
use sha2::{Digest, Sha256};

const BASE32: &[u8; 32] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZ234567";

/// The first `n` (at most 16) characters of the standard (RFC 4648) base32 encoding of
/// sha256(`input`): 16 characters carry 80 bits, so only the first 10 bytes matter.
fn base32_sha256(input: &str, n: u32) -> String {
    let digest = Sha256::digest(input.as_bytes());
    let mut bits: u128 = 0;
    for byte in &digest[..10] {
        bits = (bits << 8) | u128::from(*byte);
    }
    (16 - n..16).rev().map(|i| char::from(BASE32[((bits >> (i * 5)) & 0x1f) as usize])).collect()
}

/// The first 16 characters of base32(sha256(`input`)), as kube-proxy's iptables mode uses.
pub fn hash16(input: &str) -> String {
    base32_sha256(input, 16)
}

/// `KUBE-SVC-<hash>` for a service port: hash of "namespace/name:port" + lowercase protocol.
pub fn service_chain(port_name: &str, protocol: &str) -> String {
    format!("KUBE-SVC-{}", hash16(&format!("{port_name}{protocol}")))
}

/// `KUBE-SVL-<hash>`: the service port's local-endpoints chain (same hash as its SVC chain).
pub fn local_chain(port_name: &str, protocol: &str) -> String {
    format!("KUBE-SVL-{}", hash16(&format!("{port_name}{protocol}")))
}

/// `KUBE-EXT-<hash>`: where NodePort and external IP traffic enters (same hash as its SVC chain).
pub fn external_chain(port_name: &str, protocol: &str) -> String {
    format!("KUBE-EXT-{}", hash16(&format!("{port_name}{protocol}")))
}

/// `KUBE-SEP-<hash>` for one endpoint ("ip:port") of a service port.
pub fn endpoint_chain(port_name: &str, protocol: &str, endpoint: &str) -> String {
    format!("KUBE-SEP-{}", hash16(&format!("{port_name}{protocol}{endpoint}")))
}

/// The nftables mode's name for a service port, after the chain prefix: "<hash>-ns/name/proto/port",
/// the hash (8 characters) taken of the rest, as kube-proxy's nftables mode names it. Namespace,
/// service and port names never contain '/', so the name reads back unambiguously.
pub fn nft_service(sp: &ServicePort) -> String {
    hashed(format!("{}/{}/{}/{}", sp.namespace, sp.name, sp.protocol, sp.port_name))
}

/// The nftables mode's name for one endpoint of a service port, after the chain or set prefix:
/// "<hash>-ns/name/proto/port__ip/port".
pub fn nft_endpoint(sp: &ServicePort, ep: &Endpoint) -> String {
    hashed(format!("{}/{}/{}/{}__{}/{}", sp.namespace, sp.name, sp.protocol, sp.port_name, ep.ip, ep.port))
}

fn hashed(name: String) -> String {
    let mut out = base32_sha256(&name, 8);
    out.push('-');
    out.push_str(&name);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    // Expected names as kube-proxy prints them (its own tests and real clusters).
    #[test]
    fn service_chains_match_kube_proxy() {
        assert_eq!(service_chain("default/kubernetes:https", "tcp"), "KUBE-SVC-NPX46M4PTMTKRN6Y");
        assert_eq!(service_chain("kube-system/kube-dns:dns", "udp"), "KUBE-SVC-TCOU7JCQXEZGVUNU");
        assert_eq!(service_chain("kube-system/kube-dns:dns-tcp", "tcp"), "KUBE-SVC-ERIFXISQEP7F7OF4");
        assert_eq!(service_chain("ns1/svc1:p80", "tcp"), "KUBE-SVC-XPGD46QRK7WJZT7O");
        assert_eq!(external_chain("ns1/svc1:p80", "tcp"), "KUBE-EXT-XPGD46QRK7WJZT7O");
        assert_eq!(local_chain("ns1/svc1:p80", "tcp"), "KUBE-SVL-XPGD46QRK7WJZT7O");
    }

    #[test]
    fn endpoint_chains_match_kube_proxy() {
        assert_eq!(endpoint_chain("ns1/svc1:p80", "tcp", "10.180.0.1:80"), "KUBE-SEP-SXIVWICOYRO3J4NJ");
        assert_eq!(endpoint_chain("ns1/svc1:p80", "tcp", "10.180.2.1:80"), "KUBE-SEP-ZX7GRIZKSNUQ3LAJ");
    }

    #[test]
    fn names_are_stable_and_fit_iptables_limit() {
        let a = endpoint_chain("a-very-long-namespace-name/a-very-long-service-name:http", "sctp", "10.0.0.1:8080");
        assert_eq!(
            a,
            endpoint_chain("a-very-long-namespace-name/a-very-long-service-name:http", "sctp", "10.0.0.1:8080")
        );
        assert!(a.len() <= 28, "{a}");
        assert_ne!(service_chain("ns/a:p", "tcp"), service_chain("ns/a:p", "udp"));
    }

    // As kube-proxy's nftables mode names them (its tests' "ns1/svc1" port "p80").
    #[test]
    fn nftables_names_match_kube_proxy() {
        let sp = ServicePort::new("ns1", "svc1", "p80", "172.30.0.41".parse().expect("ip"), 80);
        assert_eq!(nft_service(&sp), "ULMVA6XW-ns1/svc1/tcp/p80");
        let ep = Endpoint::ready("10.180.0.1".parse().expect("ip"), 80, false);
        assert_eq!(nft_endpoint(&sp, &ep), "5OJB2KTY-ns1/svc1/tcp/p80__10.180.0.1/80");
    }
}
