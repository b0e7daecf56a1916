//! SPDY/3.1 frames as bytes: the 8-byte head, each frame type's body, and header blocks.
//! Pure, apart from the connection's header compression contexts it is handed.

use super::compress::{Deflater, Inflater};
use super::{Error, Headers, Result};

pub const VERSION: u16 = 3;
/// DATA and SYN_* flag: the sender's last frame on this stream.
pub const FLAG_FIN: u8 = 0x01;
pub const FLAG_UNIDIRECTIONAL: u8 = 0x02;
const SETTINGS_CLEAR: u8 = 0x01;
/// The largest frame body the 24-bit length allows.
pub const MAX_LENGTH: usize = 0x00ff_ffff;

const SYN_STREAM: u16 = 1;
const SYN_REPLY: u16 = 2;
const RST_STREAM: u16 = 3;
const SETTINGS: u16 = 4;
const PING: u16 = 6;
const GOAWAY: u16 = 7;
const HEADERS: u16 = 8;
const WINDOW_UPDATE: u16 = 9;

/// RST_STREAM status codes (SPDY/3 §2.4.2).
pub mod rst {
    pub const PROTOCOL_ERROR: u32 = 1;
    pub const INVALID_STREAM: u32 = 2;
    pub const REFUSED_STREAM: u32 = 3;
    pub const CANCEL: u32 = 5;
    pub const INTERNAL_ERROR: u32 = 6;
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Frame {
    SynStream {
        id: u32,
        associated: u32,
        priority: u8,
        flags: u8,
        headers: Headers,
    },
    SynReply {
        id: u32,
        fin: bool,
        headers: Headers,
    },
    RstStream {
        id: u32,
        status: u32,
    },
    Settings {
        clear: bool,
        entries: Vec<Setting>,
    },
    Ping {
        id: u32,
    },
    GoAway {
        last_good: u32,
        status: u32,
    },
    Headers {
        id: u32,
        fin: bool,
        headers: Headers,
    },
    WindowUpdate {
        id: u32,
        delta: u32,
    },
    Data {
        id: u32,
        fin: bool,
        data: Vec<u8>,
    },
    /// A control frame type this version does not define (the spec says: ignore it).
    Unknown {
        kind: u16,
    },
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Setting {
    pub flags: u8,
    pub id: u32,
    pub value: u32,
}

/// The common 8 bytes in front of every frame.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Head {
    Control { version: u16, kind: u16, flags: u8, length: usize },
    Data { id: u32, flags: u8, length: usize },
}

impl Head {
    pub fn parse(b: [u8; 8]) -> Head {
        let flags = b[4];
        let length = u32::from_be_bytes([0, b[5], b[6], b[7]]) as usize;
        if b[0] & 0x80 != 0 {
            let version = u16::from_be_bytes([b[0], b[1]]) & 0x7fff;
            Head::Control { version, kind: u16::from_be_bytes([b[2], b[3]]), flags, length }
        } else {
            Head::Data { id: u32::from_be_bytes([b[0], b[1], b[2], b[3]]) & 0x7fff_ffff, flags, length }
        }
    }

    pub fn length(&self) -> usize {
        match *self {
            Head::Control { length, .. } | Head::Data { length, .. } => length,
        }
    }
}

fn u32_at(body: &[u8], at: usize, what: &'static str) -> Result<u32> {
    body.get(at..at + 4).map(|b| u32::from_be_bytes([b[0], b[1], b[2], b[3]])).ok_or(Error::Truncated { what })
}

fn stream_id(body: &[u8], at: usize, what: &'static str) -> Result<u32> {
    Ok(u32_at(body, at, what)? & 0x7fff_ffff)
}

/// Decodes one frame from its head and body. Header blocks go through `inflater`, so every
/// header-carrying frame of the connection must come through here, in order.
pub fn decode(head: Head, body: &[u8], inflater: &mut Inflater) -> Result<Frame> {
    let (version, kind, flags) = match head {
        Head::Data { id, flags, .. } => return Ok(Frame::Data { id, fin: flags & FLAG_FIN != 0, data: body.to_vec() }),
        Head::Control { version, kind, flags, .. } => (version, kind, flags),
    };
    if version != VERSION {
        return Err(Error::Version(version));
    }
    let fin = flags & FLAG_FIN != 0;
    Ok(match kind {
        SYN_STREAM => {
            let id = stream_id(body, 0, "SYN_STREAM")?;
            let associated = stream_id(body, 4, "SYN_STREAM")?;
            let priority = body.get(8).ok_or(Error::Truncated { what: "SYN_STREAM" })? >> 5;
            let headers = decode_headers(&inflater.inflate(&body[10.min(body.len())..])?)?;
            Frame::SynStream { id, associated, priority, flags, headers }
        }
        SYN_REPLY | HEADERS => {
            let id = stream_id(body, 0, "SYN_REPLY")?;
            let headers = decode_headers(&inflater.inflate(&body[4..])?)?;
            if kind == SYN_REPLY {
                Frame::SynReply { id, fin, headers }
            } else {
                Frame::Headers { id, fin, headers }
            }
        }
        RST_STREAM => {
            Frame::RstStream { id: stream_id(body, 0, "RST_STREAM")?, status: u32_at(body, 4, "RST_STREAM")? }
        }
        SETTINGS => {
            let n = u32_at(body, 0, "SETTINGS")? as usize;
            let entries = body[4..]
                .chunks_exact(8)
                .take(n)
                .map(|e| Setting {
                    flags: e[0],
                    id: u32::from_be_bytes([0, e[1], e[2], e[3]]),
                    value: u32::from_be_bytes([e[4], e[5], e[6], e[7]]),
                })
                .collect::<Vec<_>>();
            if entries.len() != n {
                return Err(Error::Truncated { what: "SETTINGS" });
            }
            Frame::Settings { clear: flags & SETTINGS_CLEAR != 0, entries }
        }
        PING => Frame::Ping { id: u32_at(body, 0, "PING")? },
        GOAWAY => Frame::GoAway { last_good: stream_id(body, 0, "GOAWAY")?, status: u32_at(body, 4, "GOAWAY")? },
        WINDOW_UPDATE => Frame::WindowUpdate {
            id: stream_id(body, 0, "WINDOW_UPDATE")?,
            delta: stream_id(body, 4, "WINDOW_UPDATE")?,
        },
        kind => Frame::Unknown { kind },
    })
}

fn control(out: &mut Vec<u8>, kind: u16, flags: u8, body: &[u8]) {
    out.extend_from_slice(&(0x8000 | VERSION).to_be_bytes());
    out.extend_from_slice(&kind.to_be_bytes());
    out.push(flags);
    out.extend_from_slice(&(body.len() as u32).to_be_bytes()[1..]);
    out.extend_from_slice(body);
}

/// Appends `frame` to `out`. Header blocks go through `deflater`, so frames must be written in
/// the order they are encoded. Data longer than [`MAX_LENGTH`] is the caller's to split.
pub fn encode(frame: &Frame, deflater: &mut Deflater, out: &mut Vec<u8>) -> Result<()> {
    let fin = |f: bool| if f { FLAG_FIN } else { 0 };
    match frame {
        Frame::Data { id, fin: f, data } => {
            if data.len() > MAX_LENGTH {
                return Err(Error::TooLarge(data.len()));
            }
            out.extend_from_slice(&(id & 0x7fff_ffff).to_be_bytes());
            out.push(fin(*f));
            out.extend_from_slice(&(data.len() as u32).to_be_bytes()[1..]);
            out.extend_from_slice(data);
        }
        Frame::SynStream { id, associated, priority, flags, headers } => {
            let mut body = Vec::new();
            body.extend_from_slice(&id.to_be_bytes());
            body.extend_from_slice(&associated.to_be_bytes());
            body.extend_from_slice(&[priority << 5, 0]);
            body.extend_from_slice(&deflater.deflate(&encode_headers(headers))?);
            control(out, SYN_STREAM, *flags, &body);
        }
        Frame::SynReply { id, fin: f, headers } | Frame::Headers { id, fin: f, headers } => {
            let mut body = id.to_be_bytes().to_vec();
            body.extend_from_slice(&deflater.deflate(&encode_headers(headers))?);
            let kind = if matches!(frame, Frame::SynReply { .. }) { SYN_REPLY } else { HEADERS };
            control(out, kind, fin(*f), &body);
        }
        Frame::RstStream { id, status } => control(out, RST_STREAM, 0, &pair(*id, *status)),
        Frame::Settings { clear, entries } => {
            let mut body = (entries.len() as u32).to_be_bytes().to_vec();
            for e in entries {
                body.push(e.flags);
                body.extend_from_slice(&e.id.to_be_bytes()[1..]);
                body.extend_from_slice(&e.value.to_be_bytes());
            }
            control(out, SETTINGS, if *clear { SETTINGS_CLEAR } else { 0 }, &body);
        }
        Frame::Ping { id } => control(out, PING, 0, &id.to_be_bytes()),
        Frame::GoAway { last_good, status } => control(out, GOAWAY, 0, &pair(*last_good, *status)),
        Frame::WindowUpdate { id, delta } => control(out, WINDOW_UPDATE, 0, &pair(*id, *delta)),
        Frame::Unknown { kind } => control(out, *kind, 0, &[]),
    }
    Ok(())
}

fn pair(a: u32, b: u32) -> [u8; 8] {
    let mut v = [0u8; 8];
    v[..4].copy_from_slice(&a.to_be_bytes());
    v[4..].copy_from_slice(&b.to_be_bytes());
    v
}

/// An uncompressed header block: a count, then length-prefixed names and values (names are
/// lowercase; several values of one name are joined by NUL).
pub fn encode_headers(h: &Headers) -> Vec<u8> {
    let mut out = (h.len() as u32).to_be_bytes().to_vec();
    for (name, value) in h {
        for s in [name.to_ascii_lowercase().as_str(), value.as_str()] {
            out.extend_from_slice(&(s.len() as u32).to_be_bytes());
            out.extend_from_slice(s.as_bytes());
        }
    }
    out
}

pub fn decode_headers(b: &[u8]) -> Result<Headers> {
    let n = u32_at(b, 0, "header block")? as usize;
    let mut at = 4;
    let string = |at: &mut usize| -> Result<String> {
        let len = u32_at(b, *at, "header block")? as usize;
        let s = b.get(*at + 4..*at + 4 + len).ok_or(Error::Truncated { what: "header block" })?;
        *at += 4 + len;
        Ok(String::from_utf8_lossy(s).into_owned())
    };
    // Each pair takes at least 8 bytes: a count larger than that is a lie, not an allocation.
    let mut out = Vec::with_capacity(n.min(b.len() / 8));
    for _ in 0..n {
        let name = string(&mut at)?;
        let value = string(&mut at)?;
        out.push((name, value));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn h(pairs: &[(&str, &str)]) -> Headers {
        pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    fn roundtrip(frames: &[Frame]) -> Vec<Frame> {
        let (mut d, mut i) = (Deflater::new(), Inflater::new());
        let mut wire = Vec::new();
        for f in frames {
            encode(f, &mut d, &mut wire).expect("encodes");
        }
        let mut out = Vec::new();
        let mut rest = wire.as_slice();
        while !rest.is_empty() {
            let head = Head::parse(rest[..8].try_into().expect("8 bytes"));
            let (body, next) = rest[8..].split_at(head.length());
            out.push(decode(head, body, &mut i).expect("decodes"));
            rest = next;
        }
        out
    }

    #[test]
    fn every_frame_type_survives_encode_and_decode() {
        let frames = vec![
            Frame::SynStream {
                id: 1,
                associated: 0,
                priority: 0,
                flags: 0,
                headers: h(&[("streamtype", "error"), ("port", "80"), ("requestid", "0")]),
            },
            Frame::SynReply { id: 1, fin: false, headers: vec![] },
            Frame::Data { id: 3, fin: true, data: b"hello".to_vec() },
            Frame::RstStream { id: 5, status: rst::CANCEL },
            Frame::Settings { clear: true, entries: vec![Setting { flags: 1, id: 7, value: 65536 }] },
            Frame::Ping { id: 2 },
            Frame::GoAway { last_good: 9, status: 0 },
            Frame::Headers { id: 3, fin: true, headers: h(&[("a", "b\0c")]) },
            Frame::WindowUpdate { id: 3, delta: 1024 },
            // The same headers again: the shared compression context must still agree.
            Frame::SynStream { id: 3, associated: 0, priority: 7, flags: FLAG_FIN, headers: h(&[("port", "80")]) },
        ];
        assert_eq!(roundtrip(&frames), frames);
    }

    #[test]
    fn frames_are_laid_out_as_the_spec_draws_them() {
        let mut wire = Vec::new();
        encode(&Frame::GoAway { last_good: 8, status: 0 }, &mut Deflater::new(), &mut wire).expect("encodes");
        // kubectl's Ctrl-C, as seen on the wire (kubectl-wire.md §7.4).
        assert_eq!(wire, [0x80, 0x03, 0x00, 0x07, 0x00, 0x00, 0x00, 0x08, 0, 0, 0, 8, 0, 0, 0, 0]);
        let mut wire = Vec::new();
        encode(&Frame::Data { id: 5, fin: true, data: b"ok".to_vec() }, &mut Deflater::new(), &mut wire)
            .expect("encodes");
        assert_eq!(wire, [0, 0, 0, 5, 0x01, 0, 0, 2, b'o', b'k']);
        assert_eq!(
            Head::parse([0x80, 0x03, 0x00, 0x06, 0x00, 0x00, 0x00, 0x04]),
            Head::Control { version: 3, kind: 6, flags: 0, length: 4 }
        );
    }

    #[test]
    fn a_hand_built_ping_and_rst_decode() {
        let mut i = Inflater::new();
        let ping = Head::parse([0x80, 0x03, 0x00, 0x06, 0, 0, 0, 4]);
        assert_eq!(decode(ping, &[0, 0, 0, 7], &mut i).expect("ping"), Frame::Ping { id: 7 });
        let rst = Head::parse([0x80, 0x03, 0x00, 0x03, 0, 0, 0, 8]);
        assert_eq!(
            decode(rst, &[0x80, 0, 0, 1, 0, 0, 0, 5], &mut i).expect("rst"),
            Frame::RstStream { id: 1, status: rst::CANCEL },
            "the reserved bit is masked off"
        );
    }

    #[test]
    fn kubectls_port_forward_streams_decode() {
        // kubectl 1.32's first two SYN_STREAMs of a port-forward, captured from the wire: the
        // error and data streams of request 0 to port 8080, one zlib stream across both.
        let error_stream = [
            0x80, 0x03, 0x00, 0x01, 0x00, 0x00, 0x00, 0x3e, 0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
            0x78, 0xf9, 0xe3, 0xc6, 0xa7, 0xc2, 0x02, 0x25, 0x3a, 0x70, 0x3a, 0x2b, 0x29, 0x4a, 0x4d, 0xcc, 0x85, 0x16,
            0x25, 0xac, 0xa9, 0xa0, 0x80, 0x86, 0x14, 0xcb, 0x45, 0xe0, 0x1c, 0x60, 0x61, 0x60, 0x61, 0xc0, 0xc0, 0xc0,
            0xc0, 0x59, 0x04, 0x89, 0xc6, 0x4c, 0x50, 0xf2, 0x66, 0x34, 0x00, 0x00, 0x00, 0x00, 0xff, 0xff,
        ];
        let data_stream = [
            0x80, 0x03, 0x00, 0x01, 0x00, 0x00, 0x00, 0x18, 0x00, 0x00, 0x00, 0x03, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
            0xc2, 0xaa, 0x19, 0x54, 0x0e, 0x25, 0x12, 0xd6, 0x0b, 0x00, 0x00, 0x00, 0xff, 0xff,
        ];
        let mut i = Inflater::new();
        let mut decoded = Vec::new();
        for wire in [&error_stream[..], &data_stream[..]] {
            let head = Head::parse(wire[..8].try_into().expect("8 bytes"));
            assert_eq!(head.length(), wire.len() - 8);
            decoded.push(decode(head, &wire[8..], &mut i).expect("decodes"));
        }
        let Frame::SynStream { id: 1, ref headers, .. } = decoded[0] else { panic!("{:?}", decoded[0]) };
        let get = |h: &Headers, k: &str| super::super::header(h, k).map(str::to_string);
        assert_eq!(get(headers, "streamType").as_deref(), Some("error"));
        assert_eq!(get(headers, "port").as_deref(), Some("8080"));
        assert_eq!(get(headers, "requestID").as_deref(), Some("0"));
        let Frame::SynStream { id: 3, ref headers, .. } = decoded[1] else { panic!("{:?}", decoded[1]) };
        assert_eq!(get(headers, "streamType").as_deref(), Some("data"));
        assert_eq!(get(headers, "requestID").as_deref(), Some("0"));
    }

    #[test]
    fn malformed_frames_are_errors_not_panics() {
        let mut i = Inflater::new();
        let syn = Head::parse([0x80, 0x03, 0x00, 0x01, 0, 0, 0, 3]);
        assert!(matches!(decode(syn, &[0, 0, 1], &mut i), Err(Error::Truncated { .. })));
        let v2 = Head::parse([0x80, 0x02, 0x00, 0x06, 0, 0, 0, 4]);
        assert!(matches!(decode(v2, &[0, 0, 0, 1], &mut i), Err(Error::Version(2))));
        let settings = Head::parse([0x80, 0x03, 0x00, 0x04, 0, 0, 0, 4]);
        assert!(decode(settings, &[0xff, 0xff, 0xff, 0xff], &mut i).is_err());
        assert!(decode_headers(&[0xff, 0xff, 0xff, 0xff, 0, 0, 0, 9, b'a']).is_err());
        let unknown = Head::parse([0x80, 0x03, 0x00, 0x42, 0, 0, 0, 0]);
        assert_eq!(decode(unknown, &[], &mut i).expect("ignored"), Frame::Unknown { kind: 0x42 });
        // SYN_STREAM with garbage where the compressed header block should be.
        let syn = Head::parse([0x80, 0x03, 0x00, 0x01, 0, 0, 0, 14]);
        assert!(decode(syn, &[0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 1, 2, 3, 4], &mut i).is_err());
    }
}
