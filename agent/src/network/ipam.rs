//! Pod addresses out of the node's podCIDR, persisted as one file per address under
//! `<root-dir>/network/ipam/` (as CNI's host-local plugin does): the file name is the address,
//! its content says which pod holds it. `create_new` makes handing an address out twice
//! impossible even across agent restarts; releasing is removing the file.

use std::collections::BTreeSet;
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};

use ipnet::Ipv4Net;
use serde::{Deserialize, Serialize};

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("no free address left in {0}")]
    Exhausted(Ipv4Net),
    #[error("IPAM state {path}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// A hostPort mapping of the pod holding an address (kept with the address so the node's
/// DNAT rules can be rebuilt from disk after a restart).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct HostPort {
    pub protocol: String,
    pub host_port: u16,
    pub container_port: u16,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host_ip: Option<Ipv4Addr>,
}

/// What an address file holds.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Lease {
    pub uid: String,
    /// `namespace/name`, for people reading the directory.
    pub pod: String,
    #[serde(default)]
    pub host_ports: Vec<HostPort>,
}

#[derive(Clone, Debug)]
pub struct Ipam {
    dir: PathBuf,
}

impl Ipam {
    pub fn new(dir: impl Into<PathBuf>) -> Ipam {
        Ipam { dir: dir.into() }
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    fn io(&self, path: &Path) -> impl FnOnce(std::io::Error) -> Error + '_ {
        let path = path.to_path_buf();
        move |source| Error::Io { path, source }
    }

    /// Every address handed out, with its lease.
    pub fn leases(&self) -> Vec<(Ipv4Addr, Lease)> {
        let mut out = Vec::new();
        for entry in std::fs::read_dir(&self.dir).into_iter().flatten().flatten() {
            let Ok(ip) = entry.file_name().to_string_lossy().parse::<Ipv4Addr>() else { continue };
            let Ok(text) = std::fs::read(entry.path()) else { continue };
            if let Ok(lease) = serde_json::from_slice::<Lease>(&text) {
                out.push((ip, lease));
            }
        }
        out.sort_by_key(|(ip, _)| *ip);
        out
    }

    /// The address the pod holds, if any.
    pub fn lookup(&self, uid: &str) -> Option<Ipv4Addr> {
        self.leases().into_iter().find(|(_, l)| l.uid == uid).map(|(ip, _)| ip)
    }

    /// The pod's address in `cidr`: the one it already holds, or the next free one after the
    /// last handed out (so a just-released address is not reused at once). The network
    /// address, the gateway (first host) and the broadcast address are never handed out.
    pub fn allocate(&self, cidr: Ipv4Net, lease: &Lease) -> Result<Ipv4Addr> {
        std::fs::create_dir_all(&self.dir).map_err(self.io(&self.dir))?;
        if let Some((ip, old)) = self.leases().into_iter().find(|(ip, l)| l.uid == lease.uid && cidr.contains(ip)) {
            if &old != lease {
                self.write(ip, lease)?;
            }
            return Ok(ip);
        }
        let hosts: Vec<Ipv4Addr> = cidr.hosts().skip(1).collect();
        if hosts.is_empty() {
            return Err(Error::Exhausted(cidr));
        }
        let last_path = self.dir.join("last-reserved");
        let last: Option<Ipv4Addr> = std::fs::read_to_string(&last_path).ok().and_then(|s| s.trim().parse().ok());
        let start = last.and_then(|l| hosts.iter().position(|h| *h == l)).map_or(0, |i| i + 1);
        let body = serde_json::to_vec(lease).unwrap_or_default();
        for i in 0..hosts.len() {
            let ip = hosts[(start + i) % hosts.len()];
            let path = self.dir.join(ip.to_string());
            match std::fs::OpenOptions::new().write(true).create_new(true).open(&path) {
                Ok(mut f) => {
                    use std::io::Write;
                    f.write_all(&body).map_err(self.io(&path))?;
                    std::fs::write(&last_path, ip.to_string()).map_err(self.io(&last_path))?;
                    return Ok(ip);
                }
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
                Err(source) => return Err(Error::Io { path, source }),
            }
        }
        Err(Error::Exhausted(cidr))
    }

    fn write(&self, ip: Ipv4Addr, lease: &Lease) -> Result<()> {
        let path = self.dir.join(ip.to_string());
        let tmp = self.dir.join(format!(".{ip}.tmp"));
        std::fs::write(&tmp, serde_json::to_vec(lease).unwrap_or_default()).map_err(self.io(&tmp))?;
        std::fs::rename(&tmp, &path).map_err(self.io(&path))
    }

    /// Releases whatever the pod holds.
    pub fn release(&self, uid: &str) -> Result<()> {
        for (ip, _) in self.leases().into_iter().filter(|(_, l)| l.uid == uid) {
            let path = self.dir.join(ip.to_string());
            match std::fs::remove_file(&path) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(source) => return Err(Error::Io { path, source }),
            }
        }
        Ok(())
    }

    /// Releases the addresses of pods not in `live`; returns the uids released.
    pub fn release_all_but(&self, live: &BTreeSet<String>) -> Result<Vec<String>> {
        let mut released = Vec::new();
        for (_, lease) in self.leases() {
            if !live.contains(&lease.uid) {
                self.release(&lease.uid)?;
                released.push(lease.uid);
            }
        }
        Ok(released)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lease(uid: &str) -> Lease {
        Lease { uid: uid.into(), pod: format!("default/{uid}"), host_ports: vec![] }
    }

    fn cidr(s: &str) -> Ipv4Net {
        s.parse().expect("cidr")
    }

    #[test]
    fn hands_out_each_address_once_and_skips_gateway_and_broadcast() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let ipam = Ipam::new(tmp.path().join("ipam"));
        let net = cidr("10.244.3.0/29"); // hosts .1-.6; .1 is the gateway
        let mut got = Vec::new();
        for i in 0..5 {
            got.push(ipam.allocate(net, &lease(&format!("p{i}"))).expect("allocate"));
        }
        let want: Vec<Ipv4Addr> = (2..=6).map(|i| Ipv4Addr::new(10, 244, 3, i)).collect();
        assert_eq!(got, want);
        assert!(matches!(ipam.allocate(net, &lease("p5")), Err(Error::Exhausted(_))));
    }

    #[test]
    fn the_same_pod_keeps_its_address_across_restarts() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let net = cidr("10.244.0.0/24");
        let a = Ipam::new(tmp.path()).allocate(net, &lease("a")).expect("allocate");
        // A new Ipam over the same directory is what an agent restart sees.
        let again = Ipam::new(tmp.path()).allocate(net, &lease("a")).expect("allocate");
        assert_eq!(a, again);
        assert_eq!(Ipam::new(tmp.path()).lookup("a"), Some(a));
    }

    #[test]
    fn released_addresses_are_reused_only_after_the_others() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let ipam = Ipam::new(tmp.path());
        let net = cidr("10.244.0.0/29");
        let a = ipam.allocate(net, &lease("a")).expect("a");
        ipam.release("a").expect("release");
        assert_eq!(ipam.lookup("a"), None);
        let b = ipam.allocate(net, &lease("b")).expect("b");
        assert_ne!(a, b, "a just-released address is not handed out again at once");
        for uid in ["c", "d", "e"] {
            ipam.allocate(net, &lease(uid)).expect("allocate");
        }
        assert_eq!(ipam.allocate(net, &lease("f")).expect("wraps around"), a);
    }

    #[test]
    fn release_all_but_frees_pods_that_are_gone() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let ipam = Ipam::new(tmp.path());
        let net = cidr("10.244.0.0/24");
        for uid in ["a", "b", "c"] {
            ipam.allocate(net, &lease(uid)).expect("allocate");
        }
        let live: BTreeSet<String> = ["b".to_string()].into();
        let mut released = ipam.release_all_but(&live).expect("release");
        released.sort();
        assert_eq!(released, vec!["a", "c"]);
        assert_eq!(ipam.leases().len(), 1);
    }

    #[test]
    fn updating_a_lease_keeps_the_address() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let ipam = Ipam::new(tmp.path());
        let net = cidr("10.244.0.0/24");
        let ip = ipam.allocate(net, &lease("a")).expect("allocate");
        let mut with_port = lease("a");
        with_port.host_ports.push(HostPort {
            protocol: "TCP".into(),
            host_port: 8080,
            container_port: 80,
            host_ip: None,
        });
        assert_eq!(ipam.allocate(net, &with_port).expect("again"), ip);
        assert_eq!(ipam.leases()[0].1.host_ports.len(), 1);
    }
}
