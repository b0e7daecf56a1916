//! What every `describe` shows: metadata, a generic rendering of the other fields, status
//! conditions and the object's Events.

use super::writer::Out;
use crate::cmd::events::{last_seen, sorted};
use crate::merge::LAST_APPLIED;
use jiff::Timestamp;
use serde_json::Value;

pub fn s(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Null => String::new(),
        other => other.to_string(),
    }
}

/// kubectl's timestamp: `Mon, 02 Jan 2006 15:04:05 +0000`.
pub fn time(v: &Value) -> String {
    v.as_str()
        .and_then(|t| t.parse::<Timestamp>().ok())
        .map(|t| t.strftime("%a, %d %b %Y %H:%M:%S %z").to_string())
        .unwrap_or_default()
}

/// `k=v` lines in key order (annotations without kubectl's last-applied copy of the manifest).
pub fn pairs(map: &Value) -> Vec<String> {
    map.as_object()
        .into_iter()
        .flatten()
        .filter(|(k, _)| k.as_str() != LAST_APPLIED)
        .map(|(k, v)| format!("{k}={}", s(v)))
        .collect()
}

/// Name, Namespace, Labels, Annotations, CreationTimestamp, Controlled By.
pub fn metadata(out: &mut Out, obj: &Value) {
    let m = &obj["metadata"];
    out.kv(0, "Name", s(&m["name"]));
    if let Some(ns) = m["namespace"].as_str() {
        out.kv(0, "Namespace", ns);
    }
    metadata_rest(out, obj);
}

/// The part of `metadata` after the name and namespace.
pub fn metadata_rest(out: &mut Out, obj: &Value) {
    let m = &obj["metadata"];
    out.kv_list(0, "Labels", &pairs(&m["labels"]));
    out.kv_list(0, "Annotations", &pairs(&m["annotations"]));
    out.kv(0, "CreationTimestamp", time(&m["creationTimestamp"]));
    controlled_by(out, obj);
}

pub fn controlled_by(out: &mut Out, obj: &Value) {
    let owners = obj["metadata"]["ownerReferences"].as_array().into_iter().flatten();
    if let Some(o) = owners.clone().find(|o| o["controller"] == true) {
        out.kv(0, "Controlled By", format!("{}/{}", s(&o["kind"]), s(&o["name"])));
    }
}

/// `restartPolicy` → `Restart Policy`, as kubectl labels fields it has no describer for; keys
/// with characters other than letters and `-` (`app.conf`, `example.com/x`) stay as written.
pub fn label_for(key: &str) -> String {
    if key.chars().any(|c| !c.is_alphabetic() && c != '-') {
        return key.to_string();
    }
    let mut out = String::new();
    for (i, c) in key.chars().enumerate() {
        if i == 0 {
            out.extend(c.to_uppercase());
        } else if c.is_uppercase() && !out.ends_with(' ') && key.chars().nth(i - 1).is_some_and(char::is_lowercase) {
            out.push(' ');
            out.push(c);
        } else {
            out.push(c);
        }
    }
    out
}

/// Every field of `v` below `key`, nested by indentation (kubectl's generic describer).
pub fn tree(out: &mut Out, level: usize, key: &str, v: &Value) {
    match v {
        Value::Object(m) if m.is_empty() => out.kv(level, &label_for(key), ""),
        Value::Object(m) => {
            out.header(level, &format!("{}:", label_for(key)));
            for (k, v) in m {
                tree(out, level + 1, k, v);
            }
        }
        Value::Array(items) if items.iter().all(|i| !i.is_object() && !i.is_array()) => {
            out.kv(level, &label_for(key), items.iter().map(s).collect::<Vec<_>>().join(", "));
        }
        Value::Array(items) => {
            out.header(level, &format!("{}:", label_for(key)));
            for item in items {
                match item.as_object() {
                    Some(m) => m.iter().for_each(|(k, v)| tree(out, level + 1, k, v)),
                    None => tree(out, level + 1, "", item),
                }
            }
        }
        other => out.kv(level, &label_for(key), s(other)),
    }
}

/// `status.conditions` as a table: Type, Status, Reason (and Message when any has one).
pub fn conditions(out: &mut Out, obj: &Value) {
    let Some(conds) = obj["status"]["conditions"].as_array().filter(|c| !c.is_empty()) else {
        return;
    };
    let rows: Vec<Vec<String>> =
        conds.iter().map(|c| vec![s(&c["type"]), s(&c["status"]), s(&c["reason"]), s(&c["message"])]).collect();
    out.table(0, "Conditions", &["Type", "Status", "Reason", "Message"], &rows);
}

/// The Events section: Type, Reason, Age, From, Message, oldest first.
pub fn events(out: &mut Out, events: &[Value], now: Timestamp) {
    let rows: Vec<Vec<String>> = sorted(events.to_vec())
        .iter()
        .map(|e| {
            let from = e["source"]["component"].as_str().or(e["reportingComponent"].as_str()).unwrap_or("");
            vec![
                s(&e["type"]),
                s(&e["reason"]),
                last_seen(e, now),
                from.to_string(),
                s(&e["message"]).trim().to_string(),
            ]
        })
        .collect();
    out.table(0, "Events", &["Type", "Reason", "Age", "From", "Message"], &rows);
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn field_names_become_labels() {
        assert_eq!(label_for("restartPolicy"), "Restart Policy");
        assert_eq!(label_for("spec"), "Spec");
        assert_eq!(label_for("podCIDR"), "Pod CIDR");
    }

    #[test]
    fn timestamps_read_like_kubectls() {
        assert_eq!(time(&json!("2025-01-06T12:30:05Z")), "Mon, 06 Jan 2025 12:30:05 +0000");
        assert_eq!(time(&Value::Null), "");
    }

    #[test]
    fn the_generic_tree_nests_and_keeps_data_keys() {
        let mut o = Out::default();
        tree(&mut o, 0, "data", &json!({"app.conf": "x=1", "mode": "fast"}));
        tree(&mut o, 0, "spec", &json!({"ports": [{"port": 80}], "finalizers": ["a", "b"]}));
        assert_eq!(
            o.render(),
            "Data:\n  app.conf:  x=1\n  Mode:      fast\nSpec:\n  Finalizers:  a, b\n  Ports:\n    Port:  80\n"
        );
    }
}
