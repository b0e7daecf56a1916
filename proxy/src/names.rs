//! Chain names: kube-proxy's stable hashes (sha256, base32, first 16 characters).

use sha2::{Digest, Sha256};

const BASE32: &[u8; 32] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZ234567";

/// The first 16 characters of the standard (RFC 4648) base32 encoding of sha256(`input`):
/// 16 characters carry 80 bits, so only the first 10 bytes of the digest matter.
pub fn hash16(input: &str) -> String {
    let digest = Sha256::digest(input.as_bytes());
    let mut bits: u128 = 0;
    for byte in &digest[..10] {
        bits = (bits << 8) | u128::from(*byte);
    }
    (0..16).rev().map(|i| char::from(BASE32[((bits >> (i * 5)) & 0x1f) as usize])).collect()
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
}
