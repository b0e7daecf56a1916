//! One module per everyday command; each parses its own flags (clap `Args`) and runs against a
//! connected `Cluster`. Shared here: how `TYPE NAME...` and `TYPE/NAME...` arguments read.

pub mod apply;
pub mod delete;
pub mod describe;
pub mod events;
pub mod exec;
pub mod get;
pub mod logs;
pub mod rollout;
pub mod scale;
pub mod token;

use anyhow::{bail, Result};
use serde_json::Value;

/// A resource type as typed, and the names given for it (none: all of them).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    pub kind: String,
    pub names: Vec<String>,
}

/// `TYPE[,TYPE...] [NAME...]` or `TYPE/NAME...` (types may differ), as kubectl reads them; names keep
/// the order given, grouped by type in order of first appearance.
pub fn targets(args: &[String]) -> Result<Vec<Target>> {
    let Some(first) = args.first() else {
        bail!("you must specify the type of resource");
    };
    if !first.contains('/') {
        if let Some(bad) = args[1..].iter().find(|a| a.contains('/')) {
            bail!(
                "there is no need to specify a resource type as a separate argument when passing arguments in \
                 resource/name form (e.g. 'kaji get {first}/<name>', not '{first} {bad}')"
            );
        }
        let kinds = first.split(',').filter(|k| !k.is_empty());
        return Ok(kinds.map(|k| Target { kind: k.to_string(), names: args[1..].to_vec() }).collect());
    }
    let mut out: Vec<Target> = Vec::new();
    for a in args {
        let Some((kind, name)) = a.split_once('/').filter(|(k, n)| !k.is_empty() && !n.is_empty()) else {
            bail!("arguments in resource/name form must have a single resource and name: {a:?}");
        };
        match out.iter_mut().find(|t| t.kind == kind) {
            Some(t) => t.names.push(name.to_string()),
            None => out.push(Target { kind: kind.to_string(), names: vec![name.to_string()] }),
        }
    }
    Ok(out)
}

/// One `TYPE/NAME` or `TYPE NAME` naming exactly one object.
pub fn single(args: &[String]) -> Result<(String, String)> {
    match targets(args)?.as_slice() {
        [Target { kind, names }] if names.len() == 1 => Ok((kind.clone(), names[0].clone())),
        _ => bail!("expected one object: TYPE/NAME or TYPE NAME"),
    }
}

/// kubectl's note (on stderr) when a list came back empty.
pub fn no_resources(namespace: Option<&str>) {
    match namespace {
        Some(ns) => eprintln!("No resources found in {ns} namespace."),
        None => eprintln!("No resources found"),
    }
}

/// A selector as a label-selector string: a metav1.LabelSelector (`matchLabels`,
/// `matchExpressions`) or a Service's plain map. None when it selects nothing.
pub fn selector_string(sel: &Value) -> Option<String> {
    let pairs = |m: &Value| -> Vec<String> {
        m.as_object().into_iter().flatten().map(|(k, v)| format!("{k}={}", v.as_str().unwrap_or(""))).collect()
    };
    let mut parts = if sel.get("matchLabels").is_some() || sel.get("matchExpressions").is_some() {
        pairs(&sel["matchLabels"])
    } else {
        pairs(sel)
    };
    for e in sel["matchExpressions"].as_array().into_iter().flatten() {
        let key = e["key"].as_str().unwrap_or("");
        let values =
            e["values"].as_array().into_iter().flatten().filter_map(Value::as_str).collect::<Vec<_>>().join(",");
        parts.push(match e["operator"].as_str().unwrap_or("") {
            "In" => format!("{key} in ({values})"),
            "NotIn" => format!("{key} notin ({values})"),
            "Exists" => key.to_string(),
            _ => format!("!{key}"),
        });
    }
    (!parts.is_empty()).then(|| parts.join(","))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn selectors_become_label_selector_strings() {
        let sel = json!({"matchLabels": {"app": "web"}, "matchExpressions": [
            {"key": "tier", "operator": "In", "values": ["fe", "be"]},
            {"key": "canary", "operator": "DoesNotExist"}]});
        assert_eq!(selector_string(&sel).as_deref(), Some("app=web,tier in (fe,be),!canary"));
        assert_eq!(selector_string(&json!({"app": "web"})).as_deref(), Some("app=web"));
        assert_eq!(selector_string(&json!({})), None);
        assert_eq!(selector_string(&Value::Null), None);
    }

    fn args(a: &[&str]) -> Vec<String> {
        a.iter().map(|s| s.to_string()).collect()
    }

    fn t(kind: &str, names: &[&str]) -> Target {
        Target { kind: kind.into(), names: args(names) }
    }

    #[test]
    fn type_then_names() {
        assert_eq!(targets(&args(&["pods"])).expect("ok"), [t("pods", &[])]);
        assert_eq!(targets(&args(&["po", "a", "b"])).expect("ok"), [t("po", &["a", "b"])]);
        assert_eq!(targets(&args(&["deploy,svc", "web"])).expect("ok"), [t("deploy", &["web"]), t("svc", &["web"])]);
    }

    #[test]
    fn type_slash_name_groups_by_type() {
        assert_eq!(
            targets(&args(&["deploy/web", "svc/web", "deploy/db"])).expect("ok"),
            [t("deploy", &["web", "db"]), t("svc", &["web"])]
        );
    }

    #[test]
    fn mixing_the_two_forms_or_half_a_pair_is_refused() {
        assert!(targets(&args(&["pods", "pod/web"])).is_err());
        assert!(targets(&args(&["pod/"])).is_err());
        assert!(targets(&[]).is_err());
        assert_eq!(single(&args(&["deployment/web"])).expect("one"), ("deployment".into(), "web".into()));
        assert_eq!(single(&args(&["deployment", "web"])).expect("one"), ("deployment".into(), "web".into()));
        assert!(single(&args(&["deployment"])).is_err());
    }
}
