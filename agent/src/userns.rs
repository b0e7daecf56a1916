//! Pods with `hostUsers: false` (kubelet's userns manager): each gets 65536 host ids of its own,
//! the ranges above the first 65536 (container 0..65535 → host start..start+65535), at most one
//! per `--max-pods`. The range is written to the pod dir (`userns`, kubelet's file and format),
//! read back by a restarted agent, and freed with the pod.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

/// Ids per pod, and the first host id handed out (kubelet's defaults).
pub const LENGTH: u32 = 65536;
pub const FIRST: u32 = 65536;

/// The file in a pod's dir that holds its mappings.
pub const FILE: &str = "userns";

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("no user namespace range is free (all {0} are in use)")]
    Exhausted(u32),
    #[error("failed to {op} {path}")]
    Io {
        op: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

/// Pure: which pod holds which range (by slot: start = FIRST + slot * LENGTH).
#[derive(Debug, Default)]
pub struct Allocator {
    slots: u32,
    used: BTreeMap<u32, String>,
}

impl Allocator {
    pub fn new(slots: u32) -> Allocator {
        Allocator { slots, used: BTreeMap::new() }
    }

    /// The start of `uid`'s range: the one it has, else the lowest free one.
    pub fn allocate(&mut self, uid: &str) -> Result<u32, Error> {
        if let Some(start) = self.start_of(uid) {
            return Ok(start);
        }
        let slot = (0..self.slots).find(|s| !self.used.contains_key(s)).ok_or(Error::Exhausted(self.slots))?;
        self.used.insert(slot, uid.to_string());
        Ok(start(slot))
    }

    /// Records a range found on disk; false when it is not one of ours or another pod has it.
    pub fn adopt(&mut self, uid: &str, host_start: u32) -> bool {
        let Some(slot) = slot_of(host_start).filter(|s| *s < self.slots) else {
            return false;
        };
        match self.used.get(&slot) {
            Some(owner) => owner == uid,
            None => {
                self.used.insert(slot, uid.to_string());
                true
            }
        }
    }

    pub fn release(&mut self, uid: &str) {
        self.used.retain(|_, owner| owner != uid);
    }

    pub fn start_of(&self, uid: &str) -> Option<u32> {
        self.used.iter().find(|(_, owner)| *owner == uid).map(|(slot, _)| start(*slot))
    }

    /// The pods holding a range.
    pub fn holders(&self) -> Vec<String> {
        self.used.values().cloned().collect()
    }
}

fn start(slot: u32) -> u32 {
    FIRST + slot * LENGTH
}

fn slot_of(host_start: u32) -> Option<u32> {
    (host_start >= FIRST && (host_start - FIRST).is_multiple_of(LENGTH)).then(|| (host_start - FIRST) / LENGTH)
}

/// kubelet's `userns` file.
#[derive(Debug, Serialize, Deserialize, PartialEq)]
pub struct Mappings {
    #[serde(rename = "uidMappings")]
    pub uid: Vec<IdMapping>,
    #[serde(rename = "gidMappings")]
    pub gid: Vec<IdMapping>,
}

#[derive(Debug, Serialize, Deserialize, PartialEq)]
pub struct IdMapping {
    #[serde(rename = "hostId")]
    pub host_id: u32,
    #[serde(rename = "containerId")]
    pub container_id: u32,
    pub length: u32,
}

impl Mappings {
    pub fn for_start(start: u32) -> Mappings {
        let one = || vec![IdMapping { host_id: start, container_id: 0, length: LENGTH }];
        Mappings { uid: one(), gid: one() }
    }

    /// The range's start, when the file holds one range of ours for uids and gids alike.
    pub fn start(&self) -> Option<u32> {
        match (self.uid.as_slice(), self.gid.as_slice()) {
            ([u], [g]) if u == g && u.container_id == 0 && u.length == LENGTH => Some(u.host_id),
            _ => None,
        }
    }
}

/// Reads `<pod dir>/userns`, if there is one.
pub fn read(pod_dir: &Path) -> Option<Mappings> {
    let text = std::fs::read(pod_dir.join(FILE)).ok()?;
    serde_json::from_slice(&text).ok()
}

/// Writes `<pod dir>/userns` (to a temp file first, then renamed).
pub fn write(pod_dir: &Path, m: &Mappings) -> Result<(), Error> {
    let path = pod_dir.join(FILE);
    let tmp = pod_dir.join(format!(".{FILE}.tmp"));
    let text = serde_json::to_vec(m).expect("mappings serialize");
    std::fs::write(&tmp, text).map_err(|source| Error::Io { op: "write", path: tmp.clone(), source })?;
    std::fs::rename(&tmp, &path).map_err(|source| Error::Io { op: "rename", path, source })
}

/// An allocator holding every range recorded under `pods_dir` (a restarted agent's view).
pub fn load(pods_dir: &Path, slots: u32) -> Allocator {
    let mut a = Allocator::new(slots);
    for e in std::fs::read_dir(pods_dir).into_iter().flatten().flatten() {
        let uid = e.file_name().to_string_lossy().into_owned();
        if let Some(start) = read(&e.path()).and_then(|m| m.start()) {
            if !a.adopt(&uid, start) {
                tracing::warn!(pod = %uid, start, "ignoring a user namespace range that is not free");
            }
        }
    }
    a
}

/// Whether the pod asks for a user namespace of its own.
pub fn wanted(pod: &k8s_openapi::api::core::v1::Pod) -> bool {
    pod.spec.as_ref().and_then(|s| s.host_users) == Some(false)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pods_get_disjoint_ranges_above_the_first_65536() {
        let mut a = Allocator::new(3);
        assert_eq!(a.allocate("a").expect("a range is free"), 65536);
        assert_eq!(a.allocate("b").expect("a range is free"), 131072);
        assert_eq!(a.allocate("a").expect("a range is free"), 65536, "a pod keeps its range");
        assert_eq!(a.allocate("c").expect("a range is free"), 196608);
        assert!(matches!(a.allocate("d"), Err(Error::Exhausted(3))));
    }

    #[test]
    fn a_released_range_is_handed_out_again() {
        let mut a = Allocator::new(2);
        a.allocate("a").expect("a range is free");
        a.allocate("b").expect("a range is free");
        a.release("a");
        assert_eq!(a.start_of("a"), None);
        assert_eq!(a.allocate("c").expect("a range is free"), 65536);
    }

    #[test]
    fn ranges_read_back_are_kept_and_conflicts_refused() {
        let mut a = Allocator::new(4);
        assert!(a.adopt("a", 131072));
        assert!(a.adopt("a", 131072));
        assert!(!a.adopt("b", 131072), "taken by another pod");
        assert!(!a.adopt("b", 100000), "not on a range boundary");
        assert!(!a.adopt("b", 0), "the host's own ids");
        assert!(!a.adopt("b", FIRST + 4 * LENGTH), "beyond max-pods");
        assert_eq!(a.allocate("b").expect("a range is free"), 65536);
        assert_eq!(a.allocate("c").expect("a range is free"), 196608);
    }

    #[test]
    fn the_file_is_kubelets_format_and_round_trips() {
        let dir = tempfile::tempdir().expect("test setup");
        write(dir.path(), &Mappings::for_start(131072)).expect("test setup");
        let text = std::fs::read_to_string(dir.path().join(FILE)).expect("test setup");
        assert_eq!(
            text,
            r#"{"uidMappings":[{"hostId":131072,"containerId":0,"length":65536}],"gidMappings":[{"hostId":131072,"containerId":0,"length":65536}]}"#
        );
        assert_eq!(read(dir.path()).and_then(|m| m.start()), Some(131072));
        let pods = tempfile::tempdir().expect("test setup");
        let pod = pods.path().join("uid-1");
        std::fs::create_dir(&pod).expect("test setup");
        write(&pod, &Mappings::for_start(196608)).expect("test setup");
        assert_eq!(load(pods.path(), 110).start_of("uid-1"), Some(196608));
    }
}
