//! The content-addressed store on disk and its local operations (open, get, list, remove, touch).
//!
//! ```text
//! <root>/images.json          the index (see meta.rs)
//! <root>/blobs/sha256/<hex>   manifests, indexes and configs, verified
//! <root>/layers/<16 hex>      unpacked layers, keyed by diff ID, shared by all images (overlayfs lowerdirs)
//! <root>/tmp/                 downloads and half-unpacked layers; emptied on open
//! ```
//! Everything lands in place by rename, so a crash never leaves something that looks complete.
//! Several processes may share a store (the agent, and `kaji-agent image import` beside it): each
//! change of the index is made under an exclusive lock on `<root>/images.lock` from the index as it
//! is on disk, which a process reads again whenever another has replaced it.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::fs;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{SystemTime, UNIX_EPOCH};

use tokio::sync::OnceCell;

use crate::digest;
use crate::error::{Error, IoContext, Result};
use crate::manifest::{ImageConfig, Platform};
use crate::meta::{write_atomic, ImageRecord, Meta};
use crate::reference::{normalize, validate_digest};
use crate::unpack::unpack_layer;

/// How the store reaches registries and which platform it pulls.
#[derive(Debug, Clone)]
pub struct StoreOptions {
    /// `host[:port]` of registries spoken to over plain HTTP. Loopback hosts always are.
    pub insecure_registries: Vec<String>,
    /// The platform picked from multi-platform images; defaults to this machine's.
    pub platform: Platform,
    /// Extra PEM CA certificates trusted for registries, on top of the system roots.
    pub extra_ca_pem: Vec<Vec<u8>>,
    /// Layer downloads in flight per pull.
    pub max_concurrent_downloads: usize,
}

impl Default for StoreOptions {
    fn default() -> Self {
        StoreOptions {
            insecure_registries: Vec::new(),
            platform: Platform::host(),
            extra_ca_pem: Vec::new(),
            max_concurrent_downloads: 3,
        }
    }
}

/// An image ready to run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Image {
    /// The normalized reference it was found by: `docker.io/library/busybox:latest`.
    pub reference: String,
    /// `sha256:` of the config blob.
    pub id: String,
    /// `sha256:` of the manifest (of the index, for multi-platform images) the reference resolved to.
    pub manifest_digest: String,
    pub config: ImageConfig,
    /// Unpacked layer directories, lowest first (reverse them for overlayfs `lowerdir=`, top first).
    pub layers: Vec<PathBuf>,
    /// Compressed size (config + layer blobs), as registries and kubelet count it.
    pub size: u64,
}

impl Image {
    /// `registry/repository@<manifest digest>`: what Kubernetes shows as a container's `imageID`.
    pub fn repo_digest(&self) -> String {
        let name = self.reference.split('@').next().unwrap_or(&self.reference);
        let name = match name.rfind(':') {
            Some(i) if !name[i..].contains('/') => &name[..i],
            _ => name,
        };
        format!("{name}@{}", self.manifest_digest)
    }
}

/// Counters for tests and metrics.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Stats {
    /// Blobs (configs and layers) fetched from registries.
    pub blobs_downloaded: u64,
    /// Layers unpacked (pulled or imported).
    pub layers_unpacked: u64,
}

/// The image store. Cheap to clone; all clones share one state. Open one per root per process.
#[derive(Clone)]
pub struct Store {
    pub(crate) inner: Arc<Inner>,
}

pub(crate) struct Inner {
    pub(crate) root: PathBuf,
    pub(crate) opts: StoreOptions,
    pub(crate) client: reqwest::Client,
    state: Mutex<State>,
    pub(crate) inflight: Mutex<HashMap<String, Arc<OnceCell<Result<Image>>>>>,
    pub(crate) blobs_downloaded: AtomicU64,
    layers_unpacked: AtomicU64,
}

struct State {
    meta: Meta,
    /// Which `images.json` `meta` was read from or written as (another process replaces it).
    stamp: Option<Stamp>,
    /// Diff IDs a pull or import in progress relies on; remove and gc leave them alone.
    pinned: HashMap<String, usize>,
}

/// Releases pinned layers when a pull or import ends, however it ends.
pub(crate) struct Pins {
    store: Store,
    diff_ids: Vec<String>,
}

impl Drop for Pins {
    fn drop(&mut self) {
        let mut state = self.store.state();
        for d in &self.diff_ids {
            if let Some(n) = state.pinned.get_mut(d) {
                *n -= 1;
                if *n == 0 {
                    state.pinned.remove(d);
                }
            }
        }
    }
}

/// `State` under both locks: the mutex (this process) and the lock file (other processes).
struct Locked<'a> {
    state: MutexGuard<'a, State>,
    _file: Option<nix::fcntl::Flock<fs::File>>,
}

impl std::ops::Deref for Locked<'_> {
    type Target = State;
    fn deref(&self) -> &State {
        &self.state
    }
}

impl std::ops::DerefMut for Locked<'_> {
    fn deref_mut(&mut self) -> &mut State {
        &mut self.state
    }
}

/// A file's identity and version: the index is replaced by rename, so a new inode is a new index.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Stamp {
    dev: u64,
    ino: u64,
    len: u64,
    mtime_ns: i128,
}

impl Stamp {
    fn of(path: &Path) -> Option<Stamp> {
        let m = fs::metadata(path).ok()?;
        Some(Stamp {
            dev: m.dev(),
            ino: m.ino(),
            len: m.len(),
            mtime_ns: m.mtime() as i128 * 1_000_000_000 + m.mtime_nsec() as i128,
        })
    }
}

impl Store {
    /// Opens (creating if needed) the store at `root`, discarding leftovers of interrupted work.
    pub fn open(root: impl Into<PathBuf>, opts: StoreOptions) -> Result<Store> {
        let root = root.into();
        for dir in ["blobs/sha256", "layers", "tmp"] {
            fs::create_dir_all(root.join(dir)).ctx("create", root.join(dir))?;
        }
        for entry in fs::read_dir(root.join("tmp")).ctx("list", root.join("tmp"))? {
            let path = entry.ctx("list", root.join("tmp"))?.path();
            remove_path(&path)?;
        }
        let meta = Meta::load(&root.join("images.json"))?;
        let stamp = Stamp::of(&root.join("images.json"));
        let client = crate::registry::build_client(&opts)?;
        let store = Store {
            inner: Arc::new(Inner {
                root,
                opts,
                client,
                state: Mutex::new(State { meta, stamp, pinned: HashMap::new() }),
                inflight: Mutex::new(HashMap::new()),
                blobs_downloaded: AtomicU64::new(0),
                layers_unpacked: AtomicU64::new(0),
            }),
        };
        store.sweep_orphans()?;
        Ok(store)
    }

    pub fn root(&self) -> &Path {
        &self.inner.root
    }

    pub fn stats(&self) -> Stats {
        Stats {
            blobs_downloaded: self.inner.blobs_downloaded.load(Ordering::Relaxed),
            layers_unpacked: self.inner.layers_unpacked.load(Ordering::Relaxed),
        }
    }

    /// Looks an image up by reference (normalized first) or by manifest or config digest.
    /// `None` when absent or when one of its layer directories has gone missing.
    pub fn get(&self, reference: &str) -> Result<Option<Image>> {
        let state = self.state();
        let meta = &state.meta;
        let found = if reference.starts_with("sha256:") {
            validate_digest(reference)
                .map_err(|reason| Error::BadReference { reference: reference.to_string(), reason })?;
            meta.find_by_digest(reference).map(|m| {
                let name = meta.tags_of(m).first().map_or_else(|| m.to_string(), |t| t.to_string());
                (name, m.to_string())
            })
        } else {
            let r = normalize(reference)?;
            let key = r.to_string();
            match (meta.tags.get(&key), &r.digest) {
                (Some(m), _) => Some((key, m.clone())),
                // name@digest of an image pulled by tag.
                (None, Some(d)) if meta.tags_of(d).iter().any(|t| normalize(t).is_ok_and(|t| t.name() == r.name())) => {
                    Some((key, d.clone()))
                }
                _ => None,
            }
        };
        let Some((name, manifest_digest)) = found else { return Ok(None) };
        let Some(record) = meta.images.get(&manifest_digest) else { return Ok(None) };
        let image = self.image(name, &manifest_digest, record);
        Ok(image.layers.iter().all(|l| l.is_dir()).then_some(image))
    }

    /// One entry per reference (tag or digest reference) the store holds.
    pub fn list(&self) -> Result<Vec<Image>> {
        let state = self.state();
        Ok(state
            .meta
            .tags
            .iter()
            .filter_map(|(tag, m)| Some(self.image(tag.clone(), m, state.meta.images.get(m)?)))
            .collect())
    }

    /// Removes a reference, or with a digest every reference to that image. Images nothing
    /// refers to any more go, and with them layers and blobs no other image uses.
    pub fn remove(&self, reference_or_digest: &str) -> Result<()> {
        let mut state = self.state();
        if reference_or_digest.starts_with("sha256:") {
            let Some(m) = state.meta.find_by_digest(reference_or_digest).map(str::to_string) else {
                return Err(Error::NotPresent(reference_or_digest.to_string()));
            };
            state.meta.tags.retain(|_, d| *d != m);
            state.meta.images.remove(&m);
        } else {
            let key = normalize(reference_or_digest)?.to_string();
            if state.meta.tags.remove(&key).is_none() {
                return Err(Error::NotPresent(key));
            }
        }
        state.meta.drop_untagged();
        let trash = self.collect_garbage(&mut state)?;
        drop(state);
        for path in trash {
            remove_path(&path)?;
        }
        Ok(())
    }

    /// Records a use now (a container started from it), for [`Store::gc`]'s LRU order.
    pub fn touch(&self, reference_or_digest: &str) -> Result<()> {
        let image = self.get(reference_or_digest)?.ok_or_else(|| Error::NotPresent(reference_or_digest.to_string()))?;
        let mut state = self.state();
        if let Some(record) = state.meta.images.get_mut(&image.manifest_digest) {
            record.last_used = now();
        }
        self.save(&mut state)
    }

    pub(crate) fn image(&self, reference: String, manifest_digest: &str, record: &ImageRecord) -> Image {
        Image {
            reference,
            id: record.config_digest.clone(),
            manifest_digest: manifest_digest.to_string(),
            config: record.config.clone(),
            layers: record.layers.iter().map(|l| self.layer_dir(&l.diff_id)).collect(),
            size: record.size,
        }
    }

    /// The index, locked against this process's threads and other processes, as it is on disk.
    /// Without the lock file (a read-only store) it is this process's view.
    fn state(&self) -> Locked<'_> {
        let mut state = self.inner.state.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        let lock_path = self.inner.root.join("images.lock");
        let file = fs::OpenOptions::new().create(true).truncate(false).write(true).open(&lock_path);
        let file = match file.map_err(|e| e.to_string()).and_then(|f| {
            nix::fcntl::Flock::lock(f, nix::fcntl::FlockArg::LockExclusive).map_err(|(_, e)| e.to_string())
        }) {
            Ok(locked) => Some(locked),
            Err(e) => {
                tracing::warn!(path = %lock_path.display(), error = %e, "cannot lock the image index");
                None
            }
        };
        let index = self.inner.root.join("images.json");
        let stamp = Stamp::of(&index);
        if stamp != state.stamp {
            match Meta::load(&index) {
                Ok(meta) => {
                    state.meta = meta;
                    state.stamp = stamp;
                }
                Err(e) => tracing::warn!(error = %e, "cannot read the image index another process wrote"),
            }
        }
        Locked { state, _file: file }
    }

    fn save(&self, state: &mut State) -> Result<()> {
        let index = self.inner.root.join("images.json");
        state.meta.save(&index)?;
        state.stamp = Stamp::of(&index);
        Ok(())
    }

    pub(crate) fn blob_path(&self, digest: &str) -> PathBuf {
        self.inner.root.join("blobs/sha256").join(digest::hex(digest))
    }

    /// Short on purpose: overlayfs joins every lowerdir into one page of mount options.
    pub(crate) fn layer_dir(&self, diff_id: &str) -> PathBuf {
        let hex = digest::hex(diff_id);
        self.inner.root.join("layers").join(&hex[..hex.len().min(16)])
    }

    /// A fresh path under `tmp/` (same filesystem as everything else, so renames are atomic).
    pub(crate) fn tmp_path(&self, what: &str) -> PathBuf {
        self.inner.root.join("tmp").join(format!("{what}-{:016x}", fastrand::u64(..)))
    }

    /// Stores a small verified blob (manifest, index, config) under `blobs/`.
    pub(crate) fn put_blob(&self, bytes: &[u8]) -> Result<String> {
        let digest = digest::sha256(bytes);
        let path = self.blob_path(&digest);
        if !path.is_file() {
            write_atomic(&path, bytes)?;
        }
        Ok(digest)
    }

    pub(crate) fn read_blob(&self, digest: &str) -> Result<Option<Vec<u8>>> {
        let path = self.blob_path(digest);
        match fs::read(&path) {
            Ok(bytes) if digest::sha256(&bytes) == digest => Ok(Some(bytes)),
            Ok(_) => Ok(None),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(Error::io("read", path, e)),
        }
    }

    /// Pins `diff_ids` against removal for the life of the returned guard.
    pub(crate) fn pin(&self, diff_ids: &[String]) -> Pins {
        let mut state = self.state();
        for d in diff_ids {
            *state.pinned.entry(d.clone()).or_default() += 1;
        }
        Pins { store: self.clone(), diff_ids: diff_ids.to_vec() }
    }

    /// Unpacks the layer blob at `blob` into its directory unless that exists. Blocking.
    /// Returns the unpacked size, or `None` when the directory was already there.
    pub(crate) fn install_layer(&self, blob: &Path, diff_id: &str) -> Result<Option<u64>> {
        let dir = self.layer_dir(diff_id);
        if dir.is_dir() {
            return Ok(None);
        }
        let tmp = self.tmp_path("layer");
        fs::create_dir(&tmp).ctx("create", &tmp)?;
        let result = (|| {
            let file = fs::File::open(blob).ctx("open", blob)?;
            let unpacked = unpack_layer(file, &tmp)?;
            digest::verify(|| format!("uncompressed layer {}", blob.display()), diff_id, &unpacked.diff_id)?;
            match fs::rename(&tmp, &dir) {
                Ok(()) => Ok(Some(unpacked.size)),
                // Another pull of an image sharing this layer got there first.
                Err(_) if dir.is_dir() => Ok(None),
                Err(e) => Err(Error::io("rename into place", &dir, e)),
            }
        })();
        if !matches!(result, Ok(Some(_))) {
            let _ = fs::remove_dir_all(&tmp);
        }
        if matches!(result, Ok(Some(_))) {
            self.inner.layers_unpacked.fetch_add(1, Ordering::Relaxed);
        }
        result
    }

    /// Records an image under `tags` once all its layers and blobs are in place.
    pub(crate) fn commit(&self, tags: &[String], manifest_digest: &str, mut record: ImageRecord) -> Result<Image> {
        let mut state = self.state();
        // Layers that were already unpacked: take the size measured when they were.
        for layer in record.layers.iter_mut().filter(|l| l.unpacked_size == 0) {
            let known = state.meta.images.values().flat_map(|r| &r.layers).find(|l| l.diff_id == layer.diff_id);
            layer.unpacked_size = known.map_or(0, |l| l.unpacked_size);
        }
        record.last_used = now();
        for tag in tags {
            state.meta.tags.insert(tag.clone(), manifest_digest.to_string());
        }
        state.meta.images.insert(manifest_digest.to_string(), record.clone());
        // A tag that moved may have orphaned the image it pointed at.
        state.meta.drop_untagged();
        let trash = self.collect_garbage(&mut state)?;
        drop(state);
        for path in trash {
            remove_path(&path)?;
        }
        let name = tags.first().cloned().unwrap_or_else(|| manifest_digest.to_string());
        Ok(self.image(name, manifest_digest, &record))
    }

    /// Saves the index, then moves layer directories and blobs nothing references (and no pull
    /// has pinned) into `tmp/`, returning them for deletion outside the lock.
    fn collect_garbage(&self, state: &mut State) -> Result<Vec<PathBuf>> {
        self.save(state)?;
        let (layers, blobs) = state.meta.referenced();
        let keep_layers: HashSet<PathBuf> =
            layers.iter().chain(state.pinned.keys()).map(|d| self.layer_dir(d)).collect();
        let mut trash = Vec::new();
        for (dir, keep) in [("layers", &keep_layers), ("blobs/sha256", &HashSet::new())] {
            let dir = self.inner.root.join(dir);
            for entry in fs::read_dir(&dir).ctx("list", &dir)? {
                let path = entry.ctx("list", &dir)?.path();
                let name = path.file_name().and_then(|n| n.to_str()).unwrap_or_default();
                let referenced = keep.contains(&path) || blobs.contains(&format!("sha256:{name}"));
                if !referenced && !name.contains(".tmp-") {
                    let to = self.tmp_path("trash");
                    fs::rename(&path, &to).ctx("move to trash", &path)?;
                    trash.push(to);
                }
            }
        }
        Ok(trash)
    }

    /// On open: drop layers and blobs a crash left unreferenced.
    fn sweep_orphans(&self) -> Result<()> {
        let mut state = self.state();
        let trash = self.collect_garbage(&mut state)?;
        drop(state);
        trash.iter().try_for_each(|p| remove_path(p))
    }

    /// For gc: (manifest digest, config digest, tags, last used, unpacked bytes) of every image.
    pub(crate) fn usage(&self) -> Vec<(String, String, BTreeSet<String>, u64, u64)> {
        let state = self.state();
        state
            .meta
            .images
            .iter()
            .map(|(m, r)| {
                let tags = state.meta.tags_of(m).into_iter().map(str::to_string).collect();
                let size = r.layers.iter().map(|l| l.unpacked_size).sum();
                (m.clone(), r.config_digest.clone(), tags, r.last_used, size)
            })
            .collect()
    }
}

pub(crate) fn now() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs())
}

fn remove_path(path: &Path) -> Result<()> {
    let result = match fs::symlink_metadata(path) {
        Ok(m) if m.is_dir() => fs::remove_dir_all(path),
        Ok(_) => fs::remove_file(path),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(e),
    };
    result.ctx("remove", path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn repo_digest_strips_tag_but_keeps_registry_port() {
        let image = Image {
            reference: "127.0.0.1:5000/kaji/busybox:1".into(),
            id: String::new(),
            manifest_digest: "sha256:abc".into(),
            config: ImageConfig::default(),
            layers: vec![],
            size: 0,
        };
        assert_eq!(image.repo_digest(), "127.0.0.1:5000/kaji/busybox@sha256:abc");
        let by_digest = Image { reference: "127.0.0.1:5000/x@sha256:abc".into(), ..image };
        assert_eq!(by_digest.repo_digest(), "127.0.0.1:5000/x@sha256:abc");
    }

    #[test]
    fn layer_dirs_are_short() {
        let store = Store::open(tempfile::tempdir().expect("tempdir").keep(), StoreOptions::default()).expect("open");
        let dir = store.layer_dir(&digest::sha256(b"x"));
        assert_eq!(dir.file_name().and_then(|n| n.to_str()).map(str::len), Some(16));
        let _ = fs::remove_dir_all(store.root());
    }
}
