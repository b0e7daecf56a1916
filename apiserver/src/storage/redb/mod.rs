//! The embedded backend: redb (ACID, fsync on commit) with a global revision and a bounded event log.
//!
//! The file follows the live data, not the history: compaction drops the event log below a
//! revision and, when the file has grown well past what it holds, rewrites it in place with
//! redb's `Database::compact` (which needs every transaction closed: the database sits behind a
//! lock that readers and the writer share and compaction takes alone, for the few milliseconds
//! to seconds it runs).

mod codec;
mod reopen;

use super::{Error, Event, EventKind, KeyValue, Result, Store, StoreSize, WatchStream};
use codec::{decode_event, decode_kv, encode_event, encode_kv, live_delta, log_bytes};
use redb::{Database, ReadableDatabase, ReadableTable, TableDefinition};
use reopen::{is_io, unavailable, Counters, DbGuard};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
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

/// The file is rewritten when it is larger than this many times what it holds...
const DEFRAG_RATIO: u64 = 2;
/// ...and the space to win is at least this much (a small file is never worth the pause).
const DEFRAG_MIN_SLACK: u64 = 4 << 20;

/// The embedded store. Writes go to one writer thread that commits whatever is pending as one
/// transaction (group commit: one fsync for many acknowledged writes), assigning each its own
/// revision in arrival order.
pub struct RedbStore {
    inner: Arc<Inner>,
    ops: Option<std::sync::mpsc::Sender<Pending>>,
    writer: Option<std::thread::JoinHandle<()>>,
}

struct Inner {
    /// Shared by every transaction (readers and the writer thread hold it for as long as their
    /// transaction lives); taken alone only to rewrite the file. Lock order: `publish`, then `db`.
    /// `None` between an I/O error and a successful reopen (redb refuses every transaction after
    /// one until the database is closed and opened again).
    db: RwLock<Option<Database>>,
    path: PathBuf,
    /// Held across commit + revision bump + publish, and by readers that need a snapshot whose
    /// revision matches exactly (list, watch setup, compaction).
    publish: Mutex<()>,
    revision: AtomicU64,
    compacted: AtomicU64,
    /// Bytes of the live keys and values, and of the kept event log (as stored, so what the
    /// file must at least hold).
    live_bytes: AtomicU64,
    history_bytes: AtomicU64,
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

impl RedbStore {
    /// Open (or create) the store in `dir/kaji.redb`.
    pub fn open(dir: &Path) -> Result<Self> {
        std::fs::create_dir_all(dir).map_err(|e| Error::Backend(format!("failed to create {}: {e}", dir.display())))?;
        let path = dir.join("kaji.redb");
        let db = redb::Builder::new().set_cache_size(CACHE_BYTES).create(&path).map_err(backend)?;
        // The store holds every Secret: the apiserver's alone, as etcd keeps its data dir (0700).
        use std::os::unix::fs::PermissionsExt;
        for (p, mode) in [(dir, 0o700), (path.as_path(), 0o600)] {
            std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode))
                .map_err(|e| Error::Backend(format!("failed to restrict {}: {e}", p.display())))?;
        }
        let Counters { revision, compacted, live, history } = Counters::load(&db)?;
        let (events, _) = broadcast::channel(BROADCAST_CAPACITY);
        let inner = Arc::new(Inner {
            db: RwLock::new(Some(db)),
            path,
            publish: Mutex::new(()),
            revision: AtomicU64::new(revision),
            compacted: AtomicU64::new(compacted),
            live_bytes: AtomicU64::new(live),
            history_bytes: AtomicU64::new(history),
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

    fn db(&self) -> Result<DbGuard<'_>> {
        self.inner.db()
    }

    /// Rewrite the file when it has grown well past what it holds. Called with `publish` held,
    /// so no write is in flight; waits for open reads to finish and holds new ones meanwhile.
    fn defragment_if_worth_it(&self) -> Result<()> {
        let file = self.file_bytes()?;
        let used = self.inner.live_bytes.load(Ordering::SeqCst) + self.inner.history_bytes.load(Ordering::SeqCst);
        if file <= DEFRAG_RATIO * used || file - used < DEFRAG_MIN_SLACK {
            return Ok(());
        }
        let started = std::time::Instant::now();
        let mut guard = self.inner.db.write().map_err(|_| Error::Backend("database lock poisoned".into()))?;
        guard.as_mut().ok_or_else(unavailable)?.compact().map_err(backend)?;
        drop(guard);
        // The rewrite's scratch memory is freed but stays with the allocator's arenas (glibc
        // gives back only the top of its main heap): hand it back to the system.
        kaji_component::malloc::trim();
        let after = self.file_bytes()?;
        tracing::info!(
            before = file,
            after,
            used,
            millis = started.elapsed().as_millis() as u64,
            "rewrote the store file without its free pages"
        );
        Ok(())
    }

    fn file_bytes(&self) -> Result<u64> {
        std::fs::metadata(&self.inner.path)
            .map(|m| m.len())
            .map_err(|e| Error::Backend(format!("failed to stat {}: {e}", self.inner.path.display())))
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
    fn db(&self) -> Result<DbGuard<'_>> {
        let guard = self.db.read().map_err(|_| Error::Backend("database lock poisoned".into()))?;
        match guard.is_some() {
            true => Ok(DbGuard(guard)),
            false => Err(unavailable()),
        }
    }

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
            if self.db.read().is_ok_and(|g| g.is_none()) {
                self.reopen();
            }
            match self.commit_batch(&batch) {
                Ok((results, logged)) => {
                    self.history_bytes.fetch_add(logged, Ordering::SeqCst);
                    for (p, r) in batch.into_iter().zip(results) {
                        let out = r.map(|(event, out)| {
                            let delta = live_delta(&event);
                            if delta >= 0 {
                                self.live_bytes.fetch_add(delta as u64, Ordering::SeqCst);
                            } else {
                                self.live_bytes.fetch_sub(delta.unsigned_abs(), Ordering::SeqCst);
                            }
                            self.revision.store(event.revision, Ordering::SeqCst);
                            // No receivers is fine: nobody is watching yet.
                            let _ = self.events.send(Arc::new(event));
                            out
                        });
                        let _ = p.reply.send(out);
                    }
                }
                Err((e, io)) => {
                    for p in batch {
                        let _ = p.reply.send(Err(e.clone()));
                    }
                    if io {
                        tracing::error!(error = %e, "a commit failed on I/O; reopening the store");
                        self.reopen();
                    }
                }
            }
        }
    }

    /// Apply every op in one transaction; an op that fails its precondition changes nothing
    /// and takes no revision. The commit is durable when this returns; it answers each op's
    /// result and the bytes the event log grew by.
    /// A failure says whether it was I/O (the store must be reopened).
    #[allow(clippy::type_complexity)]
    fn commit_batch(
        &self,
        batch: &[Pending],
    ) -> std::result::Result<(Vec<Result<(Event, OpOut)>>, u64), (Error, bool)> {
        let db = self.db().map_err(|e| (e, false))?;
        let storage = |e: redb::Error| {
            let io = is_io(&e);
            (backend(e), io)
        };
        self.commit_in(&db, batch).map_err(storage)
    }

    #[allow(clippy::type_complexity)]
    fn commit_in(
        &self,
        db: &Database,
        batch: &[Pending],
    ) -> std::result::Result<(Vec<Result<(Event, OpOut)>>, u64), redb::Error> {
        let mut next = self.revision.load(Ordering::SeqCst) + 1;
        let txn = db.begin_write()?;
        let mut results = Vec::with_capacity(batch.len());
        let mut logged = 0;
        {
            let mut kv = txn.open_table(KV)?;
            let mut log = txn.open_table(LOG)?;
            for p in batch {
                let r = apply(&mut kv, &p.op, next);
                if let Ok((event, _)) = &r {
                    let encoded = encode_event(event);
                    logged += log_bytes(encoded.len());
                    log.insert(next, encoded.as_slice())?;
                    next += 1;
                }
                results.push(r);
            }
            let mut meta = txn.open_table(META)?;
            meta.insert("rev", next - 1)?;
        }
        txn.commit()?;
        Ok((results, logged))
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
        let db = self.db()?;
        let txn = db.begin_read().map_err(backend)?;
        let kv = txn.open_table(KV).map_err(backend)?;
        match kv.get(key).map_err(backend)? {
            Some(g) => Ok(Some(decode_kv(key, g.value())?)),
            None => Ok(None),
        }
    }

    fn list(&self, prefix: &str) -> Result<(Vec<KeyValue>, u64)> {
        // Take the revision under the publish lock so it matches the snapshot exactly.
        let guard = self.lock()?;
        let db = self.db()?;
        let (txn, rev) = (db.begin_read().map_err(backend)?, self.current_revision());
        drop(guard);
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
            let db = self.db()?;
            let txn = db.begin_read().map_err(backend)?;
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
        let mut dropped = 0;
        {
            let db = self.db()?;
            let txn = db.begin_write().map_err(backend)?;
            {
                let mut log = txn.open_table(LOG).map_err(backend)?;
                log.retain_in(..=revision, |_, v| {
                    dropped += log_bytes(v.len());
                    false
                })
                .map_err(backend)?;
                let mut meta = txn.open_table(META).map_err(backend)?;
                meta.insert("compacted", revision).map_err(backend)?;
            }
            txn.commit().map_err(backend)?;
        }
        self.inner.history_bytes.fetch_sub(dropped, Ordering::SeqCst);
        self.inner.compacted.store(revision, Ordering::SeqCst);
        self.defragment_if_worth_it()
    }

    fn compacted_revision(&self) -> u64 {
        self.inner.compacted.load(Ordering::SeqCst)
    }

    fn size(&self) -> Option<StoreSize> {
        Some(StoreSize {
            file: self.file_bytes().ok()?,
            live: self.inner.live_bytes.load(Ordering::SeqCst),
            history: self.inner.history_bytes.load(Ordering::SeqCst),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::codec::kv_bytes;
    use super::*;

    #[test]
    fn the_store_is_readable_by_its_owner_only() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().expect("tempdir");
        let data = dir.path().join("data");
        std::fs::create_dir(&data).expect("mkdir");
        std::fs::set_permissions(&data, std::fs::Permissions::from_mode(0o755)).expect("chmod");
        let store = RedbStore::open(&data).expect("open");
        let mode = |p: &Path| std::fs::metadata(p).expect("stat").permissions().mode() & 0o777;
        assert_eq!((mode(&data), mode(&data.join("kaji.redb"))), (0o700, 0o600));
        drop(store);
    }

    #[tokio::test]
    async fn passes_the_store_conformance_suite() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().to_path_buf();
        super::super::conformance::run_all(move || RedbStore::open(&path).expect("open store")).await;
    }

    /// `threads` writers each rewrite their share of `objects` keys `rounds` times, so the
    /// writer thread batches them as it does under load.
    fn churn(store: &Arc<RedbStore>, objects: usize, rounds: usize, value: &[u8]) {
        let threads = 32;
        std::thread::scope(|s| {
            for t in 0..threads {
                s.spawn(move || {
                    for _ in 0..rounds {
                        for i in (t..objects).step_by(threads) {
                            let key = format!("/registry/configmaps/churn/cm-{i:05}");
                            let current = store.get(&key).expect("get").expect("exists");
                            store.update(&key, value, current.mod_revision).expect("update");
                        }
                    }
                });
            }
        });
    }

    #[test]
    fn a_store_under_churn_stays_within_three_times_its_live_data() {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = Arc::new(RedbStore::open(dir.path()).expect("open"));
        // 1,000 objects of 2 KiB (a small cluster's worth), rewritten 40 times over with values
        // of alternating size, compacted the way the apiserver's compactor does: each round drops
        // the history the previous round left.
        let (objects, rounds) = (1_000, 40);
        let value = |round: usize| vec![b'a' + (round % 26) as u8; 1_500 + (round % 3) * 500];
        for i in 0..objects {
            store.create(&format!("/registry/configmaps/churn/cm-{i:05}"), &value(0)).expect("create");
        }
        let mut previous = store.current_revision();
        let mut largest = 0;
        for round in 1..=rounds {
            churn(&store, objects, 1, &value(round));
            store.compact(previous).expect("compact");
            previous = store.current_revision();
            let size = store.size().expect("redb knows its size");
            largest = largest.max(size.file);
            // One round of history is kept: live data plus about as much again in the log.
            assert!(
                size.file <= 3 * (size.live + size.history) + DEFRAG_MIN_SLACK,
                "round {round}: file {} B for {} B live + {} B history",
                size.file,
                size.live,
                size.history
            );
        }
        store.compact(store.current_revision()).expect("compact everything");
        let size = store.size().expect("size");
        let (listed, _) = store.list("/registry/").expect("list");
        let live: u64 = listed.iter().map(|kv| kv_bytes(&kv.key, 16 + kv.value.len())).sum();
        assert_eq!(size.live, live, "the live data is accounted exactly");
        assert_eq!(size.history, 0, "no history is left after compacting everything");
        eprintln!(
            "{} writes: live {} KiB, file {} KiB after compaction, largest {} KiB while churning",
            objects * (rounds + 1),
            size.live >> 10,
            size.file >> 10,
            largest >> 10
        );
        assert!(size.file <= 3 * size.live, "file {} B for {} B of live data", size.file, size.live);
        // Nothing is lost by rewriting the file, and it reopens.
        drop(store);
        let store = RedbStore::open(dir.path()).expect("reopen");
        assert_eq!(store.list("/registry/").expect("list").0, listed);
        assert_eq!(store.size().expect("size").live, live);
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
