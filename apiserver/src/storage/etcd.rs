//! The etcd backend: the same keys (under a configurable prefix) and the same JSON values as the
//! embedded store, kept in an etcd cluster so several apiservers can share them.
//!
//! The `Store` trait is synchronous (the registry's write path is), etcd's client is async: every
//! call runs on this store's own small tokio runtime and the caller waits for the answer the way
//! the embedded store's callers wait for a group commit. So it works from async handlers, plain
//! threads and single-threaded test runtimes alike.
//!
//! - create / update / delete are single etcd transactions that compare the key's
//!   `create_revision` / `mod_revision`, so compare-and-swap holds across apiservers.
//! - a request that failed on the way (member down, leader change) is retried on another member
//!   until `RETRY_FOR` has passed; when a write's outcome is unknown (the answer was lost), the
//!   retry recognises its own write by the value it stored (every object carries a fresh uid and
//!   timestamps), so an acknowledged write is never reported as a conflict.
//! - watches follow etcd's watch from a revision, and after a broken stream or a member restart
//!   resume right after the last event delivered (no event missed, none twice). A watch asked for
//!   a compacted revision ends with `Error::Compacted` (the apiserver turns it into 410 Gone).
//! - `current_revision` is a linearizable read of etcd's revision; when a watch has not caught up
//!   with it, the watch asks etcd for a progress notification and passes it on as a
//!   `EventKind::Progress` event, so a consistent read from the watch cache never waits for a
//!   write that will not come (writes outside the watched prefix also move the revision).
//! - compaction is coordinated through one key, `<prefix>/compact_rev_key` (as kube-apiserver
//!   does): the apiserver that moves it compacts etcd; the others learn the new floor from it.

use super::{Error, Event, EventKind, KeyValue, Result, Store, StoreSize, WatchStream};
use etcd_client::{
    Certificate, Client, Compare, CompareOp, ConnectOptions, GetOptions, Identity, TlsOptions, Txn, TxnOp,
    TxnOpResponse, WatchOptions,
};
use std::future::Future;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How long a request keeps trying other members before the caller gets the error.
const RETRY_FOR: Duration = Duration::from_secs(10);
/// One gRPC request's own limit (a member that hangs is left for another).
const REQUEST_TIMEOUT: Duration = Duration::from_secs(5);
/// Keys per page when listing (a page stays well under gRPC's message limit).
const PAGE: i64 = 500;
/// Largest answer accepted from etcd (a page of big objects, a large watch batch).
const MAX_MESSAGE: usize = 64 << 20;
/// Events a watch may hold for a slow reader before it waits (and so slows etcd's stream).
const WATCH_BUFFER: usize = 1024;

/// How to reach etcd.
#[derive(Debug, Clone, Default)]
pub struct EtcdConfig {
    /// Client URLs, `http://host:port` or `https://host:port`.
    pub servers: Vec<String>,
    /// Put before every key (kaji's keys are `/registry/<resource>/...` as Kubernetes'); lets
    /// several clusters share one etcd.
    pub prefix: String,
    /// CA bundle that signed the members' serving certificates (`https://` servers).
    pub ca_file: Option<PathBuf>,
    /// Client certificate and key, when etcd asks for one (`--client-cert-auth`).
    pub cert_file: Option<PathBuf>,
    pub key_file: Option<PathBuf>,
}

pub struct EtcdStore {
    client: Client,
    prefix: String,
    rt: Option<tokio::runtime::Runtime>,
    shared: Arc<Shared>,
}

/// What the store and its watch tasks share.
struct Shared {
    /// Highest etcd revision this store has seen.
    revision: AtomicU64,
    /// The compaction floor as last read from `compact_rev_key` (or reported by a watch).
    compacted: AtomicU64,
    /// The revision a consistent read is waiting for; watches behind it ask for progress.
    wanted: tokio::sync::watch::Sender<u64>,
}

impl Shared {
    fn seen(&self, rev: u64) {
        self.revision.fetch_max(rev, Ordering::SeqCst);
    }
}

fn backend(e: impl std::fmt::Display) -> Error {
    Error::Backend(format!("etcd: {e}"))
}

/// Whether trying again (on another member, or after an election) can help.
fn retriable(e: &etcd_client::Error) -> bool {
    use etcd_client::Error as E;
    match e {
        E::GRpcStatus(s) => matches!(
            s.code(),
            tonic::Code::Unavailable | tonic::Code::DeadlineExceeded | tonic::Code::Unknown | tonic::Code::Aborted
        ),
        E::TransportError(_) | E::IoError(_) | E::WatchError(_) => true,
        _ => false,
    }
}

/// Whether the request may have been applied although it failed (its answer was lost).
fn ambiguous(e: &etcd_client::Error) -> bool {
    match e {
        etcd_client::Error::GRpcStatus(s) => {
            // Refused connections and "no leader" never reached the log.
            !(s.message().contains("connect") || s.message().contains("no leader"))
        }
        _ => true,
    }
}

fn compacted_error(e: &etcd_client::Error) -> bool {
    matches!(e, etcd_client::Error::GRpcStatus(s) if s.message().contains("compacted"))
}

/// The smallest key greater than every key starting with `prefix` (etcd's prefix range end).
fn range_end(prefix: &[u8]) -> Vec<u8> {
    let mut end = prefix.to_vec();
    while let Some(last) = end.pop() {
        if last < 0xff {
            end.push(last + 1);
            return end;
        }
    }
    vec![0]
}

/// Block on a reply without starving the caller's runtime (see `redb::wait`).
fn wait<T>(rx: std::sync::mpsc::Receiver<T>) -> Option<T> {
    match tokio::runtime::Handle::try_current() {
        Ok(h) if h.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread => {
            tokio::task::block_in_place(|| rx.recv().ok())
        }
        _ => rx.recv().ok(),
    }
}

fn read_file(p: &PathBuf) -> Result<Vec<u8>> {
    std::fs::read(p).map_err(|e| Error::Backend(format!("failed to read {}: {e}", p.display())))
}

fn options(cfg: &EtcdConfig) -> Result<ConnectOptions> {
    let mut opts = ConnectOptions::new()
        .with_timeout(REQUEST_TIMEOUT)
        .with_connect_timeout(Duration::from_secs(2))
        // etcd refuses pings more often than every 5 s (its --grpc-keepalive-min-time).
        .with_keep_alive(Duration::from_secs(10), Duration::from_secs(5))
        // A member cut off from the quorum fails its requests and watches instead of serving
        // stale data, so they move on to a member that has a leader.
        .with_require_leader(true);
    if cfg.ca_file.is_some() || cfg.cert_file.is_some() {
        let mut tls = TlsOptions::new();
        if let Some(ca) = &cfg.ca_file {
            tls = tls.ca_certificate(Certificate::from_pem(read_file(ca)?));
        }
        match (&cfg.cert_file, &cfg.key_file) {
            (Some(c), Some(k)) => tls = tls.identity(Identity::from_pem(read_file(c)?, read_file(k)?)),
            (None, None) => {}
            _ => return Err(Error::Backend("--etcd-certfile and --etcd-keyfile go together".into())),
        }
        opts = opts.with_tls(tls);
    }
    Ok(opts)
}

impl EtcdStore {
    /// Connect (checking that a member answers) and read the compaction floor.
    pub fn connect(cfg: &EtcdConfig) -> Result<Self> {
        if cfg.servers.is_empty() {
            return Err(Error::Backend("no etcd servers given (--etcd-servers)".into()));
        }
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("etcd-client")
            .enable_all()
            .build()
            .map_err(|e| Error::Backend(format!("failed to start the etcd client runtime: {e}")))?;
        let opts = options(cfg)?;
        let servers = cfg.servers.clone();
        let client = run_on(&rt, async move { Client::connect(servers, Some(opts)).await.map_err(backend) })?;
        let shared = Arc::new(Shared {
            revision: AtomicU64::new(0),
            compacted: AtomicU64::new(0),
            wanted: tokio::sync::watch::channel(0).0,
        });
        let store = Self { client, prefix: cfg.prefix.trim_end_matches('/').to_string(), rt: Some(rt), shared };
        let (floor, _, rev) = store.read_compact_key()?;
        store.shared.compacted.store(floor, Ordering::SeqCst);
        store.shared.seen(rev);
        Ok(store)
    }

    fn rt(&self) -> Result<&tokio::runtime::Runtime> {
        self.rt.as_ref().ok_or_else(|| Error::Backend("etcd store is closed".into()))
    }

    fn run<T: Send + 'static>(&self, fut: impl Future<Output = Result<T>> + Send + 'static) -> Result<T> {
        run_on(self.rt()?, fut)
    }

    fn key(&self, k: &str) -> Vec<u8> {
        format!("{}{k}", self.prefix).into_bytes()
    }

    fn compact_key(&self) -> Vec<u8> {
        self.key("/compact_rev_key")
    }

    fn to_kv(&self, kv: &etcd_client::KeyValue) -> Result<KeyValue> {
        let key = std::str::from_utf8(kv.key()).map_err(backend)?;
        let key = key.strip_prefix(self.prefix.as_str()).unwrap_or(key).to_string();
        Ok(KeyValue {
            key,
            value: Arc::from(kv.value()),
            create_revision: kv.create_revision() as u64,
            mod_revision: kv.mod_revision() as u64,
            stale: false,
        })
    }

    /// (compaction floor, the key's mod revision, etcd's current revision).
    fn read_compact_key(&self) -> Result<(u64, u64, u64)> {
        let (client, key) = (self.client.clone(), self.compact_key());
        self.run(async move {
            let resp = retry(|| {
                let (mut c, k) = (client.clone(), key.clone());
                async move { c.get(k, None).await }
            })
            .await
            .map_err(backend)?;
            let rev = resp.header().map(|h| h.revision() as u64).unwrap_or(0);
            let (floor, modrev) = match resp.kvs().first() {
                Some(kv) => (
                    std::str::from_utf8(kv.value()).ok().and_then(|s| s.parse().ok()).unwrap_or(0),
                    kv.mod_revision() as u64,
                ),
                None => (0, 0),
            };
            Ok((floor, modrev, rev))
        })
    }

    /// One write transaction, retried across failures. `mine` recognises, after an ambiguous
    /// failure, that the state found is this very write having landed.
    fn write(&self, txn: impl Fn() -> Txn + Send + Sync + 'static) -> Result<(etcd_client::TxnResponse, bool)> {
        let client = self.client.clone();
        self.run(async move {
            let deadline = Instant::now() + RETRY_FOR;
            let mut uncertain = false;
            let mut delay = Duration::from_millis(50);
            loop {
                match client.clone().txn(txn()).await {
                    Ok(r) => return Ok((r, uncertain)),
                    Err(e) if retriable(&e) && Instant::now() < deadline => {
                        uncertain |= ambiguous(&e);
                        tracing::debug!(error = %e, "etcd write failed; retrying");
                        tokio::time::sleep(delay).await;
                        delay = (delay * 2).min(Duration::from_millis(500));
                    }
                    Err(e) => return Err(backend(e)),
                }
            }
        })
    }

    fn header_rev(&self, resp: &etcd_client::TxnResponse) -> u64 {
        let rev = resp.header().map(|h| h.revision() as u64).unwrap_or(0);
        self.shared.seen(rev);
        rev
    }
}

impl Drop for EtcdStore {
    fn drop(&mut self) {
        // Watch tasks end with the runtime; their receivers see the stream close.
        if let Some(rt) = self.rt.take() {
            rt.shutdown_background();
        }
    }
}

fn run_on<T: Send + 'static>(
    rt: &tokio::runtime::Runtime,
    fut: impl Future<Output = Result<T>> + Send + 'static,
) -> Result<T> {
    let (tx, rx) = std::sync::mpsc::sync_channel(1);
    rt.spawn(async move {
        let _ = tx.send(fut.await);
    });
    wait(rx).unwrap_or_else(|| Err(Error::Backend("etcd client runtime stopped".into())))
}

/// A read (safe to repeat) retried across member failures until `RETRY_FOR` passes.
async fn retry<T, F, Fut>(op: F) -> Result<T, etcd_client::Error>
where
    F: Fn() -> Fut,
    Fut: Future<Output = Result<T, etcd_client::Error>>,
{
    let deadline = Instant::now() + RETRY_FOR;
    let mut delay = Duration::from_millis(50);
    loop {
        match op().await {
            Err(e) if retriable(&e) && Instant::now() < deadline => {
                tracing::debug!(error = %e, "etcd read failed; retrying");
                tokio::time::sleep(delay).await;
                delay = (delay * 2).min(Duration::from_millis(500));
            }
            other => return other,
        }
    }
}

/// The `get` answer inside a transaction's else branch.
fn else_kv(resp: &etcd_client::TxnResponse) -> Option<etcd_client::KeyValue> {
    resp.op_responses().into_iter().find_map(|r| match r {
        TxnOpResponse::Get(g) => g.kvs().first().cloned(),
        _ => None,
    })
}

impl Store for EtcdStore {
    fn current_revision(&self) -> u64 {
        match self.read_compact_key() {
            Ok((_, _, rev)) => {
                self.shared.seen(rev);
                // Watches behind this revision ask etcd where they stand.
                self.shared.wanted.send_if_modified(|w| {
                    let behind = *w < rev;
                    *w = (*w).max(rev);
                    behind
                });
                rev
            }
            Err(e) => {
                tracing::warn!(error = %e, "cannot read etcd's revision; using the last one seen");
                self.shared.revision.load(Ordering::SeqCst)
            }
        }
    }

    fn get(&self, key: &str) -> Result<Option<KeyValue>> {
        let (client, k) = (self.client.clone(), self.key(key));
        let resp = self.run(async move {
            retry(|| {
                let (mut c, k) = (client.clone(), k.clone());
                async move { c.get(k, None).await }
            })
            .await
            .map_err(backend)
        })?;
        if let Some(h) = resp.header() {
            self.shared.seen(h.revision() as u64);
        }
        resp.kvs().first().map(|kv| self.to_kv(kv)).transpose()
    }

    fn list(&self, prefix: &str) -> Result<(Vec<KeyValue>, u64)> {
        let (client, start, end) = (self.client.clone(), self.key(prefix), range_end(&self.key(prefix)));
        let pages = self.run(async move {
            // Every page is read at the first page's revision: one consistent snapshot.
            let mut from = start;
            let mut rev = 0i64;
            let mut pages = Vec::new();
            loop {
                let opts = GetOptions::new().with_range(end.clone()).with_limit(PAGE).with_revision(rev);
                let resp = retry(|| {
                    let (mut c, f, o) = (client.clone(), from.clone(), opts.clone());
                    async move { c.get(f, Some(o)).await }
                })
                .await
                .map_err(backend)?;
                if rev == 0 {
                    rev = resp.header().map(|h| h.revision()).unwrap_or(0);
                }
                let more = resp.more();
                if let Some(last) = resp.kvs().last() {
                    from = last.key().to_vec();
                    from.push(0);
                }
                pages.push(resp);
                if !more {
                    return Ok((pages, rev as u64));
                }
            }
        })?;
        let (pages, rev) = pages;
        self.shared.seen(rev);
        let mut out = Vec::new();
        for p in &pages {
            for kv in p.kvs() {
                out.push(self.to_kv(kv)?);
            }
        }
        Ok((out, rev))
    }

    fn create(&self, key: &str, value: &[u8]) -> Result<u64> {
        let (k, v) = (self.key(key), value.to_vec());
        let (k2, v2) = (k.clone(), v.clone());
        let (resp, uncertain) = self.write(move || {
            Txn::new()
                .when([Compare::create_revision(k2.clone(), CompareOp::Equal, 0)])
                .and_then([TxnOp::put(k2.clone(), v2.clone(), None)])
                .or_else([TxnOp::get(k2.clone(), None)])
        })?;
        let rev = self.header_rev(&resp);
        if resp.succeeded() {
            return Ok(rev);
        }
        match else_kv(&resp) {
            // The first try landed and its answer was lost: this is our own object.
            Some(kv) if uncertain && kv.value() == v.as_slice() => Ok(kv.mod_revision() as u64),
            _ => Err(Error::AlreadyExists(key.to_string())),
        }
    }

    fn update(&self, key: &str, value: &[u8], expected: u64) -> Result<u64> {
        let (k, v) = (self.key(key), value.to_vec());
        let (k2, v2) = (k.clone(), v.clone());
        let (resp, uncertain) = self.write(move || {
            Txn::new()
                .when([Compare::mod_revision(k2.clone(), CompareOp::Equal, expected as i64)])
                .and_then([TxnOp::put(k2.clone(), v2.clone(), None)])
                .or_else([TxnOp::get(k2.clone(), None)])
        })?;
        let rev = self.header_rev(&resp);
        if resp.succeeded() {
            return Ok(rev);
        }
        match else_kv(&resp) {
            None => Err(Error::NotFound(key.to_string())),
            Some(kv) if uncertain && kv.value() == v.as_slice() && kv.mod_revision() as u64 > expected => {
                Ok(kv.mod_revision() as u64)
            }
            Some(kv) => Err(Error::Conflict { key: key.to_string(), expected, actual: kv.mod_revision() as u64 }),
        }
    }

    fn delete(&self, key: &str, expected: Option<u64>) -> Result<(u64, KeyValue)> {
        let k = self.key(key);
        let k2 = k.clone();
        let (resp, _) = self.write(move || {
            let del = TxnOp::delete(k2.clone(), Some(etcd_client::DeleteOptions::new().with_prev_key()));
            let cmp = match expected {
                Some(e) => Compare::mod_revision(k2.clone(), CompareOp::Equal, e as i64),
                None => Compare::create_revision(k2.clone(), CompareOp::Greater, 0),
            };
            Txn::new().when([cmp]).and_then([del]).or_else([TxnOp::get(k2.clone(), None)])
        })?;
        let rev = self.header_rev(&resp);
        if resp.succeeded() {
            let old = resp.op_responses().into_iter().find_map(|r| match r {
                TxnOpResponse::Delete(d) => d.prev_kvs().first().cloned(),
                _ => None,
            });
            return match old {
                Some(kv) => Ok((rev, self.to_kv(&kv)?)),
                None => Err(Error::NotFound(key.to_string())),
            };
        }
        match (else_kv(&resp), expected) {
            (Some(kv), Some(e)) => {
                Err(Error::Conflict { key: key.to_string(), expected: e, actual: kv.mod_revision() as u64 })
            }
            _ => Err(Error::NotFound(key.to_string())),
        }
    }

    fn watch(&self, prefix: &str, after: u64) -> Result<WatchStream> {
        // Another apiserver may have compacted since: etcd keeps the floor revision itself
        // watchable, the trait does not, so the floor comes from the shared key.
        let (floor, _, _) = self.read_compact_key()?;
        let compacted = self.shared.compacted.fetch_max(floor, Ordering::SeqCst).max(floor);
        if after < compacted {
            return Err(Error::Compacted { requested: after, compacted });
        }
        let w = Watch {
            client: self.client.clone(),
            key: self.key(prefix),
            prefix: self.prefix.clone(),
            shared: self.shared.clone(),
        };
        let (w, stream) = self.run(async move {
            let s = w.open(after).await?;
            Ok((w, s))
        })?;
        let (tx, rx) = tokio::sync::mpsc::channel(WATCH_BUFFER);
        self.rt()?.spawn(w.follow(stream, after, tx));
        Ok(rx)
    }

    fn compact(&self, revision: u64) -> Result<()> {
        let (floor, key_rev, current) = self.read_compact_key()?;
        self.shared.compacted.fetch_max(floor, Ordering::SeqCst);
        let revision = revision.min(current);
        // Nothing to do, or nothing happened since the last compaction (whose own write is the
        // latest revision): compacting again would only write again — an idle cluster stays idle.
        if revision <= floor || key_rev == current {
            return Ok(());
        }
        let key = self.compact_key();
        let k2 = key.clone();
        let (resp, _) = self.write(move || {
            Txn::new()
                .when([Compare::mod_revision(k2.clone(), CompareOp::Equal, key_rev as i64)])
                .and_then([TxnOp::put(k2.clone(), revision.to_string(), None)])
        })?;
        self.header_rev(&resp);
        if !resp.succeeded() {
            // Another apiserver compacted meanwhile; take its floor.
            let (floor, _, _) = self.read_compact_key()?;
            self.shared.compacted.fetch_max(floor, Ordering::SeqCst);
            return Ok(());
        }
        let client = self.client.clone();
        self.run(async move {
            match client.clone().compact(revision as i64, None).await {
                Ok(_) => Ok(()),
                Err(e) if compacted_error(&e) => Ok(()),
                Err(e) => Err(backend(e)),
            }
        })?;
        self.shared.compacted.fetch_max(revision, Ordering::SeqCst);
        Ok(())
    }

    fn compacted_revision(&self) -> u64 {
        self.shared.compacted.load(Ordering::SeqCst)
    }

    /// etcd's own account (Maintenance.Status of the member that answers, one try): `file` is its
    /// dbSize, what kube-apiserver reports as apiserver_storage_size_bytes. etcd does not tell its
    /// live data from the history not yet compacted, so `live` is dbSizeInUse (the pages holding
    /// both, what a defragmentation would shrink the file to) and `history` 0.
    fn size(&self) -> Option<StoreSize> {
        let client = self.client.clone();
        let status = self
            .run(async move {
                let mut c = client;
                c.status().await.map_err(backend)
            })
            .ok()?;
        let bytes = |n: i64| u64::try_from(n).unwrap_or(0);
        Some(StoreSize { file: bytes(status.db_size()), live: bytes(status.raft_used_db_size()), history: 0 })
    }
}

/// One trait watch: an etcd watch that is re-created after failures.
struct Watch {
    client: Client,
    key: Vec<u8>,
    prefix: String,
    shared: Arc<Shared>,
}

type EtcdWatch = etcd_client::WatchStream;

impl Watch {
    /// Start an etcd watch for events after `after`; waits for etcd to accept it.
    async fn open(&self, after: u64) -> Result<EtcdWatch> {
        let opts =
            WatchOptions::new().with_range(range_end(&self.key)).with_start_revision(after as i64 + 1).with_prev_key();
        let mut stream = retry(|| {
            let (c, k, o) = (self.client.watch_client(), self.key.clone(), opts.clone());
            async move { c.max_decoding_message_size(MAX_MESSAGE).watch(k, Some(o)).await }
        })
        .await
        .map_err(backend)?;
        match stream.message().await.map_err(backend)? {
            Some(r) if r.canceled() && r.compact_revision() > 0 => {
                let compacted = r.compact_revision() as u64;
                self.shared.compacted.fetch_max(compacted.saturating_sub(1), Ordering::SeqCst);
                Err(Error::Compacted { requested: after, compacted: compacted.saturating_sub(1) })
            }
            Some(r) if r.canceled() => Err(Error::Backend(format!("etcd refused the watch: {}", r.cancel_reason()))),
            Some(_) => Ok(stream),
            None => Err(Error::Backend("etcd closed the watch stream".into())),
        }
    }

    fn event(&self, e: &etcd_client::Event) -> Result<Option<Event>> {
        let Some(kv) = e.kv() else { return Ok(None) };
        let raw = std::str::from_utf8(kv.key()).map_err(backend)?;
        let key = raw.strip_prefix(self.prefix.as_str()).unwrap_or(raw).to_string();
        let prev: Option<Arc<[u8]>> = e.prev_kv().map(|p| Arc::from(p.value()));
        Ok(Some(match e.event_type() {
            etcd_client::EventType::Put => Event {
                kind: EventKind::Put,
                revision: kv.mod_revision() as u64,
                key,
                value: Arc::from(kv.value()),
                prev,
                created: kv.version() == 1,
            },
            etcd_client::EventType::Delete => Event {
                kind: EventKind::Delete,
                revision: kv.mod_revision() as u64,
                key,
                value: prev.clone().unwrap_or_else(|| Arc::from(&b""[..])),
                prev,
                created: false,
            },
        }))
    }

    /// Pass events on until the receiver goes away; resume after failures.
    async fn follow(self, mut stream: EtcdWatch, after: u64, tx: tokio::sync::mpsc::Sender<Result<Event>>) {
        // `last` is the revision of the last event passed on: a resumed watch starts after it.
        // A progress notification never moves it (etcd 3.4 before 3.4.25 may send one ahead of
        // an event still in flight), it only tells the reader how far the store has got.
        let mut last = after;
        let mut reported = after;
        let mut wanted = self.shared.wanted.subscribe();
        // When set, a progress request is outstanding; asked again at this time if still behind
        // (etcd answers only once the watch has caught up with its history).
        let mut ask_again: Option<tokio::time::Instant> = None;
        loop {
            let broke = loop {
                let behind = *wanted.borrow_and_update() > reported;
                if !behind {
                    ask_again = None;
                } else if ask_again.is_none_or(|t| t <= tokio::time::Instant::now()) {
                    if let Err(e) = stream.request_progress().await {
                        break e.to_string();
                    }
                    ask_again = Some(tokio::time::Instant::now() + Duration::from_millis(200));
                }
                let retry_at = ask_again.unwrap_or_else(|| tokio::time::Instant::now() + Duration::from_secs(3600));
                tokio::select! {
                    _ = tx.closed() => return,
                    changed = wanted.changed() => if changed.is_err() { return },
                    _ = tokio::time::sleep_until(retry_at) => {}
                    msg = stream.message() => match msg {
                        Ok(Some(resp)) => {
                            if resp.canceled() {
                                if resp.compact_revision() > 0 {
                                    let c = (resp.compact_revision() as u64).saturating_sub(1);
                                    self.shared.compacted.fetch_max(c, Ordering::SeqCst);
                                    let _ = tx.send(Err(Error::Compacted { requested: last, compacted: c })).await;
                                    return;
                                }
                                break format!("etcd cancelled the watch: {}", resp.cancel_reason());
                            }
                            if resp.created() {
                                continue;
                            }
                            let header = resp.header().map(|h| h.revision() as u64).unwrap_or(0);
                            if resp.events().is_empty() {
                                self.shared.seen(header);
                                if header > reported {
                                    reported = header;
                                    let ev = Event { kind: EventKind::Progress, revision: header, key: String::new(),
                                        value: Arc::from(&b""[..]), prev: None, created: false };
                                    if tx.send(Ok(ev)).await.is_err() {
                                        return;
                                    }
                                }
                                continue;
                            }
                            for e in resp.events() {
                                match self.event(e) {
                                    Ok(Some(ev)) if ev.revision > last => {
                                        last = ev.revision;
                                        reported = reported.max(last);
                                        self.shared.seen(last);
                                        if tx.send(Ok(ev)).await.is_err() {
                                            return;
                                        }
                                    }
                                    Ok(_) => {}
                                    Err(err) => tracing::error!(error = %err, "skipping an undecodable etcd event"),
                                }
                            }
                        }
                        Ok(None) => break "etcd closed the watch stream".to_string(),
                        Err(e) => break e.to_string(),
                    },
                }
            };
            tracing::info!(reason = %broke, after = last, "etcd watch broke; resuming");
            let mut delay = Duration::from_millis(100);
            stream = loop {
                if tx.is_closed() {
                    return;
                }
                match self.open(last).await {
                    Ok(s) => break s,
                    Err(e @ Error::Compacted { .. }) => {
                        let _ = tx.send(Err(e)).await;
                        return;
                    }
                    Err(e) => {
                        tracing::warn!(error = %e, "cannot resume the etcd watch yet");
                        tokio::time::sleep(delay).await;
                        delay = (delay * 2).min(Duration::from_secs(2));
                    }
                }
            };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::etcd_member::Cluster;
    use super::*;

    fn store(cluster: &Cluster, prefix: &str) -> EtcdStore {
        let cfg = EtcdConfig { servers: cluster.client_urls(), prefix: prefix.into(), ..Default::default() };
        EtcdStore::connect(&cfg).expect("connect to etcd")
    }

    async fn next(w: &mut WatchStream) -> Event {
        tokio::time::timeout(Duration::from_secs(20), w.recv())
            .await
            .expect("event within 20s")
            .expect("stream open")
            .expect("no error")
    }

    #[test]
    fn prefix_range_end_is_the_next_key() {
        assert_eq!(range_end(b"/registry/"), b"/registry0".to_vec());
        assert_eq!(range_end(b"a\xff"), b"b".to_vec());
        assert_eq!(range_end(b"\xff\xff"), vec![0]);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn passes_the_store_conformance_suite() {
        let dir = tempfile::tempdir().expect("tempdir");
        let cluster = Cluster::start(dir.path(), 1).expect("etcd");
        super::super::conformance::run_all(|| store(&cluster, "/conformance")).await;
        // The prefix keeps clusters apart: another prefix sees none of it.
        let other = store(&cluster, "/elsewhere");
        assert!(other.list("/").expect("list").0.is_empty());
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_watch_resumes_across_a_member_restart_without_gaps_or_repeats() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut cluster = Cluster::start(dir.path(), 1).expect("etcd");
        let s = store(&cluster, "");
        let start = s.current_revision();
        let mut w = s.watch("/r/", start).expect("watch");
        let mut written = Vec::new();
        for i in 0..5 {
            written.push(s.create(&format!("/r/{i}"), b"x").expect("create"));
        }
        for r in &written {
            assert_eq!(next(&mut w).await.revision, *r);
        }
        cluster.members[0].restart().expect("restart etcd");
        cluster.wait_healthy(Duration::from_secs(30)).expect("healthy again");
        // Writes retry until the member is back; the watch reconnects and resumes.
        for i in 5..10 {
            written.push(s.create(&format!("/r/{i}"), b"x").expect("create after the restart"));
        }
        for r in &written[5..] {
            let ev = next(&mut w).await;
            assert_eq!((ev.kind, ev.revision), (EventKind::Put, *r), "in order, none missed, none repeated");
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn writes_elsewhere_reach_a_watch_as_progress() {
        let dir = tempfile::tempdir().expect("tempdir");
        let cluster = Cluster::start(dir.path(), 1).expect("etcd");
        let s = store(&cluster, "");
        let mut w = s.watch("/watched/", s.current_revision()).expect("watch");
        let r = s.create("/unwatched/1", b"x").expect("create");
        let s = Arc::new(s);
        let reader = s.clone();
        // A consistent read learns revision r; the watch, which has no event for it, reports it.
        let current = tokio::task::spawn_blocking(move || reader.current_revision()).await.expect("read");
        assert_eq!(current, r);
        let ev = next(&mut w).await;
        assert_eq!((ev.kind, ev.revision), (EventKind::Progress, r));
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_size_is_etcds_database_and_follows_what_is_written() {
        let dir = tempfile::tempdir().expect("tempdir");
        let cluster = Cluster::start(dir.path(), 1).expect("etcd");
        let s = store(&cluster, "");
        let before = s.size().expect("etcd tells its size");
        assert!(before.live > 0 && before.live <= before.file, "{before:?}");
        let value = vec![b'x'; 64 << 10];
        for i in 0..64 {
            s.create(&format!("/big/{i}"), &value).expect("create");
        }
        // etcd's backend commits in batches (every 100 ms by default): the size follows shortly.
        let mut after = s.size().expect("size");
        for _ in 0..20 {
            if after.live >= before.live + (4 << 20) {
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
            after = s.size().expect("size");
        }
        assert!(after.live >= before.live + (4 << 20), "4 MiB written: {before:?} -> {after:?}");
        assert!(after.file >= after.live, "{after:?}");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn compaction_is_shared_through_etcd_and_old_watches_are_gone() {
        let dir = tempfile::tempdir().expect("tempdir");
        let cluster = Cluster::start(dir.path(), 1).expect("etcd");
        let (a, b) = (store(&cluster, ""), store(&cluster, ""));
        let r1 = a.create("/c/1", b"x").expect("create");
        let r2 = a.update("/c/1", b"y", r1).expect("update");
        a.compact(r2).expect("compact");
        // Nothing written since: compacting again writes nothing.
        let after = a.current_revision();
        a.compact(after).expect("compact again");
        assert_eq!(a.current_revision(), after, "an idle store stays idle");
        // The other apiserver's store learns the floor from etcd when its watch asks too far back.
        assert!(matches!(b.watch("/c/", r1), Err(Error::Compacted { .. })));
        assert!(b.compacted_revision() >= r1);
    }
}
