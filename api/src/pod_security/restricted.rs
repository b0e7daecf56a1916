//! The restricted checks (`policy/check_*.go` at level restricted), by ID; each replaces the
//! baseline checks it names once its version applies.

use super::{
    bool_at, containers, containers_phrase, is_windows, join_quote, name, pluralize, sorted, str_at, Check, Violation,
};
use serde_json::Value;

pub(super) const CHECKS: &[Check] = &[
    Check { id: "allowPrivilegeEscalation", since: 8, overrides: &[], run: allow_privilege_escalation },
    Check { id: "capabilities_restricted", since: 22, overrides: &["capabilities_baseline"], run: capabilities },
    Check { id: "restrictedVolumes", since: 0, overrides: &["hostPathVolumes"], run: restricted_volumes },
    Check { id: "runAsNonRoot", since: 0, overrides: &[], run: run_as_non_root },
    Check { id: "runAsUser", since: 23, overrides: &[], run: run_as_user },
    Check { id: "seccompProfile_restricted", since: 19, overrides: &["seccompProfile_baseline"], run: seccomp },
];

/// Since 1.25 a pod with `spec.os.name: windows` skips the Linux-only restricted checks.
fn windows_exempt(spec: &Value, minor: u32) -> bool {
    minor >= 25 && is_windows(spec)
}

fn allow_privilege_escalation(_: &Value, spec: &Value, minor: u32) -> Option<Violation> {
    if windows_exempt(spec, minor) {
        return None;
    }
    let bad: Vec<&str> = containers(spec)
        .filter(|c| bool_at(c, "/securityContext/allowPrivilegeEscalation") != Some(false))
        .map(name)
        .collect();
    (!bad.is_empty()).then(|| {
        Violation::new(
            "allowPrivilegeEscalation != false",
            format!("{} must set securityContext.allowPrivilegeEscalation=false", containers_phrase(&bad)),
        )
    })
}

fn capabilities(_: &Value, spec: &Value, minor: u32) -> Option<Violation> {
    if windows_exempt(spec, minor) {
        return None;
    }
    let (mut missing_drop, mut adding, mut caps) = (Vec::new(), Vec::new(), Vec::new());
    for c in containers(spec) {
        let Some(capabilities) = c.pointer("/securityContext/capabilities").filter(|v| !v.is_null()) else {
            missing_drop.push(name(c));
            continue;
        };
        let list = |k: &str| -> Vec<&str> {
            capabilities
                .get(k)
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .map(|v| v.as_str().unwrap_or(""))
                .collect()
        };
        if !list("drop").contains(&"ALL") {
            missing_drop.push(name(c));
        }
        let extra: Vec<&str> = list("add").into_iter().filter(|cap| *cap != "NET_BIND_SERVICE").collect();
        if !extra.is_empty() {
            adding.push(name(c));
            caps.extend(extra.into_iter().map(str::to_string));
        }
    }
    let mut details = Vec::new();
    if !missing_drop.is_empty() {
        details.push(format!(
            r#"{} must set securityContext.capabilities.drop=["ALL"]"#,
            containers_phrase(&missing_drop)
        ));
    }
    if !adding.is_empty() {
        details.push(format!(
            "{} must not include {} in securityContext.capabilities.add",
            containers_phrase(&adding),
            join_quote(&sorted(caps))
        ));
    }
    (!details.is_empty()).then(|| Violation::new("unrestricted capabilities", details.join("; ")))
}

const ALLOWED_VOLUME_TYPES: &[&str] =
    &["configMap", "csi", "downwardAPI", "emptyDir", "ephemeral", "persistentVolumeClaim", "projected", "secret"];

fn restricted_volumes(_: &Value, spec: &Value, _: u32) -> Option<Violation> {
    let (mut bad, mut types) = (Vec::new(), Vec::new());
    for v in spec.get("volumes").and_then(Value::as_array).into_iter().flatten() {
        let source =
            v.as_object().and_then(|o| o.iter().find(|(k, val)| *k != "name" && !val.is_null()).map(|(k, _)| k));
        match source {
            Some(s) if ALLOWED_VOLUME_TYPES.contains(&s.as_str()) => {}
            other => {
                bad.push(name(v));
                types.push(other.cloned().unwrap_or_else(|| "unknown".into()));
            }
        }
    }
    let types = sorted(types);
    (!bad.is_empty()).then(|| {
        Violation::new(
            "restricted volume types",
            format!(
                "{} {} {} {} {}",
                pluralize("volume", "volumes", bad.len()),
                join_quote(&bad),
                pluralize("uses", "use", bad.len()),
                pluralize("restricted volume type", "restricted volume types", types.len()),
                join_quote(&types)
            ),
        )
    })
}

/// "pod" and/or `container(s) "a"` joined by " and ".
fn who(pod: bool, bad: &[&str]) -> String {
    let mut out = Vec::new();
    if pod {
        out.push("pod".to_string());
    }
    if !bad.is_empty() {
        out.push(containers_phrase(bad));
    }
    out.join(" and ")
}

fn run_as_non_root(_: &Value, spec: &Value, _: u32) -> Option<Violation> {
    let pod = bool_at(spec, "/securityContext/runAsNonRoot");
    let (mut explicit, mut implicit) = (Vec::new(), Vec::new());
    for c in containers(spec) {
        match bool_at(c, "/securityContext/runAsNonRoot") {
            Some(false) => explicit.push(name(c)),
            Some(true) => {}
            None if pod != Some(true) => implicit.push(name(c)),
            None => {}
        }
    }
    if pod == Some(false) || !explicit.is_empty() {
        return Some(Violation::new(
            "runAsNonRoot != true",
            format!("{} must not set securityContext.runAsNonRoot=false", who(pod == Some(false), &explicit)),
        ));
    }
    (!implicit.is_empty()).then(|| {
        Violation::new(
            "runAsNonRoot != true",
            format!("pod or {} must set securityContext.runAsNonRoot=true", containers_phrase(&implicit)),
        )
    })
}

fn run_as_user(_: &Value, spec: &Value, _: u32) -> Option<Violation> {
    let root = |v: &Value| v.pointer("/securityContext/runAsUser").and_then(Value::as_i64) == Some(0);
    let bad: Vec<&str> = containers(spec).filter(|c| root(c)).map(name).collect();
    let pod = root(spec);
    (pod || !bad.is_empty())
        .then(|| Violation::new("runAsUser=0", format!("{} must not set runAsUser=0", who(pod, &bad))))
}

fn seccomp(_: &Value, spec: &Value, minor: u32) -> Option<Violation> {
    if windows_exempt(spec, minor) {
        return None;
    }
    let ok = |t: &str| t == "RuntimeDefault" || t == "Localhost";
    let mut values = Vec::new();
    let pod = str_at(spec, "/securityContext/seccompProfile/type");
    let pod_bad = pod.is_some_and(|t| !ok(t));
    if let Some(t) = pod.filter(|_| pod_bad) {
        values.push(t.to_string());
    }
    let pod_set = pod.is_some_and(ok);
    let (mut explicit, mut implicit) = (Vec::new(), Vec::new());
    for c in containers(spec) {
        match str_at(c, "/securityContext/seccompProfile/type") {
            Some(t) if !ok(t) => {
                explicit.push(name(c));
                values.push(t.to_string());
            }
            Some(_) => {}
            None if !pod_set => implicit.push(name(c)),
            None => {}
        }
    }
    if pod_bad || !explicit.is_empty() {
        return Some(Violation::new(
            "seccompProfile",
            format!(
                "{} must not set securityContext.seccompProfile.type to {}",
                who(pod_bad, &explicit),
                join_quote(&sorted(values))
            ),
        ));
    }
    (!implicit.is_empty()).then(|| {
        Violation::new(
            "seccompProfile",
            format!(
                r#"pod or {} must set securityContext.seccompProfile.type to "RuntimeDefault" or "Localhost""#,
                containers_phrase(&implicit)
            ),
        )
    })
}
