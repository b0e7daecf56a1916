//! Several apiservers behind one local address: `--master URL1,URL2,...`.
//!
//! Every component (and `kaji lab`'s forwarder) talks to 127.0.0.1:<port> of a small TCP
//! balancer in its own process, which connects each new connection to the first apiserver that
//! accepts it, starting with the one that worked last. When an apiserver dies its connections
//! close; the client's watches and requests retry on a new connection, which lands on a live
//! apiserver.
//!
//! Why a local balancer (as k3s' agent keeps one) and not failover inside the kube-rs client:
//! it works for every client in the process (kube-rs, hyper, WebSocket upgrades for exec and
//! logs) without touching their stacks, and bytes pass through untouched, so TLS still runs
//! end to end between the client and the apiserver (the client checks the certificate against
//! the apiservers' shared name, `tls_server_name`).

use anyhow::Context;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::net::{TcpListener, TcpStream};

/// How long one apiserver may take to accept before the next is tried.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);

/// The apiservers, in order of preference, and which one answered last.
#[derive(Debug)]
pub struct Servers {
    addrs: Vec<SocketAddr>,
    preferred: AtomicUsize,
}

impl Servers {
    pub fn new(addrs: Vec<SocketAddr>) -> anyhow::Result<Arc<Self>> {
        anyhow::ensure!(!addrs.is_empty(), "no apiserver addresses");
        Ok(Arc::new(Self { addrs, preferred: AtomicUsize::new(0) }))
    }

    pub fn addrs(&self) -> &[SocketAddr] {
        &self.addrs
    }

    /// A connection to the first apiserver that accepts one, from the last good one on.
    pub async fn connect(&self) -> std::io::Result<(TcpStream, SocketAddr)> {
        let start = self.preferred.load(Ordering::Relaxed);
        let mut last_err = None;
        for i in 0..self.addrs.len() {
            let idx = (start + i) % self.addrs.len();
            let addr = self.addrs[idx];
            match tokio::time::timeout(CONNECT_TIMEOUT, TcpStream::connect(addr)).await {
                Ok(Ok(s)) => {
                    if idx != start {
                        tracing::info!(apiserver = %addr, "moved to another apiserver");
                        self.preferred.store(idx, Ordering::Relaxed);
                    }
                    let _ = s.set_nodelay(true);
                    return Ok((s, addr));
                }
                Ok(Err(e)) => last_err = Some(e),
                Err(_) => {
                    last_err = Some(std::io::Error::new(std::io::ErrorKind::TimedOut, format!("{addr} did not accept")))
                }
            }
            tracing::debug!(apiserver = %addr, "apiserver not reachable; trying the next");
        }
        Err(last_err.unwrap_or_else(|| std::io::Error::other("no apiserver")))
    }
}

/// Copy bytes both ways between `client` and a live apiserver until either side closes.
pub async fn pipe(servers: &Servers, mut client: TcpStream) {
    let Ok((mut upstream, _)) = servers.connect().await else {
        tracing::warn!(servers = ?servers.addrs(), "no apiserver is reachable");
        return;
    };
    let _ = tokio::io::copy_bidirectional(&mut client, &mut upstream).await;
}

/// Listen on 127.0.0.1 (a free port) and hand every connection to a live apiserver. Runs until
/// the process ends. Returns the local address to point a client at.
pub async fn start(servers: Arc<Servers>) -> anyhow::Result<SocketAddr> {
    let listener = TcpListener::bind("127.0.0.1:0").await.context("local apiserver balancer")?;
    let local = listener.local_addr()?;
    tracing::info!(local = %local, servers = ?servers.addrs(), "several apiservers: balancing through a local port");
    tokio::spawn(async move {
        loop {
            match listener.accept().await {
                Ok((conn, _)) => {
                    let _ = conn.set_nodelay(true);
                    let s = servers.clone();
                    tokio::spawn(async move { pipe(&s, conn).await });
                }
                Err(e) => {
                    tracing::warn!(error = %e, "local balancer accept failed");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            }
        }
    });
    Ok(local)
}

/// `host:port` of each URL in a comma-separated `--master` list, resolved.
pub async fn resolve(urls: &[&str]) -> anyhow::Result<Vec<SocketAddr>> {
    let mut out = Vec::new();
    for u in urls {
        let uri: http::Uri = u.trim().parse().with_context(|| format!("--master {u}"))?;
        let host = uri.host().with_context(|| format!("--master {u}: no host"))?;
        let port = uri.port_u16().unwrap_or(if uri.scheme_str() == Some("https") { 443 } else { 80 });
        let found = tokio::net::lookup_host((host.trim_matches(|c| c == '[' || c == ']'), port))
            .await
            .with_context(|| format!("--master {u}: cannot resolve {host}"))?;
        out.extend(found.take(1));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    async fn echo_server(tag: u8) -> (SocketAddr, tokio::task::JoinHandle<()>) {
        let l = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = l.local_addr().expect("addr");
        let task = tokio::spawn(async move {
            while let Ok((mut c, _)) = l.accept().await {
                tokio::spawn(async move {
                    let mut b = [0u8; 1];
                    while c.read_exact(&mut b).await.is_ok() {
                        if c.write_all(&[tag]).await.is_err() {
                            return;
                        }
                    }
                });
            }
        });
        (addr, task)
    }

    async fn ask(local: SocketAddr) -> Option<u8> {
        let mut c = TcpStream::connect(local).await.ok()?;
        c.write_all(b"?").await.ok()?;
        let mut b = [0u8; 1];
        tokio::time::timeout(Duration::from_secs(5), c.read_exact(&mut b)).await.ok()?.ok()?;
        Some(b[0])
    }

    #[tokio::test]
    async fn connections_move_to_a_live_server_and_stay_there() {
        let (a, task_a) = echo_server(b'a').await;
        let (b, _task_b) = echo_server(b'b').await;
        let local = start(Servers::new(vec![a, b]).expect("servers")).await.expect("start");
        assert_eq!(ask(local).await, Some(b'a'), "the first server is preferred");
        task_a.abort();
        let _ = task_a.await;
        // The listener of `a` is gone: new connections go to `b`.
        assert_eq!(ask(local).await, Some(b'b'));
        assert_eq!(ask(local).await, Some(b'b'));
    }

    #[tokio::test]
    async fn urls_resolve_with_default_ports() {
        let got = resolve(&["http://127.0.0.1:6443", "https://127.0.0.1"]).await.expect("resolve");
        assert_eq!(got, ["127.0.0.1:6443".parse::<SocketAddr>().expect("a"), "127.0.0.1:443".parse().expect("b")]);
    }
}
