//! The OCI runtime spec as the runtime consumes it: loading a bundle, checking what we can honour,
//! and the default spec (Docker's capabilities, runc's masked/readonly paths) used by the agent.

use std::collections::HashSet;
use std::path::{Path, PathBuf};

use oci_spec::runtime::{
    Capability, LinuxBuilder, LinuxCapabilitiesBuilder, LinuxNamespaceBuilder, LinuxNamespaceType, Mount, MountBuilder,
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
            | LinuxNamespaceType::Cgroup => {}
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
    validate_hooks(spec)
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
/// and open any of the host's devices. Enforced on cgroup v1 and hybrid hosts; on a pure v2
/// host it needs libcgroups' eBPF device filter (its `cgroupsv2_devices` feature, which builds
/// libbpf), not built yet.
fn default_resources() -> Result<oci_spec::runtime::LinuxResources> {
    let deny_all = oci_spec::runtime::LinuxDeviceCgroupBuilder::default()
        .allow(false)
        .access("rwm")
        .build()
        .map_err(Error::Build)?;
    oci_spec::runtime::LinuxResourcesBuilder::default().devices(vec![deny_all]).build().map_err(Error::Build)
}

/// The mounts every container gets (runc's default spec without the cgroup mount).
pub fn default_mounts() -> Vec<Mount> {
    oci_spec::runtime::get_default_mounts()
        .into_iter()
        .filter(|m| m.typ().as_deref() != Some("cgroup"))
        .chain(std::iter::once(
            MountBuilder::default()
                .destination("/sys/fs/cgroup")
                .typ("tmpfs")
                .source("tmpfs")
                .options(vec!["nosuid".into(), "noexec".into(), "nodev".into(), "ro".into()])
                .build()
                .expect("static mount is valid"),
        ))
        .collect()
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
        ns.push(LinuxNamespaceBuilder::default().typ(LinuxNamespaceType::User).build().expect("valid"));
        linux.set_namespaces(Some(ns));
        spec.set_linux(Some(linux.clone()));
        assert!(matches!(validate(&spec, dir.path()), Err(Error::UnsupportedNamespace(_))));

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
