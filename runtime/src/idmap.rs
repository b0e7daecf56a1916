//! Idmapped mounts, made on the host before a container starts (what containerd does for
//! Kubernetes' `hostUsers: false`, and runc 1.2 for a mount's `uidMappings`/`gidMappings`).
//! Bind mounts with mappings become idmapped copies of their source under the state dir's
//! `idmap/`; an overlay rootfs of a container with a user namespace gets idmapped lower layers
//! and an upper dir owned by the container's root, and is mounted at the state dir's `rootfs`.
//! The spec is rewritten to use them, so both backends (runc 1.1 has no idmapped mounts) just
//! bind-mount what they are given. Everything is made in the host's mount namespace and taken
//! down by `delete` (or at once when the create fails).

use std::collections::HashMap;
use std::io::Read;
use std::os::fd::{AsFd, OwnedFd};
use std::path::{Path, PathBuf};

use nix::errno::Errno;
use nix::mount::MntFlags;
use nix::sched::CloneFlags;
use nix::sys::signal::{kill, Signal};
use nix::sys::wait::waitpid;
use oci_spec::runtime::{LinuxIdMapping, LinuxNamespaceType, Spec};

use crate::state::Dir;
use crate::sys::{self, Forked};

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("failed to {op} for an idmapped mount of {path}")]
    Sys {
        op: &'static str,
        path: PathBuf,
        #[source]
        source: Errno,
    },
    #[error("failed to {op} {path}")]
    Io {
        op: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("mount {0}: idmapped mounts need both uidMappings and gidMappings")]
    HalfMapped(PathBuf),
    #[error("mount {0}: idmapped mounts are supported for bind mounts only")]
    NotBind(PathBuf),
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

type Maps = (Vec<LinuxIdMapping>, Vec<LinuxIdMapping>);

/// Pure: the (uid, gid) mappings an overlay rootfs is idmapped with: the container's, when it
/// has a user namespace (new or joined) and its spec lists them.
pub fn rootfs_maps(spec: &Spec) -> Option<Maps> {
    let linux = spec.linux().as_ref()?;
    let userns = linux.namespaces().iter().flatten().any(|n| n.typ() == LinuxNamespaceType::User);
    let uid = linux.uid_mappings().clone().unwrap_or_default();
    let gid = linux.gid_mappings().clone().unwrap_or_default();
    (userns && !uid.is_empty() && !gid.is_empty() && crate::spec::lowerdirs(spec).is_some()).then_some((uid, gid))
}

/// Pure: whether [`prepare`] has anything to do for `spec`.
pub fn needed(spec: &Spec) -> bool {
    rootfs_maps(spec).is_some()
        || spec.mounts().iter().flatten().any(|m| m.uid_mappings().is_some() || m.gid_mappings().is_some())
}

/// The host id container id 0 maps to (the owner of an idmapped rootfs's upper dir).
pub fn root_of(maps: &[LinuxIdMapping]) -> Option<u32> {
    maps.iter().find(|m| m.container_id() == 0).map(|m| m.host_id())
}

/// What [`prepare`] made: the rewritten spec, and a guard that takes the mounts down on drop
/// unless kept.
pub struct Prepared {
    pub spec: Spec,
    /// The overlay rootfs mount, if one was made.
    pub rootfs_mount: Option<PathBuf>,
    idmap_dir: PathBuf,
    keep: bool,
}

impl Prepared {
    /// Leaves the mounts for `delete` to take down.
    pub fn keep(mut self) -> Option<PathBuf> {
        self.keep = true;
        self.rootfs_mount.clone()
    }
}

impl Drop for Prepared {
    fn drop(&mut self) {
        if !self.keep {
            take_down(&self.idmap_dir, self.rootfs_mount.as_deref());
        }
    }
}

/// Unmounts what [`prepare`] made for a container: its idmapped mounts under `idmap_dir` and
/// its rootfs mount.
pub fn take_down(idmap_dir: &Path, rootfs_mount: Option<&Path>) {
    if let Some(rootfs) = rootfs_mount {
        crate::rootfs::unmount_below(rootfs);
        let _ = nix::mount::umount2(rootfs, MntFlags::MNT_DETACH);
    }
    if idmap_dir.exists() {
        crate::rootfs::unmount_below(idmap_dir);
    }
}

/// The state dir's `idmap/` directory.
pub fn idmap_dir(dir: &Dir) -> PathBuf {
    dir.path.join("idmap")
}

/// Makes the idmapped mounts `spec` asks for and returns the spec that uses them instead.
/// Call only when [`needed`], from a single-threaded process (a user namespace is made by a
/// short-lived child per distinct mapping).
pub fn prepare(spec: &Spec, bundle: &Path, dir: &Dir) -> Result<Prepared> {
    let mut out = Prepared { spec: spec.clone(), rootfs_mount: None, idmap_dir: idmap_dir(dir), keep: false };
    // Traversable by the container's root, which is nobody on the host.
    let traversable = |p: &Path| -> Result<()> {
        std::fs::create_dir_all(p).map_err(|source| Error::Io { op: "create", path: p.to_path_buf(), source })?;
        set_mode(p, 0o711)
    };
    traversable(&out.idmap_dir)?;
    set_mode(&dir.path, 0o711)?;
    let mut namespaces: HashMap<String, OwnedFd> = HashMap::new();
    let mut userns = |maps: &Maps, what: &Path| -> Result<OwnedFd> {
        let key = format!("{:?}", maps);
        if let Some(fd) = namespaces.get(&key) {
            return fd.try_clone().map_err(|source| Error::Io { op: "dup", path: what.to_path_buf(), source });
        }
        let fd = user_namespace(maps).map_err(|source| Error::Sys {
            op: "make a user namespace",
            path: what.to_path_buf(),
            source,
        })?;
        let copy = fd.try_clone().map_err(|source| Error::Io { op: "dup", path: what.to_path_buf(), source })?;
        namespaces.insert(key, fd);
        Ok(copy)
    };

    if let Some(maps) = rootfs_maps(spec) {
        let lower = crate::spec::lowerdirs(spec).unwrap_or_default();
        let layers = out.idmap_dir.join("layers");
        traversable(&layers)?;
        let mut attached = Vec::new();
        let result = (|| -> Result<()> {
            for (i, l) in lower.iter().enumerate() {
                let ns = userns(&maps, l)?;
                let target = layers.join(i.to_string());
                traversable(&target)?;
                idmapped_copy(l, &target, ns, false)?;
                attached.push(target);
            }
            let (upper, work, merged) = (dir.upper(), dir.work(), dir.rootfs());
            for d in [&upper, &work, &merged] {
                traversable(d)?;
            }
            let (uid, gid) = (root_of(&maps.0).unwrap_or(0), root_of(&maps.1).unwrap_or(0));
            for d in [&upper, &work] {
                std::os::unix::fs::chown(d, Some(uid), Some(gid)).map_err(|source| Error::Io {
                    op: "chown",
                    path: d.clone(),
                    source,
                })?;
            }
            crate::rootfs::mount_overlay(&attached, &upper, &work, &merged).map_err(|e| Error::Io {
                op: "mount the overlay at",
                path: merged.clone(),
                source: std::io::Error::other(crate::hooks::chain(&e)),
            })?;
            out.rootfs_mount = Some(merged.clone());
            Ok(())
        })();
        // The overlay holds private copies of its layers: the attached ones can go.
        for a in &attached {
            let _ = nix::mount::umount2(a, MntFlags::MNT_DETACH);
        }
        result?;
        let mut root = out.spec.root().clone().unwrap_or_default();
        root.set_path(dir.rootfs());
        out.spec.set_root(Some(root));
        if let Some(a) = out.spec.annotations_mut() {
            a.remove(crate::spec::ANNOTATION_LOWERDIRS);
        }
    }

    let idmap_dir = out.idmap_dir.clone();
    if let Some(mounts) = out.spec.mounts_mut() {
        for (i, m) in mounts.iter_mut().enumerate() {
            let (uid, gid) = (m.uid_mappings().clone(), m.gid_mappings().clone());
            if uid.is_none() && gid.is_none() {
                continue;
            }
            let (Some(uid), Some(gid)) = (uid, gid) else {
                return Err(Error::HalfMapped(m.destination().clone()));
            };
            let opts = m.options().clone().unwrap_or_default();
            let rbind = opts.iter().any(|o| o == "rbind");
            if !(m.typ().as_deref() == Some("bind") || rbind || opts.iter().any(|o| o == "bind")) {
                return Err(Error::NotBind(m.destination().clone()));
            }
            let source = m.source().clone().unwrap_or_default();
            let source = if source.is_relative() { bundle.join(source) } else { source };
            let target = idmap_dir.join(i.to_string());
            match source.is_dir() {
                true => traversable(&target)?,
                false => {
                    std::fs::File::create(&target).map_err(|source| Error::Io {
                        op: "create",
                        path: target.clone(),
                        source,
                    })?;
                }
            }
            let ns = userns(&(uid, gid), &source)?;
            idmapped_copy(&source, &target, ns, rbind)?;
            m.set_source(Some(target));
            m.set_uid_mappings(None);
            m.set_gid_mappings(None);
        }
    }
    Ok(out)
}

fn set_mode(p: &Path, mode: u32) -> Result<()> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode)).map_err(|source| Error::Io {
        op: "set the mode of",
        path: p.to_path_buf(),
        source,
    })
}

/// An idmapped copy of the mount tree at `source`, attached at `target`.
fn idmapped_copy(source: &Path, target: &Path, userns: OwnedFd, recursive: bool) -> Result<()> {
    let err = |op| move |e| Error::Sys { op, path: source.to_path_buf(), source: e };
    let tree = sys::open_tree_clone(source, recursive).map_err(err("clone the mount"))?;
    sys::idmap_tree(tree.as_fd(), userns.as_fd(), recursive).map_err(err("idmap the mount"))?;
    sys::attach_tree(tree.as_fd(), target).map_err(err("attach the mount"))
}

/// A user namespace with `maps`, held by its nsfs fd: made by a child that waits until the
/// maps are written and the namespace opened, then exits.
fn user_namespace(maps: &Maps) -> Result<OwnedFd, Errno> {
    let (r, w) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC)?;
    match sys::clone_process(CloneFlags::CLONE_NEWUSER)? {
        Forked::Child => {
            drop(w);
            let mut b = [0u8; 1];
            let _ = std::fs::File::from(r).read(&mut b);
            // Nothing of the parent's (copied) state is flushed or dropped on the way out.
            sys::exit_now(0);
        }
        Forked::Parent(pid) => {
            drop(r);
            let text = |maps: &[LinuxIdMapping]| {
                maps.iter().map(|m| format!("{} {} {}\n", m.container_id(), m.host_id(), m.size())).collect::<String>()
            };
            let result = (|| {
                std::fs::write(format!("/proc/{pid}/gid_map"), text(&maps.1)).map_err(io_errno)?;
                std::fs::write(format!("/proc/{pid}/uid_map"), text(&maps.0)).map_err(io_errno)?;
                let f = std::fs::File::open(format!("/proc/{pid}/ns/user")).map_err(io_errno)?;
                Ok(OwnedFd::from(f))
            })();
            drop(w);
            if result.is_err() {
                let _ = kill(pid, Signal::SIGKILL);
            }
            let _ = waitpid(pid, None);
            result
        }
    }
}

fn io_errno(e: std::io::Error) -> Errno {
    Errno::from_raw(e.raw_os_error().unwrap_or(libc::EIO))
}

#[cfg(test)]
mod tests {
    use oci_spec::runtime::{LinuxBuilder, LinuxIdMappingBuilder, LinuxNamespaceBuilder, SpecBuilder};

    use super::*;

    fn map(c: u32, h: u32, n: u32) -> LinuxIdMapping {
        LinuxIdMappingBuilder::default().container_id(c).host_id(h).size(n).build().expect("valid mapping")
    }

    fn spec(userns: bool, lower: bool) -> Spec {
        let mut ns = vec![LinuxNamespaceBuilder::default().typ(LinuxNamespaceType::Mount).build().expect("ns")];
        if userns {
            ns.push(
                LinuxNamespaceBuilder::default()
                    .typ(LinuxNamespaceType::User)
                    .path("/run/pod/user")
                    .build()
                    .expect("ns"),
            );
        }
        let linux = LinuxBuilder::default()
            .namespaces(ns)
            .uid_mappings(vec![map(0, 65536, 65536)])
            .gid_mappings(vec![map(0, 65536, 65536)])
            .build()
            .expect("linux");
        let mut annotations = HashMap::new();
        if lower {
            annotations.insert(crate::spec::ANNOTATION_LOWERDIRS.to_string(), "/l1:/l2".to_string());
        }
        SpecBuilder::default().linux(linux).annotations(annotations).build().expect("spec")
    }

    #[test]
    fn an_overlay_rootfs_is_idmapped_only_in_a_user_namespace() {
        assert_eq!(rootfs_maps(&spec(true, true)).map(|m| root_of(&m.0)), Some(Some(65536)));
        assert!(rootfs_maps(&spec(false, true)).is_none());
        assert!(rootfs_maps(&spec(true, false)).is_none());
        assert!(!needed(&spec(false, true)));
    }

    #[test]
    fn the_upper_dir_owner_is_the_host_id_of_container_root() {
        assert_eq!(root_of(&[map(1, 10, 5), map(0, 200000, 1)]), Some(200000));
        assert_eq!(root_of(&[map(1, 10, 5)]), None);
    }
}
