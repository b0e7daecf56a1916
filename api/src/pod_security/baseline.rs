//! The baseline checks (`policy/check_*.go` at level baseline), in the registry's order (by ID).

use super::{bool_at, containers, containers_phrase, join_quote, name, pluralize, sorted, str_at, Check, Violation};
use serde_json::Value;

pub(super) const CHECKS: &[Check] = &[
    Check { id: "appArmorProfile", since: 0, overrides: &[], run: app_armor },
    Check { id: "capabilities_baseline", since: 0, overrides: &[], run: capabilities },
    Check { id: "hostNamespaces", since: 0, overrides: &[], run: host_namespaces },
    Check { id: "hostPathVolumes", since: 0, overrides: &[], run: host_path_volumes },
    Check { id: "hostPorts", since: 0, overrides: &[], run: host_ports },
    Check { id: "hostProbesAndHostLifecycle", since: 34, overrides: &[], run: host_probes },
    Check { id: "privileged", since: 0, overrides: &[], run: privileged },
    Check { id: "procMount", since: 0, overrides: &[], run: proc_mount },
    Check { id: "seLinuxOptions", since: 0, overrides: &[], run: se_linux_options },
    Check { id: "seccompProfile_baseline", since: 0, overrides: &[], run: seccomp },
    Check { id: "sysctls", since: 0, overrides: &[], run: sysctls },
    Check { id: "windowsHostProcess", since: 0, overrides: &[], run: windows_host_process },
];

const APPARMOR_ANNOTATION_PREFIX: &str = "container.apparmor.security.beta.kubernetes.io/";

fn annotations(meta: &Value) -> impl Iterator<Item = (&String, &str)> {
    meta.get("annotations").and_then(Value::as_object).into_iter().flatten().map(|(k, v)| (k, v.as_str().unwrap_or("")))
}

/// "pod" and/or `container(s) "a", ...`, joined by " and ".
fn setters(pod: bool, bad_containers: &[String]) -> Vec<String> {
    let mut out = Vec::new();
    if pod {
        out.push("pod".to_string());
    }
    if !bad_containers.is_empty() {
        out.push(containers_phrase(bad_containers));
    }
    out
}

fn app_armor(meta: &Value, spec: &Value, _: u32) -> Option<Violation> {
    let ok_type = |t: &str| t == "RuntimeDefault" || t == "Localhost";
    let mut values = Vec::new();
    let pod_bad = match str_at(spec, "/securityContext/appArmorProfile/type") {
        Some(t) if !ok_type(t) => {
            values.push(t.to_string());
            true
        }
        _ => false,
    };
    let mut bad = Vec::new();
    for c in containers(spec) {
        if let Some(t) = str_at(c, "/securityContext/appArmorProfile/type").filter(|t| !ok_type(t)) {
            bad.push(name(c).to_string());
            values.push(t.to_string());
        }
    }
    let mut who = setters(pod_bad, &bad);
    let mut values = sorted(values);
    let ok_annotation = |v: &str| v.is_empty() || v == "runtime/default" || v.starts_with("localhost/");
    let forbidden: Vec<String> = sorted(
        annotations(meta)
            .filter(|(k, v)| k.starts_with(APPARMOR_ANNOTATION_PREFIX) && !ok_annotation(v))
            .map(|(k, v)| format!("{k}={v:?}"))
            .collect(),
    );
    if !forbidden.is_empty() {
        who.push(pluralize("annotation", "annotations", forbidden.len()).to_string());
        values.extend(forbidden);
    }
    if who.is_empty() {
        return None;
    }
    Some(Violation::new(
        pluralize("forbidden AppArmor profile", "forbidden AppArmor profiles", values.len()),
        format!("{} must not set AppArmor profile type to {}", who.join(" and "), join_quote(&values)),
    ))
}

const DEFAULT_CAPABILITIES: &[&str] = &[
    "AUDIT_WRITE",
    "CHOWN",
    "DAC_OVERRIDE",
    "FOWNER",
    "FSETID",
    "KILL",
    "MKNOD",
    "NET_BIND_SERVICE",
    "SETFCAP",
    "SETGID",
    "SETPCAP",
    "SETUID",
    "SYS_CHROOT",
];

fn added_capabilities(c: &Value) -> impl Iterator<Item = &str> {
    c.pointer("/securityContext/capabilities/add")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .map(|v| v.as_str().unwrap_or(""))
}

fn capabilities(_: &Value, spec: &Value, _: u32) -> Option<Violation> {
    let mut bad = Vec::new();
    let mut caps = Vec::new();
    for c in containers(spec) {
        let extra: Vec<&str> = added_capabilities(c).filter(|cap| !DEFAULT_CAPABILITIES.contains(cap)).collect();
        if !extra.is_empty() {
            bad.push(name(c).to_string());
            caps.extend(extra.into_iter().map(str::to_string));
        }
    }
    (!bad.is_empty()).then(|| {
        Violation::new(
            "non-default capabilities",
            format!(
                "{} must not include {} in securityContext.capabilities.add",
                containers_phrase(&bad),
                join_quote(&sorted(caps))
            ),
        )
    })
}

fn host_namespaces(_: &Value, spec: &Value, _: u32) -> Option<Violation> {
    let set: Vec<&str> = ["hostIPC", "hostNetwork", "hostPID"]
        .into_iter()
        .filter(|f| spec.get(*f).and_then(Value::as_bool) == Some(true))
        .collect();
    (!set.is_empty()).then(|| {
        Violation::new("host namespaces", set.iter().map(|f| format!("{f}=true")).collect::<Vec<_>>().join(", "))
    })
}

fn volumes(spec: &Value) -> impl Iterator<Item = &Value> {
    spec.get("volumes").and_then(Value::as_array).into_iter().flatten()
}

fn host_path_volumes(_: &Value, spec: &Value, _: u32) -> Option<Violation> {
    let bad: Vec<&str> = volumes(spec).filter(|v| v.get("hostPath").is_some_and(|h| !h.is_null())).map(name).collect();
    (!bad.is_empty()).then(|| {
        Violation::new(
            "hostPath volumes",
            format!("{} {}", pluralize("volume", "volumes", bad.len()), join_quote(&bad)),
        )
    })
}

fn host_ports(_: &Value, spec: &Value, _: u32) -> Option<Violation> {
    let mut bad = Vec::new();
    let mut ports = Vec::new();
    for c in containers(spec) {
        let used: Vec<i64> = c
            .get("ports")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(|p| p.get("hostPort").and_then(Value::as_i64))
            .filter(|p| *p != 0)
            .collect();
        if !used.is_empty() {
            bad.push(name(c).to_string());
            ports.extend(used.into_iter().map(|p| p.to_string()));
        }
    }
    let ports = sorted(ports);
    (!bad.is_empty()).then(|| {
        Violation::new(
            "hostPort",
            format!(
                "{} {} {} {}",
                containers_phrase(&bad),
                pluralize("uses", "use", bad.len()),
                pluralize("hostPort", "hostPorts", ports.len()),
                ports.join(", ")
            ),
        )
    })
}

fn host_probes(_: &Value, spec: &Value, _: u32) -> Option<Violation> {
    let mut bad = Vec::new();
    let mut hosts = Vec::new();
    for c in containers(spec) {
        let mut found = Vec::new();
        for handler in ["livenessProbe", "readinessProbe", "startupProbe", "lifecycle/postStart", "lifecycle/preStop"] {
            for action in ["httpGet", "tcpSocket"] {
                if let Some(h) = str_at(c, &format!("/{handler}/{action}/host")).filter(|h| !h.is_empty()) {
                    found.push(h.to_string());
                }
            }
        }
        if !found.is_empty() {
            bad.push(name(c).to_string());
            hosts.extend(found);
        }
    }
    let bad = sorted(bad);
    let hosts = sorted(hosts);
    (!bad.is_empty()).then(|| {
        Violation::new(
            "probe or lifecycle host",
            format!(
                "{} {} {} {}",
                containers_phrase(&bad),
                pluralize("uses", "use", bad.len()),
                pluralize("probe or lifecycle host", "probe or lifecycle hosts", hosts.len()),
                join_quote(&hosts)
            ),
        )
    })
}

fn privileged(_: &Value, spec: &Value, _: u32) -> Option<Violation> {
    let bad: Vec<&str> =
        containers(spec).filter(|c| bool_at(c, "/securityContext/privileged") == Some(true)).map(name).collect();
    (!bad.is_empty()).then(|| {
        Violation::new(
            "privileged",
            format!("{} must not set securityContext.privileged=true", containers_phrase(&bad)),
        )
    })
}

fn proc_mount(_: &Value, spec: &Value, _: u32) -> Option<Violation> {
    let mut bad = Vec::new();
    let mut types = Vec::new();
    for c in containers(spec) {
        if let Some(t) = str_at(c, "/securityContext/procMount").filter(|t| *t != "Default") {
            bad.push(name(c).to_string());
            types.push(t.to_string());
        }
    }
    (!bad.is_empty()).then(|| {
        Violation::new(
            "procMount",
            format!(
                "{} must not set securityContext.procMount to {}",
                containers_phrase(&bad),
                join_quote(&sorted(types))
            ),
        )
    })
}

fn se_linux_options(_: &Value, spec: &Value, minor: u32) -> Option<Violation> {
    let allowed = |t: &str| {
        matches!(t, "" | "container_t" | "container_init_t" | "container_kvm_t")
            || (minor >= 31 && t == "container_engine_t")
    };
    let (mut types, mut user, mut role) = (Vec::new(), false, false);
    let mut judge = |opts: Option<&Value>| -> bool {
        let Some(opts) = opts.filter(|o| !o.is_null()) else { return true };
        let mut ok = true;
        let t = opts.get("type").and_then(Value::as_str).unwrap_or("");
        if !allowed(t) {
            types.push(t.to_string());
            ok = false;
        }
        if opts.get("user").and_then(Value::as_str).is_some_and(|u| !u.is_empty()) {
            user = true;
            ok = false;
        }
        if opts.get("role").and_then(Value::as_str).is_some_and(|r| !r.is_empty()) {
            role = true;
            ok = false;
        }
        ok
    };
    let pod_bad = !judge(spec.pointer("/securityContext/seLinuxOptions"));
    let bad: Vec<String> = containers(spec)
        .filter(|c| !judge(c.pointer("/securityContext/seLinuxOptions")))
        .map(|c| name(c).to_string())
        .collect();
    let who = setters(pod_bad, &bad);
    if who.is_empty() {
        return None;
    }
    let types = sorted(types);
    let mut data = Vec::new();
    if !types.is_empty() {
        data.push(format!("{} {}", pluralize("type", "types", types.len()), join_quote(&types)));
    }
    if user {
        data.push("user may not be set".to_string());
    }
    if role {
        data.push("role may not be set".to_string());
    }
    Some(Violation::new(
        "seLinuxOptions",
        format!("{} set forbidden securityContext.seLinuxOptions: {}", who.join(" and "), data.join("; ")),
    ))
}

fn seccomp(meta: &Value, spec: &Value, minor: u32) -> Option<Violation> {
    if minor < 19 {
        return seccomp_annotations(meta, spec);
    }
    let ok = |t: &str| t == "RuntimeDefault" || t == "Localhost";
    let mut values = Vec::new();
    let pod_bad = match str_at(spec, "/securityContext/seccompProfile/type") {
        Some(t) if !ok(t) => {
            values.push(t.to_string());
            true
        }
        _ => false,
    };
    let mut bad = Vec::new();
    for c in containers(spec) {
        if let Some(t) = str_at(c, "/securityContext/seccompProfile/type").filter(|t| !ok(t)) {
            bad.push(name(c).to_string());
            values.push(t.to_string());
        }
    }
    let who = setters(pod_bad, &bad);
    (!who.is_empty()).then(|| {
        Violation::new(
            "seccompProfile",
            format!(
                "{} must not set securityContext.seccompProfile.type to {}",
                who.join(" and "),
                join_quote(&sorted(values))
            ),
        )
    })
}

/// Before 1.19 seccomp was the alpha annotations.
fn seccomp_annotations(meta: &Value, spec: &Value) -> Option<Violation> {
    let ok = |v: &str| v == "runtime/default" || v == "docker/default" || v.starts_with("localhost/");
    let get = |k: &str| meta.get("annotations").and_then(|a| a.get(k)).and_then(Value::as_str);
    let mut forbidden = Vec::new();
    let pod_key = "seccomp.security.alpha.kubernetes.io/pod";
    if let Some(v) = get(pod_key).filter(|v| !ok(v)) {
        forbidden.push(format!("{pod_key}={v:?}"));
    }
    for c in containers(spec) {
        let key = format!("container.seccomp.security.alpha.kubernetes.io/{}", name(c));
        if let Some(v) = get(&key).filter(|v| !ok(v)) {
            forbidden.push(format!("{key}={v:?}"));
        }
    }
    let forbidden = sorted(forbidden);
    (!forbidden.is_empty()).then(|| {
        Violation::new(
            "seccompProfile",
            format!("forbidden {} {}", pluralize("annotation", "annotations", forbidden.len()), forbidden.join(", ")),
        )
    })
}

/// The safe sysctls by the policy version that allowed them.
const SAFE_SYSCTLS: &[(&str, u32)] = &[
    ("kernel.shm_rmid_forced", 0),
    ("net.ipv4.ip_local_port_range", 0),
    ("net.ipv4.tcp_syncookies", 0),
    ("net.ipv4.ping_group_range", 0),
    ("net.ipv4.ip_unprivileged_port_start", 0),
    ("net.ipv4.ip_local_reserved_ports", 27),
    ("net.ipv4.tcp_keepalive_time", 29),
    ("net.ipv4.tcp_fin_timeout", 29),
    ("net.ipv4.tcp_keepalive_intvl", 29),
    ("net.ipv4.tcp_keepalive_probes", 29),
    ("net.ipv4.tcp_rmem", 32),
    ("net.ipv4.tcp_wmem", 32),
];

fn sysctls(_: &Value, spec: &Value, minor: u32) -> Option<Violation> {
    let safe = |n: &str| SAFE_SYSCTLS.iter().any(|(s, since)| *s == n && *since <= minor);
    let bad: Vec<&str> = spec
        .pointer("/securityContext/sysctls")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .map(name)
        .filter(|n| !safe(n))
        .collect();
    (!bad.is_empty()).then(|| Violation::new("forbidden sysctls", bad.join(", ")))
}

fn windows_host_process(_: &Value, spec: &Value, _: u32) -> Option<Violation> {
    let host_process = |v: &Value| bool_at(v, "/securityContext/windowsOptions/hostProcess") == Some(true);
    let bad: Vec<String> = containers(spec).filter(|c| host_process(c)).map(|c| name(c).to_string()).collect();
    let who = setters(host_process(spec), &bad);
    (!who.is_empty()).then(|| {
        Violation::new(
            "hostProcess",
            format!("{} must not set securityContext.windowsOptions.hostProcess=true", who.join(" and ")),
        )
    })
}
