//! Pod + container + image → OCI runtime spec: the process (command line, env, cwd, user,
//! capabilities, no_new_privs), the rootfs as overlay lowerdirs, the sandbox namespaces to join,
//! volume and /etc mounts, cgroup limits and seccomp. Pure: everything it needs is passed in.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use k8s_openapi::api::core::v1::{Container, Pod, SecurityContext};
use kaji_runtime::spec::{default_spec, SpecOptions, ANNOTATION_LOWERDIRS};
use oci_spec::runtime::{LinuxNamespaceType, Spec};
use serde_json::{json, Value};

/// Everything outside the pod object that shapes the spec.
pub struct Inputs<'a> {
    pub pod: &'a Pod,
    pub container: &'a Container,
    /// Image layers, lowest first.
    pub layers: &'a [PathBuf],
    pub image: &'a kaji_image::ImageConfig,
    pub env: Vec<String>,
    pub args: Vec<String>,
    pub joins: Vec<(LinuxNamespaceType, PathBuf)>,
    pub cgroups_path: PathBuf,
    /// Host path of each volume, by name.
    pub volumes: &'a HashMap<String, PathBuf>,
    /// The bind made for each mount with a subPath (`crate::subpath`), by the mount's index.
    pub subpaths: &'a HashMap<usize, PathBuf>,
    pub pod_dir: &'a crate::volumes::PodDir,
    /// Host file bind-mounted at terminationMessagePath.
    pub termination_log: &'a Path,
    pub annotations: HashMap<String, String>,
    /// `hostUsers: false`: the first host id of the pod's user namespace (joined through
    /// `joins`), whose 65536 ids the rootfs and every bind mount are idmapped to.
    pub userns: Option<u32>,
}

/// Why a spec cannot be built (a `CreateContainerConfigError`/`CreateContainerError` message).
pub type Error = String;

/// Whether the volume itself is read-only for every container (`persistentVolumeClaim.readOnly`,
/// as kubelet forces it whatever the volumeMount says).
fn volume_read_only(pod: &Pod, name: &str) -> bool {
    pod.spec
        .iter()
        .flat_map(|s| s.volumes.iter().flatten())
        .any(|v| v.name == name && v.persistent_volume_claim.as_ref().and_then(|c| c.read_only).unwrap_or(false))
}

/// The effective security context: the container's fields over the pod's.
fn user_ids(pod: &Pod, sc: Option<&SecurityContext>) -> (Option<i64>, Option<i64>) {
    let psc = pod.spec.as_ref().and_then(|s| s.security_context.as_ref());
    let uid = sc.and_then(|s| s.run_as_user).or_else(|| psc.and_then(|p| p.run_as_user));
    let gid = sc.and_then(|s| s.run_as_group).or_else(|| psc.and_then(|p| p.run_as_group));
    (uid, gid)
}

/// Resolves an image `User` ("name", "uid", "uid:gid", "name:group") against the image's
/// /etc/passwd and /etc/group (looked up through the layers, top first).
pub fn resolve_image_user(user: &str, layers: &[PathBuf]) -> Result<(u32, u32), Error> {
    if user.is_empty() {
        return Ok((0, 0));
    }
    let (u, g) = match user.split_once(':') {
        Some((u, g)) => (u, Some(g)),
        None => (user, None),
    };
    let read =
        |file: &str| layers.iter().rev().find_map(|l| std::fs::read_to_string(l.join(file)).ok()).unwrap_or_default();
    let passwd = read("etc/passwd");
    let (uid, primary) = match u.parse::<u32>() {
        Ok(n) => {
            (n, passwd.lines().find(|l| l.split(':').nth(2) == Some(u)).and_then(|l| l.split(':').nth(3)?.parse().ok()))
        }
        Err(_) => {
            let line = passwd
                .lines()
                .find(|l| l.split(':').next() == Some(u))
                .ok_or_else(|| format!("unable to find user {u}: no matching entries in passwd file"))?;
            let f: Vec<&str> = line.split(':').collect();
            (f.get(2).and_then(|v| v.parse().ok()).unwrap_or(0), f.get(3).and_then(|v| v.parse().ok()))
        }
    };
    let gid = match g {
        None => primary.unwrap_or(0),
        Some(g) => match g.parse::<u32>() {
            Ok(n) => n,
            Err(_) => {
                let groups = read("etc/group");
                groups
                    .lines()
                    .find(|l| l.split(':').next() == Some(g))
                    .and_then(|l| l.split(':').nth(2)?.parse().ok())
                    .ok_or_else(|| format!("unable to find group {g}: no matching entries in group file"))?
            }
        },
    };
    Ok((uid, gid))
}

fn cap_name(c: &str) -> String {
    let up = c.to_ascii_uppercase();
    if up.starts_with("CAP_") {
        up
    } else {
        format!("CAP_{up}")
    }
}

/// Every capability this process holds (for `privileged` and `add: [ALL]`), as containerd's
/// `WithAllCurrentCapabilities`: asking for one the agent lacks (a node whose bounding set was
/// narrowed, e.g. without CAP_SYS_RESOURCE) would fail the container with "capset failure".
fn all_caps() -> Vec<String> {
    static BOUNDING: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
    let held = *BOUNDING.get_or_init(|| {
        std::fs::read_to_string("/proc/self/status")
            .ok()
            .and_then(|s| s.lines().find_map(|l| l.strip_prefix("CapBnd:").map(|v| v.trim().to_string())))
            .and_then(|v| u64::from_str_radix(&v, 16).ok())
            .unwrap_or(u64::MAX)
    });
    known_caps().into_iter().enumerate().filter(|(bit, _)| held & (1u64 << bit) != 0).map(|(_, c)| c).collect()
}

/// The kernel's capabilities in number order (CAP_CHOWN = 0 … CAP_CHECKPOINT_RESTORE = 40).
fn known_caps() -> Vec<String> {
    [
        "CHOWN",
        "DAC_OVERRIDE",
        "DAC_READ_SEARCH",
        "FOWNER",
        "FSETID",
        "KILL",
        "SETGID",
        "SETUID",
        "SETPCAP",
        "LINUX_IMMUTABLE",
        "NET_BIND_SERVICE",
        "NET_BROADCAST",
        "NET_ADMIN",
        "NET_RAW",
        "IPC_LOCK",
        "IPC_OWNER",
        "SYS_MODULE",
        "SYS_RAWIO",
        "SYS_CHROOT",
        "SYS_PTRACE",
        "SYS_PACCT",
        "SYS_ADMIN",
        "SYS_BOOT",
        "SYS_NICE",
        "SYS_RESOURCE",
        "SYS_TIME",
        "SYS_TTY_CONFIG",
        "MKNOD",
        "LEASE",
        "AUDIT_WRITE",
        "AUDIT_CONTROL",
        "SETFCAP",
        "MAC_OVERRIDE",
        "MAC_ADMIN",
        "SYSLOG",
        "WAKE_ALARM",
        "BLOCK_SUSPEND",
        "AUDIT_READ",
        "PERFMON",
        "BPF",
        "CHECKPOINT_RESTORE",
    ]
    .iter()
    .map(|c| format!("CAP_{c}"))
    .collect()
}

/// The capability set: Docker's default, plus `add`, minus `drop` (either may say ALL).
pub fn capabilities(sc: Option<&SecurityContext>, defaults: Vec<String>) -> Vec<String> {
    if sc.and_then(|s| s.privileged).unwrap_or(false) {
        return all_caps();
    }
    let caps = sc.and_then(|s| s.capabilities.as_ref());
    let add: Vec<String> = caps.and_then(|c| c.add.clone()).unwrap_or_default().iter().map(|c| cap_name(c)).collect();
    let drop: Vec<String> = caps.and_then(|c| c.drop.clone()).unwrap_or_default().iter().map(|c| cap_name(c)).collect();
    let mut set: Vec<String> = if drop.iter().any(|d| d == "CAP_ALL") { Vec::new() } else { defaults };
    set.retain(|c| !drop.contains(c));
    if add.iter().any(|a| a == "CAP_ALL") {
        return all_caps();
    }
    for a in add {
        if !set.contains(&a) {
            set.push(a);
        }
    }
    set.sort();
    set
}

fn bind(dest: &str, source: &Path, readonly: bool) -> Value {
    let mut options = vec!["rbind", "rprivate", "nosuid", "nodev"];
    if readonly {
        options.push("ro");
    }
    json!({"destination": dest, "type": "bind", "source": source, "options": options})
}

/// Builds the container's OCI spec.
pub fn build(i: &Inputs<'_>) -> Result<Spec, Error> {
    let c = i.container;
    let sc = c.security_context.as_ref();
    let privileged = sc.and_then(|s| s.privileged).unwrap_or(false);
    let cwd = c
        .working_dir
        .clone()
        .filter(|w| !w.is_empty())
        .or_else(|| Some(i.image.working_dir.clone()).filter(|w| !w.is_empty()))
        .unwrap_or_else(|| "/".into());
    let mut env = i.env.clone();
    if !env.iter().any(|e| e.starts_with("PATH=")) {
        env.insert(0, "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin".into());
    }
    if !env.iter().any(|e| e.starts_with("HOSTNAME=")) {
        env.push(format!("HOSTNAME={}", i.pod.metadata.name.clone().unwrap_or_default()));
    }
    // As containerd's CRI plugin does for a terminal.
    if c.tty == Some(true) && !env.iter().any(|e| e.starts_with("TERM=")) {
        env.push("TERM=xterm".into());
    }
    let opts = SpecOptions {
        args: i.args.clone(),
        env,
        cwd,
        hostname: None,
        rootfs: PathBuf::from("rootfs"),
        cgroups_path: Some(i.cgroups_path.clone()),
        join: i.joins.clone(),
        readonly_rootfs: sc.and_then(|s| s.read_only_root_filesystem).unwrap_or(false),
        // A cgroup namespace on cgroup v2 nodes (the runtime's default, containerd's too).
        ..SpecOptions::default()
    };
    let base = default_spec(&opts).map_err(|e| format!("cannot build the container spec: {e}"))?;
    let mut spec = serde_json::to_value(&base).map_err(|e| e.to_string())?;

    // The host namespaces the pod shares (hostNetwork, hostIPC, hostPID) are simply not listed.
    let joined: Vec<LinuxNamespaceType> = i.joins.iter().map(|(t, _)| *t).collect();
    let host_pid = i.pod.spec.as_ref().and_then(|s| s.host_pid).unwrap_or(false);
    if let Some(list) = spec["linux"]["namespaces"].as_array_mut() {
        list.retain(|ns| {
            let t = ns["type"].as_str().unwrap_or("");
            let shared = |ty: LinuxNamespaceType, name: &str| t == name && !joined.contains(&ty);
            !(shared(LinuxNamespaceType::Network, "network")
                || shared(LinuxNamespaceType::Ipc, "ipc")
                || shared(LinuxNamespaceType::Uts, "uts")
                || (host_pid && t == "pid"))
        });
        // The base spec's default hostname cannot be set without a UTS namespace of the
        // container's own: a hostNetwork pod shares the node's (and the node's name).
        if !list.iter().any(|ns| ns["type"] == "uts") {
            if let Some(o) = spec.as_object_mut() {
                o.remove("hostname");
            }
        }
    }

    // User and groups.
    let (uid, gid) = user_ids(i.pod, sc);
    let (image_uid, image_gid) = resolve_image_user(&i.image.user, i.layers)?;
    let uid = uid.map(|u| u as u32).unwrap_or(image_uid);
    let gid = gid.map(|g| g as u32).unwrap_or(if uid == image_uid { image_gid } else { 0 });
    if sc
        .and_then(|s| s.run_as_non_root)
        .or_else(|| i.pod.spec.as_ref().and_then(|s| s.security_context.as_ref()).and_then(|p| p.run_as_non_root))
        == Some(true)
        && uid == 0
    {
        return Err("container has runAsNonRoot and image will run as root".into());
    }
    let psc = i.pod.spec.as_ref().and_then(|s| s.security_context.as_ref());
    let mut extra: Vec<u32> =
        psc.and_then(|p| p.supplemental_groups.clone()).unwrap_or_default().iter().map(|g| *g as u32).collect();
    if let Some(fs) = psc.and_then(|p| p.fs_group) {
        extra.push(fs as u32);
    }
    spec["process"]["user"] = json!({"uid": uid, "gid": gid, "additionalGids": extra});

    // Capabilities, privilege escalation, seccomp, masked paths.
    let defaults: Vec<String> = spec["process"]["capabilities"]["bounding"]
        .as_array()
        .map(|a| a.iter().filter_map(|v| v.as_str().map(str::to_string)).collect())
        .unwrap_or_default();
    let caps = capabilities(sc, defaults);
    for set in ["bounding", "effective", "permitted"] {
        spec["process"]["capabilities"][set] = json!(caps);
    }
    let no_new_privs = sc.and_then(|s| s.allow_privilege_escalation) == Some(false) && !privileged;
    spec["process"]["noNewPrivileges"] = json!(no_new_privs);
    // `tty: true` (what `kubectl run -it` sets): the process runs on a terminal of its own.
    spec["process"]["terminal"] = json!(c.tty == Some(true));
    // As many open files as containerd gives, but never above what the agent itself may have
    // (the init may not raise a hard limit).
    let (_, hard) = nix::sys::resource::getrlimit(nix::sys::resource::Resource::RLIMIT_NOFILE).unwrap_or((1024, 1024));
    let nofile = hard.min(1 << 20);
    spec["process"]["rlimits"] = json!([{"type": "RLIMIT_NOFILE", "hard": nofile, "soft": nofile}]);
    let seccomp = sc
        .and_then(|s| s.seccomp_profile.as_ref())
        .or_else(|| psc.and_then(|p| p.seccomp_profile.as_ref()))
        .map(|p| p.type_.as_str());
    let linux = spec["linux"].as_object_mut().ok_or("spec without linux section")?;
    if privileged || seccomp == Some("Unconfined") {
        linux.remove("seccomp");
    }
    if privileged {
        linux.remove("maskedPaths");
        linux.remove("readonlyPaths");
    }

    // Resources of this container.
    let res = c.resources.as_ref();
    let lim = |n: &str| res.and_then(|r| r.limits.as_ref()).and_then(|l| l.get(n)).map(|q| q.0.clone());
    let req = |n: &str| res.and_then(|r| r.requests.as_ref()).and_then(|l| l.get(n)).map(|q| q.0.clone());
    // Devices: none but the runtime's defaults (null, zero, random, tty, pts...), as
    // containerd gives a pod's containers; a privileged container gets them all (the v1 devices
    // controller, or on cgroup v2 the runtime's eBPF device program, enforces it).
    let mut resources = json!({"devices": [{"allow": privileged, "access": "rwm"}]});
    if let Some(m) = lim("memory") {
        let bytes = crate::node::parse_bytes(&m).ok_or_else(|| format!("invalid memory limit {m:?}"))?;
        resources["memory"] = json!({"limit": bytes, "swap": bytes});
    }
    let mut cpu = json!({});
    if let Some(q) = lim("cpu") {
        let millis = crate::node::parse_cpu_millis(&q).ok_or_else(|| format!("invalid cpu limit {q:?}"))?;
        cpu["quota"] = json!(((millis * 100).max(1000)) as i64);
        cpu["period"] = json!(100000u64);
    }
    let req_millis = match req("cpu").or_else(|| lim("cpu")) {
        Some(q) => crate::node::parse_cpu_millis(&q).ok_or_else(|| format!("invalid cpu request {q:?}"))?,
        None => 0,
    };
    cpu["shares"] = json!(crate::cgroup::shares(req_millis));
    resources["cpu"] = cpu;
    linux.insert("resources".into(), resources);

    // Mounts: defaults, then /etc files, termination log, volumes (later ones win by destination).
    let mut mounts: Vec<Value> = spec["mounts"].as_array().cloned().unwrap_or_default();
    if privileged {
        // As containerd gives privileged containers: their cgroups writable.
        for m in mounts.iter_mut().filter(|m| m["type"] == "cgroup") {
            if let Some(o) = m["options"].as_array_mut() {
                o.retain(|o| o != "ro");
            }
        }
    }
    let host_network = i.pod.spec.as_ref().and_then(|s| s.host_network).unwrap_or(false);
    let mut extra_mounts =
        vec![bind("/etc/hosts", &i.pod_dir.hosts(), false), bind("/etc/resolv.conf", &i.pod_dir.resolv_conf(), false)];
    if !host_network {
        extra_mounts.push(bind("/etc/hostname", &i.pod_dir.hostname(), false));
    }
    let tm = c.termination_message_path.clone().unwrap_or_else(|| "/dev/termination-log".into());
    extra_mounts.push(bind(&tm, i.termination_log, false));
    for (idx, vm) in c.volume_mounts.iter().flatten().enumerate() {
        let Some(src) = i.volumes.get(&vm.name) else {
            return Err(format!("volume {:?} not found in the pod's volumes", vm.name));
        };
        // Never the volume joined with the subPath: that path is the container's to redirect.
        let has_sub = [&vm.sub_path, &vm.sub_path_expr].iter().any(|s| s.as_deref().is_some_and(|s| !s.is_empty()));
        let src = match i.subpaths.get(&idx) {
            Some(bound) => bound,
            None if has_sub => {
                return Err(format!("subPath of volumeMount {:?} of container {:?} not prepared", vm.name, c.name))
            }
            None => src,
        };
        extra_mounts.push(bind(
            &vm.mount_path,
            src,
            vm.read_only.unwrap_or(false) || volume_read_only(i.pod, &vm.name),
        ));
    }
    for m in extra_mounts {
        mounts.retain(|x| x["destination"] != m["destination"]);
        mounts.push(m);
    }
    // In the pod's user namespace: the joined namespace's maps (the runtime idmaps the rootfs
    // with them) and every bind mount idmapped the same way, so the host's root is the
    // container's root there (containerd's idmapped mounts for Kubernetes).
    if let (Some(start), Some((_, path))) = (i.userns, i.joins.iter().find(|(t, _)| *t == LinuxNamespaceType::User)) {
        let maps = json!([{"containerID": 0, "hostID": start, "size": crate::userns::LENGTH}]);
        if let Some(list) = spec["linux"]["namespaces"].as_array_mut() {
            list.insert(0, json!({"type": "user", "path": path}));
        }
        spec["linux"]["uidMappings"] = maps.clone();
        spec["linux"]["gidMappings"] = maps.clone();
        for m in mounts.iter_mut() {
            let bind = m["type"] == "bind" || m["options"].as_array().is_some_and(|o| o.contains(&json!("rbind")));
            if bind {
                m["uidMappings"] = maps.clone();
                m["gidMappings"] = maps.clone();
            }
        }
    }
    spec["mounts"] = json!(mounts);

    // Rootfs layers (top first for overlayfs) and the agent's own bookkeeping.
    let lower: Vec<String> = i.layers.iter().rev().map(|p| p.display().to_string()).collect();
    let mut annotations = i.annotations.clone();
    annotations.insert(ANNOTATION_LOWERDIRS.into(), lower.join(":"));
    spec["annotations"] = json!(annotations);
    serde_json::from_value(spec).map_err(|e| format!("cannot build the container spec: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(v: Value) -> Pod {
        serde_json::from_value(v).expect("valid pod")
    }

    fn inputs_spec(p: &Pod, layers: &[PathBuf]) -> Result<Value, Error> {
        let image = kaji_image::ImageConfig { user: String::new(), working_dir: "/srv".into(), ..Default::default() };
        let volumes = HashMap::from([("data".to_string(), PathBuf::from("/var/lib/kaji/pods/u/volumes/data"))]);
        let subpaths = HashMap::new();
        let dir = crate::volumes::PodDir(PathBuf::from("/var/lib/kaji/pods/u"));
        let i = Inputs {
            pod: p,
            container: &p.spec.as_ref().expect("spec").containers[0],
            layers,
            image: &image,
            env: vec!["A=1".into()],
            args: vec!["/bin/sh".into()],
            joins: vec![(LinuxNamespaceType::Network, PathBuf::from("/ns/net"))],
            cgroups_path: PathBuf::from("/kaji/kubepods/podu/c1"),
            volumes: &volumes,
            subpaths: &subpaths,
            pod_dir: &dir,
            termination_log: Path::new("/var/lib/kaji/pods/u/termination/c-0"),
            annotations: HashMap::new(),
            userns: None,
        };
        build(&i).map(|s| serde_json::to_value(s).expect("serializes"))
    }

    #[test]
    fn a_read_only_claim_is_mounted_read_only_whatever_the_mount_says() {
        let options = |claim_read_only: bool| {
            let p = pod(json!({"spec": {
                "volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": "c", "readOnly": claim_read_only}}],
                "containers": [{"name": "c", "volumeMounts": [{"name": "data", "mountPath": "/data"}]}]}}));
            let s = inputs_spec(&p, &[]).expect("builds");
            let data = s["mounts"].as_array().expect("mounts").iter().find(|m| m["destination"] == "/data").cloned();
            data.expect("volume")["options"].as_array().expect("options").contains(&json!("ro"))
        };
        assert!(options(true));
        assert!(!options(false));
    }

    #[test]
    fn container_fields_map_onto_the_oci_spec() {
        let p = pod(json!({"metadata": {"name": "web"}, "spec": {
            "securityContext": {"runAsUser": 1000, "supplementalGroups": [5]},
            "containers": [{"name": "c", "workingDir": "/work",
                "resources": {"limits": {"memory": "64Mi", "cpu": "500m"}, "requests": {"cpu": "250m"}},
                "securityContext": {"runAsGroup": 2000, "readOnlyRootFilesystem": true,
                    "allowPrivilegeEscalation": false, "capabilities": {"add": ["NET_ADMIN"], "drop": ["KILL"]}},
                "volumeMounts": [{"name": "data", "mountPath": "/data", "readOnly": true}]}]}}));
        let layers = [PathBuf::from("/l/a"), PathBuf::from("/l/b")];
        let s = inputs_spec(&p, &layers).expect("builds");
        assert_eq!(s["process"]["user"], json!({"uid": 1000, "gid": 2000, "additionalGids": [5]}));
        assert_eq!(s["process"]["cwd"], "/work");
        assert_eq!(s["process"]["noNewPrivileges"], true);
        assert_eq!(s["root"]["readonly"], true);
        let caps: Vec<&str> = s["process"]["capabilities"]["bounding"]
            .as_array()
            .expect("caps")
            .iter()
            .filter_map(|v| v.as_str())
            .collect();
        assert!(caps.contains(&"CAP_NET_ADMIN") && !caps.contains(&"CAP_KILL") && caps.contains(&"CAP_CHOWN"));
        assert_eq!(s["linux"]["resources"]["memory"]["limit"], 64 << 20);
        assert_eq!(s["linux"]["resources"]["cpu"], json!({"quota": 50000, "period": 100000, "shares": 256}));
        assert_eq!(s["linux"]["resources"]["devices"], json!([{"allow": false, "access": "rwm"}]));
        assert_eq!(s["annotations"][ANNOTATION_LOWERDIRS], "/l/b:/l/a", "overlay wants the top layer first");
        let data =
            s["mounts"].as_array().expect("mounts").iter().find(|m| m["destination"] == "/data").expect("volume");
        assert!(data["options"].as_array().expect("options").contains(&json!("ro")));
        let kinds: Vec<&str> =
            s["linux"]["namespaces"].as_array().expect("ns").iter().filter_map(|n| n["type"].as_str()).collect();
        assert!(kinds.contains(&"network") && kinds.contains(&"mount") && kinds.contains(&"pid"));
        assert!(!kinds.contains(&"uts") && !kinds.contains(&"ipc"), "not joined means the host's: {kinds:?}");
        // The runtime refuses a hostname without a UTS namespace of the container's own.
        assert!(s.get("hostname").is_none(), "{}", s["hostname"]);
    }

    #[test]
    fn containers_see_their_own_cgroups_read_only() {
        let p = pod(json!({"spec": {"containers": [{"name": "c"}]}}));
        let s = inputs_spec(&p, &[]).expect("builds");
        let mounts = s["mounts"].as_array().expect("mounts");
        let cg = mounts.iter().find(|m| m["destination"] == "/sys/fs/cgroup").expect("cgroup mount");
        assert_eq!(cg["type"], "cgroup");
        assert!(cg["options"].as_array().expect("options").contains(&json!("ro")));
        let kinds: Vec<&str> =
            s["linux"]["namespaces"].as_array().expect("ns").iter().filter_map(|n| n["type"].as_str()).collect();
        assert_eq!(kinds.contains(&"cgroup"), kaji_runtime::cgroups::is_unified(), "{kinds:?}");
        let p = pod(json!({"spec": {"containers": [{"name": "c", "securityContext": {"privileged": true}}]}}));
        let s = inputs_spec(&p, &[]).expect("builds");
        let cg = s["mounts"].as_array().expect("mounts").iter().find(|m| m["type"] == "cgroup").cloned();
        assert!(cg.is_some_and(|m| !m["options"].as_array().is_some_and(|o| o.contains(&json!("ro")))));
    }

    #[test]
    fn privileged_gets_every_capability_and_no_seccomp() {
        let p = pod(json!({"spec": {"containers": [{"name": "c", "securityContext": {"privileged": true}}]}}));
        let s = inputs_spec(&p, &[]).expect("builds");
        assert!(s["linux"].get("seccomp").is_none());
        assert!(s["process"]["capabilities"]["bounding"].as_array().expect("caps").contains(&json!("CAP_SYS_ADMIN")));
        assert_eq!(s["process"]["noNewPrivileges"], false);
        assert_eq!(s["linux"]["resources"]["devices"], json!([{"allow": true, "access": "rwm"}]));
    }

    #[test]
    fn run_as_non_root_refuses_root_and_bad_sub_paths_fail() {
        let p = pod(json!({"spec": {"containers": [{"name": "c", "securityContext": {"runAsNonRoot": true}}]}}));
        assert_eq!(inputs_spec(&p, &[]).expect_err("root"), "container has runAsNonRoot and image will run as root");
        let p = pod(json!({"spec": {"containers": [{"name": "c",
            "volumeMounts": [{"name": "data", "mountPath": "/d", "subPath": "../../etc"}]}]}}));
        assert_eq!(
            inputs_spec(&p, &[]).expect_err("not prepared"),
            "subPath of volumeMount \"data\" of container \"c\" not prepared",
            "a subPath is only ever mounted through its prepared bind, never joined to the volume here"
        );
        let p = pod(
            json!({"spec": {"containers": [{"name": "c", "volumeMounts": [{"name": "nope", "mountPath": "/d"}]}]}}),
        );
        assert!(inputs_spec(&p, &[]).is_err());
    }

    #[test]
    fn privileged_gets_every_capability_the_agent_holds_and_no_other() {
        let known = known_caps();
        assert_eq!((known[21].as_str(), known[24].as_str(), known.len()), ("CAP_SYS_ADMIN", "CAP_SYS_RESOURCE", 41));
        let status = std::fs::read_to_string("/proc/self/status").expect("status");
        let bnd = status.lines().find_map(|l| l.strip_prefix("CapBnd:")).expect("CapBnd");
        let bnd = u64::from_str_radix(bnd.trim(), 16).expect("hex");
        let want: Vec<String> =
            known.iter().enumerate().filter(|(b, _)| bnd & (1 << b) != 0).map(|(_, c)| c.clone()).collect();
        assert_eq!(all_caps(), want);
    }

    #[test]
    fn image_users_resolve_through_the_layers() {
        let dir = tempfile::tempdir().expect("temp dir");
        let (low, high) = (dir.path().join("low"), dir.path().join("high"));
        std::fs::create_dir_all(low.join("etc")).expect("mkdir");
        std::fs::create_dir_all(high.join("etc")).expect("mkdir");
        std::fs::write(low.join("etc/passwd"), "root:x:0:0::/:/bin/sh\n").expect("write");
        std::fs::write(high.join("etc/passwd"), "root:x:0:0::/:/bin/sh\napp:x:1001:1002::/:/bin/sh\n").expect("write");
        std::fs::write(high.join("etc/group"), "staff:x:50:\n").expect("write");
        let layers = [low, high];
        assert_eq!(resolve_image_user("app", &layers), Ok((1001, 1002)));
        assert_eq!(resolve_image_user("app:staff", &layers), Ok((1001, 50)));
        assert_eq!(resolve_image_user("7:8", &layers), Ok((7, 8)));
        assert!(resolve_image_user("ghost", &layers).is_err());
    }
    #[test]
    fn a_pod_in_a_user_namespace_joins_it_and_idmaps_its_bind_mounts() {
        let p = pod(json!({"spec": {"hostUsers": false,
            "volumes": [{"name": "data", "emptyDir": {}}],
            "containers": [{"name": "c", "volumeMounts": [{"name": "data", "mountPath": "/data"}]}]}}));
        let image = kaji_image::ImageConfig::default();
        let volumes = HashMap::from([("data".to_string(), PathBuf::from("/pods/u/volumes/data"))]);
        let subpaths = HashMap::new();
        let dir = crate::volumes::PodDir(PathBuf::from("/pods/u"));
        let i = Inputs {
            pod: &p,
            container: &p.spec.as_ref().expect("spec").containers[0],
            layers: &[],
            image: &image,
            env: vec![],
            args: vec!["/bin/sh".into()],
            joins: vec![
                (LinuxNamespaceType::User, PathBuf::from("/pods/u/ns/user")),
                (LinuxNamespaceType::Network, PathBuf::from("/pods/u/ns/net")),
            ],
            cgroups_path: PathBuf::from("/kaji/kubepods/podu/c1"),
            volumes: &volumes,
            subpaths: &subpaths,
            pod_dir: &dir,
            termination_log: Path::new("/pods/u/termination/c-0"),
            annotations: HashMap::new(),
            userns: Some(131072),
        };
        let s = serde_json::to_value(build(&i).expect("builds")).expect("serializes");
        let maps = json!([{"containerID": 0, "hostID": 131072, "size": 65536}]);
        assert_eq!(s["linux"]["namespaces"][0], json!({"type": "user", "path": "/pods/u/ns/user"}));
        assert_eq!(s["linux"]["uidMappings"], maps);
        assert_eq!(s["linux"]["gidMappings"], maps);
        let mounts = s["mounts"].as_array().expect("mounts");
        for dest in ["/data", "/etc/hosts", "/etc/resolv.conf", "/etc/hostname", "/dev/termination-log"] {
            let m = mounts.iter().find(|m| m["destination"] == dest).expect(dest);
            assert_eq!((&m["uidMappings"], &m["gidMappings"]), (&maps, &maps), "{dest}");
        }
        let proc = mounts.iter().find(|m| m["destination"] == "/proc").expect("proc");
        assert!(proc.get("uidMappings").is_none(), "only bind mounts are idmapped");
    }
}
