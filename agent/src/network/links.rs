//! Links, addresses and routes through rtnetlink: the node bridge, each pod's veth pair and the
//! routes to other nodes' pod CIDRs. Operations on the node run in the agent's own network
//! namespace; those inside a pod run on a short-lived thread that joined the pod's namespace
//! (setns changes only the calling thread, and that thread then ends).

use std::net::{IpAddr, Ipv4Addr};
use std::os::fd::AsRawFd;
use std::path::Path;

use futures::TryStreamExt;
use ipnet::Ipv4Net;
use rtnetlink::packet_route::link::{InfoBridgePort, InfoPortData, InfoPortKind, LinkAttribute, LinkMessage};
use rtnetlink::packet_route::route::{RouteAddress, RouteAttribute, RouteMessage, RouteProtocol};
use rtnetlink::{Handle, LinkBridge, LinkUnspec, LinkVeth, RouteMessageBuilder};

/// The routes the agent adds to other nodes carry this protocol number, so it can find and
/// remove its own and nothing else (`ip route show proto 0x4b`).
pub const ROUTE_PROTOCOL: u8 = 0x4b;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("netlink: {op}: {source}")]
    Netlink {
        op: String,
        #[source]
        source: rtnetlink::Error,
    },
    #[error("cannot open netlink: {0}")]
    Connect(#[source] std::io::Error),
    #[error("cannot enter the pod network namespace {path}: {source}")]
    Netns { path: String, source: std::io::Error },
    #[error("the network namespace thread panicked")]
    Thread,
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

fn nl(op: impl Into<String>) -> impl FnOnce(rtnetlink::Error) -> Error {
    let op = op.into();
    move |source| Error::Netlink { op, source }
}

/// ENOENT/ENODEV/ESRCH from the kernel: the thing is already gone.
fn is_not_found(e: &rtnetlink::Error) -> bool {
    if let rtnetlink::Error::NetlinkError(m) = e {
        let code = m.raw_code().abs();
        return code == libc::ENODEV || code == libc::ENOENT || code == libc::ESRCH;
    }
    false
}

fn is_exists(e: &rtnetlink::Error) -> bool {
    matches!(e, rtnetlink::Error::NetlinkError(m) if m.raw_code().abs() == libc::EEXIST)
}

/// A netlink connection in the calling thread's network namespace; the connection task ends
/// when the guard is dropped.
pub struct Conn {
    pub handle: Handle,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Conn {
    fn drop(&mut self) {
        self.task.abort();
    }
}

pub fn connect() -> Result<Conn> {
    let (connection, handle, _) = rtnetlink::new_connection().map_err(Error::Connect)?;
    Ok(Conn { handle, task: tokio::spawn(connection) })
}

/// The link called `name`, if it exists.
pub async fn link(handle: &Handle, name: &str) -> Result<Option<LinkMessage>> {
    let mut req = handle.link().get().match_name(name.to_string()).execute();
    match req.try_next().await {
        Ok(l) => Ok(l),
        Err(e) if is_not_found(&e) => Ok(None),
        Err(e) => Err(nl(format!("get link {name}"))(e)),
    }
}

/// Creates the bridge if needed, gives it `gateway/prefix` and brings it up.
pub async fn ensure_bridge(handle: &Handle, name: &str, gateway: Ipv4Addr, prefix: u8) -> Result<u32> {
    let index = match link(handle, name).await? {
        Some(l) => l.header.index,
        None => {
            match handle.link().add(LinkBridge::new(name).build()).execute().await {
                Ok(()) => {}
                Err(e) if is_exists(&e) => {}
                Err(e) => return Err(nl(format!("add bridge {name}"))(e)),
            }
            link(handle, name).await?.map(|l| l.header.index).ok_or_else(|| Error::Netlink {
                op: format!("find bridge {name} after creating it"),
                source: rtnetlink::Error::RequestFailed,
            })?
        }
    };
    handle
        .address()
        .add(index, IpAddr::V4(gateway), prefix)
        .replace()
        .execute()
        .await
        .map_err(nl(format!("add {gateway}/{prefix} to {name}")))?;
    handle
        .link()
        .set(LinkUnspec::new_with_index(index).up().build())
        .execute()
        .await
        .map_err(nl(format!("set {name} up")))?;
    Ok(index)
}

/// Deletes a link by name; gone already is fine.
pub async fn delete_link(handle: &Handle, name: &str) -> Result<()> {
    let Some(l) = link(handle, name).await? else { return Ok(()) };
    match handle.link().del(l.header.index).execute().await {
        Ok(()) => Ok(()),
        Err(e) if is_not_found(&e) => Ok(()),
        Err(e) => Err(nl(format!("delete link {name}"))(e)),
    }
}

/// What a pod's interface gets.
#[derive(Clone, Debug)]
pub struct PodInterface {
    /// The node end, on the bridge.
    pub host_name: String,
    pub ip: Ipv4Addr,
    pub prefix: u8,
    pub gateway: Ipv4Addr,
}

/// Creates the veth pair, puts the node end on the bridge and the other end into the pod's
/// namespace as `eth0`, then configures it there. Whatever a failed earlier attempt left is
/// replaced.
pub async fn attach_pod(handle: &Handle, bridge: u32, netns: &Path, pod: &PodInterface) -> Result<()> {
    delete_link(handle, &pod.host_name).await?;
    let peer = format!("{}p", &pod.host_name[..pod.host_name.len().min(14)]);
    delete_link(handle, &peer).await?;
    handle
        .link()
        .add(LinkVeth::new(&pod.host_name, &peer).build())
        .execute()
        .await
        .map_err(nl(format!("add veth pair {}", pod.host_name)))?;
    let host = link(handle, &pod.host_name).await?.map(|l| l.header.index);
    let peer_index = link(handle, &peer).await?.map(|l| l.header.index);
    let (Some(host), Some(peer_index)) = (host, peer_index) else {
        return Err(Error::Netlink {
            op: format!("find veth pair {} after creating it", pod.host_name),
            source: rtnetlink::Error::RequestFailed,
        });
    };
    handle
        .link()
        .set(LinkUnspec::new_with_index(host).controller(bridge).up().build())
        .execute()
        .await
        .map_err(nl(format!("attach {} to the bridge", pod.host_name)))?;
    // Hairpin: a pod reaching itself through a Service is DNATed back out of the port it came
    // in on (the CNI bridge plugin's hairpinMode).
    let port = LinkUnspec::new_with_index(host)
        .set_port_kind(InfoPortKind::Bridge)
        .set_port_data(InfoPortData::BridgePort(vec![InfoBridgePort::HairpinMode(true)]))
        .build();
    handle.link().set_port(port).execute().await.map_err(nl(format!("hairpin mode on {}", pod.host_name)))?;
    let ns = std::fs::File::open(netns).map_err(|source| Error::Netns { path: netns.display().to_string(), source })?;
    handle
        .link()
        .set(LinkUnspec::new_with_index(peer_index).setns_by_fd(ns.as_raw_fd()).build())
        .execute()
        .await
        .map_err(nl(format!("move {peer} into the pod")))?;
    let (pod, peer) = (pod.clone(), peer.clone());
    let path = netns.to_path_buf();
    tokio::task::spawn_blocking(move || in_netns(&path, move |h| Box::pin(configure_pod_end(h, peer, pod))))
        .await
        .map_err(|_| Error::Thread)?
}

/// Inside the pod: rename the veth end to eth0, address it, bring it up, default route.
async fn configure_pod_end(handle: Handle, peer: String, pod: PodInterface) -> Result<()> {
    let index =
        link(&handle, &peer).await?.or(link(&handle, "eth0").await?).map(|l| l.header.index).ok_or_else(|| {
            Error::Netlink { op: format!("find {peer} in the pod"), source: rtnetlink::Error::RequestFailed }
        })?;
    handle
        .link()
        .set(LinkUnspec::new_with_index(index).name("eth0".into()).build())
        .execute()
        .await
        .map_err(nl("rename the pod interface to eth0"))?;
    handle
        .address()
        .add(index, IpAddr::V4(pod.ip), pod.prefix)
        .replace()
        .execute()
        .await
        .map_err(nl(format!("add {}/{} to eth0", pod.ip, pod.prefix)))?;
    handle.link().set(LinkUnspec::new_with_index(index).up().build()).execute().await.map_err(nl("set eth0 up"))?;
    let route = RouteMessageBuilder::<Ipv4Addr>::new().gateway(pod.gateway).output_interface(index).build();
    handle.route().add(route).replace().execute().await.map_err(nl(format!("default route via {}", pod.gateway)))
}

type BoxFut = std::pin::Pin<Box<dyn std::future::Future<Output = Result<()>>>>;

/// Runs `f` with a netlink handle inside the network namespace at `path`, on a thread of its own.
pub fn in_netns(path: &Path, f: impl FnOnce(Handle) -> BoxFut + Send + 'static) -> Result<()> {
    let path = path.to_path_buf();
    std::thread::spawn(move || -> Result<()> {
        let file =
            std::fs::File::open(&path).map_err(|source| Error::Netns { path: path.display().to_string(), source })?;
        nix::sched::setns(file, nix::sched::CloneFlags::CLONE_NEWNET).map_err(|e| Error::Netns {
            path: path.display().to_string(),
            source: std::io::Error::from_raw_os_error(e as i32),
        })?;
        let rt = tokio::runtime::Builder::new_current_thread().enable_io().build().map_err(Error::Connect)?;
        rt.block_on(async move {
            let conn = connect()?;
            f(conn.handle.clone()).await
        })
    })
    .join()
    .map_err(|_| Error::Thread)?
}

/// The IPv4 address of `eth0` inside the pod's namespace, if configured.
pub fn pod_address(netns: &Path) -> Option<Ipv4Addr> {
    let found = std::sync::Arc::new(std::sync::Mutex::new(None));
    let out = found.clone();
    let _ = in_netns(netns, move |handle| {
        Box::pin(async move {
            let Some(l) = link(&handle, "eth0").await? else { return Ok(()) };
            let mut addrs = handle.address().get().set_link_index_filter(l.header.index).execute();
            while let Ok(Some(a)) = addrs.try_next().await {
                for attr in a.attributes {
                    if let rtnetlink::packet_route::address::AddressAttribute::Address(IpAddr::V4(ip)) = attr {
                        if let Ok(mut o) = out.lock() {
                            *o = Some(ip);
                        }
                    }
                }
            }
            Ok(())
        })
    });
    let ip = found.lock().ok().and_then(|f| *f);
    ip
}

/// Routes to other nodes' pod CIDRs: `(cidr, node InternalIP)`.
pub type NodeRoute = (Ipv4Net, Ipv4Addr);

fn route_of(m: &RouteMessage) -> Option<NodeRoute> {
    let mut dst = None;
    let mut gw = None;
    for a in &m.attributes {
        match a {
            RouteAttribute::Destination(RouteAddress::Inet(ip)) => dst = Some(*ip),
            RouteAttribute::Gateway(RouteAddress::Inet(ip)) => gw = Some(*ip),
            _ => {}
        }
    }
    Some((Ipv4Net::new(dst?, m.header.destination_prefix_length).ok()?, gw?))
}

fn message(r: &NodeRoute) -> RouteMessage {
    RouteMessageBuilder::<Ipv4Addr>::new()
        .destination_prefix(r.0.network(), r.0.prefix_len())
        .gateway(r.1)
        .protocol(RouteProtocol::Other(ROUTE_PROTOCOL))
        .build()
}

/// The kaji routes in the main table now.
pub async fn node_routes(handle: &Handle) -> Result<Vec<NodeRoute>> {
    let mut out = Vec::new();
    let mut dump = handle.route().get(RouteMessageBuilder::<Ipv4Addr>::new().build()).execute();
    while let Some(m) = dump.try_next().await.map_err(nl("list routes"))? {
        if m.header.protocol == RouteProtocol::Other(ROUTE_PROTOCOL) {
            if let Some(r) = route_of(&m) {
                out.push(r);
            }
        }
    }
    Ok(out)
}

/// Makes the kaji routes exactly `want`: adds the missing, removes the others.
pub async fn sync_routes(handle: &Handle, want: &[NodeRoute]) -> Result<(usize, usize)> {
    let have = node_routes(handle).await?;
    let (mut added, mut removed) = (0, 0);
    for r in want.iter().filter(|r| !have.contains(r)) {
        handle.route().add(message(r)).replace().execute().await.map_err(nl(format!("route {} via {}", r.0, r.1)))?;
        added += 1;
    }
    for r in have.iter().filter(|r| !want.contains(r)) {
        match handle.route().del(message(r)).execute().await {
            Ok(()) => removed += 1,
            Err(e) if is_not_found(&e) => {}
            Err(e) => return Err(nl(format!("delete route {} via {}", r.0, r.1))(e)),
        }
    }
    Ok((added, removed))
}

/// The names of the links whose name starts with `prefix`.
pub async fn links_with_prefix(handle: &Handle, prefix: &str) -> Result<Vec<String>> {
    let mut out = Vec::new();
    let mut dump = handle.link().get().execute();
    while let Some(l) = dump.try_next().await.map_err(nl("list links"))? {
        for a in l.attributes {
            if let LinkAttribute::IfName(n) = a {
                if n.starts_with(prefix) {
                    out.push(n);
                }
            }
        }
    }
    Ok(out)
}
