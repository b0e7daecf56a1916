//! The Node this agent runs: registration (addresses, capacity, allocatable, nodeInfo), the
//! heartbeat Lease in `kube-node-lease`, and the status conditions (Ready and the pressures).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::api::core::v1::{
    DaemonEndpoint, Node as KNode, NodeAddress, NodeCondition, NodeDaemonEndpoints, NodeStatus, NodeSystemInfo,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta, OwnerReference, Time};
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::json;
use tokio::sync::watch;

use crate::Config;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("failed to register node {node}")]
    Register {
        node: String,
        #[source]
        source: kube::Error,
    },
    #[error("invalid --reserved entry {0:?}: want cpu=<quantity>, memory=<quantity> or ephemeral-storage=<quantity>")]
    Reserved(String),
    #[error(
        "invalid --eviction-hard entry {0:?}: want memory.available|nodefs.available|pid.available<quantity or percent"
    )]
    Eviction(String),
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Resources held back from pods (`--reserved cpu=100m,memory=256Mi`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Reserved {
    pub cpu_millis: u64,
    pub memory_bytes: u64,
    pub ephemeral_bytes: u64,
}

impl std::str::FromStr for Reserved {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        let mut r = Reserved::default();
        for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let (k, v) = part.split_once('=').ok_or_else(|| Error::Reserved(part.into()))?;
            match k {
                "cpu" => r.cpu_millis = parse_cpu_millis(v).ok_or_else(|| Error::Reserved(part.into()))?,
                "memory" => r.memory_bytes = parse_bytes(v).ok_or_else(|| Error::Reserved(part.into()))?,
                "ephemeral-storage" => {
                    r.ephemeral_bytes = parse_bytes(v).ok_or_else(|| Error::Reserved(part.into()))?
                }
                _ => return Err(Error::Reserved(part.into())),
            }
        }
        Ok(r)
    }
}

/// CPU quantity in millicores: "2", "0.5", "250m".
pub fn parse_cpu_millis(s: &str) -> Option<u64> {
    let s = s.trim();
    if let Some(m) = s.strip_suffix('m') {
        return m.parse().ok();
    }
    let v: f64 = s.parse().ok()?;
    (v >= 0.0 && v.is_finite()).then(|| (v * 1000.0).ceil() as u64)
}

/// Memory/storage quantity in bytes: "128Mi", "1G", "1e3", "500k", "12345".
pub fn parse_bytes(s: &str) -> Option<u64> {
    let s = s.trim();
    let suffixes: [(&str, f64); 13] = [
        ("Ki", 1024f64),
        ("Mi", 1024f64.powi(2)),
        ("Gi", 1024f64.powi(3)),
        ("Ti", 1024f64.powi(4)),
        ("Pi", 1024f64.powi(5)),
        ("Ei", 1024f64.powi(6)),
        ("k", 1e3),
        ("M", 1e6),
        ("G", 1e9),
        ("T", 1e12),
        ("P", 1e15),
        ("E", 1e18),
        ("m", 1e-3),
    ];
    for (suffix, mult) in suffixes {
        if let Some(n) = s.strip_suffix(suffix) {
            let v: f64 = n.parse().ok()?;
            return (v >= 0.0 && v.is_finite()).then(|| (v * mult).ceil() as u64);
        }
    }
    let v: f64 = s.parse().ok()?;
    (v >= 0.0 && v.is_finite()).then(|| v.ceil() as u64)
}

/// A hard eviction threshold: below this much available, the node reports pressure.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Threshold {
    Bytes(u64),
    Percent(f64),
}

impl Threshold {
    fn crossed(self, available: u64, capacity: u64) -> bool {
        match self {
            Threshold::Bytes(b) => available < b,
            Threshold::Percent(p) => capacity > 0 && (available as f64) < p / 100.0 * capacity as f64,
        }
    }
}

/// kubelet's `--eviction-hard` signals this agent reports as node conditions; the default is
/// Kubernetes' `memory.available<100Mi,nodefs.available<10%,pid.available<10%`.
#[derive(Clone, Debug, PartialEq)]
pub struct Eviction {
    pub memory_available: Threshold,
    pub nodefs_available: Threshold,
    pub pid_available: Threshold,
}

impl Default for Eviction {
    fn default() -> Self {
        Eviction {
            memory_available: Threshold::Bytes(100 << 20),
            nodefs_available: Threshold::Percent(10.0),
            pid_available: Threshold::Percent(10.0),
        }
    }
}

impl std::str::FromStr for Eviction {
    type Err = Error;
    /// `signal<quantity|percent>` pairs, comma separated; signals not named keep their default.
    fn from_str(s: &str) -> Result<Self> {
        let mut e = Eviction::default();
        for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let bad = || Error::Eviction(part.to_string());
            let (signal, value) = part.split_once('<').ok_or_else(bad)?;
            let t = match value.trim().strip_suffix('%') {
                Some(p) => Threshold::Percent(
                    p.trim().parse::<f64>().ok().filter(|p| (0.0..=100.0).contains(p)).ok_or_else(bad)?,
                ),
                None => Threshold::Bytes(parse_bytes(value).ok_or_else(bad)?),
            };
            match signal.trim() {
                "memory.available" => e.memory_available = t,
                "nodefs.available" | "imagefs.available" => e.nodefs_available = t,
                "pid.available" => e.pid_available = t,
                _ => return Err(bad()),
            }
        }
        Ok(e)
    }
}

/// What the machine has, measured.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Capacity {
    pub cpu_millis: u64,
    pub memory_bytes: u64,
    pub ephemeral_bytes: u64,
    pub pods: u32,
}

impl Capacity {
    pub fn measure(config: &Config) -> Capacity {
        let cpus = std::thread::available_parallelism().map(|n| n.get() as u64).unwrap_or(1);
        let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
        let ephemeral_bytes =
            nix::sys::statvfs::statvfs(&config.root_dir).map(|s| s.blocks() * s.fragment_size()).unwrap_or(0);
        Capacity {
            cpu_millis: cpus * 1000,
            memory_bytes: meminfo_kib(&meminfo, "MemTotal").unwrap_or(0) * 1024,
            ephemeral_bytes,
            pods: config.max_pods,
        }
    }

    pub fn minus(&self, r: &Reserved) -> Capacity {
        Capacity {
            cpu_millis: self.cpu_millis.saturating_sub(r.cpu_millis),
            memory_bytes: self.memory_bytes.saturating_sub(r.memory_bytes),
            ephemeral_bytes: self.ephemeral_bytes.saturating_sub(r.ephemeral_bytes),
            pods: self.pods,
        }
    }

    /// As the API shows it: cpu in cores or millicores, memory in Ki, storage in bytes.
    pub fn to_quantities(&self) -> BTreeMap<String, Quantity> {
        let cpu = if self.cpu_millis.is_multiple_of(1000) {
            format!("{}", self.cpu_millis / 1000)
        } else {
            format!("{}m", self.cpu_millis)
        };
        BTreeMap::from([
            ("cpu".to_string(), Quantity(cpu)),
            ("memory".to_string(), Quantity(format!("{}Ki", self.memory_bytes / 1024))),
            ("ephemeral-storage".to_string(), Quantity(format!("{}", self.ephemeral_bytes))),
            ("pods".to_string(), Quantity(self.pods.to_string())),
        ])
    }
}

/// A `/proc/meminfo` field in KiB.
pub fn meminfo_kib(text: &str, field: &str) -> Option<u64> {
    text.lines()
        .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
}

/// The pressure signals, with Kubernetes' default hard eviction thresholds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Pressure {
    pub memory: bool,
    pub disk: bool,
    pub pid: bool,
}

impl Pressure {
    /// Available memory, root-dir filesystem space and pids against `--eviction-hard`.
    pub fn measure(config: &Config) -> Pressure {
        let t = &config.eviction_hard;
        let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
        let mem_total = meminfo_kib(&meminfo, "MemTotal").unwrap_or(0) * 1024;
        let memory =
            meminfo_kib(&meminfo, "MemAvailable").is_some_and(|kib| t.memory_available.crossed(kib * 1024, mem_total));
        let disk = nix::sys::statvfs::statvfs(&config.root_dir)
            .map(|s| {
                let f = s.fragment_size();
                t.nodefs_available.crossed(s.blocks_available() * f, s.blocks() * f)
            })
            .unwrap_or(false);
        let pid_max: u64 =
            std::fs::read_to_string("/proc/sys/kernel/pid_max").ok().and_then(|s| s.trim().parse().ok()).unwrap_or(0);
        let pids = std::fs::read_dir("/proc")
            .map(|d| {
                d.flatten().filter(|e| e.file_name().to_string_lossy().bytes().all(|b| b.is_ascii_digit())).count()
            })
            .unwrap_or(0) as u64;
        let pid = pid_max > 0 && t.pid_available.crossed(pid_max.saturating_sub(pids), pid_max);
        Pressure { memory, disk, pid }
    }
}

/// Kubernetes' four node conditions for these readings (lastTransitionTime filled by the caller).
pub fn conditions(p: Pressure, now: &Time) -> Vec<NodeCondition> {
    let cond = |type_: &str, status: bool, reason: &str, message: &str| NodeCondition {
        type_: type_.into(),
        status: if status { "True" } else { "False" }.into(),
        reason: Some(reason.into()),
        message: Some(message.into()),
        last_heartbeat_time: Some(now.clone()),
        last_transition_time: Some(now.clone()),
    };
    vec![
        if p.memory {
            cond("MemoryPressure", true, "KubeletHasInsufficientMemory", "kubelet has insufficient memory available")
        } else {
            cond("MemoryPressure", false, "KubeletHasSufficientMemory", "kubelet has sufficient memory available")
        },
        if p.disk {
            cond("DiskPressure", true, "KubeletHasDiskPressure", "kubelet has disk pressure")
        } else {
            cond("DiskPressure", false, "KubeletHasNoDiskPressure", "kubelet has no disk pressure")
        },
        if p.pid {
            cond("PIDPressure", true, "KubeletHasInsufficientPID", "kubelet has insufficient PID available")
        } else {
            cond("PIDPressure", false, "KubeletHasSufficientPID", "kubelet has sufficient PID available")
        },
        cond("Ready", true, "KubeletReady", "kubelet is posting ready status"),
    ]
}

/// Keeps each condition's lastTransitionTime from `old` when its status did not change.
pub fn carry_transitions(new: &mut [NodeCondition], old: &[NodeCondition]) {
    for c in new.iter_mut() {
        if let Some(o) = old.iter().find(|o| o.type_ == c.type_ && o.status == c.status) {
            c.last_transition_time = o.last_transition_time.clone();
        }
    }
}

/// Conditions equal apart from the heartbeat time.
fn same_conditions(a: &[NodeCondition], b: &[NodeCondition]) -> bool {
    let key = |c: &NodeCondition| (c.type_.clone(), c.status.clone(), c.reason.clone());
    let mut ka: Vec<_> = a.iter().map(key).collect();
    let mut kb: Vec<_> = b.iter().map(key).collect();
    ka.sort();
    kb.sort();
    ka == kb
}

fn os_image() -> String {
    let text = std::fs::read_to_string("/etc/os-release").unwrap_or_default();
    text.lines()
        .find_map(|l| l.strip_prefix("PRETTY_NAME="))
        .map(|v| v.trim_matches('"').to_string())
        .unwrap_or_else(|| "Linux".into())
}

/// The Go name of this machine's architecture, as Kubernetes reports it.
pub fn go_arch() -> &'static str {
    match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        "x86" => "386",
        "powerpc64" => "ppc64le",
        other => other,
    }
}

pub struct Node {
    client: kube::Client,
    config: Arc<Config>,
}

impl Node {
    pub fn new(client: kube::Client, config: Arc<Config>) -> Self {
        Node { client, config }
    }

    fn status(&self, now: &Time) -> NodeStatus {
        let capacity = Capacity::measure(&self.config);
        let allocatable = capacity.minus(&self.config.reserved);
        let uname = nix::sys::utsname::uname().ok();
        let kernel = uname.as_ref().map(|u| u.release().to_string_lossy().into_owned()).unwrap_or_default();
        let machine_id = std::fs::read_to_string("/etc/machine-id").map(|s| s.trim().to_string()).unwrap_or_default();
        let boot_id = std::fs::read_to_string("/proc/sys/kernel/random/boot_id")
            .map(|s| s.trim().to_string())
            .unwrap_or_default();
        let port = self.config.server_addr.map(|a| a.port()).unwrap_or(10250);
        NodeStatus {
            addresses: Some(vec![
                NodeAddress { type_: "InternalIP".into(), address: self.config.node_ip.to_string() },
                NodeAddress { type_: "Hostname".into(), address: self.config.node_name.clone() },
            ]),
            capacity: Some(capacity.to_quantities()),
            allocatable: Some(allocatable.to_quantities()),
            conditions: Some(conditions(Pressure::measure(&self.config), now)),
            daemon_endpoints: Some(NodeDaemonEndpoints {
                kubelet_endpoint: Some(DaemonEndpoint { port: port.into() }),
            }),
            node_info: Some(NodeSystemInfo {
                architecture: go_arch().into(),
                boot_id,
                container_runtime_version: format!("kaji://{}", env!("CARGO_PKG_VERSION")),
                kernel_version: kernel,
                kube_proxy_version: String::new(),
                kubelet_version: kaji_api::version::git_version(),
                machine_id: machine_id.clone(),
                operating_system: "linux".into(),
                os_image: os_image(),
                system_uuid: machine_id,
                ..NodeSystemInfo::default()
            }),
            ..NodeStatus::default()
        }
    }

    fn labels(&self) -> BTreeMap<String, String> {
        let mut labels = BTreeMap::from([
            ("kubernetes.io/hostname".to_string(), self.config.node_name.clone()),
            ("kubernetes.io/os".to_string(), "linux".to_string()),
            ("kubernetes.io/arch".to_string(), go_arch().to_string()),
            ("beta.kubernetes.io/os".to_string(), "linux".to_string()),
            ("beta.kubernetes.io/arch".to_string(), go_arch().to_string()),
        ]);
        labels.extend(self.config.node_labels.clone());
        labels
    }

    /// Creates the Node, or updates labels and status of an existing one (an agent restart).
    /// Returns the conditions it posted.
    pub async fn register(&self) -> Result<Vec<NodeCondition>> {
        let api: Api<KNode> = Api::all(self.client.clone());
        let now = Time(jiff::Timestamp::now());
        let err = |source| Error::Register { node: self.config.node_name.clone(), source };
        let node = KNode {
            metadata: ObjectMeta {
                name: Some(self.config.node_name.clone()),
                labels: Some(self.labels()),
                ..ObjectMeta::default()
            },
            ..KNode::default()
        };
        match api.create(&PostParams::default(), &node).await {
            Ok(_) => tracing::info!(node = %self.config.node_name, "registered node"),
            Err(kube::Error::Api(e)) if e.code == 409 => {
                let patch = json!({"metadata": {"labels": self.labels()}});
                api.patch(&self.config.node_name, &PatchParams::default(), &Patch::Merge(&patch)).await.map_err(err)?;
                tracing::info!(node = %self.config.node_name, "node already registered; updated it");
            }
            Err(e) => return Err(err(e)),
        }
        let mut status = self.status(&now);
        if let Ok(existing) = api.get_status(&self.config.node_name).await {
            let old = existing.status.and_then(|s| s.conditions).unwrap_or_default();
            if let Some(new) = status.conditions.as_mut() {
                carry_transitions(new, &old);
            }
        }
        api.patch_status(&self.config.node_name, &PatchParams::default(), &Patch::Merge(&json!({"status": status})))
            .await
            .map_err(err)?;
        Ok(status.conditions.unwrap_or_default())
    }

    /// Renews the Lease every `lease_renew_interval`; posts status when conditions change and at
    /// least every `node_status_report_frequency` (`posted`: what registration posted just now).
    pub async fn run(self, posted: Vec<NodeCondition>, mut stop: watch::Receiver<bool>) {
        let mut last_conditions = posted;
        let mut last_report = std::time::Instant::now();
        let check = Duration::from_secs(10).min(self.config.lease_renew_interval);
        let mut next_lease = std::time::Instant::now();
        let mut lease: Option<Lease> = None;
        loop {
            if std::time::Instant::now() >= next_lease {
                // The lease as last written is renewed without reading it first (as kubelet);
                // after a failure it is read again.
                lease = match self.renew_lease(lease.take()).await {
                    Ok(l) => Some(l),
                    Err(e) => {
                        tracing::warn!(error = %e, "cannot renew node lease");
                        None
                    }
                };
                next_lease = std::time::Instant::now() + self.config.lease_renew_interval;
            }
            let now = Time(jiff::Timestamp::now());
            let mut conds = conditions(Pressure::measure(&self.config), &now);
            carry_transitions(&mut conds, &last_conditions);
            let due = last_report.elapsed() >= self.config.node_status_report_frequency;
            if due || !same_conditions(&conds, &last_conditions) {
                match self.post_status(&now, &last_conditions).await {
                    Ok(c) => {
                        last_conditions = c;
                        last_report = std::time::Instant::now();
                    }
                    Err(e) => tracing::warn!(error = %e, "cannot update node status"),
                }
            }
            tokio::select! {
                _ = stop.wait_for(|s| *s) => return,
                _ = tokio::time::sleep(check) => {}
            }
        }
    }

    async fn post_status(&self, now: &Time, old: &[NodeCondition]) -> Result<Vec<NodeCondition>, kube::Error> {
        let api: Api<KNode> = Api::all(self.client.clone());
        let mut status = self.status(now);
        let previous = if old.is_empty() {
            api.get_status(&self.config.node_name).await?.status.and_then(|s| s.conditions).unwrap_or_default()
        } else {
            old.to_vec()
        };
        if let Some(new) = status.conditions.as_mut() {
            carry_transitions(new, &previous);
        }
        let conds = status.conditions.clone().unwrap_or_default();
        api.patch_status(&self.config.node_name, &PatchParams::default(), &Patch::Merge(&json!({"status": status})))
            .await?;
        Ok(conds)
    }

    /// Renews `last` (the lease as last written; read when `None`), creating it if missing.
    async fn renew_lease(&self, last: Option<Lease>) -> Result<Lease, kube::Error> {
        let api: Api<Lease> = Api::namespaced(self.client.clone(), "kube-node-lease");
        let name = &self.config.node_name;
        let now = MicroTime(jiff::Timestamp::now());
        let current = match last {
            Some(l) => Some(l),
            None => api.get_opt(name).await?,
        };
        match current {
            Some(mut lease) => {
                let spec = lease.spec.get_or_insert_with(LeaseSpec::default);
                spec.holder_identity = Some(name.clone());
                spec.lease_duration_seconds = Some(40);
                spec.renew_time = Some(now);
                lease.metadata.managed_fields = None;
                api.replace(name, &PostParams::default(), &lease).await
            }
            None => {
                let owner = Api::<KNode>::all(self.client.clone()).get(name).await?;
                let lease = Lease {
                    metadata: ObjectMeta {
                        name: Some(name.clone()),
                        namespace: Some("kube-node-lease".into()),
                        owner_references: Some(vec![OwnerReference {
                            api_version: "v1".into(),
                            kind: "Node".into(),
                            name: name.clone(),
                            uid: owner.metadata.uid.unwrap_or_default(),
                            ..OwnerReference::default()
                        }]),
                        ..ObjectMeta::default()
                    },
                    spec: Some(LeaseSpec {
                        holder_identity: Some(name.clone()),
                        lease_duration_seconds: Some(40),
                        renew_time: Some(now),
                        ..LeaseSpec::default()
                    }),
                };
                api.create(&PostParams::default(), &lease).await
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reserved_parses_kubernetes_quantities() {
        let r: Reserved = "cpu=250m,memory=256Mi,ephemeral-storage=1Gi".parse().expect("valid");
        assert_eq!(r, Reserved { cpu_millis: 250, memory_bytes: 256 << 20, ephemeral_bytes: 1 << 30 });
        assert!("cpu=lots".parse::<Reserved>().is_err());
        assert!("gpu=1".parse::<Reserved>().is_err());
        assert_eq!(parse_cpu_millis("1.5"), Some(1500));
        assert_eq!(parse_bytes("1G"), Some(1_000_000_000));
        assert_eq!(parse_bytes("64Mi"), Some(64 << 20));
    }

    #[test]
    fn eviction_thresholds_parse_as_kubelet_flags() {
        let e: Eviction = "memory.available<1Gi, nodefs.available<0%".parse().expect("valid");
        assert_eq!(e.memory_available, Threshold::Bytes(1 << 30));
        assert_eq!(e.nodefs_available, Threshold::Percent(0.0));
        assert_eq!(e.pid_available, Eviction::default().pid_available);
        assert!("nodefs.available<200%".parse::<Eviction>().is_err());
        assert!("cpu.available<1".parse::<Eviction>().is_err());
        assert!(Threshold::Percent(10.0).crossed(5, 100) && !Threshold::Percent(0.0).crossed(0, 100));
        assert!(Threshold::Bytes(100).crossed(99, 1000) && !Threshold::Bytes(100).crossed(100, 1000));
    }

    #[test]
    fn allocatable_is_capacity_minus_reserved_and_shown_as_kubernetes_does() {
        let cap = Capacity { cpu_millis: 2000, memory_bytes: 4 << 30, ephemeral_bytes: 1000, pods: 110 };
        let alloc = cap.minus(&Reserved { cpu_millis: 100, memory_bytes: 1 << 30, ephemeral_bytes: 2000 });
        let q = alloc.to_quantities();
        assert_eq!(q["cpu"].0, "1900m");
        assert_eq!(q["memory"].0, format!("{}Ki", 3 << 20));
        assert_eq!(q["ephemeral-storage"].0, "0");
        assert_eq!(cap.to_quantities()["cpu"].0, "2");
    }

    #[test]
    fn pressure_turns_conditions_true_with_kubelet_reasons() {
        let now = Time(jiff::Timestamp::UNIX_EPOCH);
        let c = conditions(Pressure { memory: true, disk: false, pid: false }, &now);
        let mem = c.iter().find(|c| c.type_ == "MemoryPressure").expect("present");
        assert_eq!((mem.status.as_str(), mem.reason.as_deref()), ("True", Some("KubeletHasInsufficientMemory")));
        let ready = c.iter().find(|c| c.type_ == "Ready").expect("present");
        assert_eq!(ready.reason.as_deref(), Some("KubeletReady"));
    }

    #[test]
    fn transition_time_is_kept_while_status_holds() {
        let t0 = Time(jiff::Timestamp::UNIX_EPOCH);
        let t1 = Time(jiff::Timestamp::now());
        let old = conditions(Pressure { memory: false, disk: false, pid: false }, &t0);
        let mut new = conditions(Pressure { memory: true, disk: false, pid: false }, &t1);
        carry_transitions(&mut new, &old);
        let get = |t: &str| new.iter().find(|c| c.type_ == t).and_then(|c| c.last_transition_time.clone());
        assert_eq!(get("DiskPressure"), Some(t0.clone()));
        assert_eq!(get("MemoryPressure"), Some(t1));
        assert!(!same_conditions(&new, &old));
    }

    #[test]
    fn meminfo_fields_are_read_in_kib() {
        let text = "MemTotal:       24576000 kB\nMemFree:   100 kB\nMemAvailable:   2000 kB\n";
        assert_eq!(meminfo_kib(text, "MemTotal"), Some(24_576_000));
        assert_eq!(meminfo_kib(text, "MemAvailable"), Some(2000));
        assert_eq!(meminfo_kib(text, "Nope"), None);
    }
}
