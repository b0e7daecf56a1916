//! The pod network on this node (`--pod-network bridge`): the node's `spec.podCIDR` (from the
//! node IPAM controller) on a bridge `kaji0` holding the CIDR's first address as the pods'
//! gateway; per pod a veth pair with `eth0` inside the pod and an address from the CIDR (IPAM
//! under `<root-dir>/network/ipam`); host-gw routes to every other node's podCIDR via its
//! InternalIP; masquerading of pod traffic leaving the cluster CIDR and hostPort DNAT; IP
//! forwarding on. All of it happens in the network namespace the agent runs in — on a real node
//! that is the host's, in `kaji lab` and the tests it is a namespace made for the node.

pub mod ipam;
pub mod links;
pub mod rules;

use std::collections::BTreeSet;
use std::net::{IpAddr, Ipv4Addr};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use ipnet::Ipv4Net;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::Api;
use kube::runtime::watcher;
use kube::runtime::WatchStreamExt;
use tokio::sync::watch;

use ipam::{HostPort, Ipam, Lease};

pub const BRIDGE: &str = "kaji0";
/// Prefix of the node ends of pod veth pairs.
pub const VETH_PREFIX: &str = "veth";

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("network is not ready: node has no podCIDR yet")]
    NoPodCidr,
    #[error("node podCIDR {0:?} is not an IPv4 CIDR")]
    BadPodCidr(String),
    #[error(transparent)]
    Ipam(#[from] ipam::Error),
    #[error(transparent)]
    Link(#[from] links::Error),
    #[error(transparent)]
    Rules(#[from] rules::Error),
    #[error("cannot enable IP forwarding: {0}")]
    Forwarding(#[source] std::io::Error),
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

#[derive(Clone, Debug)]
pub struct Settings {
    /// The whole pod network; traffic from pods to anywhere else is masqueraded.
    pub cluster_cidr: Ipv4Net,
}

pub struct Network {
    settings: Settings,
    node_name: String,
    ipam: Ipam,
    pod_cidr: watch::Sender<Option<Ipv4Net>>,
    /// Serialises bridge, pod and rule changes; holds the last applied rules.
    state: tokio::sync::Mutex<State>,
}

#[derive(Default)]
struct State {
    bridge: Option<(Ipv4Net, u32)>,
    rules: Option<String>,
}

/// The node end of a pod's veth pair: stable for the pod's UID, at most 15 characters.
pub fn veth_name(uid: &str) -> String {
    use sha2::Digest;
    let digest = sha2::Sha256::digest(uid.as_bytes());
    let hex: String = digest.iter().take(4).map(|b| format!("{b:02x}")).collect();
    format!("{VETH_PREFIX}{hex}")
}

/// The pod's hostPort mappings.
pub fn host_ports(pod: &Pod) -> Vec<HostPort> {
    let mut out = Vec::new();
    for c in pod.spec.iter().flat_map(|s| s.containers.iter()) {
        for p in c.ports.iter().flatten() {
            let Some(host_port) = p.host_port.filter(|h| *h > 0 && *h <= 65535) else { continue };
            out.push(HostPort {
                protocol: p.protocol.clone().unwrap_or_else(|| "TCP".into()),
                host_port: host_port as u16,
                container_port: p.container_port.clamp(0, 65535) as u16,
                host_ip: p.host_ip.as_deref().and_then(|h| h.parse().ok()).filter(|h: &Ipv4Addr| !h.is_unspecified()),
            });
        }
    }
    out
}

fn lease_for(pod: &Pod) -> Lease {
    Lease {
        uid: pod.metadata.uid.clone().unwrap_or_default(),
        pod: format!(
            "{}/{}",
            pod.metadata.namespace.as_deref().unwrap_or("default"),
            pod.metadata.name.as_deref().unwrap_or("")
        ),
        host_ports: host_ports(pod),
    }
}

impl Network {
    pub fn new(config: &crate::Config, settings: Settings) -> Arc<Network> {
        Arc::new(Network {
            settings,
            node_name: config.node_name.clone(),
            ipam: Ipam::new(ipam_dir(config)),
            pod_cidr: watch::channel(None).0,
            state: tokio::sync::Mutex::new(State::default()),
        })
    }

    pub fn ipam(&self) -> &Ipam {
        &self.ipam
    }

    pub fn pod_cidr(&self) -> Option<Ipv4Net> {
        *self.pod_cidr.borrow()
    }

    /// Gives the pod its interface and address (or confirms what it has) and returns the address.
    pub async fn attach(&self, pod: &Pod, netns: &Path) -> Result<Ipv4Addr> {
        let cidr = self.pod_cidr().ok_or(Error::NoPodCidr)?;
        let lease = lease_for(pod);
        let mut state = self.state.lock().await;
        let bridge = self.ensure_node(&mut state, cidr).await?;
        let existing = self.ipam.lookup(&lease.uid);
        let ip = self.ipam.allocate(cidr, &lease)?;
        let netns_path = netns.to_path_buf();
        let configured = existing == Some(ip)
            && tokio::task::spawn_blocking(move || links::pod_address(&netns_path)).await.ok().flatten() == Some(ip);
        if !configured {
            let conn = links::connect()?;
            let iface = links::PodInterface {
                host_name: veth_name(&lease.uid),
                ip,
                prefix: cidr.prefix_len(),
                gateway: gateway(cidr),
            };
            links::attach_pod(&conn.handle, bridge, netns, &iface).await?;
            tracing::info!(pod = %lease.pod, %ip, veth = %iface.host_name, "pod attached to the network");
        }
        self.sync_rules(&mut state, cidr).await?;
        Ok(ip)
    }

    /// The address the pod holds, if any.
    pub fn address_of(&self, uid: &str) -> Option<Ipv4Addr> {
        self.ipam.lookup(uid)
    }

    /// Removes the pod's veth and releases its address and hostPorts.
    pub async fn detach(&self, uid: &str) -> Result<()> {
        let mut state = self.state.lock().await;
        let conn = links::connect()?;
        links::delete_link(&conn.handle, &veth_name(uid)).await?;
        let had = self.ipam.lookup(uid);
        self.ipam.release(uid)?;
        if let Some(ip) = had {
            tracing::info!(uid, %ip, "pod address released");
        }
        if let Some(cidr) = self.pod_cidr() {
            self.sync_rules(&mut state, cidr).await?;
        }
        Ok(())
    }

    /// Releases addresses of pods not in `live` (after a restart) and removes their veths.
    pub async fn release_all_but(&self, live: &BTreeSet<String>) -> Result<()> {
        for (_, lease) in self.ipam.leases() {
            if !live.contains(&lease.uid) {
                self.detach(&lease.uid).await?;
            }
        }
        Ok(())
    }

    /// The bridge with the gateway address, IP forwarding on. Returns the bridge's index.
    async fn ensure_node(&self, state: &mut State, cidr: Ipv4Net) -> Result<u32> {
        if let Some((c, index)) = state.bridge {
            if c == cidr {
                return Ok(index);
            }
        }
        // The state dir first: it is what `cleanup` takes as the sign that this agent built a
        // pod network, so a node whose bridge exists but that never ran a pod is cleaned too.
        let dir = self.ipam.dir();
        std::fs::create_dir_all(dir).map_err(|source| ipam::Error::Io { path: dir.to_path_buf(), source })?;
        std::fs::write("/proc/sys/net/ipv4/ip_forward", "1").map_err(Error::Forwarding)?;
        let conn = links::connect()?;
        let index = links::ensure_bridge(&conn.handle, BRIDGE, gateway(cidr), cidr.prefix_len()).await?;
        tracing::info!(bridge = BRIDGE, gateway = %gateway(cidr), pod_cidr = %cidr, "node bridge ready");
        state.bridge = Some((cidr, index));
        Ok(index)
    }

    async fn sync_rules(&self, state: &mut State, cidr: Ipv4Net) -> Result<()> {
        let leases: Vec<_> = self.ipam.leases().into_iter().filter(|(ip, _)| cidr.contains(ip)).collect();
        let table = rules::render(cidr, self.settings.cluster_cidr, &leases);
        if state.rules.as_deref() == Some(table.as_str()) {
            return Ok(());
        }
        rules::apply(&table).await?;
        state.rules = Some(table);
        Ok(())
    }

    /// Follows the Nodes: this node's podCIDR, and a route to every other node's.
    pub async fn run(self: Arc<Self>, client: kube::Client, mut stop: watch::Receiver<bool>) {
        let api: Api<Node> = Api::all(client);
        let (reader, writer) = kube::runtime::reflector::store();
        // Only podCIDRs and addresses are read: managedFields are dropped before the store
        // (every agent holds every Node).
        let nodes = watcher(api, watcher::Config::default()).modify(|n| n.metadata.managed_fields = None);
        let mut events = kube::runtime::reflector(writer, nodes).default_backoff().boxed();
        let mut resync = tokio::time::interval(Duration::from_secs(30));
        let mut ready = false;
        loop {
            tokio::select! {
                _ = stop.wait_for(|s| *s) => return,
                ev = events.next() => match ev {
                    None => return,
                    Some(Err(e)) => { tracing::warn!(error = %e, "node watch failed; retrying"); continue }
                    // The store swaps a (re)list in whole at InitDone: before it, `reader` holds
                    // nothing or the previous list, so only a complete state is acted on (an agent
                    // restarted on a quiet cluster gets no later event to wait for).
                    Some(Ok(watcher::Event::Init | watcher::Event::InitApply(_))) => continue,
                    Some(Ok(_)) => ready = true,
                },
                _ = resync.tick() => {}
            }
            if !ready {
                continue;
            }
            let nodes: Vec<Arc<Node>> = reader.state();
            if let Err(e) = self.apply_nodes(&nodes).await {
                tracing::warn!(error = %e, "cannot sync the pod network with the nodes");
            }
        }
    }

    /// Takes this node's podCIDR from `nodes` and routes every other node's podCIDR via its
    /// InternalIP (what the Node watch feeds; public for benchmarks and tools).
    pub async fn apply_nodes(&self, nodes: &[Arc<Node>]) -> Result<()> {
        let mut routes = Vec::new();
        for n in nodes {
            let cidr = n.spec.as_ref().and_then(|s| s.pod_cidr.clone());
            if n.metadata.name.as_deref() == Some(self.node_name.as_str()) {
                let parsed = match cidr {
                    Some(c) => Some(c.parse::<Ipv4Net>().map_err(|_| Error::BadPodCidr(c))?),
                    None => None,
                };
                if parsed != self.pod_cidr() {
                    if let Some(c) = parsed {
                        tracing::info!(pod_cidr = %c, "node podCIDR assigned");
                    }
                    self.pod_cidr.send_replace(parsed);
                }
                continue;
            }
            let (Some(cidr), Some(ip)) = (cidr.and_then(|c| c.parse::<Ipv4Net>().ok()), internal_ip(n)) else {
                continue;
            };
            routes.push((cidr, ip));
        }
        routes.sort();
        if let Some(cidr) = self.pod_cidr() {
            let mut state = self.state.lock().await;
            self.ensure_node(&mut state, cidr).await?;
            self.sync_rules(&mut state, cidr).await?;
        }
        let conn = links::connect()?;
        let (added, removed) = links::sync_routes(&conn.handle, &routes).await?;
        if added + removed > 0 {
            tracing::info!(added, removed, routes = routes.len(), "routes to other nodes' pods updated");
        }
        Ok(())
    }
}

fn internal_ip(n: &Node) -> Option<Ipv4Addr> {
    n.status
        .as_ref()?
        .addresses
        .as_ref()?
        .iter()
        .find(|a| a.type_ == "InternalIP")
        .and_then(|a| a.address.parse::<IpAddr>().ok())
        .and_then(|ip| match ip {
            IpAddr::V4(v4) => Some(v4),
            IpAddr::V6(_) => None,
        })
}

/// The pods' gateway: the CIDR's first host address, held by the bridge.
pub fn gateway(cidr: Ipv4Net) -> Ipv4Addr {
    cidr.hosts().next().unwrap_or(cidr.network())
}

pub fn ipam_dir(config: &crate::Config) -> PathBuf {
    config.root_dir.join("network").join("ipam")
}

/// Removes everything the pod network put on the node: pod veths, the bridge, the routes to
/// other nodes, the NAT chains, the IPAM state.
pub async fn cleanup(config: &crate::Config) -> anyhow::Result<()> {
    let conn = links::connect()?;
    for name in links::links_with_prefix(&conn.handle, VETH_PREFIX).await? {
        // Only pod veths this agent made: their names come from pod UIDs it held.
        let ours = Ipam::new(ipam_dir(config)).leases().iter().any(|(_, l)| veth_name(&l.uid) == name);
        if ours {
            links::delete_link(&conn.handle, &name).await?;
        }
    }
    links::delete_link(&conn.handle, BRIDGE).await?;
    links::sync_routes(&conn.handle, &[]).await?;
    rules::remove().await?;
    let dir = config.root_dir.join("network");
    match std::fs::remove_dir_all(&dir) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(anyhow::Error::new(e).context(format!("cannot remove {}", dir.display()))),
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn veth_names_fit_the_kernel_limit_and_are_stable() {
        let a = veth_name("0a8b2c4e-1111-2222-3333-444455556666");
        assert_eq!(a, veth_name("0a8b2c4e-1111-2222-3333-444455556666"));
        assert!(a.len() <= 15 && a.starts_with("veth"), "{a}");
        assert_ne!(a, veth_name("another"));
    }

    #[test]
    fn gateway_is_the_first_host() {
        assert_eq!(gateway("10.244.3.0/24".parse().expect("cidr")), Ipv4Addr::new(10, 244, 3, 1));
    }

    #[test]
    fn host_ports_come_from_container_ports() {
        let pod: Pod = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "web", "namespace": "demo", "uid": "u1"},
            "spec": {"containers": [{"name": "c", "ports": [
                {"containerPort": 80, "hostPort": 8080},
                {"containerPort": 53, "hostPort": 5353, "protocol": "UDP", "hostIP": "172.30.0.11"},
                {"containerPort": 9000}
            ]}]}
        }))
        .expect("pod");
        let hp = host_ports(&pod);
        assert_eq!(hp.len(), 2);
        assert_eq!((hp[0].protocol.as_str(), hp[0].host_port, hp[0].container_port), ("TCP", 8080, 80));
        assert_eq!(hp[1].host_ip, Some(Ipv4Addr::new(172, 30, 0, 11)));
        assert_eq!(lease_for(&pod).pod, "demo/web");
    }
}
