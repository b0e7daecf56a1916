//! One SPDY/3.1 connection, server side: the peer opens streams (each answered with a
//! SYN_REPLY and handed out as a [`Stream`]), pings are echoed, and one writer task owns the
//! socket and the header compressor. No flow control is enforced: Kubernetes' spdystream
//! peers neither send nor honour WINDOW_UPDATE.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::sync::mpsc;

use super::compress::{Deflater, Inflater};
use super::frame::{self, rst, Frame, Head};
use super::{Error, Headers, Result};

/// Data frames we send are at most this long.
const CHUNK: usize = 32 * 1024;
/// Frames from the peer larger than this are a protocol error (kubectl sends ≤ 32 KiB).
const MAX_FRAME: usize = 1 << 20;

enum Out {
    Frame(Frame),
    Shutdown,
}

/// A stream the peer opened.
pub struct Stream {
    pub id: u32,
    pub headers: Headers,
    /// What the peer sends on it; ends at its FIN, a reset, or the connection's end.
    pub data: mpsc::Receiver<Vec<u8>>,
    pub sender: Sender,
}

/// Writes to one stream.
#[derive(Clone)]
pub struct Sender {
    id: u32,
    out: mpsc::Sender<Out>,
}

impl Sender {
    pub fn id(&self) -> u32 {
        self.id
    }

    pub async fn write(&self, data: &[u8]) -> Result<()> {
        for chunk in data.chunks(CHUNK) {
            self.frame(Frame::Data { id: self.id, fin: false, data: chunk.to_vec() }).await?;
        }
        Ok(())
    }

    /// Half-closes the stream: our last frame on it (an empty DATA with FIN).
    pub async fn close(&self) -> Result<()> {
        self.frame(Frame::Data { id: self.id, fin: true, data: Vec::new() }).await
    }

    pub async fn reset(&self, status: u32) -> Result<()> {
        self.frame(Frame::RstStream { id: self.id, status }).await
    }

    async fn frame(&self, f: Frame) -> Result<()> {
        self.out.send(Out::Frame(f)).await.map_err(|_| Error::Closed)
    }
}

/// The connection: the streams the peer opens, in order, until it goes away.
pub struct Connection {
    pub streams: mpsc::Receiver<Stream>,
    out: mpsc::Sender<Out>,
    writer: tokio::task::JoinHandle<()>,
    /// The last stream the peer opened, for GOAWAY.
    last_id: Arc<AtomicU32>,
}

impl Connection {
    /// Serves SPDY on `io` (an upgraded HTTP connection, or a WebSocket tunnel).
    pub fn serve<T>(io: T) -> Connection
    where
        T: AsyncRead + AsyncWrite + Send + 'static,
    {
        let (read, write) = tokio::io::split(io);
        let (out, out_rx) = mpsc::channel(64);
        let (streams_tx, streams) = mpsc::channel(16);
        let writer = tokio::spawn(write_loop(write, out_rx));
        let last_id = Arc::new(AtomicU32::new(0));
        tokio::spawn(read_loop(read, out.clone(), streams_tx, last_id.clone()));
        Connection { streams, out, writer, last_id }
    }

    /// Says GOAWAY, flushes what was queued and closes our side.
    pub async fn shutdown(self) {
        let Connection { streams, out, writer, last_id } = self;
        drop(streams);
        let last_good = last_id.load(Ordering::Relaxed);
        let _ = out.send(Out::Frame(Frame::GoAway { last_good, status: 0 })).await;
        let _ = out.send(Out::Shutdown).await;
        drop(out);
        let _ = tokio::time::timeout(std::time::Duration::from_secs(5), writer).await;
    }
}

async fn write_loop<W: AsyncWrite + Unpin>(mut w: W, mut rx: mpsc::Receiver<Out>) {
    let mut deflater = Deflater::new();
    let mut buf = Vec::with_capacity(CHUNK + 64);
    while let Some(msg) = rx.recv().await {
        let Out::Frame(f) = msg else { break };
        buf.clear();
        if let Err(e) = frame::encode(&f, &mut deflater, &mut buf) {
            tracing::debug!(error = %e, "cannot encode a SPDY frame");
            break;
        }
        if w.write_all(&buf).await.is_err() {
            return;
        }
        if rx.is_empty() && w.flush().await.is_err() {
            return;
        }
    }
    let _ = w.flush().await;
    let _ = w.shutdown().await;
}

async fn read_frame<R: AsyncRead + Unpin>(r: &mut R, inflater: &mut Inflater) -> Result<Option<Frame>> {
    let mut head = [0u8; 8];
    if r.read_exact(&mut head).await.is_err() {
        return Ok(None);
    }
    let head = Head::parse(head);
    if head.length() > MAX_FRAME {
        return Err(Error::TooLarge(head.length()));
    }
    let mut body = vec![0u8; head.length()];
    if r.read_exact(&mut body).await.is_err() {
        return Ok(None);
    }
    frame::decode(head, &body, inflater).map(Some)
}

async fn read_loop<R: AsyncRead + Unpin>(
    mut r: R,
    out: mpsc::Sender<Out>,
    streams: mpsc::Sender<Stream>,
    last_good: Arc<AtomicU32>,
) {
    let mut inflater = Inflater::new();
    let mut open: HashMap<u32, mpsc::Sender<Vec<u8>>> = HashMap::new();
    let (mut last_id, mut going_away) = (0u32, false);
    let send = |f: Frame| {
        let out = out.clone();
        async move { out.send(Out::Frame(f)).await.is_ok() }
    };
    loop {
        let frame = match read_frame(&mut r, &mut inflater).await {
            Ok(Some(f)) => f,
            Ok(None) => break,
            Err(e) => {
                // The compression context or the framing is lost: nothing after can be read.
                tracing::debug!(error = %e, "SPDY protocol error");
                let _ = send(Frame::GoAway { last_good: last_id, status: 1 }).await;
                break;
            }
        };
        tracing::trace!(frame = ?frame, "spdy frame");
        match frame {
            Frame::SynStream { id, flags, headers, .. } => {
                if id % 2 == 0 || id <= last_id || going_away {
                    let status = if going_away { rst::REFUSED_STREAM } else { rst::PROTOCOL_ERROR };
                    send(Frame::RstStream { id, status }).await;
                    continue;
                }
                last_id = id;
                last_good.store(id, Ordering::Relaxed);
                if !send(Frame::SynReply { id, fin: false, headers: Vec::new() }).await {
                    break;
                }
                let (tx, data) = mpsc::channel(64);
                if flags & frame::FLAG_FIN == 0 {
                    open.insert(id, tx);
                }
                let stream = Stream { id, headers, data, sender: Sender { id, out: out.clone() } };
                if streams.send(stream).await.is_err() {
                    open.remove(&id);
                    send(Frame::RstStream { id, status: rst::REFUSED_STREAM }).await;
                }
            }
            Frame::Data { id, fin, data } => match open.get(&id) {
                Some(tx) => {
                    if !data.is_empty() && tx.send(data).await.is_err() {
                        // Nobody reads this stream any more: what comes is dropped.
                    }
                    if fin {
                        open.remove(&id);
                    }
                }
                None => {
                    send(Frame::RstStream { id, status: rst::INVALID_STREAM }).await;
                }
            },
            Frame::RstStream { id, .. } => {
                open.remove(&id);
            }
            Frame::Headers { id, fin: true, .. } => {
                open.remove(&id);
            }
            // Pings the peer starts carry odd ids: answer them.
            Frame::Ping { id } if id % 2 == 1 => {
                send(Frame::Ping { id }).await;
            }
            Frame::GoAway { .. } => going_away = true,
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Writes `frames` as a client would, through its own compressor.
    fn wire(frames: &[Frame]) -> Vec<u8> {
        let mut d = Deflater::new();
        let mut out = Vec::new();
        for f in frames {
            frame::encode(f, &mut d, &mut out).expect("encodes");
        }
        out
    }

    async fn read_all(r: &mut (impl AsyncRead + Unpin)) -> Vec<Frame> {
        let mut i = Inflater::new();
        let mut got = Vec::new();
        while let Ok(Some(f)) = read_frame(r, &mut i).await {
            got.push(f);
        }
        got
    }

    #[tokio::test]
    async fn streams_are_accepted_answered_and_carry_data_both_ways() {
        let (client, server) = tokio::io::duplex(1 << 16);
        let mut conn = Connection::serve(server);
        let (mut cr, mut cw) = tokio::io::split(client);
        let headers = vec![("streamtype".to_string(), "data".to_string())];
        cw.write_all(&wire(&[
            Frame::SynStream { id: 1, associated: 0, priority: 0, flags: 0, headers: headers.clone() },
            Frame::Ping { id: 1 },
            Frame::SynStream { id: 2, associated: 0, priority: 0, flags: 0, headers: vec![] },
            Frame::Data { id: 9, fin: false, data: b"?".to_vec() },
            Frame::Data { id: 1, fin: false, data: b"ping".to_vec() },
            Frame::Data { id: 1, fin: true, data: Vec::new() },
        ]))
        .await
        .expect("write");
        let mut s = conn.streams.recv().await.expect("a stream");
        assert_eq!((s.id, &s.headers), (1, &headers));
        assert_eq!(s.data.recv().await.as_deref(), Some(&b"ping"[..]));
        assert_eq!(s.data.recv().await, None, "FIN ends the data");
        s.sender.write(b"pong").await.expect("write");
        s.sender.close().await.expect("close");
        drop(s);
        drop(cw);
        conn.shutdown().await;
        let got = read_all(&mut cr).await;
        // The reader's answers and the stream's writes interleave; each keeps its own order.
        let from_reader: Vec<&Frame> = got.iter().filter(|f| !matches!(f, Frame::Data { .. })).collect();
        assert_eq!(
            from_reader,
            [
                &Frame::SynReply { id: 1, fin: false, headers: vec![] },
                &Frame::Ping { id: 1 },
                &Frame::RstStream { id: 2, status: rst::PROTOCOL_ERROR },
                &Frame::RstStream { id: 9, status: rst::INVALID_STREAM },
                &Frame::GoAway { last_good: 1, status: 0 },
            ]
        );
        let data: Vec<&Frame> = got.iter().filter(|f| matches!(f, Frame::Data { .. })).collect();
        assert_eq!(
            data,
            [
                &Frame::Data { id: 1, fin: false, data: b"pong".to_vec() },
                &Frame::Data { id: 1, fin: true, data: vec![] }
            ]
        );
    }

    #[tokio::test]
    async fn garbage_ends_the_connection_without_a_panic() {
        let (client, server) = tokio::io::duplex(1 << 16);
        let mut conn = Connection::serve(server);
        let (mut cr, mut cw) = tokio::io::split(client);
        cw.write_all(&[0x80, 0x03, 0x00, 0x01, 0, 0, 0, 12, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0xde, 0xad])
            .await
            .expect("w");
        assert!(conn.streams.recv().await.is_none());
        conn.shutdown().await;
        let got = read_all(&mut cr).await;
        assert_eq!(got.first(), Some(&Frame::GoAway { last_good: 0, status: 1 }));
    }
}
