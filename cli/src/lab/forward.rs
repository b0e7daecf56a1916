//! `kaji lab forward`: the user's way into the lab. Listens on the host's loopback and, for each
//! connection, connects to the apiserver inside the lab namespace, then copies bytes both ways.
//!
//! A socket stays in the network namespace of the thread that created it, so one dedicated thread
//! `setns`es into the lab namespace once and makes every outbound connection; the tokio runtime
//! (and the listener) stay in the host's namespace. Nothing in the host's namespace changes: no
//! route, no address, no rule — only a listening socket on 127.0.0.1.

use anyhow::{Context, Result};
use nix::sched::CloneFlags;
use std::net::SocketAddr;
use std::sync::mpsc;
use std::time::Duration;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::oneshot;

type Reply = oneshot::Sender<std::io::Result<std::net::TcpStream>>;

/// Makes TCP connections from inside one network namespace.
#[derive(Clone)]
struct Connector(mpsc::Sender<(SocketAddr, Reply)>);

impl Connector {
    fn start(netns: &str) -> Result<Connector> {
        let path = super::procs::netns_path(netns);
        let ns = std::fs::File::open(&path).with_context(|| format!("cannot open {}", path.display()))?;
        let (tx, rx) = mpsc::channel::<(SocketAddr, Reply)>();
        let (ready_tx, ready_rx) = mpsc::channel();
        std::thread::Builder::new().name("connector".into()).spawn(move || {
            // Only this thread changes namespace; it exists for nothing else.
            let joined = nix::sched::setns(&ns, CloneFlags::CLONE_NEWNET);
            let ok = joined.is_ok();
            let _ = ready_tx.send(joined);
            if !ok {
                return;
            }
            for (addr, reply) in rx {
                let _ = reply.send(std::net::TcpStream::connect_timeout(&addr, Duration::from_secs(5)));
            }
        })?;
        ready_rx
            .recv()
            .context("the connector thread died")?
            .with_context(|| format!("cannot enter network namespace {netns}"))?;
        Ok(Connector(tx))
    }

    async fn connect(&self, addr: SocketAddr) -> std::io::Result<TcpStream> {
        let (reply, answer) = oneshot::channel();
        let gone = || std::io::Error::other("the connector thread is gone");
        self.0.send((addr, reply)).map_err(|_| gone())?;
        let stream = answer.await.map_err(|_| gone())??;
        stream.set_nonblocking(true)?;
        TcpStream::from_std(stream)
    }
}

/// A connection to the first of `to` that accepts, from the last good one on (an HA lab's
/// apiservers: kubectl carries on through the others when one dies).
async fn connect_any(
    connector: &Connector,
    to: &[SocketAddr],
    preferred: &std::sync::atomic::AtomicUsize,
) -> std::io::Result<TcpStream> {
    use std::sync::atomic::Ordering;
    let start = preferred.load(Ordering::Relaxed);
    let mut last = std::io::Error::other("no address to forward to");
    for i in 0..to.len() {
        let idx = (start + i) % to.len();
        match connector.connect(to[idx]).await {
            Ok(s) => {
                preferred.store(idx, Ordering::Relaxed);
                return Ok(s);
            }
            Err(e) => last = e,
        }
    }
    Err(last)
}

/// Serves until killed.
pub async fn run(netns: &str, listen: SocketAddr, to: Vec<SocketAddr>) -> Result<()> {
    let connector = Connector::start(netns)?;
    let listener = TcpListener::bind(listen).await.with_context(|| format!("cannot listen on {listen}"))?;
    eprintln!("forwarding {listen} to {to:?} in network namespace {netns}");
    let to = std::sync::Arc::new(to);
    let preferred = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    loop {
        let (mut inbound, peer) = match listener.accept().await {
            Ok(c) => c,
            Err(e) => {
                eprintln!("accept: {e}");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        let connector = connector.clone();
        let netns = netns.to_string();
        let (to, preferred) = (to.clone(), preferred.clone());
        tokio::spawn(async move {
            let mut outbound = match connect_any(&connector, &to, &preferred).await {
                Ok(s) => s,
                Err(e) => {
                    eprintln!("{peer}: cannot connect to {to:?} in {netns}: {e}");
                    return;
                }
            };
            let _ = inbound.set_nodelay(true);
            let _ = outbound.set_nodelay(true);
            let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
        });
    }
}
