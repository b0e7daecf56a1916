//! The Store trait every backend implements, its types, and the conformance suite they must pass.

pub mod encryption;
pub mod etcd;
pub mod etcd_member;
pub mod redb;

#[cfg(test)]
pub mod conformance;

use std::sync::Arc;

/// One stored key with its revisions. `value` is the object's JSON without `resourceVersion`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyValue {
    pub key: String,
    pub value: Arc<[u8]>,
    pub create_revision: u64,
    pub mod_revision: u64,
    /// Stored in a form the current configuration would not write (encryption at rest: another
    /// provider or key than the first): an update rewrites it even when nothing else changed, so
    /// `kubectl replace` re-encrypts, as Kubernetes' transformers report stale data.
    pub stale: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventKind {
    Put,
    Delete,
    /// No change: every event up to `revision` under the watched prefix has been delivered
    /// (etcd's progress notification). `key` and `value` are empty. Readers that track a
    /// revision move it forward (never back); others ignore it.
    Progress,
}

/// A change, as the watch stream reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Event {
    pub kind: EventKind,
    pub revision: u64,
    pub key: String,
    /// For Put the new value; for Delete the value it had.
    pub value: Arc<[u8]>,
    /// The value before this change, if any.
    pub prev: Option<Arc<[u8]>>,
    /// Whether a Put created the key.
    pub created: bool,
}

#[derive(Debug, Clone, thiserror::Error)]
pub enum Error {
    #[error("key {0} already exists")]
    AlreadyExists(String),
    #[error("key {0} not found")]
    NotFound(String),
    #[error("key {key} was modified: expected revision {expected}, found {actual}")]
    Conflict { key: String, expected: u64, actual: u64 },
    #[error("revision {requested} has been compacted (oldest kept is {compacted})")]
    Compacted { requested: u64, compacted: u64 },
    #[error("storage backend failed: {0}")]
    Backend(String),
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// A live stream of every change after a revision, in revision order.
pub type WatchStream = tokio::sync::mpsc::Receiver<Result<Event>>;

/// The durable key-value store the apiserver keeps objects in.
///
/// Revisions are global and strictly increasing; each write gets the next one.
pub trait Store: Send + Sync + 'static {
    /// The revision of the latest committed write.
    fn current_revision(&self) -> u64;
    fn get(&self, key: &str) -> Result<Option<KeyValue>>;
    /// Every key under `prefix` (sorted), and the revision the read was taken at.
    fn list(&self, prefix: &str) -> Result<(Vec<KeyValue>, u64)>;
    /// Create `key`; fails with AlreadyExists. Returns the new revision.
    fn create(&self, key: &str, value: &[u8]) -> Result<u64>;
    /// Replace `key` if its mod revision is still `expected` (compare-and-swap).
    fn update(&self, key: &str, value: &[u8], expected: u64) -> Result<u64>;
    /// Delete `key`, if `expected` is given only at that mod revision. Returns the deletion
    /// revision and the value it had.
    fn delete(&self, key: &str, expected: Option<u64>) -> Result<(u64, KeyValue)>;
    /// Every event under `prefix` with revision > `after`, then live ones. Compacted history
    /// gives `Error::Compacted`.
    fn watch(&self, prefix: &str, after: u64) -> Result<WatchStream>;
    /// Forget history at and below `revision`.
    fn compact(&self, revision: u64) -> Result<()>;
    /// The highest revision whose history has been forgotten (0 = none).
    fn compacted_revision(&self) -> u64;
    /// What the backend's storage takes, if it can tell (metrics, soak measurements).
    fn size(&self) -> Option<StoreSize> {
        None
    }
}

/// What a store takes on disk and what it holds, in bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StoreSize {
    /// The database file (or files) as allocated on disk.
    pub file: u64,
    /// The live keys and values (etcd, which cannot tell them from its history: the bytes its
    /// database uses, dbSizeInUse).
    pub live: u64,
    /// The kept history (events not yet compacted; etcd: 0, counted in `live`).
    pub history: u64,
}
