//! The embedded backend: redb (ACID, fsync on commit) with a global revision and a bounded event log.

use super::{Error, Event, EventKind, KeyValue, Result, Store, WatchStream};
use redb::{Database, ReadableDatabase, ReadableTable, TableDefinition};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use tokio::sync::broadcast;

/// key -> [create_rev u64][mod_rev u64][value]
const KV: TableDefinition<'_, &str, &[u8]> = TableDefinition::new("kv");
/// revision -> encoded Event
const LOG: TableDefinition<'_, u64, &[u8]> = TableDefinition::new("log");
/// "rev" / "compacted" -> u64
const META: TableDefinition<'_, &str, u64> = TableDefinition::new("meta");

/// How many events a live watcher may fall behind before its stream is ended.
const BROADCAST_CAPACITY: usize = 4096;
/// redb's page cache; the watch cache holds the hot objects, this only speeds up writes.
const CACHE_BYTES: usize = 32 << 20;

/// Most writes one commit (one fsync) carries.
const MAX_BATCH: usize = 512;

/// The embedded store. Writes go to one writer thread that commits whatever is pending as one
/// transaction (group commit: one fsync for many acknowledged writes), assigning each its own
/// revision in arrival order.
pub struct RedbStore {
    inner: Arc<Inner>,
    ops: Option<std::sync::mpsc::Sender<Pending>>,
    writer: Option<std::thread::JoinHandle<()>>,
}

struct Inner {
    db: Database,
    /// Held across commit + revision bump + publish, and by readers that need a snapshot whose
    /// revision matches exactly (list, watch setup, compaction).
    publish: Mutex<()>,
    revision: AtomicU64,
    compacted: AtomicU64,
    events: broadcast::Sender<Arc<Event>>,
}

enum Op {
    Create { key: String, value: Vec<u8> },
    Update { key: String, value: Vec<u8>, expected: u64 },
    Delete { key: String, expected: Option<u64> },
}

enum OpOut {
    Rev(u64),
    Deleted(u64, KeyValue),
}

struct Pending {
    op: Op,
    reply: std::sync::mpsc::SyncSender<Result<OpOut>>,
}

/// Block on a reply without starving the async runtime: on a multi-threaded tokio runtime the
/// worker hands its other tasks off first, so many requests can wait on one group commit.
fn wait<T>(rx: std::sync::mpsc::Receiver<T>) -> Option<T> {
    match tokio::runtime::Handle::try_current() {
        Ok(h) if h.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread => {
            tokio::task::block_in_place(|| rx.recv().ok())
        }
        _ => rx.recv().ok(),
    }
}

fn backend(e: impl std::fmt::Display) -> Error {
    Error::Backend(e.to_string())
}

fn encode_kv(create: u64, modrev: u64, value: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(16 + value.len());
    out.extend_from_slice(&create.to_le_bytes());
    out.extend_from_slice(&modrev.to_le_bytes());
    out.extend_from_slice(value);
    out
}

fn decode_kv(key: &str, raw: &[u8]) -> Result<KeyValue> {
    if raw.len() < 16 {
        return Err(Error::Backend(format!("corrupt record for {key}")));
    }
    let create = u64::from_le_bytes(raw[0..8].try_into().expect("8-byte slice"));
    let modrev = u64::from_le_bytes(raw[8..16].try_into().expect("8-byte slice"));
    Ok(KeyValue { key: key.to_string(), value: Arc::from(&raw[16..]), create_revision: create, mod_revision: modrev })
}

fn put_bytes(out: &mut Vec<u8>, b: &[u8]) {
    out.extend_from_slice(&(b.len() as u32).to_le_bytes());
    out.extend_from_slice(b);
}

fn encode_event(e: &Event) -> Vec<u8> {
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

fn decode_event(revision: u64, raw: &[u8]) -> Result<Event> {
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

impl RedbStore {
    /// Open (or create) the store in `dir/kaji.redb`.
    pub fn open(dir: &Path) -> Result<Self> {
        std::fs::create_dir_all(dir).map_err(|e| Error::Backend(format!("failed to create {}: {e}", dir.display())))?;
        let db = redb::Builder::new().set_cache_size(CACHE_BYTES).create(dir.join("kaji.redb")).map_err(backend)?;
        let (revision, compacted) = {
            let txn = db.begin_write().map_err(backend)?;
            let (rev, comp) = {
                txn.open_table(KV).map_err(backend)?;
                txn.open_table(LOG).map_err(backend)?;
                let meta = txn.open_table(META).map_err(backend)?;
                let rev = meta.get("rev").map_err(backend)?.map(|g| g.value()).unwrap_or(0);
                let comp = meta.get("compacted").map_err(backend)?.map(|g| g.value()).unwrap_or(0);
                (rev, comp)
            };
            txn.commit().map_err(backend)?;
            (rev, comp)
        };
        let (events, _) = broadcast::channel(BROADCAST_CAPACITY);
        let inner = Arc::new(Inner {
            db,
            publish: Mutex::new(()),
            revision: AtomicU64::new(revision),
            compacted: AtomicU64::new(compacted),
            events,
        });
        let (tx, rx) = std::sync::mpsc::channel();
        let w = inner.clone();
        let writer = std::thread::Builder::new()
            .name("redb-writer".into())
            .spawn(move || w.writer_loop(rx))
            .map_err(|e| Error::Backend(format!("failed to start the writer thread: {e}")))?;
        Ok(Self { inner, ops: Some(tx), writer: Some(writer) })
    }

    fn submit(&self, op: Op) -> Result<OpOut> {
        let (reply, rx) = std::sync::mpsc::sync_channel(1);
        let ops = self.ops.as_ref().ok_or_else(|| Error::Backend("store is closed".into()))?;
        ops.send(Pending { op, reply }).map_err(|_| Error::Backend("the writer thread has stopped".into()))?;
        wait(rx).unwrap_or_else(|| Err(Error::Backend("the writer thread has stopped".into())))
    }

    fn lock(&self) -> Result<std::sync::MutexGuard<'_, ()>> {
        self.inner.publish.lock().map_err(|_| Error::Backend("publish lock poisoned".into()))
    }
}

impl Drop for RedbStore {
    fn drop(&mut self) {
        // Closing the queue ends the writer after the batch in flight; joining it releases the
        // database file before anyone reopens it.
        self.ops.take();
        if let Some(w) = self.writer.take() {
            let _ = w.join();
        }
    }
}

impl Inner {
    fn writer_loop(&self, rx: std::sync::mpsc::Receiver<Pending>) {
        while let Ok(first) = rx.recv() {
            let mut batch = vec![first];
            while batch.len() < MAX_BATCH {
                match rx.try_recv() {
                    Ok(p) => batch.push(p),
                    Err(_) => break,
                }
            }
            let Ok(_guard) = self.publish.lock() else {
                for p in batch {
                    let _ = p.reply.send(Err(Error::Backend("publish lock poisoned".into())));
                }
                continue;
            };
            match self.commit_batch(&batch) {
                Ok(results) => {
                    for (p, r) in batch.into_iter().zip(results) {
                        let out = r.map(|(event, out)| {
                            self.revision.store(event.revision, Ordering::SeqCst);
                            // No receivers is fine: nobody is watching yet.
                            let _ = self.events.send(Arc::new(event));
                            out
                        });
                        let _ = p.reply.send(out);
                    }
                }
                Err(e) => {
                    for p in batch {
                        let _ = p.reply.send(Err(e.clone()));
                    }
                }
            }
        }
    }

    /// Apply every op in one transaction; an op that fails its precondition changes nothing
    /// and takes no revision. The commit is durable when this returns.
    fn commit_batch(&self, batch: &[Pending]) -> Result<Vec<Result<(Event, OpOut)>>> {
        let mut next = self.revision.load(Ordering::SeqCst) + 1;
        let txn = self.db.begin_write().map_err(backend)?;
        let mut results = Vec::with_capacity(batch.len());
        {
            let mut kv = txn.open_table(KV).map_err(backend)?;
            let mut log = txn.open_table(LOG).map_err(backend)?;
            for p in batch {
                let r = apply(&mut kv, &p.op, next);
                if let Ok((event, _)) = &r {
                    log.insert(next, encode_event(event).as_slice()).map_err(backend)?;
                    next += 1;
                }
                results.push(r);
            }
            let mut meta = txn.open_table(META).map_err(backend)?;
            meta.insert("rev", next - 1).map_err(backend)?;
        }
        txn.commit().map_err(backend)?;
        Ok(results)
    }
}

fn read_kv(kv: &redb::Table<'_, &str, &[u8]>, key: &str) -> Result<Option<KeyValue>> {
    match kv.get(key).map_err(backend)? {
        Some(g) => Ok(Some(decode_kv(key, g.value())?)),
        None => Ok(None),
    }
}

/// One op against the open table at revision `rev`. Preconditions are checked before any
/// change, so a failed op leaves the transaction untouched.
fn apply(kv: &mut redb::Table<'_, &str, &[u8]>, op: &Op, rev: u64) -> Result<(Event, OpOut)> {
    match op {
        Op::Create { key, value } => {
            if kv.get(key.as_str()).map_err(backend)?.is_some() {
                return Err(Error::AlreadyExists(key.clone()));
            }
            kv.insert(key.as_str(), encode_kv(rev, rev, value).as_slice()).map_err(backend)?;
            let event = Event {
                kind: EventKind::Put,
                revision: rev,
                key: key.clone(),
                value: value.as_slice().into(),
                prev: None,
                created: true,
            };
            Ok((event, OpOut::Rev(rev)))
        }
        Op::Update { key, value, expected } => {
            let old = read_kv(kv, key)?.ok_or_else(|| Error::NotFound(key.clone()))?;
            if old.mod_revision != *expected {
                return Err(Error::Conflict { key: key.clone(), expected: *expected, actual: old.mod_revision });
            }
            kv.insert(key.as_str(), encode_kv(old.create_revision, rev, value).as_slice()).map_err(backend)?;
            let event = Event {
                kind: EventKind::Put,
                revision: rev,
                key: key.clone(),
                value: value.as_slice().into(),
                prev: Some(old.value),
                created: false,
            };
            Ok((event, OpOut::Rev(rev)))
        }
        Op::Delete { key, expected } => {
            let old = read_kv(kv, key)?.ok_or_else(|| Error::NotFound(key.clone()))?;
            if let Some(expected) = expected {
                if old.mod_revision != *expected {
                    return Err(Error::Conflict { key: key.clone(), expected: *expected, actual: old.mod_revision });
                }
            }
            kv.remove(key.as_str()).map_err(backend)?;
            let event = Event {
                kind: EventKind::Delete,
                revision: rev,
                key: key.clone(),
                value: old.value.clone(),
                prev: Some(old.value.clone()),
                created: false,
            };
            Ok((event, OpOut::Deleted(rev, old)))
        }
    }
}

impl Store for RedbStore {
    fn current_revision(&self) -> u64 {
        self.inner.revision.load(Ordering::SeqCst)
    }

    fn get(&self, key: &str) -> Result<Option<KeyValue>> {
        let txn = self.inner.db.begin_read().map_err(backend)?;
        let kv = txn.open_table(KV).map_err(backend)?;
        match kv.get(key).map_err(backend)? {
            Some(g) => Ok(Some(decode_kv(key, g.value())?)),
            None => Ok(None),
        }
    }

    fn list(&self, prefix: &str) -> Result<(Vec<KeyValue>, u64)> {
        // Take the revision under the publish lock so it matches the snapshot exactly.
        let (txn, rev) = {
            let _guard = self.lock()?;
            (self.inner.db.begin_read().map_err(backend)?, self.current_revision())
        };
        let kv = txn.open_table(KV).map_err(backend)?;
        let mut out = Vec::new();
        for entry in kv.range(prefix..).map_err(backend)? {
            let (k, v) = entry.map_err(backend)?;
            let key = k.value();
            if !key.starts_with(prefix) {
                break;
            }
            out.push(decode_kv(key, v.value())?);
        }
        Ok((out, rev))
    }

    fn create(&self, key: &str, value: &[u8]) -> Result<u64> {
        match self.submit(Op::Create { key: key.into(), value: value.to_vec() })? {
            OpOut::Rev(r) | OpOut::Deleted(r, _) => Ok(r),
        }
    }

    fn update(&self, key: &str, value: &[u8], expected: u64) -> Result<u64> {
        match self.submit(Op::Update { key: key.into(), value: value.to_vec(), expected })? {
            OpOut::Rev(r) | OpOut::Deleted(r, _) => Ok(r),
        }
    }

    fn delete(&self, key: &str, expected: Option<u64>) -> Result<(u64, KeyValue)> {
        match self.submit(Op::Delete { key: key.into(), expected })? {
            OpOut::Deleted(r, kv) => Ok((r, kv)),
            OpOut::Rev(_) => Err(Error::Backend("writer answered a delete with no value".into())),
        }
    }

    fn watch(&self, prefix: &str, after: u64) -> Result<WatchStream> {
        let (history, mut live) = {
            let _guard = self.lock()?;
            let compacted = self.compacted_revision();
            if after < compacted {
                return Err(Error::Compacted { requested: after, compacted });
            }
            let txn = self.inner.db.begin_read().map_err(backend)?;
            let log = txn.open_table(LOG).map_err(backend)?;
            let mut history = Vec::new();
            for entry in log.range(after + 1..).map_err(backend)? {
                let (k, v) = entry.map_err(backend)?;
                let ev = decode_event(k.value(), v.value())?;
                if ev.key.starts_with(prefix) {
                    history.push(ev);
                }
            }
            (history, self.inner.events.subscribe())
        };
        let (tx, rx) = tokio::sync::mpsc::channel(1024);
        let prefix = prefix.to_string();
        tokio::spawn(async move {
            for ev in history {
                if tx.send(Ok(ev)).await.is_err() {
                    return;
                }
            }
            loop {
                match live.recv().await {
                    Ok(ev) if ev.key.starts_with(&prefix) => {
                        if tx.send(Ok((*ev).clone())).await.is_err() {
                            return;
                        }
                    }
                    Ok(_) => {}
                    Err(broadcast::error::RecvError::Lagged(n)) => {
                        let _ = tx.send(Err(Error::Backend(format!("watcher fell {n} events behind")))).await;
                        return;
                    }
                    Err(broadcast::error::RecvError::Closed) => return,
                }
            }
        });
        Ok(rx)
    }

    fn compact(&self, revision: u64) -> Result<()> {
        let _guard = self.lock()?;
        let revision = revision.min(self.current_revision());
        if revision <= self.compacted_revision() {
            return Ok(());
        }
        let txn = self.inner.db.begin_write().map_err(backend)?;
        {
            let mut log = txn.open_table(LOG).map_err(backend)?;
            log.retain_in(..=revision, |_, _| false).map_err(backend)?;
            let mut meta = txn.open_table(META).map_err(backend)?;
            meta.insert("compacted", revision).map_err(backend)?;
        }
        txn.commit().map_err(backend)?;
        self.inner.compacted.store(revision, Ordering::SeqCst);
        Ok(())
    }

    fn compacted_revision(&self) -> u64 {
        self.inner.compacted.load(Ordering::SeqCst)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn passes_the_store_conformance_suite() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().to_path_buf();
        super::super::conformance::run_all(move || RedbStore::open(&path).expect("open store")).await;
    }

    #[test]
    fn event_encoding_round_trips() {
        let ev = Event {
            kind: EventKind::Delete,
            revision: 7,
            key: "/registry/pods/a/b".into(),
            value: Arc::from(&b"{}"[..]),
            prev: Some(Arc::from(&b"{\"x\":1}"[..])),
            created: false,
        };
        assert_eq!(decode_event(7, &encode_event(&ev)).expect("decodes"), ev);
    }
}
