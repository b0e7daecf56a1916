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
}

pub fn run(cmd: PkiCommand) -> Result<()> {
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
    }
}
