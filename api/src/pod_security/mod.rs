//! Pod Security Standards (Kubernetes' `k8s.io/pod-security-admission`): the levels, their
//! versions, every check of the policy and the evaluation of a pod spec (or a workload's pod
//! template) against a level, with Kubernetes' forbidden reasons, details and aggregate message.

mod baseline;
mod policy;
mod restricted;

pub use policy::{Level, LevelVersion, Policy, PolicyError, Version};

use serde_json::Value;

/// One failed check: Kubernetes' `ForbiddenReason` and `ForbiddenDetail`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Violation {
    pub reason: String,
    pub detail: String,
}

impl Violation {
    fn new(reason: impl Into<String>, detail: impl Into<String>) -> Self {
        Self { reason: reason.into(), detail: detail.into() }
    }
}

type CheckFn = fn(meta: &Value, spec: &Value, minor: u32) -> Option<Violation>;

/// One check of the registry (`policy/registry.go`): its ID, the first policy version it exists
/// in, and the baseline checks a restricted check replaces at the restricted level.
struct Check {
    id: &'static str,
    since: u32,
    overrides: &'static [&'static str],
    run: CheckFn,
}

/// Evaluates a pod's metadata and spec against `lv`: the failures in Kubernetes' order (the
/// baseline checks by ID, then at restricted the restricted checks by ID).
pub fn evaluate(lv: LevelVersion, meta: &Value, spec: &Value) -> Vec<Violation> {
    let minor = lv.version.minor();
    let restricted: Vec<&Check> = match lv.level {
        Level::Privileged => return Vec::new(),
        Level::Baseline => Vec::new(),
        Level::Restricted => restricted::CHECKS.iter().filter(|c| c.since <= minor).collect(),
    };
    let overridden = |id: &str| restricted.iter().any(|c| c.overrides.contains(&id));
    baseline::CHECKS
        .iter()
        .filter(|c| c.since <= minor && !overridden(c.id))
        .chain(restricted.iter().copied())
        .filter_map(|c| (c.run)(meta, spec, minor))
        .collect()
}

/// `AggregateCheckResult.ForbiddenDetail`: `reason (detail), reason (detail)`.
pub fn forbidden_detail(violations: &[Violation]) -> String {
    let parts: Vec<String> = violations
        .iter()
        .map(|v| if v.detail.is_empty() { v.reason.clone() } else { format!("{} ({})", v.reason, v.detail) })
        .collect();
    parts.join(", ")
}

/// The pod template of a workload kind Kubernetes checks (`admission.go`'s `PodSpecExtractor`):
/// its metadata and spec, or None for other kinds or an object without one.
pub fn pod_template<'a>(kind: &str, object: &'a Value) -> Option<(&'a Value, &'a Value)> {
    let template = match kind {
        "Pod" => return Some((object.get("metadata").unwrap_or(&Value::Null), object.get("spec")?)),
        "ReplicationController" | "ReplicaSet" | "Deployment" | "StatefulSet" | "DaemonSet" | "Job" => {
            object.pointer("/spec/template")?
        }
        "CronJob" => object.pointer("/spec/jobTemplate/spec/template")?,
        "PodTemplate" => object.get("template")?,
        _ => return None,
    };
    Some((template.get("metadata").unwrap_or(&Value::Null), template.get("spec")?))
}

// --- helpers shared by the checks (policy/helpers.go, visitor.go) ---

/// `joinQuote`: `"a", "b"`.
fn join_quote<S: AsRef<str>>(items: &[S]) -> String {
    items.iter().map(|s| format!("\"{}\"", s.as_ref())).collect::<Vec<_>>().join(", ")
}

fn pluralize<'a>(singular: &'a str, plural: &'a str, n: usize) -> &'a str {
    if n == 1 {
        singular
    } else {
        plural
    }
}

/// `container "a"` or `containers "a", "b"`.
fn containers_phrase<S: AsRef<str>>(names: &[S]) -> String {
    format!("{} {}", pluralize("container", "containers", names.len()), join_quote(names))
}

/// Init containers, containers, then ephemeral containers, as `visitContainers`.
fn containers(spec: &Value) -> impl Iterator<Item = &Value> {
    ["initContainers", "containers", "ephemeralContainers"]
        .into_iter()
        .flat_map(move |k| spec.get(k).and_then(Value::as_array).into_iter().flatten())
}

fn name(container: &Value) -> &str {
    container.get("name").and_then(Value::as_str).unwrap_or("")
}

fn str_at<'a>(v: &'a Value, pointer: &str) -> Option<&'a str> {
    v.pointer(pointer).and_then(Value::as_str)
}

fn bool_at(v: &Value, pointer: &str) -> Option<bool> {
    v.pointer(pointer).and_then(Value::as_bool)
}

/// A sorted, deduplicated list (Go's `sets.NewString().List()`).
fn sorted(mut items: Vec<String>) -> Vec<String> {
    items.sort();
    items.dedup();
    items
}

/// Windows pods are exempt from some restricted checks since 1.25 (`spec.os.name`).
fn is_windows(spec: &Value) -> bool {
    str_at(spec, "/os/name") == Some("windows")
}

#[cfg(test)]
mod tests;
