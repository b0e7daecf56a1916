//! How the embedded store lays out its records and event log entries, and what each takes.

use super::super::{Error, Event, EventKind, KeyValue, Result};
use std::sync::Arc;

pub(super) fn encode_kv(create: u64, modrev: u64, value: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(16 + value.len());
    out.extend_from_slice(&create.to_le_bytes());
    out.extend_from_slice(&modrev.to_le_bytes());
    out.extend_from_slice(value);
    out
}

pub(super) fn decode_kv(key: &str, raw: &[u8]) -> Result<KeyValue> {
    if raw.len() < 16 {
        return Err(Error::Backend(format!("corrupt record for {key}")));
    }
    let create = u64::from_le_bytes(raw[0..8].try_into().expect("8-byte slice"));
    let modrev = u64::from_le_bytes(raw[8..16].try_into().expect("8-byte slice"));
    Ok(KeyValue {
        key: key.to_string(),
        value: Arc::from(&raw[16..]),
        create_revision: create,
        mod_revision: modrev,
        stale: false,
    })
}

fn put_bytes(out: &mut Vec<u8>, b: &[u8]) {
    out.extend_from_slice(&(b.len() as u32).to_le_bytes());
    out.extend_from_slice(b);
}

pub(super) fn encode_event(e: &Event) -> Vec<u8> {
    let mut out = Vec::with_capacity(16 + e.key.len() + e.value.len());
    out.push(match e.kind {
        EventKind::Put => 0,
        EventKind::Delete => 1,
        // Never stored: progress is only ever sent live.
        EventKind::Progress => 2,
    });
    out.push(u8::from(e.created));
    put_bytes(&mut out, e.key.as_bytes());
    put_bytes(&mut out, &e.value);
    match &e.prev {
        Some(p) => {
            out.push(1);
            put_bytes(&mut out, p);
        }
        None => out.push(0),
    }
    out
}

struct Cursor<'a> {
    raw: &'a [u8],
    pos: usize,
    revision: u64,
}

impl<'a> Cursor<'a> {
    fn corrupt(&self) -> Error {
        Error::Backend(format!("corrupt event log entry at revision {}", self.revision))
    }

    fn take(&mut self, n: usize) -> Result<&'a [u8]> {
        let s = self.raw.get(self.pos..self.pos + n).ok_or_else(|| self.corrupt())?;
        self.pos += n;
        Ok(s)
    }

    fn byte(&mut self) -> Result<u8> {
        Ok(self.take(1)?[0])
    }

    fn bytes(&mut self) -> Result<&'a [u8]> {
        let len = u32::from_le_bytes(self.take(4)?.try_into().expect("4-byte slice")) as usize;
        self.take(len)
    }
}

pub(super) fn decode_event(revision: u64, raw: &[u8]) -> Result<Event> {
    let mut c = Cursor { raw, pos: 0, revision };
    let kind = match c.byte()? {
        0 => EventKind::Put,
        _ => EventKind::Delete,
    };
    let created = c.byte()? == 1;
    let key = String::from_utf8(c.bytes()?.to_vec()).map_err(|_| c.corrupt())?;
    let value: Arc<[u8]> = c.bytes()?.into();
    let prev = if c.byte()? == 1 { Some(c.bytes()?.into()) } else { None };
    Ok(Event { kind, revision, key, value, prev, created })
}

/// What a key and its record take (the record carries two revisions before the value).
pub(super) fn kv_bytes(key: &str, record: usize) -> u64 {
    (key.len() + record) as u64
}

/// What one event log entry takes (its revision key and the encoded event).
pub(super) fn log_bytes(encoded: usize) -> u64 {
    (8 + encoded) as u64
}

/// How much a committed event changes the live data by.
pub(super) fn live_delta(e: &Event) -> i64 {
    let record = |v: &[u8]| kv_bytes(&e.key, 16 + v.len()) as i64;
    match (e.kind, &e.prev) {
        (EventKind::Put, Some(prev)) if !e.created => record(&e.value) - record(prev),
        (EventKind::Put, _) => record(&e.value),
        (EventKind::Delete, _) => -record(&e.value),
        (EventKind::Progress, _) => 0,
    }
}
