//! Pod cgroups: `<kubepods>[/burstable|/besteffort]/pod<uid>` (Kubernetes' layout) with the
//! pod-level limits Kubernetes derives from its containers, on cgroup v1 and v2.
//!
//! Where `<kubepods>` is depends on the driver ([`Driver`]): `/<cgroup-parent>/kubepods` in every
//! hierarchy (cgroupfs, as kubelet's cgroupfs driver), or, when systemd is PID 1 on a pure cgroup
//! v2 host, a scope systemd delegates to the agent, `kubepods.slice/kaji-pods.scope` (see
//! [`systemd`]): outside the agent's own unit, so stopping or restarting the agent leaves pods
//! and shims alone, and never a cgroup of systemd's own that kaji would write to.

pub mod systemd;

use std::path::{Path, PathBuf};

use k8s_openapi::api::core::v1::{Container, Pod};
use libcgroups::common::CgroupSetup;
use libcgroups::v1::ControllerType;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("failed to {op} {path}")]
    Io {
        op: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error(transparent)]
    Runtime(#[from] kaji_runtime::cgroups::Error),
    #[error("failed to detect the cgroup setup: {0}")]
    Detect(String),
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// The pod's QoS class as the apiserver recorded it (or as Kubernetes computes it).
pub fn qos_class(pod: &Pod) -> &'static str {
    match pod.status.as_ref().and_then(|s| s.qos_class.as_deref()) {
        Some("Guaranteed") => "Guaranteed",
        Some("Burstable") => "Burstable",
        Some("BestEffort") => "BestEffort",
        _ => {
            let containers: Vec<&Container> = pod.spec.iter().flat_map(|s| s.containers.iter()).collect();
            let has = |c: &Container, kind: &str| {
                c.resources.as_ref().is_some_and(|r| {
                    let m = if kind == "limits" { &r.limits } else { &r.requests };
                    m.as_ref().is_some_and(|m| m.contains_key("cpu") || m.contains_key("memory"))
                })
            };
            if containers.iter().all(|c| !has(c, "limits") && !has(c, "requests")) {
                "BestEffort"
            } else if containers.iter().all(|c| {
                let r = c.resources.as_ref();
                let l = r.and_then(|r| r.limits.as_ref());
                let q = r.and_then(|r| r.requests.as_ref());
                ["cpu", "memory"].iter().all(|k| {
                    l.and_then(|l| l.get(*k)).is_some_and(|lim| q.and_then(|q| q.get(*k)).is_none_or(|req| req == lim))
                })
            }) {
                "Guaranteed"
            } else {
                "Burstable"
            }
        }
    }
}

/// How the agent lays out and makes its cgroups.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Driver {
    /// `/<cgroup-parent>/kubepods/...` made directly in every hierarchy.
    #[default]
    Cgroupfs,
    /// Below the scope systemd delegates to the agent ([`systemd::SCOPE_CGROUP`]); pure cgroup v2.
    Systemd,
}

impl Driver {
    /// `auto`: systemd when it is PID 1 (`/run/systemd/system` exists) on a pure cgroup v2 host.
    pub fn detect() -> Driver {
        let unified = matches!(libcgroups::common::get_cgroup_setup(), Ok(CgroupSetup::Unified));
        if unified && Path::new("/run/systemd/system").is_dir() {
            Driver::Systemd
        } else {
            Driver::Cgroupfs
        }
    }

    /// The cgroup every pod's cgroup goes below.
    pub fn kubepods(&self, cgroup_parent: &str) -> PathBuf {
        match self {
            Driver::Cgroupfs => Path::new("/").join(cgroup_parent.trim_matches('/')).join("kubepods"),
            Driver::Systemd => PathBuf::from(systemd::SCOPE_CGROUP),
        }
    }

    /// Where this driver may start enabling controllers (`cgroup.subtree_control`): the
    /// hierarchy's root for cgroupfs, the delegated scope for systemd (whose ancestors are
    /// systemd's to manage; it enables what the scope needs).
    fn boundary(&self) -> PathBuf {
        match self {
            Driver::Cgroupfs => PathBuf::from("/"),
            Driver::Systemd => PathBuf::from(systemd::SCOPE_CGROUP),
        }
    }
}

impl std::str::FromStr for Driver {
    type Err = String;
    fn from_str(s: &str) -> Result<Driver, String> {
        match s {
            "auto" => Ok(Driver::detect()),
            "systemd" => Ok(Driver::Systemd),
            "cgroupfs" => Ok(Driver::Cgroupfs),
            other => Err(format!("unknown cgroup driver {other:?}: auto, systemd or cgroupfs")),
        }
    }
}

/// `<kubepods>/pod<uid>` for Guaranteed pods, `<kubepods>/<qos>/pod<uid>` otherwise.
pub fn pod_path(kubepods: &Path, pod: &Pod) -> PathBuf {
    let uid = pod.metadata.uid.as_deref().unwrap_or("unknown");
    let base = kubepods.to_path_buf();
    match qos_class(pod) {
        "Guaranteed" => base.join(format!("pod{uid}")),
        "Burstable" => base.join("burstable").join(format!("pod{uid}")),
        _ => base.join("besteffort").join(format!("pod{uid}")),
    }
}

/// The container's cgroup inside its pod's.
pub fn container_path(pod_path: &Path, container_id: &str) -> PathBuf {
    pod_path.join(container_id)
}

/// Pod-level limits: memory and CPU quota only when every container has one (init containers
/// count as their maximum, as Kubernetes does), CPU shares from the sum of requests.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Limits {
    pub memory_bytes: Option<u64>,
    pub cpu_quota_millis: Option<u64>,
    pub cpu_shares: u64,
}

fn quantity(c: &Container, kind: &str, name: &str) -> Option<String> {
    let r = c.resources.as_ref()?;
    let m = if kind == "limits" { r.limits.as_ref()? } else { r.requests.as_ref()? };
    m.get(name).map(|q| q.0.clone())
}

fn sum_or_none(containers: &[Container], f: impl Fn(&Container) -> Option<u64>) -> Option<u64> {
    containers.iter().map(f).sum::<Option<u64>>()
}

pub fn pod_limits(pod: &Pod) -> Limits {
    let spec = pod.spec.clone().unwrap_or_default();
    let inits = spec.init_containers.unwrap_or_default();
    let apps = spec.containers;
    let mem = |c: &Container| quantity(c, "limits", "memory").and_then(|q| crate::node::parse_bytes(&q));
    let cpu = |c: &Container| quantity(c, "limits", "cpu").and_then(|q| crate::node::parse_cpu_millis(&q));
    let req = |c: &Container| {
        quantity(c, "requests", "cpu")
            .or_else(|| quantity(c, "limits", "cpu"))
            .and_then(|q| crate::node::parse_cpu_millis(&q))
            .unwrap_or(0)
    };
    let with_inits = |app: Option<u64>, f: &dyn Fn(&Container) -> Option<u64>| -> Option<u64> {
        let app = app?;
        let init = inits.iter().map(f).collect::<Option<Vec<u64>>>()?;
        Some(init.into_iter().max().unwrap_or(0).max(app))
    };
    let requests = apps.iter().map(req).sum::<u64>().max(inits.iter().map(req).max().unwrap_or(0));
    Limits {
        memory_bytes: with_inits(sum_or_none(&apps, mem), &mem),
        cpu_quota_millis: with_inits(sum_or_none(&apps, cpu), &cpu),
        cpu_shares: shares(requests),
    }
}

/// Kubernetes' milliCPU → shares (minimum 2).
pub fn shares(millis: u64) -> u64 {
    (millis * 1024 / 1000).max(2)
}

/// cgroup v2 weight for v1 shares (the formula runc and Kubernetes use).
pub fn weight(shares: u64) -> u64 {
    1 + ((shares.clamp(2, 262144) - 2) * 9999) / 262142
}

enum Hierarchies {
    V2(PathBuf),
    V1 { memory: Option<PathBuf>, cpu: Option<PathBuf>, pids: Option<PathBuf> },
}

fn hierarchies() -> Result<Hierarchies> {
    match libcgroups::common::get_cgroup_setup().map_err(|e| Error::Detect(e.to_string()))? {
        CgroupSetup::Unified => Ok(Hierarchies::V2(PathBuf::from("/sys/fs/cgroup"))),
        CgroupSetup::Legacy | CgroupSetup::Hybrid => {
            let mount = |c: ControllerType| libcgroups::v1::util::get_subsystem_mount_point(&c).ok();
            Ok(Hierarchies::V1 {
                memory: mount(ControllerType::Memory),
                cpu: mount(ControllerType::Cpu),
                pids: mount(ControllerType::Pids),
            })
        }
    }
}

/// Creates the pod cgroup (memory, cpu, pids controllers) and writes its limits.
pub fn ensure(driver: Driver, path: &Path, limits: &Limits) -> Result<()> {
    let write = |file: PathBuf, value: String| -> Result<()> {
        std::fs::write(&file, &value).map_err(|source| Error::Io { op: "write", path: file, source })
    };
    let mkdir = |dir: &Path| -> Result<()> {
        std::fs::create_dir_all(dir).map_err(|source| Error::Io { op: "create", path: dir.to_path_buf(), source })
    };
    match hierarchies()? {
        Hierarchies::V2(root) => {
            let boundary = driver.boundary();
            let rel = path.strip_prefix("/").unwrap_or(path);
            let mut cur = root.clone();
            let mut at = PathBuf::from("/");
            for part in rel.components() {
                if at.starts_with(&boundary) {
                    let _ = std::fs::write(cur.join("cgroup.subtree_control"), "+cpu +memory +pids");
                }
                cur = cur.join(part);
                at = at.join(part);
                mkdir(&cur)?;
            }
            write(cur.join("memory.max"), limits.memory_bytes.map(|b| b.to_string()).unwrap_or_else(|| "max".into()))?;
            let quota = limits.cpu_quota_millis.map(|m| (m * 100).to_string()).unwrap_or_else(|| "max".into());
            write(cur.join("cpu.max"), format!("{quota} 100000"))?;
            write(cur.join("cpu.weight"), weight(limits.cpu_shares).to_string())?;
        }
        Hierarchies::V1 { memory, cpu, pids } => {
            let rel = path.strip_prefix("/").unwrap_or(path);
            if let Some(m) = memory {
                let d = m.join(rel);
                mkdir(&d)?;
                let v = limits.memory_bytes.map(|b| b.to_string()).unwrap_or_else(|| "-1".into());
                write(d.join("memory.limit_in_bytes"), v)?;
            }
            if let Some(c) = cpu {
                let d = c.join(rel);
                mkdir(&d)?;
                write(d.join("cpu.cfs_period_us"), "100000".into())?;
                let q = limits.cpu_quota_millis.map(|m| (m * 100).to_string()).unwrap_or_else(|| "-1".into());
                write(d.join("cpu.cfs_quota_us"), q)?;
                write(d.join("cpu.shares"), limits.cpu_shares.to_string())?;
            }
            if let Some(p) = pids {
                mkdir(&p.join(rel))?;
            }
        }
    }
    Ok(())
}

/// Removes the pod cgroup, children first, from every hierarchy: what is still inside is killed
/// and waited for (the runtime's `remove_dir`), and a hierarchy that fails does not stop the
/// others — the first error is returned once all were tried.
pub fn remove(path: &Path) -> Result<()> {
    let mut first_error = None;
    for dir in kaji_runtime::cgroups::directories(path)? {
        // Children first: anything a crashed runtime left behind.
        let mut stack = vec![dir];
        let mut all = Vec::new();
        while let Some(d) = stack.pop() {
            for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
                if e.path().is_dir() {
                    stack.push(e.path());
                }
            }
            all.push(d);
        }
        for d in all.iter().rev() {
            if let Err(e) = kaji_runtime::cgroups::remove_dir(d) {
                first_error.get_or_insert(Error::Runtime(e));
            }
        }
    }
    first_error.map_or(Ok(()), Err)
}

/// Whether the cgroup still exists in any hierarchy.
pub fn exists(path: &Path) -> bool {
    kaji_runtime::cgroups::directories(path).unwrap_or_default().iter().any(|d| d.exists())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod(v: serde_json::Value) -> Pod {
        serde_json::from_value(v).expect("valid pod")
    }

    #[test]
    fn pods_land_in_their_qos_directory() {
        let fs = Driver::Cgroupfs.kubepods("kaji");
        let p = pod(json!({"metadata": {"uid": "u1"}, "spec": {"containers": [{"name": "a"}]}}));
        assert_eq!(pod_path(&fs, &p), PathBuf::from("/kaji/kubepods/besteffort/podu1"));
        let p = pod(json!({"metadata": {"uid": "u2"}, "spec": {"containers": [
            {"name": "a", "resources": {"limits": {"cpu": "1", "memory": "64Mi"}}}]}}));
        assert_eq!(pod_path(&Driver::Cgroupfs.kubepods("/kaji/"), &p), PathBuf::from("/kaji/kubepods/podu2"));
        let p = pod(json!({"metadata": {"uid": "u3"}, "spec": {"containers": [
            {"name": "a", "resources": {"requests": {"cpu": "100m"}}}]}}));
        assert_eq!(pod_path(&fs, &p), PathBuf::from("/kaji/kubepods/burstable/podu3"));
        // systemd: below the delegated scope, whatever the parent.
        assert_eq!(
            pod_path(&Driver::Systemd.kubepods("kaji"), &p),
            PathBuf::from("/kubepods.slice/kaji-pods.scope/burstable/podu3")
        );
    }

    #[test]
    fn pod_limits_exist_only_when_every_container_is_limited() {
        let p = pod(json!({"spec": {
        "initContainers": [{"name": "i", "resources": {"limits": {"memory": "200Mi", "cpu": "2"}}}],
        "containers": [
            {"name": "a", "resources": {"limits": {"memory": "64Mi", "cpu": "500m"}}},
            {"name": "b", "resources": {"limits": {"memory": "64Mi", "cpu": "250m"}, "requests": {"cpu": "100m"}}}
        ]}}));
        let l = pod_limits(&p);
        assert_eq!(l.memory_bytes, Some(200 << 20), "the init container's larger limit wins");
        assert_eq!(l.cpu_quota_millis, Some(2000));
        assert_eq!(l.cpu_shares, shares(600).max(shares(2000)));
        let p = pod(json!({"spec": {"containers": [
            {"name": "a", "resources": {"limits": {"memory": "64Mi"}}}, {"name": "b"}]}}));
        assert_eq!(pod_limits(&p), Limits { memory_bytes: None, cpu_quota_millis: None, cpu_shares: 2 });
    }

    #[test]
    fn shares_and_weights_follow_kubernetes() {
        assert_eq!(shares(0), 2);
        assert_eq!(shares(1000), 1024);
        assert_eq!(weight(2), 1);
        assert_eq!(weight(1024), 39);
        assert_eq!(weight(262144), 10000);
    }
}
