//! DELETE: immediate, graceful (bound pods) or marked while finalizers remain.

use super::meta::{self, meta_mut, meta_str};
use super::{encode_for_store, namespaces, parse_rv, pods, services, with_rv, DeleteOptions, Outcome, Registry};
use crate::http::errors::{ApiError, ApiResult};
use kaji_api::resources::ResourceInfo;
use serde_json::{json, Value};

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
        let grace = if info.kind == "Pod" { pods::grace_period(&old, opts.grace_period_seconds) } else { 0 };
        let has_finalizers = !meta::finalizers(&old).is_empty() || !namespaces::spec_finalizers_done(info, &old);
        if grace > 0 || has_finalizers {
            let mut new = old.clone();
            let now = meta::now();
            let existing_grace = old.pointer("/metadata/deletionGracePeriodSeconds").and_then(Value::as_i64);
            let changed = match (meta::is_deleting(&old), existing_grace) {
                (false, _) => true,
                // A shorter grace period may be requested for an object already terminating.
                (true, Some(g)) => grace < g,
                (true, None) => false,
            };
            if changed {
                let m = meta_mut(&mut new);
                let at = now.checked_add(jiff::SignedDuration::from_secs(grace)).unwrap_or(now);
                m.insert("deletionTimestamp".into(), meta::timestamp(at).into());
                m.insert("deletionGracePeriodSeconds".into(), grace.into());
                let g = meta::generation(&old);
                if g > 0 {
                    m.insert("generation".into(), (g + 1).into());
                }
                if info.kind == "Namespace" {
                    new["status"]["phase"] = "Terminating".into();
                }
            }
            if opts.dry_run || !changed {
                return Ok(Outcome { code: 200, body: new, warnings: vec![] });
            }
            let rev = self
                .store
                .update(&info.key(ns, name), &encode_for_store(&new)?, kv.mod_revision)
                .map_err(|e| self.store_err(info, name, e))?;
            return Ok(Outcome { code: 200, body: with_rv(new, rev), warnings: vec![] });
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
