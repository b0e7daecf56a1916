//! PodSecurity on namespaces (`ValidateNamespace`): its labels must parse (422 otherwise), and a
//! stricter enforce level answers warnings naming the existing pods that would now be refused.

use kaji_api::pod_security::{self as pss, Level, LevelVersion, Policy, PolicyError};
use serde_json::Value;
use std::collections::BTreeMap;

/// Kubernetes' `--pod-security-admission` `namespaceMaxPodsToCheck`.
pub const MAX_PODS_TO_CHECK: usize = 3000;

pub fn labels(object: &Value) -> BTreeMap<String, String> {
    object
        .pointer("/metadata/labels")
        .and_then(Value::as_object)
        .map(|m| m.iter().filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_string()))).collect())
        .unwrap_or_default()
}

/// `namespaces "x" is invalid: metadata.labels[...]: Invalid value: "v": why` (several in `[...]`).
pub fn invalid_message(name: &str, errs: &[PolicyError]) -> String {
    let each: Vec<String> = errs
        .iter()
        .map(|e| format!("metadata.labels[{}]: Invalid value: {:?}: {}", e.label, e.value, e.message))
        .collect();
    let all = if each.len() == 1 { each[0].clone() } else { format!("[{}]", each.join(", ")) };
    format!("namespaces {name:?} is invalid: {all}")
}

/// Whether an update's new enforce level calls for judging the pods already there: it changed,
/// is not privileged, and is not the same version at a level no stricter.
pub fn recheck_pods(old: &Policy, new: &Policy) -> bool {
    let (o, n) = (old.enforce, new.enforce);
    n != o && n.level != Level::Privileged && !(n.version == o.version && n.level <= o.level)
}

/// `EvaluatePodsInNamespace`: one line saying the namespace's pods violate `enforce`, then per
/// distinct set of failed reasons the first pod and how many others share it.
pub fn existing_pod_warnings(
    ns: &str,
    enforce: LevelVersion,
    pods: &[Value],
    exempt_runtime_class: impl Fn(Option<&str>) -> bool,
) -> Vec<String> {
    let mut order: Vec<String> = Vec::new();
    let mut seen: BTreeMap<String, (String, usize)> = BTreeMap::new();
    for pod in pods.iter().take(MAX_PODS_TO_CHECK) {
        let Some((meta, spec)) = pss::pod_template("Pod", pod) else { continue };
        if exempt_runtime_class(spec.get("runtimeClassName").and_then(Value::as_str)) {
            continue;
        }
        let failed = pss::evaluate(enforce, meta, spec);
        if failed.is_empty() {
            continue;
        }
        let reasons = failed.iter().map(|v| v.reason.as_str()).collect::<Vec<_>>().join(", ");
        let name = meta.get("name").and_then(Value::as_str).unwrap_or("").to_string();
        let entry = seen.entry(reasons.clone()).or_insert_with(|| {
            order.push(reasons);
            (name, 0)
        });
        entry.1 += 1;
    }
    if order.is_empty() {
        return Vec::new();
    }
    let mut out =
        vec![format!("existing pods in namespace {ns:?} violate the new PodSecurity enforce level \"{enforce}\"")];
    for reasons in order {
        let (first, count) = &seen[&reasons];
        out.push(match count {
            1 => format!("{first}: {reasons}"),
            2 => format!("{first} (and 1 other pod): {reasons}"),
            n => format!("{first} (and {} other pods): {reasons}", n - 1),
        });
    }
    if pods.len() > MAX_PODS_TO_CHECK {
        out.push(format!(
            "new PodSecurity enforce level only checked against the first {MAX_PODS_TO_CHECK} of {} existing pods",
            pods.len()
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use kaji_api::pod_security::Version;
    use serde_json::json;

    fn lv(level: Level) -> LevelVersion {
        LevelVersion { level, version: Version::Latest }
    }

    fn pod(name: &str, privileged: bool) -> Value {
        json!({"metadata": {"name": name}, "spec": {"containers": [{"name": "c", "securityContext": {"privileged": privileged}}]}})
    }

    #[test]
    fn existing_violators_are_grouped_by_their_reasons() {
        let pods = [pod("a", true), pod("b", false), pod("c", true), pod("d", true)];
        let w = existing_pod_warnings("apps", lv(Level::Baseline), &pods, |_| false);
        assert_eq!(
            w,
            [
                r#"existing pods in namespace "apps" violate the new PodSecurity enforce level "baseline:latest""#,
                "a (and 2 other pods): privileged",
            ]
        );
        assert!(existing_pod_warnings("apps", lv(Level::Baseline), &[pod("b", false)], |_| false).is_empty());
    }

    #[test]
    fn only_a_stricter_or_other_version_enforce_level_rechecks_pods() {
        let p = |level| Policy { enforce: lv(level), ..Policy::default() };
        assert!(recheck_pods(&p(Level::Privileged), &p(Level::Baseline)));
        assert!(!recheck_pods(&p(Level::Restricted), &p(Level::Baseline)));
        assert!(!recheck_pods(&p(Level::Baseline), &p(Level::Baseline)));
        assert!(!recheck_pods(&p(Level::Baseline), &p(Level::Privileged)));
    }

    #[test]
    fn bad_labels_are_described_as_kubernetes_does() {
        let errs = [PolicyError {
            label: "pod-security.kubernetes.io/enforce",
            value: "strict".into(),
            message: "must be one of privileged, baseline, restricted".into(),
        }];
        assert_eq!(
            invalid_message("apps", &errs),
            r#"namespaces "apps" is invalid: metadata.labels[pod-security.kubernetes.io/enforce]: Invalid value: "strict": must be one of privileged, baseline, restricted"#
        );
    }
}
