//! A volumeMount's `subPath`, made safe as kubelet makes it (CVE-2017-1002101, CVE-2021-25741):
//! the path is resolved inside the volume with `openat2(RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS)`
//! — a symlink a container left in the volume may point elsewhere inside it, never out — and the
//! file it opened (not the path, which a container can swap meanwhile) is bind-mounted at
//! `<pod>/volume-subpaths/<volume>/<container>/<index>`, the source the runtime mounts. Missing
//! directories are created one `mkdirat` at a time beneath the volume, with the volume's mode.
//! Teardown unmounts these binds before the pod directory is removed.

use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::path::{Component, Path, PathBuf};

use kaji_runtime::sys;
use nix::errno::Errno;
use nix::fcntl::OFlag;
use nix::mount::{MntFlags, MsFlags};
use nix::sys::stat::{Mode, SFlag};

use crate::volumes::PodDir;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The path itself is refused (absolute, `..`): kubelet's messages, shown to the user.
    #[error("{0}")]
    Invalid(String),
    /// A missing directory could not be made beneath the volume.
    #[error("failed to create {path} beneath {volume}")]
    Create {
        path: String,
        volume: PathBuf,
        #[source]
        source: nix::Error,
    },
    /// The path could not be opened beneath the volume (it escapes it, or is missing) or bound.
    #[error("failed to {op} {path}")]
    Prepare {
        op: &'static str,
        path: PathBuf,
        #[source]
        source: nix::Error,
    },
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// The subPath a mount asks for: `subPath`, or `subPathExpr` expanded with the container's
/// environment (kubelet's `ExpandContainerVolumeMounts`: every `$(VAR)` must have a value), checked
/// as kubelet checks it (not absolute, no `..`). `None` when the mount has neither.
pub fn requested(
    mount: &k8s_openapi::api::core::v1::VolumeMount,
    env: &std::collections::HashMap<String, String>,
) -> Result<Option<PathBuf>> {
    let sub = match mount.sub_path_expr.as_deref().filter(|s| !s.is_empty()) {
        Some(expr) => {
            let mut missing: Vec<&str> = Vec::new();
            let mut rest = expr;
            while let Some(i) = rest.find("$(") {
                let Some(end) = rest[i + 2..].find(')') else { break };
                let name = &rest[i + 2..i + 2 + end];
                if env.get(name).is_none_or(|v| v.is_empty()) && !missing.contains(&name) {
                    missing.push(name);
                }
                rest = &rest[i + 2 + end + 1..];
            }
            if !missing.is_empty() {
                missing.sort();
                return Err(Error::Invalid(format!("missing value for {}", missing.join(", "))));
            }
            crate::env::expand(expr, env)
        }
        None => match mount.sub_path.as_deref().filter(|s| !s.is_empty()) {
            Some(s) => s.to_string(),
            None => return Ok(None),
        },
    };
    let path = Path::new(&sub);
    if path.is_absolute() {
        return Err(Error::Invalid(format!("error SubPath `{sub}` must not be an absolute path")));
    }
    if path.components().any(|c| c == Component::ParentDir) {
        return Err(Error::Invalid(format!("unable to provision SubPath `{sub}`: must not contain '..'")));
    }
    let rel: PathBuf = path.components().filter(|c| matches!(c, Component::Normal(_))).collect();
    Ok(Some(rel))
}

/// Where the subPath of mount `index` of `container` is bound: kubelet's layout.
pub fn target(dir: &PodDir, volume: &str, container: &str, index: usize) -> PathBuf {
    dir.0.join("volume-subpaths").join(volume).join(container).join(index.to_string())
}

fn open_beneath(root: &OwnedFd, rel: &Path) -> nix::Result<OwnedFd> {
    if rel.as_os_str().is_empty() {
        return sys::openat(root.as_fd(), Path::new("."), OFlag::O_PATH);
    }
    sys::openat2_beneath(root.as_fd(), rel, OFlag::O_PATH)
}

/// Opens `rel` beneath the volume at `volume`, creating the directories it lacks (kubelet's
/// `SafeMakeDir`): each is made with `mkdirat` in a parent opened beneath the volume, so a
/// symlink swapped in meanwhile is met by the next `openat2`, never followed out.
pub fn open(volume: &Path, rel: &Path) -> Result<OwnedFd> {
    let cwd =
        std::fs::File::open("/").map_err(|e| Error::Prepare { op: "open", path: "/".into(), source: io_errno(&e) })?;
    let root = sys::openat(cwd.as_fd(), volume, OFlag::O_PATH | OFlag::O_DIRECTORY)
        .map_err(|source| Error::Prepare { op: "open volume", path: volume.to_path_buf(), source })?;
    match open_beneath(&root, rel) {
        Err(Errno::ENOENT) => {}
        other => return other.map_err(|source| Error::Prepare { op: "open", path: rel.to_path_buf(), source }),
    }
    let mode = nix::sys::stat::fstat(root.as_raw_fd())
        .map(|s| Mode::from_bits_truncate(s.st_mode & 0o7777))
        .map_err(|source| Error::Prepare { op: "stat volume", path: volume.to_path_buf(), source })?;
    let create = |source| Error::Create { path: rel.display().to_string(), volume: volume.to_path_buf(), source };
    let mut prefix = PathBuf::new();
    let mut parent = open_beneath(&root, &prefix).map_err(create)?;
    for c in rel.components() {
        prefix.push(c);
        let fd = match open_beneath(&root, &prefix) {
            Ok(fd) => fd,
            Err(Errno::ENOENT) => {
                match nix::sys::stat::mkdirat(Some(parent.as_raw_fd()), c.as_os_str(), mode) {
                    Ok(()) | Err(Errno::EEXIST) => {}
                    Err(e) => return Err(create(e)),
                }
                let fd = open_beneath(&root, &prefix).map_err(create)?;
                // mkdirat honours the umask; the new directory gets the volume's mode exactly.
                let dir =
                    sys::openat(fd.as_fd(), Path::new("."), OFlag::O_RDONLY | OFlag::O_DIRECTORY).map_err(create)?;
                nix::sys::stat::fchmod(dir.as_raw_fd(), mode).map_err(create)?;
                fd
            }
            Err(e) => return Err(create(e)),
        };
        parent = fd;
    }
    Ok(parent)
}

/// Binds what `fd` opened at `target` (replacing an earlier bind there: a restarted container
/// gets the volume's current content at that path, resolved again).
pub fn bind(fd: &OwnedFd, target: &Path) -> Result<()> {
    let err = |op| move |source| Error::Prepare { op, path: target.to_path_buf(), source };
    if crate::volumes::is_mountpoint(target) {
        nix::mount::umount2(target, MntFlags::MNT_DETACH).map_err(err("unmount"))?;
    }
    let is_dir = nix::sys::stat::fstat(fd.as_fd().as_raw_fd())
        .map(|s| SFlag::from_bits_truncate(s.st_mode & SFlag::S_IFMT.bits()) == SFlag::S_IFDIR)
        .map_err(err("stat"))?;
    if let Some(parent) = target.parent() {
        std::fs::create_dir_all(parent).map_err(|e| Error::Prepare {
            op: "create",
            path: parent.to_path_buf(),
            source: io_errno(&e),
        })?;
    }
    let meta = std::fs::symlink_metadata(target);
    if meta.as_ref().is_ok_and(|m| m.is_dir() != is_dir) {
        let removed = if is_dir { std::fs::remove_file(target) } else { std::fs::remove_dir(target) };
        removed.map_err(|e| Error::Prepare { op: "replace", path: target.to_path_buf(), source: io_errno(&e) })?;
    }
    if std::fs::symlink_metadata(target).is_err() {
        let made = if is_dir {
            std::fs::create_dir(target)
        } else {
            std::fs::OpenOptions::new().write(true).create_new(true).open(target).map(drop)
        };
        made.map_err(|e| Error::Prepare { op: "create", path: target.to_path_buf(), source: io_errno(&e) })?;
    }
    let source = PathBuf::from(format!("/proc/thread-self/fd/{}", fd.as_raw_fd()));
    nix::mount::mount(Some(&source), target, None::<&str>, MsFlags::MS_BIND, None::<&str>).map_err(err("bind-mount"))
}

fn io_errno(e: &std::io::Error) -> nix::Error {
    e.raw_os_error().map(Errno::from_raw).unwrap_or(Errno::EIO)
}

/// Resolves `rel` beneath `volume` and binds it at its target; returns the target.
pub fn prepare(volume: &Path, rel: &Path, target: &Path) -> Result<PathBuf> {
    let fd = open(volume, rel)?;
    bind(&fd, target)?;
    Ok(target.to_path_buf())
}

/// Unmounts every subPath bind of the pod (deepest first), before its directory is removed.
pub fn cleanup(dir: &PodDir) -> Result<()> {
    let base = dir.0.join("volume-subpaths");
    for m in mounts_under(&base) {
        match nix::mount::umount2(&m, MntFlags::MNT_DETACH) {
            Ok(()) | Err(Errno::EINVAL) | Err(Errno::ENOENT) => {}
            Err(source) => return Err(Error::Prepare { op: "unmount", path: m, source }),
        }
    }
    Ok(())
}

/// The mount points at or under `base` in this mount namespace, deepest first.
pub fn mounts_under(base: &Path) -> Vec<PathBuf> {
    let info = std::fs::read_to_string("/proc/thread-self/mountinfo").unwrap_or_default();
    let mut found: Vec<PathBuf> = info
        .lines()
        .filter_map(|l| l.split(' ').nth(4))
        .map(unescape)
        .map(PathBuf::from)
        .filter(|p| p.starts_with(base))
        .collect();
    found.sort_by_key(|p| std::cmp::Reverse(p.components().count()));
    found.dedup();
    found
}

/// mountinfo escapes space, tab, newline and backslash as octal (`\040`).
fn unescape(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\' && i + 3 < b.len() && b[i + 1..i + 4].iter().all(|c| (b'0'..=b'7').contains(c)) {
            out.push((b[i + 1] - b'0') * 64 + (b[i + 2] - b'0') * 8 + (b[i + 3] - b'0'));
            i += 4;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::VolumeMount;
    use std::collections::HashMap;
    use std::os::unix::fs::PermissionsExt;

    fn mount(sub: &str, expr: &str) -> VolumeMount {
        VolumeMount {
            name: "v".into(),
            mount_path: "/m".into(),
            sub_path: Some(sub.into()).filter(|s: &String| !s.is_empty()),
            sub_path_expr: Some(expr.into()).filter(|s: &String| !s.is_empty()),
            ..Default::default()
        }
    }

    #[test]
    fn requested_paths_are_checked_and_expanded_as_kubelet_does() {
        let env = HashMap::from([("POD".to_string(), "web-0".to_string()), ("EMPTY".to_string(), String::new())]);
        assert_eq!(requested(&mount("", ""), &env).expect("none"), None);
        assert_eq!(requested(&mount("a/./b", ""), &env).expect("ok"), Some(PathBuf::from("a/b")));
        assert_eq!(requested(&mount("", "logs/$(POD)"), &env).expect("ok"), Some(PathBuf::from("logs/web-0")));
        let msg = |m: VolumeMount| requested(&m, &env).expect_err("refused").to_string();
        assert_eq!(msg(mount("/etc", "")), "error SubPath `/etc` must not be an absolute path");
        assert_eq!(msg(mount("a/../../etc", "")), "unable to provision SubPath `a/../../etc`: must not contain '..'");
        assert_eq!(msg(mount("", "$(NOPE)/$(EMPTY)")), "missing value for EMPTY, NOPE");
        assert_eq!(msg(mount("", "$(POD)/..")), "unable to provision SubPath `web-0/..`: must not contain '..'");
    }

    fn volume() -> tempfile::TempDir {
        let v = tempfile::tempdir().expect("tempdir");
        std::fs::set_permissions(v.path(), std::fs::Permissions::from_mode(0o777)).expect("chmod");
        v
    }

    fn opened_path(fd: &OwnedFd) -> PathBuf {
        std::fs::read_link(format!("/proc/self/fd/{}", fd.as_raw_fd())).expect("readlink")
    }

    #[test]
    fn symlinks_inside_the_volume_resolve_and_symlinks_out_of_it_are_refused() {
        let v = volume();
        std::fs::create_dir_all(v.path().join("data/conf")).expect("mkdir");
        std::os::unix::fs::symlink("data/conf", v.path().join("inside")).expect("symlink");
        std::os::unix::fs::symlink("/", v.path().join("root")).expect("symlink");
        std::os::unix::fs::symlink("../../../../../../..", v.path().join("up")).expect("symlink");
        std::os::unix::fs::symlink("/proc/self/root", v.path().join("magic")).expect("symlink");
        let fd = open(v.path(), Path::new("inside")).expect("inside");
        assert_eq!(opened_path(&fd), v.path().join("data/conf"));
        for escape in ["root", "root/etc", "up", "up/etc", "magic", "inside/../../root"] {
            let err = open(v.path(), Path::new(escape)).expect_err(escape);
            assert!(
                matches!(err, Error::Prepare { source: Errno::EXDEV, .. } | Error::Create { source: Errno::EXDEV, .. }),
                "{escape}: {err:?}"
            );
        }
    }

    #[test]
    fn missing_directories_are_made_beneath_the_volume_with_its_mode() {
        let v = volume();
        std::os::unix::fs::symlink("/tmp", v.path().join("out")).expect("symlink");
        let fd = open(v.path(), Path::new("a/b/c")).expect("created");
        assert_eq!(opened_path(&fd), v.path().join("a/b/c"));
        let mode = std::fs::metadata(v.path().join("a/b")).expect("stat").permissions().mode() & 0o7777;
        assert_eq!(mode, 0o777, "the volume's mode, whatever the umask");
        // A missing path behind a symlink out of the volume is neither made nor opened.
        let before: Vec<_> = std::fs::read_dir("/tmp").expect("ls").flatten().map(|e| e.file_name()).collect();
        let err = open(v.path(), Path::new("out/kaji-subpath-escape")).expect_err("escape");
        assert!(
            matches!(err, Error::Create { source: Errno::EXDEV, .. } | Error::Prepare { source: Errno::EXDEV, .. }),
            "{err:?}"
        );
        assert!(!Path::new("/tmp/kaji-subpath-escape").exists());
        let after: Vec<_> = std::fs::read_dir("/tmp").expect("ls").flatten().map(|e| e.file_name()).collect();
        assert!(
            after.iter().all(|n| before.contains(n) || n.to_string_lossy().starts_with(".tmp")),
            "nothing made in /tmp"
        );
    }

    /// Runs `f` on a thread in a mount namespace of its own (root), so its mounts leave no trace.
    fn in_private_mount_ns<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
        std::thread::spawn(move || {
            nix::sched::unshare(nix::sched::CloneFlags::CLONE_NEWNS).expect("unshare a mount namespace (root)");
            nix::mount::mount(None::<&str>, "/", None::<&str>, MsFlags::MS_REC | MsFlags::MS_PRIVATE, None::<&str>)
                .expect("make mounts private");
            f()
        })
        .join()
        .expect("thread")
    }

    #[test]
    fn the_bind_holds_what_was_opened_not_what_the_path_later_names() {
        in_private_mount_ns(|| {
            let v = volume();
            let pod = tempfile::tempdir().expect("tempdir");
            let dir = PodDir(pod.path().to_path_buf());
            std::fs::create_dir_all(v.path().join("real")).expect("mkdir");
            std::fs::write(v.path().join("real/file"), "volume's").expect("write");
            std::os::unix::fs::symlink("real", v.path().join("link")).expect("symlink");
            let t = target(&dir, "v", "app", 0);
            let fd = open(v.path(), Path::new("link")).expect("open");
            // The container swaps the link for one to the host's root before the bind.
            std::fs::remove_file(v.path().join("link")).expect("rm");
            std::os::unix::fs::symlink("/", v.path().join("link")).expect("symlink");
            bind(&fd, &t).expect("bind");
            assert_eq!(std::fs::read_to_string(t.join("file")).expect("read"), "volume's");
            assert!(!t.join("etc").exists(), "the host's root is not what was bound");
            // A file subPath binds onto a file; binding again replaces the earlier bind.
            let f = target(&dir, "v", "app", 1);
            prepare(v.path(), Path::new("real/file"), &f).expect("file");
            prepare(v.path(), Path::new("real/file"), &f).expect("again");
            assert_eq!(std::fs::read_to_string(&f).expect("read"), "volume's");
            assert_eq!(mounts_under(&pod.path().join("volume-subpaths")).len(), 2, "one bind per target");
            cleanup(&dir).expect("cleanup");
            assert!(mounts_under(pod.path()).is_empty(), "nothing left mounted");
        });
    }

    #[test]
    fn mountinfo_paths_are_unescaped() {
        assert_eq!(unescape(r"/a\134b"), "/a\\b");
        assert_eq!(unescape(r"/a\040b"), "/a b");
        assert_eq!(unescape("/plain"), "/plain");
    }
}
