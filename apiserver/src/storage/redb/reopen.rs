//! After an I/O error (a full disk, a failing device) redb refuses every transaction until the
//! database is closed and opened again: the writer thread does that, under the lock every
//! transaction shares, and the store carries on from what the file holds.

use super::codec::{decode_event, kv_bytes, log_bytes};
use super::{backend, Inner, CACHE_BYTES, KV, LOG, META};
use crate::storage::{Error, Result};
use redb::{Database, ReadableDatabase, ReadableTable};
use std::sync::atomic::Ordering;
use std::sync::{Arc, RwLockReadGuard};

/// A read lock on the open database.
pub(super) struct DbGuard<'a>(pub(super) RwLockReadGuard<'a, Option<Database>>);

impl std::ops::Deref for DbGuard<'_> {
    type Target = Database;
    fn deref(&self) -> &Database {
        // `Inner::db` hands a guard out only when the database is open, and only the writer
        // thread's reopen (under the write lock) closes it.
        self.0.as_ref().expect("open database")
    }
}

pub(super) fn unavailable() -> Error {
    Error::Backend("the store is closed after an I/O error; it reopens with the next write".into())
}

/// What the store's counters are, read from the file.
pub(super) struct Counters {
    pub(super) revision: u64,
    pub(super) compacted: u64,
    pub(super) live: u64,
    pub(super) history: u64,
}

impl Counters {
    pub(super) fn load(db: &Database) -> Result<Self> {
        let txn = db.begin_write().map_err(backend)?;
        let out = {
            let kv = txn.open_table(KV).map_err(backend)?;
            let log = txn.open_table(LOG).map_err(backend)?;
            let meta = txn.open_table(META).map_err(backend)?;
            let revision = meta.get("rev").map_err(backend)?.map(|g| g.value()).unwrap_or(0);
            let compacted = meta.get("compacted").map_err(backend)?.map(|g| g.value()).unwrap_or(0);
            let mut live = 0;
            for entry in kv.iter().map_err(backend)? {
                let (k, v) = entry.map_err(backend)?;
                live += kv_bytes(k.value(), v.value().len());
            }
            let mut history = 0;
            for entry in log.iter().map_err(backend)? {
                history += log_bytes(entry.map_err(backend)?.1.value().len());
            }
            Counters { revision, compacted, live, history }
        };
        txn.commit().map_err(backend)?;
        Ok(out)
    }
}

/// Whether a redb error is an I/O failure (a full disk, a failing device): redb refuses every
/// later transaction until the database is reopened.
pub(super) fn is_io(e: &redb::Error) -> bool {
    matches!(e, redb::Error::Io(_) | redb::Error::PreviousIo)
}

impl Inner {
    /// Closes and reopens the database after an I/O error, as redb asks. A commit whose error
    /// came after it was durable is in the file now: its events are published from the log, so
    /// watchers and the counters follow what is stored. Reads and writes wait meanwhile; if the
    /// file cannot be opened yet (the disk still full), the store stays closed and the next
    /// write tries again.
    pub(super) fn reopen(&self) {
        let Ok(mut guard) = self.db.write() else { return };
        // redb holds a lock on the file: the old handle must be gone before it opens again.
        guard.take();
        let opened = redb::Builder::new().set_cache_size(CACHE_BYTES).create(&self.path).map_err(backend);
        let db = match opened.and_then(|db| Counters::load(&db).map(|c| (db, c))) {
            Ok((db, counters)) => {
                let known = self.revision.load(Ordering::SeqCst);
                if counters.revision > known {
                    if let Err(e) = self.publish_logged(&db, known, counters.revision) {
                        tracing::error!(error = %e, "cannot read back the commit that failed late");
                    }
                }
                self.revision.store(counters.revision, Ordering::SeqCst);
                self.live_bytes.store(counters.live, Ordering::SeqCst);
                self.history_bytes.store(counters.history, Ordering::SeqCst);
                tracing::warn!(revision = counters.revision, "reopened the store after an I/O error");
                db
            }
            Err(e) => {
                tracing::error!(error = %e, "cannot reopen the store yet; the next write tries again");
                return;
            }
        };
        *guard = Some(db);
    }

    /// Publishes the logged events after `from` up to `to`.
    fn publish_logged(&self, db: &Database, from: u64, to: u64) -> Result<()> {
        let txn = db.begin_read().map_err(backend)?;
        let log = txn.open_table(LOG).map_err(backend)?;
        for entry in log.range(from + 1..=to).map_err(backend)? {
            let (rev, raw) = entry.map_err(backend)?;
            let _ = self.events.send(Arc::new(decode_event(rev.value(), raw.value())?));
        }
        Ok(())
    }
}
