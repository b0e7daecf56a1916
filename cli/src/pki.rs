//! `kaji pki`: the cluster's certificates, laid out as kubeadm lays out /etc/kubernetes (see
//! `kaji_pki::layout`) — what `kaji lab up` and the installer run.

use anyhow::{Context, Result};
use clap::Subcommand;
use kaji_pki::layout::{InitSpec, Layout};
use std::net::IpAddr;
use std::path::PathBuf;

const DEFAULT_DIR: &str = "/etc/kaji";

#[derive(Subcommand, Debug)]
pub enum PkiCommand {
    /// Make the cluster CA (kept if it exists), the apiserver's serving and kubelet-client
    /// certificates, and the kubeconfigs of admin, scheduler, controller manager and proxy.
    Init {
        /// Where the files go (pki/ for certificates and keys, *.conf for kubeconfigs).
        #[arg(long, default_value = DEFAULT_DIR)]
        dir: PathBuf,
        /// The apiserver URL the kubeconfigs use (default: https://<first --ip, else 127.0.0.1>:6443).
        #[arg(long)]
        server: Option<String>,
        /// An address the apiserver answers on (repeatable; 127.0.0.1 is always in).
        #[arg(long = "ip")]
        ips: Vec<IpAddr>,
        /// A name the apiserver answers on (repeatable; kubernetes, kubernetes.default[.svc[.cluster.local]],
        /// localhost and this host's name are always in).
        #[arg(long = "dns")]
        dns_names: Vec<String>,
        /// The Service range; its first address (the `kubernetes` Service) is in the certificate.
        #[arg(long, default_value = "10.96.0.0/12")]
        service_cluster_ip_range: ipnet::Ipv4Net,
    },
    /// Issue a node's client kubeconfig (system:node:<name>) and its agent serving certificate,
    /// for nodes that do not join with a bootstrap token.
    Node {
        #[arg(long, default_value = DEFAULT_DIR)]
        dir: PathBuf,
        #[arg(long)]
        name: String,
        /// The node's addresses (in its serving certificate).
        #[arg(long = "ip")]
        ips: Vec<IpAddr>,
        /// The apiserver URL its kubeconfig uses.
        #[arg(long)]
        server: String,
    },
    /// Print the CA's hash (sha256:<hex of its public key>), what a joining node pins.
    CaHash {
        #[arg(long, default_value = DEFAULT_DIR)]
        dir: PathBuf,
    },
    /// Join discovery (kubeadm's token discovery, pinned): fetch the cluster CA from --server's
    /// TLS handshake, keep it only if its public key hashes to --ca-hash and the server's
    /// certificate verifies against it, then write <dir>/pki/ca.crt and the bootstrap kubeconfig
    /// <dir>/bootstrap-kubelet.conf with --token.
    Join {
        #[arg(long, default_value = DEFAULT_DIR)]
        dir: PathBuf,
        /// The apiserver, https://HOST:PORT.
        #[arg(long)]
        server: String,
        /// A bootstrap token, <id>.<secret> (`kaji token create`).
        #[arg(long)]
        token: String,
        /// sha256:<64 hex digits>, what `kaji pki ca-hash` prints on the server.
        #[arg(long)]
        ca_hash: String,
    },
    /// A self-signed serving pair for a node's agent port (kubelet's own when the cluster CA has
    /// issued none): <cert-dir>/kubelet.crt and kubelet.key, kept if they exist.
    SelfSigned {
        #[arg(long)]
        cert_dir: PathBuf,
        /// The node's name (in the certificate).
        #[arg(long)]
        name: String,
        /// The node's addresses (in the certificate).
        #[arg(long = "ip")]
        ips: Vec<IpAddr>,
    },
}

/// A bootstrap token's shape, `[a-z0-9]{6}.[a-z0-9]{16}` (kubeadm's BootstrapTokenPattern).
pub fn valid_token(token: &str) -> bool {
    let ok = |s: &str, n: usize| s.len() == n && s.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit());
    token.split_once('.').is_some_and(|(id, secret)| ok(id, 6) && ok(secret, 16))
}

/// The host and port of an `https://HOST[:PORT]` apiserver URL (6443 when no port is given).
pub fn https_host_port(server: &str) -> Result<(String, u16)> {
    let rest = server
        .strip_prefix("https://")
        .with_context(|| format!("--server {server:?}: a joining node needs https://HOST:PORT"))?;
    let authority = rest.split('/').next().unwrap_or_default();
    let (host, port) = match authority.rsplit_once(':') {
        Some((h, p)) if !h.ends_with(']') || h.starts_with('[') => {
            (h, p.parse::<u16>().with_context(|| format!("--server {server:?}: bad port {p:?}"))?)
        }
        _ => (authority, 6443),
    };
    let host = host.trim_start_matches('[').trim_end_matches(']');
    anyhow::ensure!(!host.is_empty(), "--server {server:?}: no host");
    Ok((host.to_string(), port))
}

pub async fn run(cmd: PkiCommand) -> Result<()> {
    match cmd {
        PkiCommand::Init { dir, server, ips, mut dns_names, service_cluster_ip_range } => {
            let host = kaji_pki::layout::host_name();
            dns_names.extend(host);
            let first = ips.first().copied().unwrap_or(IpAddr::from([127, 0, 0, 1]));
            let server = server.unwrap_or_else(|| format!("https://{}", std::net::SocketAddr::new(first, 6443)));
            let service_ip = service_cluster_ip_range.hosts().next().map(IpAddr::V4);
            let layout = Layout::new(&dir);
            let ca = layout
                .init(&InitSpec { server, ips, dns_names, service_ip })
                .with_context(|| format!("cannot write the certificates in {}", dir.display()))?;
            println!("certificates and kubeconfigs written in {}", dir.display());
            println!("CA hash: {}", ca.spki_hash()?);
            Ok(())
        }
        PkiCommand::Node { dir, name, ips, server } => {
            let layout = Layout::new(&dir);
            let ca = layout.load_ca().with_context(|| format!("no CA in {} (run `kaji pki init`)", dir.display()))?;
            let files = layout.issue_node(&ca, &name, &ips, &server)?;
            println!("{}", files.kubeconfig.display());
            println!("{}", files.serving_cert.display());
            println!("{}", files.serving_key.display());
            Ok(())
        }
        PkiCommand::CaHash { dir } => {
            let layout = Layout::new(&dir);
            let pem = kaji_pki::files::read(&layout.ca_cert())?;
            println!("{}", kaji_pki::cert::spki_sha256(kaji_pki::cert::first_cert(&pem, "ca.crt")?.as_ref())?);
            Ok(())
        }
        PkiCommand::Join { dir, server, token, ca_hash } => {
            anyhow::ensure!(valid_token(&token), "--token: not a bootstrap token (<6 of a-z0-9>.<16 of a-z0-9>)");
            let (host, port) = https_host_port(&server)?;
            let ca_pem = kaji_pki::tls::discover_pinned_ca(&host, port, &ca_hash)
                .await
                .with_context(|| format!("cannot get a CA with hash {ca_hash} from {host}:{port}"))?;
            let layout = Layout::new(&dir);
            kaji_pki::files::write_public(&layout.ca_cert(), &ca_pem)?;
            let kc = kaji_pki::kubeconfig::Kubeconfig {
                cluster: kaji_pki::layout::CLUSTER.into(),
                server,
                ca_pem,
                user: "tls-bootstrap-token-user".into(),
                context: format!("tls-bootstrap-token-user@{}", kaji_pki::layout::CLUSTER),
                credentials: kaji_pki::kubeconfig::Credentials::Token(token),
            };
            let path = layout.kubeconfig("bootstrap-kubelet");
            kaji_pki::files::write_private(&path, &kc.render())?;
            println!("{}", layout.ca_cert().display());
            println!("{}", path.display());
            Ok(())
        }
        PkiCommand::SelfSigned { cert_dir, name, ips } => {
            let (cert, key) = (cert_dir.join("kubelet.crt"), cert_dir.join("kubelet.key"));
            if !(cert.exists() && key.exists()) {
                // kubelet's: a CA of its own (<host>-ca@<time>) that signs the serving certificate.
                let now = jiff::Timestamp::now().as_second();
                let ca = kaji_pki::ca::Ca::generate(&format!("{name}-ca@{now}"), kaji_pki::ca::LEAF_VALIDITY)?;
                let spec = kaji_pki::ca::CertSpec::server(&format!("{name}@{now}"), std::slice::from_ref(&name), &ips);
                let issued = ca.issue(&spec)?;
                kaji_pki::files::write_private(&key, &issued.key_pem)?;
                kaji_pki::files::write_public(&cert, &format!("{}{}", issued.cert_pem, ca.cert_pem()))?;
            }
            println!("{}", cert.display());
            println!("{}", key.display());
            Ok(())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bootstrap_tokens_have_kubeadms_shape() {
        assert!(valid_token("abcdef.0123456789abcdef"));
        for bad in [
            "abcdef0123456789abcdef",
            "ABCDEF.0123456789abcdef",
            "abcde.0123456789abcdef",
            "abcdef.0123456789abcde",
            "",
        ] {
            assert!(!valid_token(bad), "{bad}");
        }
    }

    #[test]
    fn join_takes_host_and_port_of_an_https_url_only() {
        assert_eq!(https_host_port("https://10.0.0.1:6443").expect("url"), ("10.0.0.1".into(), 6443));
        assert_eq!(https_host_port("https://cp.example:443/").expect("url"), ("cp.example".into(), 443));
        assert_eq!(https_host_port("https://cp").expect("url"), ("cp".into(), 6443));
        assert_eq!(https_host_port("https://[fd00::1]:6443").expect("url"), ("fd00::1".into(), 6443));
        for bad in ["http://10.0.0.1:6443", "10.0.0.1:6443", "https://:6443", "https://h:port"] {
            assert!(https_host_port(bad).is_err(), "{bad}");
        }
    }
}
