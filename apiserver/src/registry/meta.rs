//! Small helpers over an object's JSON: metadata fields, timestamps, names.

use serde_json::{Map, Value};

pub fn now() -> jiff::Timestamp {
    jiff::Timestamp::now()
}

/// RFC 3339 with second precision, as metav1.Time.
pub fn timestamp(t: jiff::Timestamp) -> String {
    jiff::Timestamp::from_second(t.as_second()).unwrap_or(t).to_string()
}

pub fn meta(obj: &Value) -> Option<&Map<String, Value>> {
    obj.get("metadata").and_then(Value::as_object)
}

/// `metadata`, created if missing or not an object.
pub fn meta_mut(obj: &mut Value) -> &mut Map<String, Value> {
    if !obj.is_object() {
        *obj = Value::Object(Map::new());
    }
    let root = obj.as_object_mut().expect("just made an object");
    let m = root.entry("metadata").or_insert_with(|| Value::Object(Map::new()));
    if !m.is_object() {
        *m = Value::Object(Map::new());
    }
    m.as_object_mut().expect("just made an object")
}

pub fn meta_str<'a>(obj: &'a Value, field: &str) -> Option<&'a str> {
    meta(obj).and_then(|m| m.get(field)).and_then(Value::as_str).filter(|s| !s.is_empty())
}

pub fn name(obj: &Value) -> &str {
    meta_str(obj, "name").unwrap_or("")
}

pub fn finalizers(obj: &Value) -> Vec<String> {
    meta(obj)
        .and_then(|m| m.get("finalizers"))
        .and_then(Value::as_array)
        .map(|a| a.iter().filter_map(Value::as_str).map(str::to_string).collect())
        .unwrap_or_default()
}

pub fn is_deleting(obj: &Value) -> bool {
    meta_str(obj, "deletionTimestamp").is_some()
}

/// The object without metadata and status: what `generation` tracks.
pub fn spec_part(obj: &Value) -> Value {
    let mut v = obj.clone();
    if let Some(o) = v.as_object_mut() {
        o.remove("metadata");
        o.remove("status");
        o.remove("kind");
        o.remove("apiVersion");
    }
    v
}

pub fn generation(obj: &Value) -> i64 {
    meta(obj).and_then(|m| m.get("generation")).and_then(Value::as_i64).unwrap_or(0)
}

/// Whether an update from `old` to `new` changes nothing, by Kubernetes' rule: the objects are
/// equal except for `resourceVersion` (never stored) and the `time` of managedFields entries — a
/// manager entry whose only change is its timestamp is not a change (kube-apiserver's
/// IgnoreManagedFieldsTimestampsTransformer puts the old timestamps back, then GuaranteedUpdate
/// skips a write whose bytes equal the stored ones).
pub fn unchanged(new: &Value, old: &Value) -> bool {
    let (Some(n), Some(o)) = (new.as_object(), old.as_object()) else { return new == old };
    equal_except(n, o, &["metadata"])
        && match (n.get("metadata").and_then(Value::as_object), o.get("metadata").and_then(Value::as_object)) {
            (Some(nm), Some(om)) => {
                equal_except(nm, om, &["resourceVersion", "managedFields"])
                    && same_managers(nm.get("managedFields"), om.get("managedFields"))
            }
            (nm, om) => nm.is_none_or(|m| m.is_empty()) && om.is_none_or(|m| m.is_empty()),
        }
}

/// `a` and `b` hold the same keys with equal values, `skip` aside.
fn equal_except(a: &Map<String, Value>, b: &Map<String, Value>, skip: &[&str]) -> bool {
    let count = |m: &Map<String, Value>| m.keys().filter(|k| !skip.contains(&k.as_str())).count();
    count(a) == count(b) && a.iter().filter(|(k, _)| !skip.contains(&k.as_str())).all(|(k, v)| b.get(k) == Some(v))
}

/// managedFields lists equal entry by entry, ignoring each entry's `time`.
fn same_managers(a: Option<&Value>, b: Option<&Value>) -> bool {
    fn entries(v: Option<&Value>) -> &[Value] {
        v.and_then(Value::as_array).map(Vec::as_slice).unwrap_or_default()
    }
    let (a, b) = (entries(a), entries(b));
    a.len() == b.len()
        && a.iter().zip(b).all(|(x, y)| match (x.as_object(), y.as_object()) {
            (Some(x), Some(y)) => equal_except(x, y, &["time"]),
            _ => x == y,
        })
}

/// generateName suffix: 5 characters from Kubernetes' alphabet (no vowels, no confusables).
pub fn random_suffix() -> String {
    const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    let bytes = uuid::Uuid::new_v4();
    bytes.as_bytes()[..5].iter().map(|b| ALPHABET[*b as usize % ALPHABET.len()] as char).collect()
}

/// Copy the server-owned metadata fields from `old` into `new`. A `uid` the writer sent is kept,
/// so that validation refuses a write meant for another object of the same name (Kubernetes uses
/// the existing uid only when none is provided).
pub fn carry_system_meta(new: &mut Value, old: &Value) {
    let Some(om) = meta(old).cloned() else { return };
    let nm = meta_mut(new);
    if nm.get("uid").and_then(Value::as_str).is_none_or(str::is_empty) {
        match om.get("uid") {
            Some(v) => nm.insert("uid".into(), v.clone()),
            None => nm.remove("uid"),
        };
    }
    for f in ["creationTimestamp", "deletionTimestamp", "deletionGracePeriodSeconds", "generation"] {
        match om.get(f) {
            Some(v) => {
                nm.insert(f.into(), v.clone());
            }
            None => {
                nm.remove(f);
            }
        }
    }
    nm.remove("selfLink");
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn timestamps_have_second_precision() {
        let t = jiff::Timestamp::from_millisecond(1_700_000_000_123).expect("valid");
        assert_eq!(timestamp(t), "2023-11-14T22:13:20Z");
    }

    #[test]
    fn spec_part_ignores_metadata_and_status() {
        let a = json!({"metadata":{"name":"a"},"spec":{"x":1},"status":{"y":1}});
        let b = json!({"metadata":{"name":"b"},"spec":{"x":1},"status":{"y":2}});
        assert_eq!(spec_part(&a), spec_part(&b));
    }

    #[test]
    fn a_sent_uid_is_kept_for_validation_and_a_missing_one_filled_in() {
        let old = json!({"metadata": {"uid": "u1", "creationTimestamp": "2024-01-01T00:00:00Z"}});
        let mut stale = json!({"metadata": {"uid": "u0", "creationTimestamp": "1999-01-01T00:00:00Z"}});
        carry_system_meta(&mut stale, &old);
        assert_eq!(
            (stale["metadata"]["uid"].as_str(), stale["metadata"]["creationTimestamp"].as_str()),
            (Some("u0"), Some("2024-01-01T00:00:00Z"))
        );
        let mut bare = json!({"metadata": {}});
        carry_system_meta(&mut bare, &old);
        assert_eq!(bare["metadata"]["uid"], "u1");
    }

    #[test]
    fn unchanged_ignores_only_the_resource_version_and_manager_timestamps() {
        let mf = |time: &str, fields: Value| json!([{"manager": "m", "operation": "Update", "time": time, "fieldsV1": fields}]);
        let base = json!({"metadata": {"name": "a", "resourceVersion": "5", "labels": {"x": "1"},
            "managedFields": mf("2024-01-01T00:00:00Z", json!({"f:metadata": {}}))}, "spec": {"n": 1}});
        let with = |f: &dyn Fn(&mut Value)| {
            let mut v = base.clone();
            f(&mut v);
            v
        };
        let cases: Vec<(&str, Value, bool)> = vec![
            ("identical", base.clone(), true),
            ("another resourceVersion", with(&|v| v["metadata"]["resourceVersion"] = "9".into()), true),
            (
                "no resourceVersion",
                with(&|v| {
                    meta_mut(v).remove("resourceVersion");
                }),
                true,
            ),
            (
                "a manager's timestamp alone",
                with(&|v| v["metadata"]["managedFields"][0]["time"] = "2025-01-01T00:00:00Z".into()),
                true,
            ),
            (
                "a manager's fields",
                with(&|v| v["metadata"]["managedFields"] = mf("2024-01-01T00:00:00Z", json!({"f:spec": {}}))),
                false,
            ),
            (
                "managedFields dropped",
                with(&|v| {
                    meta_mut(v).remove("managedFields");
                }),
                false,
            ),
            ("a label", with(&|v| v["metadata"]["labels"]["x"] = "2".into()), false),
            ("the spec", with(&|v| v["spec"]["n"] = 2.into()), false),
            ("a new top-level field", with(&|v| v["status"] = json!({})), false),
        ];
        for (name, new, want) in cases {
            assert_eq!(unchanged(&new, &base), want, "{name}");
            assert_eq!(unchanged(&base, &new), want, "{name}, reversed");
        }
    }

    #[test]
    fn random_suffixes_use_the_kubernetes_alphabet() {
        let s = random_suffix();
        assert_eq!(s.len(), 5);
        assert!(s.chars().all(|c| "bcdfghjklmnpqrstvwxz2456789".contains(c)));
    }
}
