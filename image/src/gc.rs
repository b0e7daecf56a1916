//! Image garbage collection, kubelet style: when the filesystem holding the store is more than
//! `high` percent full, remove least-recently-used images that no container uses until it would be
//! `low` percent full. [`plan`] decides; [`Store::gc`] measures and removes.

use std::collections::{BTreeSet, HashSet};

use nix::sys::statvfs::statvfs;
use tracing::info;

use crate::error::{Error, Result};
use crate::store::Store;

/// One image as gc sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Candidate {
    pub manifest_digest: String,
    pub last_used: u64,
    /// Bytes removing it is expected to free.
    pub size: u64,
}

/// Filesystem capacity and free space for unprivileged users, in bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Disk {
    pub capacity: u64,
    pub available: u64,
}

impl Disk {
    pub fn usage_percent(&self) -> u64 {
        if self.capacity == 0 {
            return 0;
        }
        100 - (self.available.min(self.capacity) * 100 / self.capacity)
    }
}

/// Manifest digests to remove, oldest use first, enough to bring usage down to `low` percent.
/// Nothing when usage is at or below `high` percent.
pub fn plan(mut candidates: Vec<Candidate>, disk: Disk, high: u8, low: u8) -> Vec<String> {
    if disk.usage_percent() <= u64::from(high) {
        return Vec::new();
    }
    let target_available = disk.capacity / 100 * (100 - u64::from(low.min(100)));
    let mut to_free = target_available.saturating_sub(disk.available);
    candidates.sort_by(|a, b| (a.last_used, &a.manifest_digest).cmp(&(b.last_used, &b.manifest_digest)));
    let mut out = Vec::new();
    for c in candidates {
        if to_free == 0 {
            break;
        }
        to_free = to_free.saturating_sub(c.size.max(1));
        out.push(c.manifest_digest);
    }
    out
}

impl Store {
    /// Removes least-recently-used images not in `in_use` (manifest digests, image IDs or
    /// references) while the store's filesystem is above `high_percent` full, aiming for
    /// `low_percent`. Returns the manifest digests removed.
    pub fn gc(&self, in_use: &HashSet<String>, high_percent: u8, low_percent: u8) -> Result<Vec<String>> {
        let stat = statvfs(self.root()).map_err(|e| Error::io("statvfs", self.root(), e.into()))?;
        let block = stat.fragment_size();
        let disk = Disk { capacity: stat.blocks() * block, available: stat.blocks_available() * block };
        let candidates = self
            .usage()
            .into_iter()
            .filter(|(manifest, config, tags, _, _)| !used(in_use, manifest, config, tags))
            .map(|(manifest_digest, _, _, last_used, size)| Candidate { manifest_digest, last_used, size })
            .collect();
        let victims = plan(candidates, disk, high_percent, low_percent);
        for digest in &victims {
            match self.remove(digest) {
                Ok(()) | Err(Error::NotPresent(_)) => {}
                Err(e) => return Err(e),
            }
            info!(digest = %digest, usage_percent = disk.usage_percent(), "removed unused image");
        }
        Ok(victims)
    }
}

fn used(in_use: &HashSet<String>, manifest: &str, config: &str, tags: &BTreeSet<String>) -> bool {
    in_use.contains(manifest)
        || in_use.contains(config)
        || tags.iter().any(|t| in_use.contains(t) || in_use.contains(&format!("{}@{manifest}", name_of(t))))
}

/// `host/repo` of `host/repo:tag` or `host/repo@digest`.
fn name_of(reference: &str) -> &str {
    let name = reference.split('@').next().unwrap_or(reference);
    match name.rfind(':') {
        Some(i) if !name[i..].contains('/') => &name[..i],
        _ => name,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn c(digest: &str, last_used: u64, size: u64) -> Candidate {
        Candidate { manifest_digest: digest.into(), last_used, size }
    }

    const GB: u64 = 1 << 30;

    #[test]
    fn does_nothing_below_the_high_threshold() {
        let disk = Disk { capacity: 100 * GB, available: 20 * GB }; // 80% used
        assert!(plan(vec![c("a", 1, GB)], disk, 85, 80).is_empty());
    }

    #[test]
    fn removes_least_recently_used_until_low_threshold() {
        let disk = Disk { capacity: 100 * GB, available: 10 * GB }; // 90% used, low 80% → free 10 GB
        let candidates = vec![c("new", 30, 8 * GB), c("old", 10, 6 * GB), c("mid", 20, 6 * GB)];
        assert_eq!(plan(candidates, disk, 85, 80), ["old", "mid"]);
    }

    #[test]
    fn zero_thresholds_remove_everything_unused() {
        let disk = Disk { capacity: 100 * GB, available: 50 * GB };
        assert_eq!(plan(vec![c("b", 2, 0), c("a", 1, 0)], disk, 0, 0), ["a", "b"]);
    }

    #[test]
    fn in_use_matches_digests_ids_references_and_repo_digests() {
        let tags: BTreeSet<String> = ["127.0.0.1:5000/x:1".to_string()].into();
        let check = |s: &str| used(&[s.to_string()].into(), "sha256:m", "sha256:c", &tags);
        assert!(check("sha256:m"));
        assert!(check("sha256:c"));
        assert!(check("127.0.0.1:5000/x:1"));
        assert!(check("127.0.0.1:5000/x@sha256:m"));
        assert!(!check("127.0.0.1:5000/x:2"));
    }
}
