//! Linux namespaces: which ones to create with clone(2), which to join by path with setns(2).

use std::path::PathBuf;

use nix::sched::CloneFlags;
use oci_spec::runtime::{LinuxNamespace, LinuxNamespaceType};

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("namespace type {0} is not supported")]
    Unsupported(String),
    #[error("failed to open namespace file {path}")]
    Open {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("failed to join {kind} namespace {path}")]
    Join {
        kind: String,
        path: PathBuf,
        #[source]
        source: nix::Error,
    },
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// The split of a spec's namespace list: flags for clone(2), and paths to setns(2) into.
#[derive(Debug, PartialEq)]
pub struct Plan {
    pub clone_flags: CloneFlags,
    /// Joined in the shim before clone (pid: it only applies to children; with a new user
    /// namespace, every one but the mount namespace).
    pub join_before_clone: Vec<(CloneFlags, PathBuf)>,
    /// Joined by the container init itself (net, ipc, uts, mount, cgroup), a user namespace
    /// first: it owns the others, and joining it gives the capabilities to join them.
    pub join_in_child: Vec<(CloneFlags, PathBuf)>,
}

fn flag(typ: LinuxNamespaceType) -> Result<CloneFlags> {
    Ok(match typ {
        LinuxNamespaceType::Mount => CloneFlags::CLONE_NEWNS,
        LinuxNamespaceType::Pid => CloneFlags::CLONE_NEWPID,
        LinuxNamespaceType::Uts => CloneFlags::CLONE_NEWUTS,
        LinuxNamespaceType::Ipc => CloneFlags::CLONE_NEWIPC,
        LinuxNamespaceType::Network => CloneFlags::CLONE_NEWNET,
        LinuxNamespaceType::Cgroup => CloneFlags::CLONE_NEWCGROUP,
        LinuxNamespaceType::User => CloneFlags::CLONE_NEWUSER,
        other => return Err(Error::Unsupported(other.to_string())),
    })
}

/// Pure: turns the spec's namespace list into a [`Plan`].
pub fn plan(namespaces: &[LinuxNamespace]) -> Result<Plan> {
    let mut plan = Plan { clone_flags: CloneFlags::empty(), join_before_clone: vec![], join_in_child: vec![] };
    for ns in namespaces {
        let f = flag(ns.typ())?;
        match ns.path() {
            None => plan.clone_flags |= f,
            Some(path) if f == CloneFlags::CLONE_NEWPID => plan.join_before_clone.push((f, path.clone())),
            Some(path) => plan.join_in_child.push((f, path.clone())),
        }
    }
    plan.join_in_child.sort_by_key(|(f, _)| *f != CloneFlags::CLONE_NEWUSER);
    // A new user namespace takes the host's privileges away from the init, and joining a
    // namespace it does not own needs them: those are joined first, before the clone (runc's
    // order: join by path, then unshare the user namespace). The mount namespace stays last.
    if plan.clone_flags.contains(CloneFlags::CLONE_NEWUSER) {
        let (before, child): (Vec<_>, Vec<_>) =
            plan.join_in_child.into_iter().partition(|(f, _)| *f != CloneFlags::CLONE_NEWNS);
        plan.join_before_clone.extend(before);
        plan.join_in_child = child;
    }
    Ok(plan)
}

/// setns(2) into each namespace file.
pub fn join(list: &[(CloneFlags, PathBuf)]) -> Result<()> {
    for (f, path) in list {
        let file = std::fs::File::open(path).map_err(|source| Error::Open { path: path.clone(), source })?;
        nix::sched::setns(file, *f).map_err(|source| Error::Join {
            kind: format!("{f:?}"),
            path: path.clone(),
            source,
        })?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use oci_spec::runtime::LinuxNamespaceBuilder;

    fn ns(typ: LinuxNamespaceType, path: Option<&str>) -> LinuxNamespace {
        let mut b = LinuxNamespaceBuilder::default().typ(typ);
        if let Some(p) = path {
            b = b.path(p);
        }
        b.build().expect("valid namespace")
    }

    #[test]
    fn new_namespaces_become_clone_flags_and_paths_become_joins() {
        let p = plan(&[
            ns(LinuxNamespaceType::Mount, None),
            ns(LinuxNamespaceType::Pid, None),
            ns(LinuxNamespaceType::Network, Some("/run/netns/pod")),
            ns(LinuxNamespaceType::Uts, None),
        ])
        .expect("supported");
        assert_eq!(p.clone_flags, CloneFlags::CLONE_NEWNS | CloneFlags::CLONE_NEWPID | CloneFlags::CLONE_NEWUTS);
        assert_eq!(p.join_in_child, vec![(CloneFlags::CLONE_NEWNET, PathBuf::from("/run/netns/pod"))]);
        assert!(p.join_before_clone.is_empty());
    }

    #[test]
    fn pid_namespace_path_is_joined_before_clone() {
        let p = plan(&[ns(LinuxNamespaceType::Pid, Some("/proc/1/ns/pid"))]).expect("supported");
        assert_eq!(p.join_before_clone.len(), 1);
        assert!(p.clone_flags.is_empty());
    }

    #[test]
    fn a_user_namespace_is_made_with_the_others_or_joined_before_them() {
        let p = plan(&[ns(LinuxNamespaceType::User, None), ns(LinuxNamespaceType::Mount, None)]).expect("supported");
        assert_eq!(p.clone_flags, CloneFlags::CLONE_NEWUSER | CloneFlags::CLONE_NEWNS);
        let p = plan(&[
            ns(LinuxNamespaceType::Network, Some("/run/netns/pod")),
            ns(LinuxNamespaceType::User, Some("/proc/7/ns/user")),
        ])
        .expect("supported");
        assert_eq!(p.join_in_child[0], (CloneFlags::CLONE_NEWUSER, PathBuf::from("/proc/7/ns/user")));
        // With a new one, the others are joined before the clone (the mount namespace excepted).
        let p = plan(&[
            ns(LinuxNamespaceType::User, None),
            ns(LinuxNamespaceType::Network, Some("/run/netns/pod")),
            ns(LinuxNamespaceType::Mount, Some("/proc/7/ns/mnt")),
        ])
        .expect("supported");
        assert_eq!(p.join_before_clone, vec![(CloneFlags::CLONE_NEWNET, PathBuf::from("/run/netns/pod"))]);
        assert_eq!(p.join_in_child, vec![(CloneFlags::CLONE_NEWNS, PathBuf::from("/proc/7/ns/mnt"))]);
    }
}
