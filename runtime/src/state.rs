//! On-disk container state under the runtime root: `<root>/<id>/state.json` (OCI state plus what
//! the runtime needs to re-attach), `exit.json` written by the shim, and the start fifo.
//! Everything a new owner process needs is here, so an agent restart loses nothing.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("container {0} does not exist")]
    NotFound(String),
    #[error("container {0} already exists")]
    Exists(String),
    #[error("invalid container id {0:?}")]
    InvalidId(String),
    #[error("failed to {op} {path}")]
    Io {
        op: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("corrupt state file {path}")]
    Corrupt {
        path: PathBuf,
        #[source]
        source: serde_json::Error,
    },
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// OCI container status.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    Creating,
    Created,
    Running,
    /// Running, but frozen (`pause`).
    Paused,
    Stopped,
}

/// What is persisted about a container once it is created.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Record {
    pub id: String,
    pub pid: i32,
    pub shim_pid: i32,
    pub bundle: PathBuf,
    pub created: String,
    pub cgroups_path: Option<PathBuf>,
    pub log_path: Option<PathBuf>,
    pub backend: String,
    #[serde(default)]
    pub annotations: HashMap<String, String>,
    /// The spec's hooks that run outside the container's own setup (poststart, poststop), kept
    /// from create so start and delete run what was created, not a later edit of the bundle.
    /// Only the native backend keeps them; runc runs its own.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hooks: Option<oci_spec::runtime::Hooks>,
    /// No shim watches it (the CLI made it, as `runc create` does, and left the init to its
    /// caller's reaper): nobody records its exit, and whether it runs is the init's liveness.
    #[serde(default)]
    pub detached: bool,
    /// The init's start time (clock ticks after boot, `/proc/<pid>/stat` field 22): a pid the
    /// kernel reused for another process after the init was reaped is not the container.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_time: Option<u64>,
    /// Without a mount namespace of its own the container mounted in the host's, below this
    /// rootfs: `delete` unmounts what is there.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shared_mounts: Option<PathBuf>,
    /// A rootfs the shim mounted in the host's mount namespace for another runtime (the runc
    /// backend's overlay, as containerd mounts a snapshot for runc): `delete` unmounts it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rootfs_mount: Option<PathBuf>,
}

impl Record {
    /// The OCI state handed to hooks run in the runtime namespace.
    pub fn hook_state(&self, status: Status, pid: i32) -> State {
        State {
            oci_version: OCI_VERSION.into(),
            id: self.id.clone(),
            status,
            pid,
            bundle: self.bundle.clone(),
            created: self.created.clone(),
            annotations: self.annotations.clone(),
            exit: None,
        }
    }
}

/// The runtime-spec version our state JSON follows.
pub const OCI_VERSION: &str = "1.0.2";

/// How the container's process ended, written once by the shim.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Exit {
    /// Shell convention: the exit code, or 128 + signal number.
    pub code: i32,
    pub signal: Option<i32>,
    pub oom_killed: bool,
}

/// The state JSON as `runc state` prints it, plus exit information when stopped.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct State {
    pub oci_version: String,
    pub id: String,
    pub status: Status,
    pub pid: i32,
    pub bundle: PathBuf,
    pub created: String,
    #[serde(default, skip_serializing_if = "HashMap::is_empty")]
    pub annotations: HashMap<String, String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exit: Option<Exit>,
}

/// The directory layout of one container.
#[derive(Debug, Clone)]
pub struct Dir {
    pub path: PathBuf,
}

impl Dir {
    pub fn new(root: &Path, id: &str) -> Result<Self> {
        if id.is_empty()
            || id.len() > 128
            || !id.chars().all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c))
            || id.starts_with('.')
        {
            return Err(Error::InvalidId(id.to_string()));
        }
        Ok(Dir { path: root.join(id) })
    }
    pub fn record(&self) -> PathBuf {
        self.path.join("state.json")
    }
    pub fn exit(&self) -> PathBuf {
        self.path.join("exit.json")
    }
    /// A fifo the shim holds open until it has written the exit record: a reader that opened it
    /// while the shim held it sees a hang-up then (before the shim itself has exited).
    pub fn exited(&self) -> PathBuf {
        self.path.join("exited.fifo")
    }
    pub fn fifo(&self) -> PathBuf {
        self.path.join("exec.fifo")
    }
    /// A fifo the init writes a startContainer hook failure to; `start` reads it to the end
    /// (end of file: the init exec'd). Only exists when the spec has startContainer hooks.
    pub fn start_status(&self) -> PathBuf {
        self.path.join("start.status")
    }
    /// The container's stdin fifo (only with `CreateOptions::stdin`): its process reads it as
    /// fd 0; writers are attach sessions. The shim holds a write end so it stays open between them.
    pub fn stdin(&self) -> PathBuf {
        self.path.join("stdin")
    }
    /// With `process.terminal`: "<cols> <rows>\n" lines written here resize the container's
    /// terminal (the shim holds its master).
    pub fn resize(&self) -> PathBuf {
        self.path.join("resize")
    }
    /// A byte written here makes the shim drop its write end of [`Dir::stdin`]: once the current
    /// writers are gone the process reads end of file (`stdinOnce`).
    pub fn stdin_close(&self) -> PathBuf {
        self.path.join("stdin.close")
    }
    /// Present from create until start: distinguishes created from running.
    pub fn created_marker(&self) -> PathBuf {
        self.path.join("created")
    }
    pub fn rootfs(&self) -> PathBuf {
        self.path.join("rootfs")
    }
    pub fn upper(&self) -> PathBuf {
        self.path.join("upper")
    }
    pub fn work(&self) -> PathBuf {
        self.path.join("work")
    }

    /// Claims the id: fails if a container with this id exists.
    pub fn create(&self) -> Result<()> {
        if let Some(parent) = self.path.parent() {
            std::fs::create_dir_all(parent).map_err(|source| Error::Io {
                op: "create",
                path: parent.into(),
                source,
            })?;
        }
        match std::fs::create_dir(&self.path) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                Err(Error::Exists(self.path.file_name().map(|s| s.to_string_lossy().into_owned()).unwrap_or_default()))
            }
            Err(source) => Err(Error::Io { op: "create", path: self.path.clone(), source }),
        }
    }

    pub fn exists(&self) -> bool {
        self.path.is_dir()
    }

    pub fn remove(&self) -> Result<()> {
        match std::fs::remove_dir_all(&self.path) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(source) => Err(Error::Io { op: "remove", path: self.path.clone(), source }),
        }
    }
}

/// Writes JSON atomically (temp file + rename) so readers never see half a file.
pub fn write_json<T: Serialize>(path: &Path, value: &T) -> Result<()> {
    let tmp = path.with_extension("tmp");
    let bytes = serde_json::to_vec(value).map_err(|source| Error::Corrupt { path: path.into(), source })?;
    std::fs::write(&tmp, bytes).map_err(|source| Error::Io { op: "write", path: tmp.clone(), source })?;
    std::fs::rename(&tmp, path).map_err(|source| Error::Io { op: "rename", path: path.into(), source })
}

/// Reads JSON; `Ok(None)` if the file does not exist.
pub fn read_json<T: for<'de> Deserialize<'de>>(path: &Path) -> Result<Option<T>> {
    match std::fs::read(path) {
        Ok(bytes) => {
            serde_json::from_slice(&bytes).map(Some).map_err(|source| Error::Corrupt { path: path.into(), source })
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(source) => Err(Error::Io { op: "read", path: path.into(), source }),
    }
}

/// The start time of process `pid` (`/proc/<pid>/stat` field 22), if it exists.
pub fn start_time(pid: i32) -> Option<u64> {
    parse_stat(&std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?).map(|(_, t)| t)
}

/// Pure: the state letter and the start time from a `/proc/<pid>/stat` line (the command name,
/// in parentheses, may itself contain spaces and parentheses).
pub fn parse_stat(stat: &str) -> Option<(char, u64)> {
    let rest = &stat[stat.rfind(')')? + 1..];
    let mut fields = rest.split_whitespace();
    let state = fields.next()?.chars().next()?;
    // Field 3 is the state; the start time is field 22.
    let start = fields.nth(18)?.parse().ok()?;
    Some((state, start))
}

/// Whether the process `pid` is the one that started at `start` and has not exited (a zombie
/// has); without a start time to compare, whether `pid` exists and is not a zombie.
pub fn process_alive(pid: i32, start: Option<u64>) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")).ok().as_deref().and_then(parse_stat) {
        Some((state, t)) => !matches!(state, 'Z' | 'X') && start.is_none_or(|s| s == t),
        None => false,
    }
}

/// Pure: the OCI status from what is on disk and whether the init is alive.
pub fn status(exit: Option<&Exit>, alive: bool, created_marker: bool) -> Status {
    match (exit, alive, created_marker) {
        (Some(_), _, _) | (None, false, _) => Status::Stopped,
        (None, true, true) => Status::Created,
        (None, true, false) => Status::Running,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_follows_exit_liveness_and_start_marker() {
        let exit = Exit { code: 0, signal: None, oom_killed: false };
        assert_eq!(status(Some(&exit), true, false), Status::Stopped);
        assert_eq!(status(None, false, true), Status::Stopped);
        assert_eq!(status(None, true, true), Status::Created);
        assert_eq!(status(None, true, false), Status::Running);
    }

    #[test]
    fn stat_lines_give_state_and_start_time_whatever_the_command_name() {
        let line = "4242 (a (b) c) S 1 4242 4242 0 -1 4194560 90 0 0 0 0 0 0 0 20 0 1 0 987654 1110016 ...";
        assert_eq!(parse_stat(line), Some(('S', 987654)));
        assert_eq!(parse_stat("1 (x) Z"), None);
        let me = std::process::id() as i32;
        let mine = start_time(me);
        assert!(mine.is_some());
        assert!(process_alive(me, mine));
        assert!(!process_alive(me, mine.map(|t| t + 1)), "a recycled pid is not the process");
    }

    #[test]
    fn ids_that_could_escape_the_root_are_refused() {
        let root = Path::new("/run/kaji");
        assert!(Dir::new(root, "web-1_a.b").is_ok());
        for bad in ["", "../x", "a/b", ".hidden", "a b"] {
            assert!(matches!(Dir::new(root, bad), Err(Error::InvalidId(_))), "{bad}");
        }
    }
}
