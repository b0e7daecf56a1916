//! kubelet's `/portForward/{namespace}/{pod}`: SPDY/3.1 with protocol `portforward.k8s.io`,
//! natively upgraded (kubectl ≤ 1.30) or tunnelled in WebSocket messages (subprotocol
//! `SPDY/3.1+portforward.k8s.io`, kubectl ≥ 1.31). Each forwarded connection is a pair of
//! streams sharing a `requestID`: `streamType: error` and `streamType: data`, with the pod's
//! `port`. The data stream is joined to a TCP connection made inside the pod's network namespace
//! (from a thread that entered it: a socket keeps the namespace it was made in), so a server on
//! the pod's 127.0.0.1 is reached; what went wrong is written on the error stream.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::os::fd::AsFd;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::ws::WebSocketUpgrade;
use axum::extract::{FromRequestParts, Path, Request, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::pods::Manager;
use crate::sandbox::Wanted;
use crate::spdy::{self, frame::rst, header, upgrade, Connection, Stream};

/// The SPDY protocol kubectl asks for in `X-Stream-Protocol-Version`.
pub const PROTOCOL: &str = "portforward.k8s.io";
/// The WebSocket subprotocol of the tunnelled form.
pub const WS_PROTOCOL: &str = "SPDY/3.1+portforward.k8s.io";
/// How long a connection to the pod's port may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// How long the second stream of a pair may take to come (kubelet's stream creation timeout).
const PAIR_TIMEOUT: Duration = Duration::from_secs(30);
/// Once one direction is done, how long the other may still run (containerd's grace).
const LINGER: Duration = Duration::from_secs(1);

/// Where forwarded connections go.
#[derive(Debug)]
struct Target {
    pod: String,
    uid: String,
    /// The pod's network namespace file; `None` for a host-network pod.
    netns: Option<PathBuf>,
}

/// `GET|POST /portForward/{namespace}/{pod}`.
pub async fn serve(State(m): State<Manager>, Path((ns, pod)): Path<(String, String)>, req: Request) -> Response {
    let Some(p) = m.pod(&ns, &pod) else {
        return (StatusCode::NOT_FOUND, "pod does not exist").into_response();
    };
    let uid = p.metadata.uid.clone().unwrap_or_default();
    let netns = Wanted::for_pod(&p).net.then(|| m.shared.config.pods_dir().join(&uid).join("ns").join("net"));
    let target = Arc::new(Target { pod, uid, netns });
    if upgrade::is_spdy(req.headers()) {
        return match upgrade::negotiate(&upgrade::offered(req.headers()), &[PROTOCOL]) {
            Ok(proto) => upgrade::accept(req, proto, move |io| session(io, target, PAIR_TIMEOUT)),
            Err(msg) => upgrade::refuse(msg, &[PROTOCOL]),
        };
    }
    let (mut parts, _) = req.into_parts();
    let ws = match WebSocketUpgrade::from_request_parts(&mut parts, &()).await {
        Ok(ws) => ws.protocols([WS_PROTOCOL]),
        Err(_) => return (StatusCode::BAD_REQUEST, "Upgrade request required").into_response(),
    };
    if ws.selected_protocol().is_none() {
        return (StatusCode::BAD_REQUEST, format!("port-forward over WebSocket needs subprotocol {WS_PROTOCOL}"))
            .into_response();
    }
    tracing::info!(pod = %format!("{ns}/{}", target.pod), "port-forward");
    ws.on_upgrade(move |socket| session(spdy::tunnel::over_websocket(socket), target, PAIR_TIMEOUT))
}

/// The two streams of one forwarded connection, as they arrive.
struct Pair {
    data: Option<Stream>,
    error: Option<Stream>,
    since: tokio::time::Instant,
}

impl Default for Pair {
    fn default() -> Self {
        Pair { data: None, error: None, since: tokio::time::Instant::now() }
    }
}

/// Gives up on a pair whose other stream never came, as kubelet does: the error stream (if
/// any) says so, the data stream (if any) is reset.
async fn abandon(pair: Pair, key: String) {
    if let Some(e) = pair.error {
        let msg = format!("(request={key}) timed out waiting for streams");
        let _ = e.sender.write(msg.as_bytes()).await;
        let _ = e.sender.close().await;
    }
    if let Some(d) = pair.data {
        let _ = d.sender.reset(rst::CANCEL).await;
    }
}

/// Which connection a stream belongs to: its `requestID`, or for clients too old to send one,
/// the error stream's id (the data stream comes right after it). Pure.
fn request_key(s: &Stream, is_data: bool) -> String {
    match header(&s.headers, "requestID") {
        Some(id) => id.to_string(),
        None if is_data => s.id.saturating_sub(2).to_string(),
        None => s.id.to_string(),
    }
}

/// Serves one connection; pairs not complete within `pair_timeout` are given up.
async fn session<T>(io: T, target: Arc<Target>, pair_timeout: Duration)
where
    T: AsyncRead + AsyncWrite + Send + 'static,
{
    let mut conn = Connection::serve(io);
    let mut pending: HashMap<String, Pair> = HashMap::new();
    let mut sweep = tokio::time::interval(pair_timeout / 4);
    loop {
        let s = tokio::select! {
            s = conn.streams.recv() => match s {
                Some(s) => s,
                None => break,
            },
            _ = sweep.tick() => {
                let late: Vec<String> =
                    pending.iter().filter(|(_, p)| p.since.elapsed() > pair_timeout).map(|(k, _)| k.clone()).collect();
                for key in late {
                    if let Some(pair) = pending.remove(&key) {
                        tokio::spawn(abandon(pair, key));
                    }
                }
                continue;
            }
        };
        let is_data = match header(&s.headers, "streamType") {
            Some("data") => true,
            Some("error") => false,
            other => {
                tracing::debug!(stream_type = ?other, "unexpected port-forward stream");
                let _ = s.sender.reset(rst::PROTOCOL_ERROR).await;
                continue;
            }
        };
        let key = request_key(&s, is_data);
        let pair = pending.entry(key.clone()).or_default();
        if is_data {
            pair.data = Some(s);
        } else {
            pair.error = Some(s);
        }
        if !matches!(pending.get(&key), Some(Pair { data: Some(_), error: Some(_), .. })) {
            continue;
        }
        if let Some(Pair { data: Some(data), error: Some(error), .. }) = pending.remove(&key) {
            tokio::spawn(forward(data, error, target.clone()));
        }
    }
    conn.shutdown().await;
}

/// One forwarded connection: data both ways, then both streams closed; errors on the error
/// stream in kubelet's words.
async fn forward(data: Stream, error: Stream, target: Arc<Target>) {
    let port_header = header(&data.headers, "port").unwrap_or("").to_string();
    let result = match port_header.parse::<u16>() {
        Ok(port) if port > 0 => match connect(target.netns.clone(), port).await {
            Ok(tcp) => {
                pipe(data.data, &data.sender, tcp).await;
                Ok(())
            }
            Err(e) => Err(format!("error forwarding port {port} to pod {}, uid {}: {e}", target.pod, target.uid)),
        },
        _ => Err(format!("invalid port {port_header:?}: it must be a number between 1 and 65535")),
    };
    if let Err(msg) = result {
        tracing::debug!(pod = %target.pod, error = %msg, "port-forward failed");
        let _ = error.sender.write(msg.as_bytes()).await;
    }
    let _ = data.sender.close().await;
    let _ = error.sender.close().await;
}

/// Copies both ways until one side is done, then gives the other [`LINGER`] to finish.
async fn pipe(mut from_client: tokio::sync::mpsc::Receiver<Vec<u8>>, to_client: &spdy::Sender, tcp: TcpStream) {
    let (mut rd, mut wr) = tcp.into_split();
    let mut to_pod = tokio::spawn(async move {
        while let Some(b) = from_client.recv().await {
            if wr.write_all(&b).await.is_err() {
                return;
            }
        }
        // The client's FIN: the pod sees the end of its input.
        let _ = wr.shutdown().await;
    });
    let sender = to_client.clone();
    let mut from_pod = tokio::spawn(async move {
        let mut buf = vec![0u8; 32 * 1024];
        loop {
            match rd.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(n) => {
                    if sender.write(&buf[..n]).await.is_err() {
                        return;
                    }
                }
            }
        }
    });
    tokio::select! {
        _ = &mut to_pod => {
            if tokio::time::timeout(LINGER, &mut from_pod).await.is_err() {
                from_pod.abort();
            }
        }
        _ = &mut from_pod => {
            if tokio::time::timeout(LINGER, &mut to_pod).await.is_err() {
                to_pod.abort();
            }
        }
    }
}

/// Connects to `localhost:port` from inside `netns` (a short-lived thread enters it; the
/// socket stays in that namespace after the thread is gone).
async fn connect(netns: Option<PathBuf>, port: u16) -> Result<TcpStream, String> {
    let (tx, rx) = tokio::sync::oneshot::channel();
    let spawned = std::thread::Builder::new().name("portforward".into()).spawn(move || {
        let _ = tx.send(connect_in(netns, port));
    });
    if let Err(e) = spawned {
        return Err(format!("cannot start a thread: {e}"));
    }
    let stream = rx.await.map_err(|_| "the connecting thread died".to_string())??;
    TcpStream::from_std(stream).map_err(|e| e.to_string())
}

fn connect_in(netns: Option<PathBuf>, port: u16) -> Result<std::net::TcpStream, String> {
    if let Some(ns) = &netns {
        let f = std::fs::File::open(ns)
            .map_err(|e| format!("cannot open the pod network namespace {}: {e}", ns.display()))?;
        nix::sched::setns(f.as_fd(), nix::sched::CloneFlags::CLONE_NEWNET)
            .map_err(|e| format!("cannot enter the pod network namespace {}: {e}", ns.display()))?;
    }
    let mut errors = Vec::new();
    for addr in [SocketAddr::from(([127, 0, 0, 1], port)), SocketAddr::from((std::net::Ipv6Addr::LOCALHOST, port))] {
        match std::net::TcpStream::connect_timeout(&addr, CONNECT_TIMEOUT) {
            Ok(s) => {
                s.set_nonblocking(true).map_err(|e| e.to_string())?;
                let _ = s.set_nodelay(true);
                return Ok(s);
            }
            Err(e) => errors.push(format!("dial {addr}: {e}")),
        }
    }
    Err(format!("failed to connect to localhost:{port} inside the pod's network namespace: {}", errors.join(", ")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spdy::compress::{Deflater, Inflater};
    use crate::spdy::frame::{self, Frame, Head};

    #[tokio::test]
    async fn a_pair_whose_data_stream_never_comes_is_given_up_on_the_error_stream() {
        let (client, server) = tokio::io::duplex(1 << 16);
        let target = Arc::new(Target { pod: "p".into(), uid: "u".into(), netns: None });
        tokio::spawn(session(server, target, Duration::from_millis(200)));
        let (mut r, mut w) = tokio::io::split(client);
        let headers = [("streamtype", "error"), ("port", "80"), ("requestid", "7")];
        let headers = headers.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        let mut wire = Vec::new();
        let syn = Frame::SynStream { id: 1, associated: 0, priority: 0, flags: 0, headers };
        frame::encode(&syn, &mut Deflater::new(), &mut wire).expect("encodes");
        w.write_all(&wire).await.expect("write");
        let mut inflater = Inflater::new();
        let mut got = Vec::new();
        while got.len() < 3 {
            let mut h = [0u8; 8];
            r.read_exact(&mut h).await.expect("a frame");
            let head = Head::parse(h);
            let mut body = vec![0u8; head.length()];
            r.read_exact(&mut body).await.expect("a body");
            got.push(frame::decode(head, &body, &mut inflater).expect("decodes"));
        }
        assert_eq!(
            got,
            [
                Frame::SynReply { id: 1, fin: false, headers: vec![] },
                Frame::Data { id: 1, fin: false, data: b"(request=7) timed out waiting for streams".to_vec() },
                Frame::Data { id: 1, fin: true, data: vec![] },
            ]
        );
    }

    #[test]
    fn a_connection_refused_on_loopback_is_an_error_message() {
        // A port nothing listens on (bound, then released).
        let port = std::net::TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).expect("bind").port();
        let err = connect_in(None, port).expect_err("nothing listens");
        assert!(err.starts_with(&format!("failed to connect to localhost:{port} inside")), "{err}");
        assert!(err.contains("127.0.0.1"), "{err}");
        let err = connect_in(Some("/nonexistent/net".into()), 80).expect_err("no namespace");
        assert!(err.contains("cannot open the pod network namespace"), "{err}");
    }
}
