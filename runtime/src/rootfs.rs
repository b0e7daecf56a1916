//! The container's filesystem view, built inside its new mount namespace: private propagation,
//! overlayfs or bind rootfs, spec mounts (every destination resolved inside the rootfs, see
//! `securejoin`), /dev nodes, pivot_root, masked and read-only paths. Because every mount lives
//! in the container's mount namespace, none can leak to the host. A spec without a mount
//! namespace (runc allows it) shares the host's: its mounts are then the host's, made as runc
//! makes them, and `delete` takes them down again.

use std::os::unix::fs::symlink;
use std::path::{Component, Path, PathBuf};

use nix::mount::{mount, umount2, MntFlags, MsFlags};
use nix::sys::stat::{makedev, mknod, Mode, SFlag};
use oci_spec::runtime::{LinuxDevice, LinuxDeviceType, Mount, Spec};

pub use crate::mountopts::Options;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("failed to mount {what} on {target}")]
    Mount {
        what: String,
        target: PathBuf,
        #[source]
        source: nix::Error,
    },
    #[error("failed to create {path}")]
    Create {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("failed to create device {path}")]
    Device {
        path: PathBuf,
        #[source]
        source: nix::Error,
    },
    #[error("failed to pivot_root into {path}")]
    Pivot {
        path: PathBuf,
        #[source]
        source: nix::Error,
    },
    #[error("mount destination {0} is not absolute or escapes the rootfs")]
    Destination(PathBuf),
    #[error("filesystem {fstype:?} must be mounted on ordinary directory, and {dest} is not one")]
    NotADirectory { fstype: String, dest: PathBuf },
    #[error("can't {what} {path}")]
    Harden {
        what: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("failed to set the recursive attributes of {target}")]
    Setattr {
        target: PathBuf,
        #[source]
        source: nix::Error,
    },
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Where the rootfs comes from.
pub enum Source<'a> {
    /// A directory, bind-mounted onto itself so it can be pivoted into.
    Dir(&'a Path),
    /// overlayfs: read-only lower dirs (top first) plus per-container upper/work, mounted at target.
    Overlay { lower: &'a [PathBuf], upper: &'a Path, work: &'a Path, target: &'a Path },
}

/// Pure: splits OCI mount options (see [`crate::mountopts`]).
pub fn parse_options(options: &[String]) -> Options {
    crate::mountopts::parse(options)
}

/// Pure: `dest` under `root`, refusing `..` components.
pub fn join_under(root: &Path, dest: &Path) -> Result<PathBuf> {
    if !dest.is_absolute() || dest.components().any(|c| c == Component::ParentDir) {
        return Err(Error::Destination(dest.to_path_buf()));
    }
    Ok(root.join(dest.strip_prefix("/").unwrap_or(dest)))
}

pub(crate) fn do_mount(
    src: Option<&Path>,
    target: &Path,
    fstype: Option<&str>,
    flags: MsFlags,
    data: Option<&str>,
) -> Result<()> {
    mount(src, target, fstype, flags, data).map_err(|source| Error::Mount {
        what: fstype.map(str::to_string).or_else(|| src.map(|s| s.display().to_string())).unwrap_or_default(),
        target: target.to_path_buf(),
        source,
    })
}

pub(crate) fn mkdir_all(path: &Path) -> Result<()> {
    std::fs::create_dir_all(path).map_err(|source| Error::Create { path: path.to_path_buf(), source })
}

/// `dest` (absolute, from the container's point of view) under `rootfs`, symlinks resolved
/// inside it.
pub fn resolve(rootfs: &Path, dest: &Path) -> Result<PathBuf> {
    join_under(rootfs, dest)?;
    crate::securejoin::join(rootfs, dest).map_err(|source| Error::Create { path: rootfs.join(dest), source })
}

/// Prepares the rootfs and returns the directory to pivot into. `own_namespace`: the
/// container has a mount namespace of its own (otherwise nothing about the host's mounts
/// changes here, and the rootfs is a plain directory to chroot into).
pub fn prepare(source: Source<'_>, propagation: MsFlags, own_namespace: bool) -> Result<PathBuf> {
    if !own_namespace {
        return match source {
            Source::Dir(dir) => Ok(dir.to_path_buf()),
            Source::Overlay { target, .. } => Err(Error::Destination(target.to_path_buf())),
        };
    }
    // Nothing we mount from here on may propagate back to the host.
    do_mount(None, Path::new("/"), None, MsFlags::MS_REC | propagation, None)?;
    match source {
        Source::Dir(dir) => {
            do_mount(Some(dir), dir, None, MsFlags::MS_BIND | MsFlags::MS_REC, None)?;
            Ok(dir.to_path_buf())
        }
        Source::Overlay { lower, upper, work, target } => {
            mount_overlay(lower, upper, work, target)?;
            Ok(target.to_path_buf())
        }
    }
}

/// overlayfs at `target`: read-only `lower` dirs (top first) under a writable `upper`.
pub fn mount_overlay(lower: &[PathBuf], upper: &Path, work: &Path, target: &Path) -> Result<()> {
    let lowerdir = lower.iter().map(|p| p.display().to_string()).collect::<Vec<_>>().join(":");
    let data = format!("lowerdir={lowerdir},upperdir={},workdir={}", upper.display(), work.display());
    do_mount(Some(Path::new("overlay")), target, Some("overlay"), MsFlags::empty(), Some(&data))
}

/// Mounts one spec mount under `rootfs`.
pub fn mount_one(rootfs: &Path, m: &Mount) -> Result<()> {
    let fstype = m.typ().as_deref();
    let opts = parse_options(m.options().as_deref().unwrap_or_default());
    if let Some(fs @ ("proc" | "sysfs")) = fstype {
        // Not through a symlink (or onto a file): the kernel's own files must land where the
        // container expects them, and a symlink could point them anywhere (runc's rule).
        let raw = join_under(rootfs, m.destination())?;
        if raw.symlink_metadata().is_ok_and(|md| !md.is_dir()) {
            return Err(Error::NotADirectory { fstype: fs.to_string(), dest: m.destination().clone() });
        }
    }
    let target = resolve(rootfs, m.destination())?;
    let is_bind = opts.flags.contains(MsFlags::MS_BIND) || fstype == Some("bind");
    let source = m.source().as_deref();
    if is_bind && source.is_some_and(|s| !s.is_dir()) {
        if let Some(parent) = target.parent() {
            mkdir_all(parent)?;
        }
        if !target.exists() {
            std::fs::File::create(&target).map_err(|source| Error::Create { path: target.clone(), source })?;
        }
    } else {
        mkdir_all(&target)?;
    }
    let data = (!opts.data.is_empty()).then(|| opts.data.join(","));
    if is_bind {
        let base = MsFlags::MS_BIND | (opts.flags & MsFlags::MS_REC);
        do_mount(source, &target, None, base, None)?;
        let rest = opts.flags & !(MsFlags::MS_BIND | MsFlags::MS_REC);
        if !rest.is_empty() {
            do_mount(None, &target, None, MsFlags::MS_BIND | MsFlags::MS_REMOUNT | rest, None)?;
        }
    } else if opts.tmpcopyup && fstype == Some("tmpfs") {
        tmpfs_copyup(&target, opts.flags, data.as_deref())?;
    } else {
        do_mount(source, &target, fstype, opts.flags, data.as_deref())?;
    }
    if !opts.propagation.is_empty() {
        do_mount(None, &target, None, opts.propagation, None)?;
    }
    if opts.rec_set != 0 || opts.rec_clr != 0 {
        crate::sys::mount_setattr(&target, true, opts.rec_set, opts.rec_clr)
            .map_err(|source| Error::Setattr { target: target.clone(), source })?;
    }
    Ok(())
}

/// A tmpfs at `target` that starts with what the directory held (`tmpcopyup`): mounted aside,
/// filled, then moved over it.
fn tmpfs_copyup(target: &Path, flags: MsFlags, data: Option<&str>) -> Result<()> {
    let aside = std::env::temp_dir().join(format!("kaji-copyup-{}", std::process::id()));
    mkdir_all(&aside)?;
    let result = (|| {
        do_mount(Some(Path::new("tmpfs")), &aside, Some("tmpfs"), flags, data)?;
        copy_tree(target, &aside).map_err(|source| Error::Create { path: aside.clone(), source })?;
        do_mount(Some(&aside), target, None, MsFlags::MS_MOVE, None)
    })();
    if result.is_err() {
        let _ = umount2(&aside, MntFlags::MNT_DETACH);
    }
    let _ = std::fs::remove_dir(&aside);
    result
}

/// Copies the tree under `from` into `to`: files, directories, symlinks and special files, with
/// their modes and owners.
fn copy_tree(from: &Path, to: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    for entry in std::fs::read_dir(from)? {
        let entry = entry?;
        let (src, dst) = (entry.path(), to.join(entry.file_name()));
        let md = std::fs::symlink_metadata(&src)?;
        let ft = md.file_type();
        if ft.is_symlink() {
            symlink(std::fs::read_link(&src)?, &dst)?;
        } else if ft.is_dir() {
            std::fs::create_dir(&dst)?;
            copy_tree(&src, &dst)?;
        } else if ft.is_file() {
            std::fs::copy(&src, &dst)?;
        } else {
            let kind = SFlag::from_bits_truncate(md.mode() & libc::S_IFMT);
            mknod(&dst, kind, Mode::from_bits_truncate(md.mode()), md.rdev()).map_err(std::io::Error::from)?;
        }
        std::os::unix::fs::lchown(&dst, Some(md.uid()), Some(md.gid()))?;
        if !ft.is_symlink() {
            std::fs::set_permissions(&dst, std::fs::Permissions::from_mode(md.mode() & 0o7777))?;
        }
    }
    Ok(())
}

/// The device nodes every container gets when /dev is a tmpfs (runc's default set).
const DEVICES: &[(&str, u64, u64)] =
    &[("null", 1, 3), ("zero", 1, 5), ("full", 1, 7), ("random", 1, 8), ("urandom", 1, 9), ("tty", 5, 0)];

/// Creates the spec's device nodes (`linux.devices`), then the defaults it did not name, and
/// the /dev symlinks. In a user namespace, where mknod is refused, each node is a bind mount of
/// the host's node at the same path, as runc makes them there.
pub fn populate_dev(rootfs: &Path, devices: &[LinuxDevice], in_userns: bool) -> Result<()> {
    for d in devices {
        let path = resolve(rootfs, d.path())?;
        if path.symlink_metadata().is_ok() {
            continue;
        }
        if let Some(parent) = path.parent() {
            mkdir_all(parent)?;
        }
        let kind = match d.typ() {
            LinuxDeviceType::B => SFlag::S_IFBLK,
            LinuxDeviceType::P => SFlag::S_IFIFO,
            _ => SFlag::S_IFCHR,
        };
        let mode = Mode::from_bits_truncate(d.file_mode().unwrap_or(0o666));
        let dev = makedev(d.major() as u64, d.minor() as u64);
        if in_userns {
            bind_device(d.path(), &path)?;
            continue;
        }
        let err = |source| Error::Device { path: path.clone(), source };
        mknod(&path, kind, mode, dev).map_err(err)?;
        nix::sys::stat::fchmodat(None, &path, mode, nix::sys::stat::FchmodatFlags::FollowSymlink).map_err(err)?;
        let (uid, gid) = (d.uid().map(nix::unistd::Uid::from_raw), d.gid().map(nix::unistd::Gid::from_raw));
        nix::unistd::chown(
            &path,
            uid.or(Some(nix::unistd::Uid::from_raw(0))),
            gid.or(Some(nix::unistd::Gid::from_raw(0))),
        )
        .map_err(err)?;
    }
    let dev = rootfs.join("dev");
    for (name, major, minor) in DEVICES {
        let path = dev.join(name);
        if path.exists() {
            continue;
        }
        if in_userns {
            bind_device(&Path::new("/dev").join(name), &path)?;
            continue;
        }
        mknod(&path, SFlag::S_IFCHR, Mode::from_bits_truncate(0o666), makedev(*major, *minor))
            .map_err(|source| Error::Device { path: path.clone(), source })?;
        // mknod honours the umask; devices must be usable by any uid.
        nix::sys::stat::fchmodat(
            None,
            &path,
            Mode::from_bits_truncate(0o666),
            nix::sys::stat::FchmodatFlags::FollowSymlink,
        )
        .map_err(|source| Error::Device { path: path.clone(), source })?;
    }
    for (link, to) in [
        ("fd", "/proc/self/fd"),
        ("stdin", "/proc/self/fd/0"),
        ("stdout", "/proc/self/fd/1"),
        ("stderr", "/proc/self/fd/2"),
        ("ptmx", "pts/ptmx"),
        ("core", "/proc/kcore"),
    ] {
        // runc links /dev/core only where the kernel has /proc/kcore.
        if link == "core" && !Path::new("/proc/kcore").exists() {
            continue;
        }
        let path = dev.join(link);
        if path.symlink_metadata().is_err() {
            symlink(to, &path).map_err(|source| Error::Create { path, source })?;
        }
    }
    Ok(())
}

/// The host's device node `host` bind-mounted at `path` (an empty file made for it).
fn bind_device(host: &Path, path: &Path) -> Result<()> {
    std::fs::File::create(path).map_err(|source| Error::Create { path: path.to_path_buf(), source })?;
    mount(Some(host), path, None::<&str>, MsFlags::MS_BIND, None::<&str>)
        .map_err(|source| Error::Device { path: path.to_path_buf(), source })
}

/// pivot_root into `rootfs` and detach the old root (pivot_root(".", ".") as runc does).
pub fn pivot(rootfs: &Path) -> Result<()> {
    let err = |source| Error::Pivot { path: rootfs.to_path_buf(), source };
    nix::unistd::chdir(rootfs).map_err(err)?;
    nix::unistd::pivot_root(".", ".").map_err(err)?;
    umount2(".", MntFlags::MNT_DETACH).map_err(err)?;
    nix::unistd::chdir("/").map_err(err)
}

/// Without pivot_root (`--no-pivot`, for a rootfs on a ramdisk, where pivot_root fails): move
/// the rootfs mount onto / and chroot into it, as runc's `msMoveRoot` does. The host's mounts
/// stay in the namespace, out of reach.
pub fn move_root(rootfs: &Path) -> Result<()> {
    let err = |source| Error::Pivot { path: rootfs.to_path_buf(), source };
    nix::unistd::chdir(rootfs).map_err(err)?;
    mount(Some(rootfs), "/", None::<&str>, MsFlags::MS_MOVE, None::<&str>).map_err(err)?;
    nix::unistd::chroot(".").map_err(err)?;
    nix::unistd::chdir("/").map_err(err)
}

/// Without a mount namespace of its own: chroot into the rootfs (runc's way; pivot_root would
/// move the host's root).
pub fn chroot(rootfs: &Path) -> Result<()> {
    let err = |source| Error::Pivot { path: rootfs.to_path_buf(), source };
    nix::unistd::chroot(rootfs).map_err(err)?;
    nix::unistd::chdir("/").map_err(err)
}

/// After pivot: hide masked paths, make read-only paths (and optionally /) read-only. A path
/// that does not exist is skipped, as runc skips it; any other failure (a symlink loop) is the
/// create's error.
pub fn harden(spec: &Spec, own_namespace: bool) -> Result<()> {
    let Some(linux) = spec.linux() else { return Ok(()) };
    fn io<'a>(what: &'static str, p: &'a Path) -> impl FnOnce(nix::Error) -> Error + 'a {
        move |e| Error::Harden { what, path: p.to_path_buf(), source: e.into() }
    }
    for path in linux.masked_paths().iter().flatten() {
        let p = Path::new(path);
        match p.metadata() {
            Ok(md) if md.is_dir() => {
                mount(Some("tmpfs"), p, Some("tmpfs"), MsFlags::MS_RDONLY, Some("size=0k")).map_err(io("mask", p))?
            }
            Ok(_) => {
                mount(Some("/dev/null"), p, None::<&str>, MsFlags::MS_BIND, None::<&str>).map_err(io("mask", p))?
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(source) => return Err(Error::Harden { what: "mask", path: p.to_path_buf(), source }),
        }
    }
    for path in linux.readonly_paths().iter().flatten() {
        let p = Path::new(path);
        match p.metadata() {
            Ok(_) => {
                mount(Some(p), p, None::<&str>, MsFlags::MS_BIND | MsFlags::MS_REC, None::<&str>)
                    .map_err(io("make read-only", p))?;
                let flags = MsFlags::MS_BIND
                    | MsFlags::MS_REMOUNT
                    | MsFlags::MS_RDONLY
                    | MsFlags::MS_NOSUID
                    | MsFlags::MS_NODEV
                    | MsFlags::MS_NOEXEC;
                mount(None::<&str>, p, None::<&str>, flags, None::<&str>).map_err(io("make read-only", p))?;
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(source) => return Err(Error::Harden { what: "make read-only", path: p.to_path_buf(), source }),
        }
    }
    // Without a namespace of its own, / is a directory of the host's, not a mount to remount.
    if own_namespace && spec.root().as_ref().and_then(|r| r.readonly()).unwrap_or(false) {
        do_mount(None, Path::new("/"), None, MsFlags::MS_BIND | MsFlags::MS_REMOUNT | MsFlags::MS_RDONLY, None)?;
    }
    Ok(())
}

/// Takes down what a container without a mount namespace mounted in the host's: every mount
/// strictly below its rootfs, deepest first (the rootfs itself may be its engine's mount).
pub fn unmount_below(rootfs: &Path) {
    let info = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    let mut below: Vec<PathBuf> = info
        .lines()
        .filter_map(|l| l.split(' ').nth(4))
        .map(|p| PathBuf::from(unescape(p)))
        .filter(|p| p != rootfs && p.starts_with(rootfs))
        .collect();
    below.sort_by_key(|p| std::cmp::Reverse(p.components().count()));
    for p in below {
        let _ = umount2(&p, MntFlags::MNT_DETACH);
    }
}

/// Pure: a mountinfo path with its octal escapes (`\040` for a space) undone.
fn unescape(p: &str) -> String {
    let b = p.as_bytes();
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

    #[test]
    fn mountinfo_escapes_are_undone() {
        assert_eq!(unescape("/a\\040b/c"), "/a b/c");
        assert_eq!(unescape("/plain"), "/plain");
        assert_eq!(unescape("/end\\04"), "/end\\04");
    }

    #[test]
    fn destinations_cannot_escape_the_rootfs() {
        assert_eq!(join_under(Path::new("/r"), Path::new("/proc")).ok(), Some(PathBuf::from("/r/proc")));
        assert!(join_under(Path::new("/r"), Path::new("/../etc")).is_err());
        assert!(join_under(Path::new("/r"), Path::new("proc")).is_err());
    }
}
