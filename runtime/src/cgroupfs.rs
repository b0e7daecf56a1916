//! The OCI `cgroup` mount (what a container sees at /sys/fs/cgroup), as runc makes it. On a
//! cgroup v2 host, a `cgroup2` mount: with a cgroup namespace it shows the container's own
//! subtree. On a v1 (or hybrid) host the kernel has no such single mount: a tmpfs, and in it one
//! directory per v1 hierarchy — a fresh `cgroup` mount of the hierarchy inside a cgroup
//! namespace, a bind of the container's own cgroup in it otherwise — with symlinks for
//! co-mounted controllers (`cpu` → `cpu,cpuacct`); the v2 part of a hybrid host is left out, as
//! runc leaves it out.

use std::path::{Path, PathBuf};

use nix::mount::MsFlags;

use crate::rootfs::{self, Error, Result};

/// One step of building a v1 cgroup mount, relative to the container's rootfs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    /// The tmpfs that holds the hierarchies (runc's: nosuid, nodev, noexec, mode=755).
    Tmpfs { dest: PathBuf },
    /// A read-only-as-asked bind of the container's cgroup in one hierarchy (host path).
    Bind { source: PathBuf, dest: PathBuf },
    /// A fresh mount of one hierarchy (`data`: its controllers, e.g. `cpu,cpuacct` or
    /// `name=systemd`), rooted at the container's cgroup by its cgroup namespace.
    Fresh { source: String, data: String, dest: PathBuf },
    /// `link` → `target` (a co-mounted controller's name for its hierarchy's directory).
    Symlink { target: String, link: PathBuf },
}

/// Pure: the steps of the v1 emulation of a `cgroup` mount at `dest`, from the host's mountinfo
/// and the container init's `/proc/self/cgroup` (read once it is in its cgroups).
pub fn plan_v1(mountinfo: &str, self_cgroup: &str, dest: &Path, cgroupns: bool) -> Vec<Step> {
    let mut steps = vec![Step::Tmpfs { dest: dest.to_path_buf() }];
    let mut links = Vec::new();
    // Each line of /proc/self/cgroup: id, controllers (or name=), path.
    let paths: Vec<(Vec<&str>, &str)> = self_cgroup
        .lines()
        .filter_map(|l| {
            let mut parts = l.splitn(3, ':');
            let (_, names, path) = (parts.next()?, parts.next()?, parts.next()?);
            (!names.is_empty()).then(|| (names.split(',').collect(), path))
        })
        .collect();
    for h in crate::cgroups::parse_v1_hierarchies(mountinfo) {
        let Some((names, path)) =
            paths.iter().find(|(names, _)| names.iter().all(|n| h.controllers.iter().any(|c| c == n)))
        else {
            continue;
        };
        let base = h.mount_point.file_name().map(|b| b.to_string_lossy().into_owned()).unwrap_or_default();
        let at = dest.join(&base);
        if cgroupns {
            let source = if names.iter().any(|w| w.starts_with("name=")) { "systemd" } else { "cgroup" };
            steps.push(Step::Fresh { source: source.into(), data: names.join(","), dest: at });
        } else {
            let rel = Path::new(path).strip_prefix(&h.root).unwrap_or(Path::new(""));
            let rel = rel.strip_prefix("/").unwrap_or(rel);
            steps.push(Step::Bind { source: h.mount_point.join(rel), dest: at });
        }
        if base.contains(',') {
            for c in base.split(',') {
                links.push(Step::Symlink { target: base.clone(), link: dest.join(c) });
            }
        }
    }
    steps.extend(links);
    steps
}

/// Mounts the OCI `cgroup` mount at `dest` (absolute, inside `rootfs`), with the mount's own
/// flags (`ro`, `nosuid`...). `own_v2`: the container's cgroup on a v2 host, bound instead
/// when the kernel refuses a cgroup2 mount (a user namespace without a cgroup namespace).
pub fn mount(rootfs: &Path, dest: &Path, flags: MsFlags, cgroupns: bool, own_v2: Option<&Path>) -> Result<()> {
    let target = rootfs::join_under(rootfs, dest)?;
    rootfs::mkdir_all(&target)?;
    if crate::cgroups::is_unified() {
        return match rootfs::do_mount(Some(Path::new("cgroup")), &target, Some("cgroup2"), flags, None) {
            Err(Error::Mount { source: nix::Error::EPERM | nix::Error::EBUSY, .. }) => {
                let host = Path::new("/sys/fs/cgroup");
                let source = match (cgroupns, own_v2) {
                    (true, Some(p)) => host.join(p.strip_prefix("/").unwrap_or(p)),
                    _ => host.to_path_buf(),
                };
                bind(&source, &target, flags)
            }
            other => other,
        };
    }
    let read = |p: &str| std::fs::read_to_string(p).map_err(|source| Error::Create { path: p.into(), source });
    let steps = plan_v1(&read("/proc/self/mountinfo")?, &read("/proc/self/cgroup")?, dest, cgroupns);
    let fs_flags = MsFlags::MS_NOSUID | MsFlags::MS_NODEV | MsFlags::MS_NOEXEC;
    for step in steps {
        match step {
            Step::Tmpfs { dest } => {
                let target = rootfs::join_under(rootfs, &dest)?;
                rootfs::do_mount(Some(Path::new("tmpfs")), &target, Some("tmpfs"), fs_flags, Some("mode=755"))?;
            }
            Step::Bind { source, dest } => {
                let target = rootfs::join_under(rootfs, &dest)?;
                rootfs::mkdir_all(&target)?;
                bind(&source, &target, flags)?;
            }
            Step::Fresh { source, data, dest } => {
                let target = rootfs::join_under(rootfs, &dest)?;
                rootfs::mkdir_all(&target)?;
                let f = fs_flags | (flags & MsFlags::MS_RDONLY);
                rootfs::do_mount(Some(Path::new(&source)), &target, Some("cgroup"), f, Some(&data))?;
            }
            Step::Symlink { target, link } => {
                let at = rootfs::join_under(rootfs, &link)?;
                match std::os::unix::fs::symlink(&target, &at) {
                    Err(e) if e.kind() != std::io::ErrorKind::AlreadyExists => {
                        return Err(Error::Create { path: at, source: e });
                    }
                    _ => {}
                }
            }
        }
    }
    Ok(())
}

/// A recursive bind of `source` at `target`, then the mount's own flags (a bind takes them only
/// on a remount).
fn bind(source: &Path, target: &Path, flags: MsFlags) -> Result<()> {
    rootfs::do_mount(Some(source), target, None, MsFlags::MS_BIND | MsFlags::MS_REC, None)?;
    let rest = flags & !(MsFlags::MS_BIND | MsFlags::MS_REC | MsFlags::MS_REMOUNT);
    if rest.is_empty() {
        return Ok(());
    }
    rootfs::do_mount(None, target, None, MsFlags::MS_BIND | MsFlags::MS_REMOUNT | rest, None)
}

#[cfg(test)]
mod tests {
    use super::*;

    const MOUNTINFO: &str = "31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755\n\
        32 31 0:29 / /sys/fs/cgroup/cpu,cpuacct rw,relatime - cgroup cgroup rw,cpu,cpuacct\n\
        35 31 0:32 /docker/abc /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory\n\
        40 31 0:37 / /sys/fs/cgroup/systemd rw,relatime - cgroup cgroup rw,xattr,name=systemd\n\
        41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw\n\
        42 31 0:39 / /sys/fs/cgroup/rdma rw,relatime - cgroup cgroup rw,rdma\n";
    const SELF: &str = "6:rdma:/\n5:name=systemd:/user.slice\n4:memory:/docker/abc/c1\n2:cpu,cpuacct:/c1\n0::/c1\n";

    #[test]
    fn v1_binds_the_containers_own_cgroup_of_each_hierarchy() {
        let steps = plan_v1(MOUNTINFO, SELF, Path::new("/sys/fs/cgroup"), false);
        let d = |p: &str| PathBuf::from("/sys/fs/cgroup").join(p);
        assert_eq!(
            steps,
            vec![
                Step::Tmpfs { dest: d("") },
                Step::Bind { source: PathBuf::from("/sys/fs/cgroup/cpu,cpuacct/c1"), dest: d("cpu,cpuacct") },
                // The memory hierarchy is mounted from /docker/abc: the path is relative to it.
                Step::Bind { source: PathBuf::from("/sys/fs/cgroup/memory/c1"), dest: d("memory") },
                Step::Bind { source: PathBuf::from("/sys/fs/cgroup/systemd/user.slice"), dest: d("systemd") },
                // A controller no container is put in (it stays in the root): shown all the same.
                Step::Bind { source: PathBuf::from("/sys/fs/cgroup/rdma"), dest: d("rdma") },
                Step::Symlink { target: "cpu,cpuacct".into(), link: d("cpu") },
                Step::Symlink { target: "cpu,cpuacct".into(), link: d("cpuacct") },
            ]
        );
    }

    #[test]
    fn in_a_cgroup_namespace_each_hierarchy_is_mounted_afresh() {
        let steps = plan_v1(MOUNTINFO, SELF, Path::new("/sys/fs/cgroup"), true);
        assert!(steps.contains(&Step::Fresh {
            source: "systemd".into(),
            data: "name=systemd".into(),
            dest: PathBuf::from("/sys/fs/cgroup/systemd")
        }));
        assert!(steps.contains(&Step::Fresh {
            source: "cgroup".into(),
            data: "cpu,cpuacct".into(),
            dest: PathBuf::from("/sys/fs/cgroup/cpu,cpuacct")
        }));
        assert!(!steps.iter().any(|s| matches!(s, Step::Bind { .. })));
    }
}
