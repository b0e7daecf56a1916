//! The store's persisted index (`<root>/images.json`): tags → manifest digest, manifest digest →
//! config and layers, last-use times. Rewritten whole, atomically (temp file + fsync + rename).

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::io::Write;
use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::error::{Error, IoContext, Result};
use crate::manifest::ImageConfig;

const VERSION: u32 = 1;

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Meta {
    pub version: u32,
    /// Normalized reference (`docker.io/library/busybox:latest`, `host/x@sha256:..`) → manifest digest.
    pub tags: BTreeMap<String, String>,
    /// Manifest digest (the index digest for multi-platform images) → what it unpacked to.
    pub images: BTreeMap<String, ImageRecord>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ImageRecord {
    /// `sha256:` of the config blob: the image ID.
    pub config_digest: String,
    pub config: ImageConfig,
    /// Lowest first.
    pub layers: Vec<LayerRecord>,
    /// Manifest, index and config blobs kept under `blobs/`.
    pub blobs: Vec<String>,
    /// Compressed size as the registry counts it (config + layer blobs).
    pub size: u64,
    /// Unix seconds of the last pull or [`crate::Store::touch`].
    pub last_used: u64,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LayerRecord {
    /// Digest of the uncompressed tar; names the unpacked directory.
    pub diff_id: String,
    /// Bytes of regular files in the unpacked directory.
    pub unpacked_size: u64,
}

impl Meta {
    pub fn load(path: &Path) -> Result<Meta> {
        let bytes = match fs::read(path) {
            Ok(bytes) => bytes,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Ok(Meta { version: VERSION, ..Meta::default() })
            }
            Err(e) => return Err(Error::io("read", path, e)),
        };
        let meta: Meta =
            serde_json::from_slice(&bytes).map_err(|e| Error::invalid(format!("store index {}", path.display()), e))?;
        if meta.version != VERSION {
            return Err(Error::invalid(
                format!("store index {}", path.display()),
                format!("version {} (this build reads {VERSION})", meta.version),
            ));
        }
        Ok(meta)
    }

    pub fn save(&self, path: &Path) -> Result<()> {
        let bytes = serde_json::to_vec_pretty(self).expect("the index serializes: string keys only");
        write_atomic(path, &bytes)
    }

    /// Manifest digests of images whose manifest or config digest is `digest`.
    pub fn find_by_digest(&self, digest: &str) -> Option<&str> {
        if self.images.contains_key(digest) {
            return self.images.get_key_value(digest).map(|(k, _)| k.as_str());
        }
        self.images.iter().find(|(_, r)| r.config_digest == digest).map(|(k, _)| k.as_str())
    }

    pub fn tags_of(&self, manifest_digest: &str) -> Vec<&str> {
        self.tags.iter().filter(|(_, d)| *d == manifest_digest).map(|(t, _)| t.as_str()).collect()
    }

    /// Diff IDs and blob digests still referenced by some image.
    pub fn referenced(&self) -> (BTreeSet<String>, BTreeSet<String>) {
        let layers = self.images.values().flat_map(|r| r.layers.iter().map(|l| l.diff_id.clone())).collect();
        let blobs = self.images.values().flat_map(|r| r.blobs.iter().cloned()).collect();
        (layers, blobs)
    }

    /// Drops images no tag points at any more; returns their manifest digests.
    pub fn drop_untagged(&mut self) -> Vec<String> {
        let tagged: BTreeSet<&String> = self.tags.values().collect();
        let untagged: Vec<String> = self.images.keys().filter(|d| !tagged.contains(d)).cloned().collect();
        for d in &untagged {
            self.images.remove(d);
        }
        untagged
    }
}

/// Writes `bytes` to a sibling temp file, fsyncs and renames it over `path`.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> Result<()> {
    let tmp = path.with_extension(format!("tmp-{}", fastrand::u64(..)));
    let write = || -> std::io::Result<()> {
        let mut file = fs::File::create(&tmp)?;
        file.write_all(bytes)?;
        file.sync_all()?;
        fs::rename(&tmp, path)
    };
    write().map_err(|e| {
        let _ = fs::remove_file(&tmp);
        Error::io("write", path, e)
    })?;
    if let Some(dir) = path.parent() {
        fs::File::open(dir).and_then(|d| d.sync_all()).ctx("sync", dir)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(config: &str, layers: &[&str]) -> ImageRecord {
        ImageRecord {
            config_digest: config.into(),
            config: ImageConfig::default(),
            layers: layers.iter().map(|l| LayerRecord { diff_id: l.to_string(), unpacked_size: 1 }).collect(),
            blobs: vec![config.into()],
            size: 1,
            last_used: 0,
        }
    }

    #[test]
    fn survives_a_save_and_load_round_trip() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("images.json");
        let mut meta = Meta::load(&path).expect("missing file is an empty index");
        meta.tags.insert("docker.io/library/a:1".into(), "m1".into());
        meta.images.insert("m1".into(), record("c1", &["l1", "l2"]));
        meta.save(&path).expect("save");
        let loaded = Meta::load(&path).expect("load");
        assert_eq!(loaded.tags, meta.tags);
        assert_eq!(loaded.images, meta.images);
        let leftovers: Vec<_> = fs::read_dir(dir.path()).expect("ls").collect();
        assert_eq!(leftovers.len(), 1, "no temp files left behind");
    }

    #[test]
    fn untagged_images_drop_and_release_their_layers() {
        let mut meta = Meta { version: VERSION, ..Meta::default() };
        meta.tags.insert("a".into(), "m1".into());
        meta.images.insert("m1".into(), record("c1", &["shared", "only1"]));
        meta.images.insert("m2".into(), record("c2", &["shared", "only2"]));
        assert_eq!(meta.drop_untagged(), vec!["m2".to_string()]);
        let (layers, blobs) = meta.referenced();
        assert_eq!(layers.into_iter().collect::<Vec<_>>(), ["only1", "shared"]);
        assert_eq!(blobs.into_iter().collect::<Vec<_>>(), ["c1"]);
        assert_eq!(meta.find_by_digest("c1"), Some("m1"));
        assert_eq!(meta.find_by_digest("c2"), None);
    }
}
