//! Acts out the topology's network plan with iproute2's `ip`, only ever inside the lab's own
//! namespaces (`ip netns add`, `ip -n <ns> …`): the host's network namespace is never touched.

use super::topology::Lab;
use anyhow::{anyhow, bail, Context, Result};
use nix::sched::CloneFlags;
use std::os::unix::fs::MetadataExt as _;
use std::process::{Command, Stdio};

pub const IP: &str = "ip";

/// Runs `ip args…`; a failure names the command and carries ip's own message.
pub fn ip(args: &[String]) -> Result<()> {
    let out = Command::new(IP)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .with_context(|| format!("cannot run `ip {}` (is iproute2 installed?)", args.join(" ")))?;
    if !out.status.success() {
        bail!("`ip {}` failed: {}", args.join(" "), String::from_utf8_lossy(&out.stderr).trim());
    }
    Ok(())
}

/// `ip` arguments that route each node's pod CIDR through the node's address, inside the lab's
/// namespace: the apiserver there reaches pods (admission webhooks, aggregated APIs) as a
/// control plane on a host-gw network does. Nodes without a CIDR or address yet are left out.
pub fn pod_route_plan(lab_netns: &str, nodes: &[k8s_openapi::api::core::v1::Node]) -> Vec<Vec<String>> {
    nodes
        .iter()
        .filter_map(|n| {
            let cidr = n.spec.as_ref()?.pod_cidr.clone()?;
            let addrs = n.status.as_ref()?.addresses.as_ref()?;
            let ip = addrs.iter().find(|a| a.type_ == "InternalIP")?.address.clone();
            Some(["-n", lab_netns, "route", "replace", &cidr, "via", &ip].map(String::from).to_vec())
        })
        .collect()
}

pub fn run_plan(plan: &[Vec<String>]) -> Result<()> {
    plan.iter().try_for_each(|args| ip(args))
}

/// The names of the network namespaces `ip netns` knows (the files in /run/netns).
pub fn namespaces() -> Vec<String> {
    std::fs::read_dir("/run/netns")
        .map(|d| d.filter_map(|e| e.ok()).map(|e| e.file_name().to_string_lossy().into_owned()).collect())
        .unwrap_or_default()
}

pub fn exists(netns: &str) -> bool {
    super::procs::netns_path(netns).exists()
}

/// The nsfs inode of a named namespace: what `/proc/<pid>/ns/net` of its members reads as `net:[ino]`.
pub fn inode(netns: &str) -> Option<u64> {
    std::fs::metadata(super::procs::netns_path(netns)).ok().map(|m| m.ino())
}

/// This lab's namespaces that exist, lab namespace last (nodes' veths go with it).
pub fn lab_namespaces(lab: &Lab) -> Vec<String> {
    let mut mine: Vec<String> = namespaces().into_iter().filter(|n| lab.owns(n)).collect();
    mine.sort_by_key(|n| (n == &lab.netns(), n.clone()));
    mine
}

pub fn delete(netns: &str) -> Result<()> {
    ip(&["netns".into(), "delete".into(), netns.into()])
}

/// Runs `f`'s future to completion on a new thread that first entered `netns`: every socket it
/// opens lives there (a socket keeps the namespace of the thread that created it). Blocking.
pub fn block_on_in<T, Fut, F>(netns: &str, f: F) -> Result<T>
where
    F: FnOnce() -> Fut + Send + 'static,
    Fut: std::future::Future<Output = Result<T>>,
    T: Send + 'static,
{
    let path = super::procs::netns_path(netns);
    let ns = std::fs::File::open(&path).with_context(|| format!("cannot open {}", path.display()))?;
    let netns = netns.to_string();
    std::thread::spawn(move || {
        nix::sched::setns(&ns, CloneFlags::CLONE_NEWNET).with_context(|| format!("cannot enter {netns}"))?;
        tokio::runtime::Builder::new_current_thread().enable_all().build()?.block_on(f())
    })
    .join()
    .map_err(|_| anyhow!("the thread in {} panicked", path.display()))?
}
