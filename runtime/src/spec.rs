//! The OCI runtime spec as the runtime consumes it: loading a bundle, checking what we can honour,
//! and the default spec (Docker's capabilities, runc's masked/readonly paths) used by the agent.

use std::collections::HashSet;
use std::path::{Path, PathBuf};

use oci_spec::runtime::{
    Capability, LinuxBuilder, LinuxCapabilitiesBuilder, LinuxNamespaceBuilder, LinuxNamespaceType, Mount,
    ProcessBuilder, RootBuilder, Spec, SpecBuilder, UserBuilder,
};

/// Annotation naming read-only overlay lower directories (`:`-separated, top first). When set,
/// the container root is an overlayfs of these with a per-container upper/work dir.
pub const ANNOTATION_LOWERDIRS: &str = "kaji.io/rootfs.lowerdirs";

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("failed to read {path}")]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("invalid runtime spec {path}")]
    Parse {
        path: PathBuf,
        #[source]
        source: oci_spec::OciSpecError,
    },
    #[error("spec has no {0}")]
    Missing(&'static str),
    #[error("rootfs {0} does not exist or is not a directory")]
    Rootfs(PathBuf),
    #[error("namespace type {0} is not supported")]
    UnsupportedNamespace(String),
    #[error("namespace {0} listed more than once")]
    DuplicateNamespace(String),
    #[error("process.args is empty")]
    NoArgs,
    #[error("cgroupsPath {0:?} must be a non-empty path below the hierarchy root")]
    CgroupPath(String),
    #[error("{point} hook path {path} is not absolute")]
    HookPath { point: crate::hooks::Point, path: PathBuf },
    #[error("{point} hook {path} has timeout {timeout}: it must be greater than zero")]
    HookTimeout { point: crate::hooks::Point, path: PathBuf, timeout: i64 },
    #[error("failed to build spec")]
    Build(#[source] oci_spec::OciSpecError),
    #[error("{field} path {path:?} must be absolute and without \"..\"")]
    Path { field: &'static str, path: String },
    #[error("unable to restrict sys entries without a private MNT namespace")]
    MaskWithoutMountNamespace,
    #[error("annotation {0} needs a private MNT namespace")]
    OverlayWithoutMountNamespace(&'static str),
    #[error("unable to set hostname without a private UTS namespace")]
    HostnameWithoutUts,
    #[error("sysctl {key:?} {why}")]
    Sysctl { key: String, why: &'static str },
    #[error("invalid netDevices entry {name:?}: {why}")]
    NetDevice { name: String, why: &'static str },
    #[error("user namespace mappings specified, but user namespace isn't enabled in the config")]
    MappingsWithoutUserNamespace,
    #[error("user namespaces enabled, but no {0} mappings found")]
    UserNamespaceWithoutMappings(&'static str),
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Loads `<bundle>/config.json`.
pub fn load(bundle: &Path) -> Result<Spec> {
    let path = bundle.join("config.json");
    let text = std::fs::read_to_string(&path).map_err(|source| Error::Read { path: path.clone(), source })?;
    let spec: Spec = serde_json::from_str(&text)
        .map_err(|e| Error::Parse { path: path.clone(), source: oci_spec::OciSpecError::SerDe(e) })?;
    Ok(spec)
}

/// The rootfs directory of a bundle (spec paths are relative to the bundle).
pub fn rootfs_path(spec: &Spec, bundle: &Path) -> Result<PathBuf> {
    let root = spec.root().as_ref().ok_or(Error::Missing("root"))?;
    Ok(if root.path().is_absolute() { root.path().clone() } else { bundle.join(root.path()) })
}

/// Overlay lower dirs requested through [`ANNOTATION_LOWERDIRS`], if any.
pub fn lowerdirs(spec: &Spec) -> Option<Vec<PathBuf>> {
    let value = spec.annotations().as_ref()?.get(ANNOTATION_LOWERDIRS)?;
    Some(value.split(':').filter(|s| !s.is_empty()).map(PathBuf::from).collect())
}

/// Checks everything that can be checked before any process or cgroup exists, so a spec we
/// cannot honour fails with a precise error and nothing to clean up.
pub fn validate(spec: &Spec, bundle: &Path) -> Result<()> {
    let process = spec.process().as_ref().ok_or(Error::Missing("process"))?;
    if process.args().as_ref().is_none_or(|a| a.is_empty()) {
        return Err(Error::NoArgs);
    }
    match lowerdirs(spec) {
        Some(dirs) => {
            if let Some(bad) = dirs.iter().find(|d| !d.is_dir()) {
                return Err(Error::Rootfs(bad.clone()));
            }
        }
        None => {
            let rootfs = rootfs_path(spec, bundle)?;
            if !rootfs.is_dir() {
                return Err(Error::Rootfs(rootfs));
            }
        }
    }
    let linux = spec.linux().as_ref().ok_or(Error::Missing("linux"))?;
    let mut seen = HashSet::new();
    for ns in linux.namespaces().iter().flatten() {
        match ns.typ() {
            LinuxNamespaceType::Mount
            | LinuxNamespaceType::Pid
            | LinuxNamespaceType::Uts
            | LinuxNamespaceType::Ipc
            | LinuxNamespaceType::Network
            | LinuxNamespaceType::Cgroup
            | LinuxNamespaceType::User => {}
            other => return Err(Error::UnsupportedNamespace(other.to_string())),
        }
        if !seen.insert(ns.typ()) {
            return Err(Error::DuplicateNamespace(ns.typ().to_string()));
        }
    }
    if let Some(path) = linux.cgroups_path() {
        let s = path.to_string_lossy();
        if s.trim_matches('/').is_empty() || s.contains("..") {
            return Err(Error::CgroupPath(s.into_owned()));
        }
    }
    validate_paths(spec, linux)?;
    validate_sysctl(linux)?;
    validate_net_devices(linux)?;
    validate_hooks(spec)
}

/// Whether the spec creates a namespace of `typ`, or joins one by path.
fn has_namespace(linux: &oci_spec::runtime::Linux, typ: LinuxNamespaceType) -> bool {
    linux.namespaces().iter().flatten().any(|n| n.typ() == typ)
}

/// Masked and read-only paths are absolute (the runtime-spec's rule: a relative one would be
/// resolved against wherever the init happens to be), and need a mount namespace to be
/// confined to the container; so does an overlay rootfs.
fn validate_paths(spec: &Spec, linux: &oci_spec::runtime::Linux) -> Result<()> {
    for (field, list) in [("maskedPaths", linux.masked_paths()), ("readonlyPaths", linux.readonly_paths())] {
        for p in list.iter().flatten() {
            let path = Path::new(p);
            if !path.is_absolute() || path.components().any(|c| c == std::path::Component::ParentDir) {
                return Err(Error::Path { field, path: p.clone() });
            }
        }
    }
    let own_mounts =
        linux.namespaces().iter().flatten().any(|n| n.typ() == LinuxNamespaceType::Mount && n.path().is_none());
    if !own_mounts {
        if linux.masked_paths().iter().flatten().next().is_some()
            || linux.readonly_paths().iter().flatten().next().is_some()
        {
            return Err(Error::MaskWithoutMountNamespace);
        }
        if lowerdirs(spec).is_some() {
            return Err(Error::OverlayWithoutMountNamespace(ANNOTATION_LOWERDIRS));
        }
    }
    if spec.hostname().as_deref().is_some_and(|h| !h.is_empty()) && !has_namespace(linux, LinuxNamespaceType::Uts) {
        return Err(Error::HostnameWithoutUts);
    }
    let mappings = linux.uid_mappings().iter().flatten().next().is_some()
        || linux.gid_mappings().iter().flatten().next().is_some();
    if mappings && !has_namespace(linux, LinuxNamespaceType::User) {
        return Err(Error::MappingsWithoutUserNamespace);
    }
    // A new user namespace maps someone (runc's rule; one joined by path has its maps).
    if linux.namespaces().iter().flatten().any(|n| n.typ() == LinuxNamespaceType::User && n.path().is_none()) {
        for (what, maps) in [("uid", linux.uid_mappings()), ("gid", linux.gid_mappings())] {
            if maps.iter().flatten().next().is_none() {
                return Err(Error::UserNamespaceWithoutMappings(what));
            }
        }
    }
    Ok(())
}

/// Only sysctls of a namespace the container has of its own, as runc allows them.
fn validate_sysctl(linux: &oci_spec::runtime::Linux) -> Result<()> {
    const IPC: &[&str] = &[
        "kernel.msgmax",
        "kernel.msgmnb",
        "kernel.msgmni",
        "kernel.sem",
        "kernel.shmall",
        "kernel.shmmax",
        "kernel.shmmni",
        "kernel.shm_rmid_forced",
    ];
    let host_net = || match linux.namespaces().iter().flatten().find(|n| n.typ() == LinuxNamespaceType::Network) {
        None => true,
        // Joining the namespace we are in is joining the host's.
        Some(n) => n.path().as_ref().is_some_and(|p| same_file(p, Path::new("/proc/self/ns/net"))),
    };
    for key in linux.sysctl().iter().flatten().map(|(k, _)| k) {
        let err = |why| Err(Error::Sysctl { key: key.clone(), why });
        if IPC.contains(&key.as_str()) || key.starts_with("fs.mqueue.") {
            if !has_namespace(linux, LinuxNamespaceType::Ipc) {
                return err("is not allowed in the hosts ipc namespace");
            }
        } else if key.starts_with("net.") {
            if host_net() {
                return err("not allowed in host network namespace");
            }
        } else if key == "kernel.domainname" && has_namespace(linux, LinuxNamespaceType::Uts) {
        } else if key == "kernel.hostname" && has_namespace(linux, LinuxNamespaceType::Uts) {
            return err("is not allowed as it conflicts with the OCI \"hostname\" field");
        } else {
            return err("is not in a separate kernel namespace");
        }
    }
    Ok(())
}

fn same_file(a: &Path, b: &Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    match (std::fs::metadata(a), std::fs::metadata(b)) {
        (Ok(a), Ok(b)) => a.dev() == b.dev() && a.ino() == b.ino(),
        _ => false,
    }
}

/// Pure: whether `name` can name a network interface (IFNAMSIZ, no `/`, `:` or whitespace).
pub fn valid_interface_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() < 16
        && name != "."
        && name != ".."
        && !name.chars().any(|c| c == '/' || c == ':' || c.is_whitespace())
}

/// `linux.netDevices`: interface names that can exist, moved into a network namespace the
/// container has of its own.
fn validate_net_devices(linux: &oci_spec::runtime::Linux) -> Result<()> {
    let Some(devices) = linux.net_devices().as_ref().filter(|d| !d.is_empty()) else { return Ok(()) };
    let own_net = linux.namespaces().iter().flatten().any(|n| n.typ() == LinuxNamespaceType::Network);
    for (host, dev) in devices {
        let err = |why| Err(Error::NetDevice { name: host.clone(), why });
        if !own_net {
            return err("network devices need a network namespace of the container's own");
        }
        if !valid_interface_name(host) {
            return err("not a valid interface name");
        }
        if dev.name().as_deref().is_some_and(|n| !valid_interface_name(n)) {
            return err("its name in the container is not a valid interface name");
        }
    }
    Ok(())
}

fn validate_hooks(spec: &Spec) -> Result<()> {
    use crate::hooks::Point;
    let Some(hooks) = spec.hooks() else { return Ok(()) };
    let points = [
        Point::Prestart,
        Point::CreateRuntime,
        Point::CreateContainer,
        Point::StartContainer,
        Point::Poststart,
        Point::Poststop,
    ];
    for point in points {
        for h in crate::hooks::at(hooks, point) {
            if !h.path().is_absolute() {
                return Err(Error::HookPath { point, path: h.path().clone() });
            }
            if let Some(timeout) = h.timeout().filter(|t| *t <= 0) {
                return Err(Error::HookTimeout { point, path: h.path().clone(), timeout });
            }
        }
    }
    Ok(())
}

/// Docker's default capability set.
pub fn default_capabilities() -> HashSet<Capability> {
    use Capability::*;
    [
        Chown,
        DacOverride,
        Fsetid,
        Fowner,
        Mknod,
        NetRaw,
        Setgid,
        Setuid,
        Setfcap,
        Setpcap,
        NetBindService,
        SysChroot,
        Kill,
        AuditWrite,
    ]
    .into_iter()
    .collect()
}

/// No device but the runtime's defaults (null, zero, full, random, urandom, tty, console, pts,
/// ptmx, tun: the list libcgroups adds), as `runc spec` writes it: a new v1 devices cgroup
/// otherwise inherits "a *:* rwm", and with CAP_MKNOD in the default set a container could make
/// and open any of the host's devices. Enforced by the v1 devices controller, and on a cgroup v2
/// host by the runtime's eBPF device program (see `devices`).
fn default_resources() -> Result<oci_spec::runtime::LinuxResources> {
    let deny_all = oci_spec::runtime::LinuxDeviceCgroupBuilder::default()
        .allow(false)
        .access("rwm")
        .build()
        .map_err(Error::Build)?;
    oci_spec::runtime::LinuxResourcesBuilder::default().devices(vec![deny_all]).build().map_err(Error::Build)
}

/// The mounts every container gets: runc's default set, /sys/fs/cgroup included (a read-only
/// view of the container's own cgroups: JVMs and Go runtimes read their limits there).
pub fn default_mounts() -> Vec<Mount> {
    oci_spec::runtime::get_default_mounts()
}

/// What [`default_spec`] needs from the caller.
#[derive(Debug, Clone)]
pub struct SpecOptions {
    pub args: Vec<String>,
    pub env: Vec<String>,
    pub cwd: String,
    pub hostname: Option<String>,
    pub rootfs: PathBuf,
    pub cgroups_path: Option<PathBuf>,
    /// Namespaces to join by path instead of creating (e.g. the pod sandbox's net/ipc/uts).
    pub join: Vec<(LinuxNamespaceType, PathBuf)>,
    pub readonly_rootfs: bool,
    /// A cgroup namespace of its own, so that /sys/fs/cgroup shows its own cgroup as the root.
    /// By default on a cgroup v2 host, as containerd does.
    pub cgroup_namespace: bool,
}

impl Default for SpecOptions {
    fn default() -> Self {
        SpecOptions {
            args: vec!["sh".into()],
            env: vec!["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin".into()],
            cwd: "/".into(),
            hostname: None,
            rootfs: PathBuf::from("rootfs"),
            cgroups_path: None,
            join: Vec::new(),
            readonly_rootfs: false,
            cgroup_namespace: crate::cgroups::is_unified(),
        }
    }
}

/// A hardened spec: new mount/pid/uts/ipc/net namespaces (or joined ones), Docker's default
/// capabilities, no_new_privs, runc's masked and read-only paths, the default seccomp profile.
pub fn default_spec(opts: &SpecOptions) -> Result<Spec> {
    let caps = default_capabilities();
    let capabilities = LinuxCapabilitiesBuilder::default()
        .bounding(caps.clone())
        .effective(caps.clone())
        .permitted(caps.clone())
        .inheritable(HashSet::new())
        .ambient(HashSet::new())
        .build()
        .map_err(Error::Build)?;
    let process = ProcessBuilder::default()
        .terminal(false)
        .user(UserBuilder::default().uid(0u32).gid(0u32).build().map_err(Error::Build)?)
        .args(opts.args.clone())
        .env(opts.env.clone())
        .cwd(opts.cwd.clone())
        .capabilities(capabilities)
        .no_new_privileges(true)
        .rlimits(vec![oci_spec::runtime::PosixRlimitBuilder::default()
            .typ(oci_spec::runtime::PosixRlimitType::RlimitNofile)
            .hard(1024u64)
            .soft(1024u64)
            .build()
            .map_err(Error::Build)?])
        .build()
        .map_err(Error::Build)?;
    let mut namespaces = Vec::new();
    for typ in [
        LinuxNamespaceType::Pid,
        LinuxNamespaceType::Network,
        LinuxNamespaceType::Ipc,
        LinuxNamespaceType::Uts,
        LinuxNamespaceType::Mount,
    ] {
        let mut b = LinuxNamespaceBuilder::default().typ(typ);
        if let Some((_, path)) = opts.join.iter().find(|(t, _)| *t == typ) {
            b = b.path(path.clone());
        }
        namespaces.push(b.build().map_err(Error::Build)?);
    }
    if opts.cgroup_namespace {
        namespaces
            .push(LinuxNamespaceBuilder::default().typ(LinuxNamespaceType::Cgroup).build().map_err(Error::Build)?);
    }
    let mut linux = LinuxBuilder::default()
        .namespaces(namespaces)
        .masked_paths(oci_spec::runtime::get_default_maskedpaths())
        .readonly_paths(oci_spec::runtime::get_default_readonly_paths())
        .seccomp(crate::seccomp::default_profile())
        .resources(default_resources()?);
    if let Some(path) = &opts.cgroups_path {
        linux = linux.cgroups_path(path.clone());
    }
    let mut spec = SpecBuilder::default()
        .version("1.0.2")
        .root(
            RootBuilder::default()
                .path(opts.rootfs.clone())
                .readonly(opts.readonly_rootfs)
                .build()
                .map_err(Error::Build)?,
        )
        .process(process)
        .mounts(default_mounts())
        .linux(linux.build().map_err(Error::Build)?)
        .build()
        .map_err(Error::Build)?;
    if let Some(h) = &opts.hostname {
        spec.set_hostname(Some(h.clone()));
    }
    Ok(spec)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A bundle directory with an empty rootfs, removed when the `TempDir` is dropped.
    fn bundle_with_rootfs() -> (tempfile::TempDir, Spec) {
        let dir = tempfile::Builder::new().prefix("kaji-spec-test").tempdir().expect("temp dir is writable");
        std::fs::create_dir(dir.path().join("rootfs")).expect("temp dir is writable");
        let spec = default_spec(&SpecOptions::default()).expect("default spec builds");
        (dir, spec)
    }

    #[test]
    fn default_spec_is_valid_and_hardened() {
        let (dir, spec) = bundle_with_rootfs();
        validate(&spec, dir.path()).expect("default spec validates");
        let process = spec.process().as_ref().expect("has process");
        assert_eq!(process.no_new_privileges(), Some(true));
        let linux = spec.linux().as_ref().expect("has linux");
        assert!(linux.masked_paths().as_ref().is_some_and(|p| p.iter().any(|p| p == "/proc/kcore")));
        assert!(linux.seccomp().is_some());
        assert!(!default_capabilities().contains(&Capability::SysAdmin));
    }

    #[test]
    fn rejects_what_it_cannot_honour() {
        let (dir, mut spec) = bundle_with_rootfs();
        let mut linux = spec.linux().clone().expect("has linux");
        let mut ns = linux.namespaces().clone().unwrap_or_default();
        ns.push(LinuxNamespaceBuilder::default().typ(LinuxNamespaceType::Time).build().expect("valid"));
        linux.set_namespaces(Some(ns.clone()));
        spec.set_linux(Some(linux.clone()));
        assert!(matches!(validate(&spec, dir.path()), Err(Error::UnsupportedNamespace(_))));
        ns.pop();
        ns.push(LinuxNamespaceBuilder::default().typ(LinuxNamespaceType::User).build().expect("valid"));
        linux.set_namespaces(Some(ns));
        spec.set_linux(Some(linux.clone()));
        assert!(matches!(validate(&spec, dir.path()), Err(Error::UserNamespaceWithoutMappings("uid"))));

        linux.set_namespaces(None);
        linux.set_cgroups_path(Some(PathBuf::from("/")));
        spec.set_linux(Some(linux));
        assert!(matches!(validate(&spec, dir.path()), Err(Error::CgroupPath(_))));

        let hook = |path: &str, timeout: i64| {
            oci_spec::runtime::HookBuilder::default().path(path).timeout(timeout).build().expect("valid hook")
        };
        let (_, mut ok) = bundle_with_rootfs();
        let hooks = |h| oci_spec::runtime::HooksBuilder::default().poststop(vec![h]).build().expect("valid hooks");
        ok.set_hooks(Some(hooks(hook("relative/hook", 1))));
        assert!(matches!(validate(&ok, dir.path()), Err(Error::HookPath { .. })));
        ok.set_hooks(Some(hooks(hook("/bin/true", 0))));
        assert!(matches!(validate(&ok, dir.path()), Err(Error::HookTimeout { timeout: 0, .. })));
        ok.set_hooks(Some(hooks(hook("/bin/true", 3))));
        assert!(validate(&ok, dir.path()).is_ok());

        let missing = dir.path().join("nope");
        assert!(matches!(validate(&spec, &missing), Err(Error::Rootfs(_))));
    }
}
