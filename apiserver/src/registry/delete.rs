//! DELETE: immediate, graceful (bound pods) or marked while finalizers remain — including the
//! garbage collector's `orphan` and `foregroundDeletion` finalizers that `propagationPolicy` asks for.

use super::meta::{self, meta_mut, meta_str};
use super::{encode_for_store, namespaces, parse_rv, pods, services, with_rv, DeleteOptions, Outcome, Registry};
use crate::auth::{AdmissionRequest, Operation};
use crate::http::errors::{ApiError, ApiResult};
use kaji_api::resources::ResourceInfo;
use kaji_api::validation::Cause;
use serde_json::{json, Value};

/// The finalizer that makes the garbage collector orphan an object's dependents.
const ORPHAN_FINALIZER: &str = "orphan";
/// The finalizer that makes the garbage collector delete an object's dependents first.
const FOREGROUND_FINALIZER: &str = "foregroundDeletion";

/// What happens to an object's dependents when it is deleted (`DeleteOptions.propagationPolicy`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Propagation {
    /// The owner goes now; the garbage collector deletes the dependents afterwards.
    Background,
    /// The owner stays (with `foregroundDeletion`) until its blocking dependents are gone.
    Foreground,
    /// The owner stays (with `orphan`) until its dependents no longer reference it.
    Orphan,
}

impl Propagation {
    /// `propagationPolicy` and the legacy `orphanDependents` from one DeleteOptions, validated as
    /// Kubernetes' ValidateDeleteOptions does (a 422 on `DeleteOptions.meta.k8s.io`).
    pub fn from_options(policy: Option<&str>, orphan_dependents: Option<bool>) -> ApiResult<Option<Self>> {
        let parsed = match policy {
            None => None,
            Some("Background") => Some(Self::Background),
            Some("Foreground") => Some(Self::Foreground),
            Some("Orphan") => Some(Self::Orphan),
            Some(other) => {
                let supported = ["Foreground", "Background", "Orphan", "nil"];
                return Err(invalid_delete_options(Cause::not_supported("propagationPolicy", other, &supported)));
            }
        };
        match (parsed, orphan_dependents) {
            (Some(_), Some(_)) => Err(invalid_delete_options(Cause::invalid(
                "propagationPolicy",
                policy.unwrap_or_default(),
                "orphanDependents and deletionPropagation cannot be both set",
            ))),
            (Some(p), None) => Ok(Some(p)),
            (None, Some(true)) => Ok(Some(Self::Orphan)),
            (None, Some(false)) => Ok(Some(Self::Background)),
            (None, None) => Ok(None),
        }
    }
}

fn invalid_delete_options(cause: Cause) -> ApiError {
    ApiError {
        code: 422,
        reason: "Invalid",
        message: format!("DeleteOptions.meta.k8s.io \"\" is invalid: {}", cause.error_string()),
        details: Some(json!({"group": "meta.k8s.io", "kind": "DeleteOptions",
            "causes": [{"reason": cause.reason, "message": cause.message, "field": cause.field}]})),
    }
}

/// The finalizers an object carries after a DELETE with `policy`, or `None` when they stay as they
/// are (Kubernetes' deletionFinalizersForGarbageCollection). Without a policy the object's own GC
/// finalizer decides, and without one its kind's default: orphaning when `orphan_by_default` (a
/// core/v1 ReplicationController), else Background.
pub fn gc_finalizers(existing: &[String], policy: Option<Propagation>, orphan_by_default: bool) -> Option<Vec<String>> {
    let (orphan, foreground) = match policy {
        Some(p) => (p == Propagation::Orphan, p == Propagation::Foreground),
        None => {
            let first = existing.iter().find(|f| *f == ORPHAN_FINALIZER || *f == FOREGROUND_FINALIZER);
            let orphan = first.map_or(orphan_by_default, |f| f == ORPHAN_FINALIZER);
            (orphan, existing.iter().any(|f| f == FOREGROUND_FINALIZER))
        }
    };
    let mut next: Vec<String> =
        existing.iter().filter(|f| *f != ORPHAN_FINALIZER && *f != FOREGROUND_FINALIZER).cloned().collect();
    if orphan {
        next.push(ORPHAN_FINALIZER.into());
    }
    if foreground {
        next.push(FOREGROUND_FINALIZER.into());
    }
    let set = |v: &[String]| v.iter().cloned().collect::<std::collections::BTreeSet<_>>();
    (set(existing) != set(&next)).then_some(next)
}

/// Marks `obj` as being deleted: in `grace` seconds for a graceful deletion, else now with a zero
/// grace period while finalizers hold it (an earlier deletionTimestamp is kept).
fn mark_deleting(info: &ResourceInfo, obj: &mut Value, grace: i64, now: jiff::Timestamp) {
    let first = !meta::is_deleting(obj);
    let g = meta::generation(obj);
    let m = meta_mut(obj);
    if first && g > 0 {
        m.insert("generation".into(), (g + 1).into());
    }
    if grace > 0 {
        let at = now.checked_add(jiff::SignedDuration::from_secs(grace)).unwrap_or(now);
        m.insert("deletionTimestamp".into(), meta::timestamp(at).into());
    } else {
        let earlier = m
            .get("deletionTimestamp")
            .and_then(Value::as_str)
            .and_then(|t| t.parse::<jiff::Timestamp>().ok())
            .is_some_and(|t| t <= now);
        if !earlier {
            m.insert("deletionTimestamp".into(), meta::timestamp(now).into());
        }
    }
    m.insert("deletionGracePeriodSeconds".into(), grace.into());
    if info.kind == "Namespace" {
        obj["status"]["phase"] = "Terminating".into();
    }
}

/// What an immediate DELETE answers: the object for pods/services/namespaces, else a Status.
fn deleted_body(info: &ResourceInfo, obj: Value) -> Value {
    if info.returns_deleted_object() {
        return obj;
    }
    json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success",
           "details": {"name": meta::name(&obj), "group": info.group, "kind": info.plural,
                       "uid": meta_str(&obj, "uid").unwrap_or("")}})
}

impl Registry {
    /// DELETE one object: graceful for bound pods, marked while finalizers remain.
    pub async fn delete(
        &self,
        info: &'static ResourceInfo,
        ns: Option<&str>,
        name: &str,
        opts: &DeleteOptions,
    ) -> ApiResult<Outcome> {
        let mut attempts = 0;
        loop {
            attempts += 1;
            match self.delete_once(info, ns, name, opts) {
                Err(e) if e.code == 409 && e.reason == "Conflict" && opts.precondition_rv.is_none() && attempts < 5 => {
                    continue
                }
                other => return other,
            }
        }
    }

    fn delete_once(
        &self,
        info: &'static ResourceInfo,
        ns: Option<&str>,
        name: &str,
        opts: &DeleteOptions,
    ) -> ApiResult<Outcome> {
        let (old, kv) = self.get_raw(info, ns, name)?;
        if let Some(uid) = &opts.precondition_uid {
            if meta_str(&old, "uid") != Some(uid.as_str()) {
                return Err(ApiError::conflict(
                    info.group,
                    info.plural,
                    name,
                    &format!(
                        "Precondition failed: UID in precondition: {uid}, UID in object meta: {}",
                        meta_str(&old, "uid").unwrap_or("")
                    ),
                ));
            }
        }
        if let Some(rv) = &opts.precondition_rv {
            if parse_rv(rv) != Some(kv.mod_revision) {
                return Err(ApiError::conflict(info.group, info.plural, name, &format!(
                    "Precondition failed: ResourceVersion in precondition: {rv}, ResourceVersion in object meta: {}", kv.mod_revision
                )));
            }
        }
        if let Some(why) = info.strategy.and_then(|s| s.0.forbids_delete(&old)) {
            return Err(crate::auth::authz::message::resource_forbidden(info.group, info.plural, name, &why));
        }
        let req = AdmissionRequest {
            user: &opts.user,
            operation: Operation::Delete,
            resource: info,
            subresource: None,
            namespace: ns,
            name,
            old: Some(&old),
            dry_run: opts.dry_run,
            options: None,
        };
        self.admission.admit(&req, None)?;
        self.admission.validate(&req, None)?;
        let pending = |body: Value| Outcome {
            code: if opts.orphan_dependents == Some(false) { 202 } else { 200 },
            body,
            warnings: vec![],
        };
        let deleting = meta::is_deleting(&old);
        let grace = if info.kind == "Pod" { pods::grace_period(&old, opts.grace_period_seconds) } else { 0 };
        let existing_grace = old.pointer("/metadata/deletionGracePeriodSeconds").and_then(Value::as_i64).unwrap_or(0);
        // A graceful deletion under way may only be shortened; until it is, DeleteOptions change
        // nothing. A terminating namespace waits for its spec finalizers the same way.
        let waiting_namespace = info.kind == "Namespace" && !namespaces::spec_finalizers_done(info, &old);
        if deleting && ((existing_grace > 0 && grace >= existing_grace) || waiting_namespace) {
            return Ok(pending(old));
        }
        let mut new = old.clone();
        let orphan_by_default = info.orphans_dependents_by_default();
        if let Some(finalizers) = gc_finalizers(&meta::finalizers(&old), opts.propagation, orphan_by_default) {
            let m = meta_mut(&mut new);
            if finalizers.is_empty() {
                m.remove("finalizers");
            } else {
                m.insert("finalizers".into(), json!(finalizers));
            }
        }
        let has_finalizers = !meta::finalizers(&new).is_empty() || !namespaces::spec_finalizers_done(info, &new);
        if grace > 0 || has_finalizers {
            mark_deleting(info, &mut new, grace, meta::now());
            if new == old {
                return Ok(pending(new));
            }
            if opts.dry_run {
                return Ok(pending(new));
            }
            let rev = self
                .store
                .update(&info.key(ns, name), &encode_for_store(&new)?, kv.mod_revision)
                .map_err(|e| self.store_err(info, name, e))?;
            return Ok(pending(with_rv(new, rev)));
        }
        if opts.dry_run {
            return Ok(Outcome { code: 200, body: deleted_body(info, old), warnings: vec![] });
        }
        let (rev, _) =
            self.store.delete(&info.key(ns, name), Some(kv.mod_revision)).map_err(|e| self.store_err(info, name, e))?;
        self.after_delete(info, &old);
        Ok(Outcome { code: 200, body: deleted_body(info, with_rv(old, rev)), warnings: vec![] })
    }

    pub(super) fn after_delete(&self, info: &ResourceInfo, old: &Value) {
        if info.kind == "Service" {
            services::release(self, old);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn strings(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn policies_add_and_swap_the_gc_finalizers() {
        use Propagation::*;
        // (finalizers before, policy, finalizers after or None when unchanged)
        type Case = (&'static [&'static str], Option<Propagation>, Option<&'static [&'static str]>);
        let cases: &[Case] = &[
            (&[], None, None),
            (&[], Some(Background), None),
            (&[], Some(Foreground), Some(&["foregroundDeletion"])),
            (&[], Some(Orphan), Some(&["orphan"])),
            (&["example.com/hold"], Some(Orphan), Some(&["example.com/hold", "orphan"])),
            (&["foregroundDeletion"], Some(Orphan), Some(&["orphan"])),
            (&["orphan"], Some(Background), Some(&[])),
            // Without a policy, the finalizer already there decides.
            (&["orphan"], None, None),
            (&["foregroundDeletion"], None, None),
            (&["foregroundDeletion"], Some(Foreground), None),
        ];
        for (existing, policy, want) in cases {
            let got = gc_finalizers(&strings(existing), *policy, false);
            assert_eq!(got, want.map(strings), "{existing:?} with {policy:?}");
        }
    }

    #[test]
    fn a_kind_that_orphans_by_default_does_so_unless_told_otherwise() {
        use Propagation::*;
        type Case = (&'static [&'static str], Option<Propagation>, Option<&'static [&'static str]>);
        let cases: &[Case] = &[
            (&[], None, Some(&["orphan"])),
            (&[], Some(Background), None),
            (&[], Some(Foreground), Some(&["foregroundDeletion"])),
            // A GC finalizer already there still decides.
            (&["foregroundDeletion"], None, None),
            (&["orphan"], None, None),
        ];
        for (existing, policy, want) in cases {
            let got = gc_finalizers(&strings(existing), *policy, true);
            assert_eq!(got, want.map(strings), "{existing:?} with {policy:?}");
        }
        let rc = kaji_api::resources::by_kind("ReplicationController").expect("served");
        assert!(rc.orphans_dependents_by_default());
        assert!(!kaji_api::resources::by_kind("ReplicaSet").expect("served").orphans_dependents_by_default());
    }

    #[test]
    fn options_map_orphan_dependents_and_refuse_bad_policies() {
        assert_eq!(Propagation::from_options(None, None).ok(), Some(None));
        assert_eq!(Propagation::from_options(Some("Foreground"), None).ok(), Some(Some(Propagation::Foreground)));
        assert_eq!(Propagation::from_options(None, Some(true)).ok(), Some(Some(Propagation::Orphan)));
        assert_eq!(Propagation::from_options(None, Some(false)).ok(), Some(Some(Propagation::Background)));

        let err = Propagation::from_options(Some("Sideways"), None).expect_err("unknown policy");
        assert_eq!((err.code, err.reason), (422, "Invalid"));
        assert_eq!(
            err.message,
            r#"DeleteOptions.meta.k8s.io "" is invalid: propagationPolicy: Unsupported value: "Sideways": supported values: "Foreground", "Background", "Orphan", "nil""#
        );
        let err = Propagation::from_options(Some("Orphan"), Some(true)).expect_err("both set");
        assert!(
            err.message.ends_with("orphanDependents and deletionPropagation cannot be both set"),
            "{}",
            err.message
        );
    }

    #[test]
    fn marking_keeps_an_earlier_deletion_timestamp_and_bumps_generation_once() {
        let info = kaji_api::resources::by_kind("Deployment").expect("served");
        let now: jiff::Timestamp = "2025-01-01T00:00:10Z".parse().expect("time");
        let mut obj = json!({"metadata": {"generation": 3}});
        mark_deleting(info, &mut obj, 0, now);
        assert_eq!(obj["metadata"]["deletionTimestamp"], "2025-01-01T00:00:10Z");
        assert_eq!(
            (obj["metadata"]["generation"].as_i64(), obj["metadata"]["deletionGracePeriodSeconds"].as_i64()),
            (Some(4), Some(0))
        );
        let later = now.checked_add(jiff::SignedDuration::from_secs(5)).expect("time");
        mark_deleting(info, &mut obj, 0, later);
        assert_eq!(obj["metadata"]["deletionTimestamp"], "2025-01-01T00:00:10Z");
        assert_eq!(obj["metadata"]["generation"], 4);
    }
}
