//! The container's filesystem view, built inside its new mount namespace: private propagation,
//! overlayfs or bind rootfs, spec mounts, /dev nodes, pivot_root, masked and read-only paths.
//! Because every mount lives in the container's mount namespace, none can leak to the host.

use std::os::unix::fs::symlink;
use std::path::{Component, Path, PathBuf};

use nix::mount::{mount, umount2, MntFlags, MsFlags};
use nix::sys::stat::{makedev, mknod, Mode, SFlag};
use oci_spec::runtime::{Mount, Spec};

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
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Where the rootfs comes from.
pub enum Source<'a> {
    /// A directory, bind-mounted onto itself so it can be pivoted into.
    Dir(&'a Path),
    /// overlayfs: read-only lower dirs (top first) plus per-container upper/work, mounted at target.
    Overlay { lower: &'a [PathBuf], upper: &'a Path, work: &'a Path, target: &'a Path },
}

/// Parsed mount options: flags to set, propagation flags, filesystem data.
#[derive(Debug, PartialEq)]
pub struct Options {
    pub flags: MsFlags,
    pub propagation: MsFlags,
    pub data: Vec<String>,
}

/// Pure: splits OCI mount options into mount(2) flags and data.
pub fn parse_options(options: &[String]) -> Options {
    let mut o = Options { flags: MsFlags::empty(), propagation: MsFlags::empty(), data: Vec::new() };
    for opt in options {
        let (set, clear) = match opt.as_str() {
            "ro" => (MsFlags::MS_RDONLY, MsFlags::empty()),
            "rw" => (MsFlags::empty(), MsFlags::MS_RDONLY),
            "nosuid" => (MsFlags::MS_NOSUID, MsFlags::empty()),
            "suid" => (MsFlags::empty(), MsFlags::MS_NOSUID),
            "nodev" => (MsFlags::MS_NODEV, MsFlags::empty()),
            "dev" => (MsFlags::empty(), MsFlags::MS_NODEV),
            "noexec" => (MsFlags::MS_NOEXEC, MsFlags::empty()),
            "exec" => (MsFlags::empty(), MsFlags::MS_NOEXEC),
            "relatime" => (MsFlags::MS_RELATIME, MsFlags::empty()),
            "noatime" => (MsFlags::MS_NOATIME, MsFlags::empty()),
            "strictatime" => (MsFlags::MS_STRICTATIME, MsFlags::empty()),
            "sync" => (MsFlags::MS_SYNCHRONOUS, MsFlags::empty()),
            "bind" => (MsFlags::MS_BIND, MsFlags::empty()),
            "rbind" => (MsFlags::MS_BIND | MsFlags::MS_REC, MsFlags::empty()),
            "private" | "rprivate" | "slave" | "rslave" | "shared" | "rshared" => {
                let mut p = match opt.trim_start_matches('r') {
                    "private" => MsFlags::MS_PRIVATE,
                    "slave" => MsFlags::MS_SLAVE,
                    _ => MsFlags::MS_SHARED,
                };
                if opt.starts_with('r') {
                    p |= MsFlags::MS_REC;
                }
                o.propagation |= p;
                continue;
            }
            other => {
                o.data.push(other.to_string());
                continue;
            }
        };
        o.flags |= set;
        o.flags &= !clear;
    }
    o
}

/// Pure: `dest` under `root`, refusing `..` components.
pub fn join_under(root: &Path, dest: &Path) -> Result<PathBuf> {
    if !dest.is_absolute() || dest.components().any(|c| c == Component::ParentDir) {
        return Err(Error::Destination(dest.to_path_buf()));
    }
    Ok(root.join(dest.strip_prefix("/").unwrap_or(dest)))
}

fn do_mount(src: Option<&Path>, target: &Path, fstype: Option<&str>, flags: MsFlags, data: Option<&str>) -> Result<()> {
    mount(src, target, fstype, flags, data).map_err(|source| Error::Mount {
        what: fstype.map(str::to_string).or_else(|| src.map(|s| s.display().to_string())).unwrap_or_default(),
        target: target.to_path_buf(),
        source,
    })
}

fn mkdir_all(path: &Path) -> Result<()> {
    std::fs::create_dir_all(path).map_err(|source| Error::Create { path: path.to_path_buf(), source })
}

/// Prepares the rootfs and returns the directory to pivot into.
pub fn prepare(source: Source<'_>, propagation: MsFlags) -> Result<PathBuf> {
    // Nothing we mount from here on may propagate back to the host.
    do_mount(None, Path::new("/"), None, MsFlags::MS_REC | propagation, None)?;
    match source {
        Source::Dir(dir) => {
            do_mount(Some(dir), dir, None, MsFlags::MS_BIND | MsFlags::MS_REC, None)?;
            Ok(dir.to_path_buf())
        }
        Source::Overlay { lower, upper, work, target } => {
            let lowerdir = lower.iter().map(|p| p.display().to_string()).collect::<Vec<_>>().join(":");
            let data = format!("lowerdir={lowerdir},upperdir={},workdir={}", upper.display(), work.display());
            do_mount(Some(Path::new("overlay")), target, Some("overlay"), MsFlags::empty(), Some(&data))?;
            Ok(target.to_path_buf())
        }
    }
}

/// Mounts one spec mount under `rootfs`.
pub fn mount_one(rootfs: &Path, m: &Mount) -> Result<()> {
    let target = join_under(rootfs, m.destination())?;
    let opts = parse_options(m.options().as_deref().unwrap_or_default());
    let fstype = m.typ().as_deref();
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
    } else {
        do_mount(source, &target, fstype, opts.flags, data.as_deref())?;
    }
    if !opts.propagation.is_empty() {
        do_mount(None, &target, None, opts.propagation, None)?;
    }
    Ok(())
}

/// The device nodes every container gets when /dev is a tmpfs (runc's default set).
const DEVICES: &[(&str, u64, u64)] =
    &[("null", 1, 3), ("zero", 1, 5), ("full", 1, 7), ("random", 1, 8), ("urandom", 1, 9), ("tty", 5, 0)];

/// Creates default device nodes and the /dev symlinks.
pub fn populate_dev(rootfs: &Path) -> Result<()> {
    let dev = rootfs.join("dev");
    for (name, major, minor) in DEVICES {
        let path = dev.join(name);
        if path.exists() {
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

/// pivot_root into `rootfs` and detach the old root (pivot_root(".", ".") as runc does).
pub fn pivot(rootfs: &Path) -> Result<()> {
    let err = |source| Error::Pivot { path: rootfs.to_path_buf(), source };
    nix::unistd::chdir(rootfs).map_err(err)?;
    nix::unistd::pivot_root(".", ".").map_err(err)?;
    umount2(".", MntFlags::MNT_DETACH).map_err(err)?;
    nix::unistd::chdir("/").map_err(err)
}

/// After pivot: hide masked paths, make read-only paths (and optionally /) read-only.
pub fn harden(spec: &Spec) -> Result<()> {
    let Some(linux) = spec.linux() else { return Ok(()) };
    for path in linux.masked_paths().iter().flatten() {
        let p = Path::new(path);
        match p.metadata() {
            Ok(md) if md.is_dir() => {
                do_mount(Some(Path::new("tmpfs")), p, Some("tmpfs"), MsFlags::MS_RDONLY, Some("size=0k"))?
            }
            Ok(_) => do_mount(Some(Path::new("/dev/null")), p, None, MsFlags::MS_BIND, None)?,
            Err(_) => {}
        }
    }
    for path in linux.readonly_paths().iter().flatten() {
        let p = Path::new(path);
        if p.exists() {
            do_mount(Some(p), p, None, MsFlags::MS_BIND | MsFlags::MS_REC, None)?;
            let flags = MsFlags::MS_BIND
                | MsFlags::MS_REMOUNT
                | MsFlags::MS_RDONLY
                | MsFlags::MS_NOSUID
                | MsFlags::MS_NODEV
                | MsFlags::MS_NOEXEC;
            do_mount(None, p, None, flags, None)?;
        }
    }
    if spec.root().as_ref().and_then(|r| r.readonly()).unwrap_or(false) {
        do_mount(None, Path::new("/"), None, MsFlags::MS_BIND | MsFlags::MS_REMOUNT | MsFlags::MS_RDONLY, None)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn strings(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn splits_flags_propagation_and_data() {
        let o = parse_options(&strings(&["nosuid", "noexec", "ro", "mode=755", "size=65536k", "rslave"]));
        assert_eq!(o.flags, MsFlags::MS_NOSUID | MsFlags::MS_NOEXEC | MsFlags::MS_RDONLY);
        assert_eq!(o.propagation, MsFlags::MS_SLAVE | MsFlags::MS_REC);
        assert_eq!(o.data, strings(&["mode=755", "size=65536k"]));
    }

    #[test]
    fn later_options_override_earlier_ones() {
        assert_eq!(parse_options(&strings(&["ro", "rw"])).flags, MsFlags::empty());
        assert_eq!(parse_options(&strings(&["rbind"])).flags, MsFlags::MS_BIND | MsFlags::MS_REC);
    }

    #[test]
    fn destinations_cannot_escape_the_rootfs() {
        assert_eq!(join_under(Path::new("/r"), Path::new("/proc")).ok(), Some(PathBuf::from("/r/proc")));
        assert!(join_under(Path::new("/r"), Path::new("/../etc")).is_err());
        assert!(join_under(Path::new("/r"), Path::new("proc")).is_err());
    }
}
