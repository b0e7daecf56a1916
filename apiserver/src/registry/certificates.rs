//! The CertificateSigningRequest strategy (`pkg/registry/certificates/certificates/strategy.go`):
//! the requester's identity fills spec.username/uid/groups/extra on create, never the body; a new
//! request has no status; the main endpoint changes neither spec nor status, `/status` not the
//! spec, `/approval` only the conditions; new conditions get their timestamps.

use super::meta;
use crate::auth::UserInfo;
use serde_json::{json, Map, Value};

/// `PrepareForCreate`: who asked, from the request's authentication, and an empty status.
pub fn prepare_create(body: &mut Value, user: &UserInfo) {
    let Some(obj) = body.as_object_mut() else { return };
    let spec = obj.entry("spec").or_insert_with(|| json!({}));
    if let Some(spec) = spec.as_object_mut() {
        for f in ["username", "uid", "groups", "extra"] {
            spec.remove(f);
        }
        if !user.name.is_empty() {
            spec.insert("username".into(), user.name.clone().into());
        }
        if !user.uid.is_empty() {
            spec.insert("uid".into(), user.uid.clone().into());
        }
        if !user.groups.is_empty() {
            spec.insert("groups".into(), json!(user.groups));
        }
        if !user.extra.is_empty() {
            spec.insert("extra".into(), json!(user.extra));
        }
    }
    obj.insert("status".into(), json!({}));
}

/// `PrepareForUpdate` of each endpoint, after the generic status split: the stored spec always
/// wins; through `/approval` only `status.conditions` comes from the request.
pub fn prepare_update(new: &mut Value, old: &Value, approval: bool) {
    match old.get("spec") {
        Some(spec) => new["spec"] = spec.clone(),
        None => {
            if let Some(o) = new.as_object_mut() {
                o.remove("spec");
            }
        }
    }
    if approval {
        let conditions = new.pointer("/status/conditions").cloned();
        let mut status = old.get("status").cloned().unwrap_or_else(|| json!({}));
        if let Some(s) = status.as_object_mut() {
            match conditions {
                Some(c) => s.insert("conditions".into(), c),
                None => s.remove("conditions"),
            };
        }
        new["status"] = status;
    }
    populate_condition_timestamps(new, old);
}

/// Conditions without `lastUpdateTime` get now; without `lastTransitionTime`, the old one of the
/// same type and status, else now.
fn populate_condition_timestamps(new: &mut Value, old: &Value) {
    let now = meta::timestamp(meta::now());
    let old_conditions: Vec<Value> =
        old.pointer("/status/conditions").and_then(Value::as_array).cloned().unwrap_or_default();
    let Some(conditions) = new.pointer_mut("/status/conditions").and_then(Value::as_array_mut) else { return };
    for c in conditions.iter_mut().filter_map(Value::as_object_mut) {
        if is_zero(c, "lastUpdateTime") {
            c.insert("lastUpdateTime".into(), now.clone().into());
        }
        if is_zero(c, "lastTransitionTime") {
            let same = |o: &&Value| o.get("type") == c.get("type") && o.get("status") == c.get("status");
            let kept = old_conditions
                .iter()
                .filter(same)
                .find_map(|o| o.get("lastTransitionTime").filter(|t| t.as_str().is_some_and(|s| !s.is_empty())))
                .cloned();
            c.insert("lastTransitionTime".into(), kept.unwrap_or_else(|| now.clone().into()));
        }
    }
}

fn is_zero(c: &Map<String, Value>, key: &str) -> bool {
    c.get(key).and_then(Value::as_str).is_none_or(str::is_empty)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_requester_comes_from_authentication_not_the_body() {
        let mut csr = json!({"spec": {"username": "admin", "groups": ["system:masters"], "request": "cg=="},
            "status": {"conditions": [{"type": "Approved", "status": "True"}]}});
        let user = UserInfo::new("system:bootstrap:abcdef", &["system:bootstrappers", "system:authenticated"]);
        prepare_create(&mut csr, &user);
        assert_eq!(
            csr,
            json!({"spec": {"username": "system:bootstrap:abcdef", "request": "cg==",
                "groups": ["system:bootstrappers", "system:authenticated"]}, "status": {}})
        );
    }

    #[test]
    fn approval_takes_only_the_conditions_and_stamps_them() {
        let old = json!({"spec": {"username": "u"}, "status": {"certificate": "Y2VydA=="}});
        let mut new = json!({"spec": {"username": "forged"}, "status": {"certificate": "",
            "conditions": [{"type": "Approved", "status": "True", "reason": "KubectlApprove"}]}});
        prepare_update(&mut new, &old, true);
        assert_eq!(new["spec"], json!({"username": "u"}));
        assert_eq!(new["status"]["certificate"], "Y2VydA==");
        let c = &new["status"]["conditions"][0];
        assert!(c["lastUpdateTime"].as_str().is_some_and(|t| t.ends_with('Z')), "{c}");
        assert_eq!(c["lastUpdateTime"], c["lastTransitionTime"]);
    }

    #[test]
    fn a_condition_that_did_not_change_keeps_its_transition_time() {
        let old = json!({"status": {"conditions": [{"type": "Approved", "status": "True",
            "lastTransitionTime": "2020-01-01T00:00:00Z"}]}});
        let mut new = json!({"status": {"conditions": [{"type": "Approved", "status": "True"}]}});
        prepare_update(&mut new, &old, false);
        assert_eq!(new["status"]["conditions"][0]["lastTransitionTime"], "2020-01-01T00:00:00Z");
    }
}
