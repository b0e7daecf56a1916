//! Server-side apply (PATCH `application/apply-patch+yaml`) and the `managedFields` every write records.

use super::meta::{self, meta_mut, meta_str};
use super::{Outcome, Registry, WriteOptions};
use crate::fieldmanager::entries::{self, Entry, Operation, Sent};
use crate::fieldmanager::fieldpath::FieldSet;
use crate::fieldmanager::{self, value, Writer};
use crate::http::errors::{ApiError, ApiResult};
use kaji_api::resources::{ResourceInfo, Subresource};
use kaji_api::validation::Cause;
use serde_json::{json, Value};

pub const REQUIRE_MANAGER: &str = "PATCH, application/apply-patch+yaml requests require a fieldManager";
const LAST_APPLIED: &str = "kubectl.kubernetes.io/last-applied-configuration";

fn subresource(sub: Option<Subresource>, opts: &WriteOptions) -> String {
    match sub {
        Some(Subresource::Status) => "status".into(),
        Some(Subresource::Approval) => "approval".into(),
        _ => opts.subresource.unwrap_or("").into(),
    }
}

fn set_entries(obj: &mut Value, entries: &[Entry]) {
    if entries.is_empty() {
        meta_mut(obj).remove("managedFields");
    } else {
        meta_mut(obj).insert("managedFields".into(), entries::encode(entries));
    }
}

/// The entries stored on `obj`; unreadable ones (written by no kaji) count as none.
fn stored_entries(obj: &Value) -> Vec<Entry> {
    match obj.pointer("/metadata/managedFields").map(entries::decode) {
        Some(Ok(e)) => e,
        Some(Err(err)) => {
            tracing::warn!(field = %err.field, error = %err.message, "ignoring unreadable managedFields");
            vec![]
        }
        None => vec![],
    }
}

/// Record an ordinary write (create, update, patch) from `old` (`None`: create) to `new` in
/// `new`'s managedFields. `sent` is the managedFields the writer's body carried.
pub(super) fn track(
    info: &ResourceInfo,
    name: &str,
    old: Option<&Value>,
    new: &mut Value,
    sent: Option<Value>,
    sub: Option<Subresource>,
    opts: &WriteOptions,
) -> ApiResult<()> {
    let Some(manager) = &opts.field_manager else {
        // Server-side apply computed them; an internal write keeps what the object had.
        match sent.or_else(|| old.and_then(|o| o.pointer("/metadata/managedFields").cloned())) {
            Some(v) if v.as_array().is_some_and(|a| !a.is_empty()) => {
                meta_mut(new).insert("managedFields".into(), v);
            }
            _ => {
                meta_mut(new).remove("managedFields");
            }
        }
        return Ok(());
    };
    let live = old.map(stored_entries).unwrap_or_default();
    // Subresources never take managedFields from the body, as in Kubernetes.
    let base = match (sub, entries::decode_sent(sent.as_ref())) {
        (Some(_), _) | (None, Ok(Sent::Nothing)) => live,
        (None, Ok(Sent::Reset)) => vec![],
        (None, Ok(Sent::Entries(e))) => e,
        (None, Err(err)) => {
            let cause = Cause {
                reason: "FieldValueInvalid".into(),
                message: err.message,
                field: format!("metadata.managedFields{}", err.field),
            };
            return Err(ApiError::invalid(info.group, info.kind, name, &[cause]));
        }
    };
    let who = Writer {
        manager: manager.clone(),
        operation: Operation::Update,
        api_version: info.api_version(),
        subresource: subresource(sub, opts),
    };
    let empty = json!({});
    let out = fieldmanager::update(info.kind, old.unwrap_or(&empty), new, base, &who, &meta::timestamp(meta::now()));
    set_entries(new, &out);
    Ok(())
}

/// Decode an apply body: JSON, or YAML (of which JSON is a subset).
fn decode_config(body: &[u8]) -> ApiResult<Value> {
    let v = match serde_json::from_slice::<Value>(body) {
        Ok(v) => v,
        Err(_) => {
            let text =
                std::str::from_utf8(body).map_err(|_| ApiError::bad_request("error decoding YAML: not UTF-8"))?;
            serde_saphyr::from_str::<Value>(text)
                .map_err(|e| ApiError::bad_request(format!("error decoding YAML: {e}")))?
        }
    };
    if !v.is_object() {
        return Err(ApiError::bad_request("error decoding YAML: the apply configuration must be an object"));
    }
    Ok(v)
}

/// Preconditions an apply configuration may carry.
struct Preconditions {
    resource_version: Option<String>,
    uid: Option<String>,
}

/// Check that the configuration is for this object, and keep only what a manager may own.
fn check_config(
    info: &ResourceInfo,
    ns: Option<&str>,
    name: &str,
    sub: Option<Subresource>,
    cfg: &mut Value,
) -> ApiResult<Preconditions> {
    let expected = info.api_version();
    let av = cfg.get("apiVersion").and_then(Value::as_str).unwrap_or("");
    if av != expected {
        return Err(ApiError::bad_request(format!(
            "Incorrect version specified in apply patch. Specified patch version: {av}, expected: {expected}"
        )));
    }
    let kind = cfg.get("kind").and_then(Value::as_str).unwrap_or("");
    if kind != info.kind {
        return Err(ApiError::bad_request(format!(
            "Incorrect kind specified in apply patch. Specified patch kind: {kind}, expected: {}",
            info.kind
        )));
    }
    if cfg.get("metadata").is_some_and(|m| !m.is_object() && !m.is_null()) {
        return Err(ApiError::bad_request("error decoding YAML: metadata must be an object"));
    }
    if cfg.pointer("/metadata/managedFields").is_some_and(|v| !v.is_null()) {
        return Err(ApiError::bad_request("metadata.managedFields must be nil"));
    }
    if let Some(n) = cfg.pointer("/metadata/name").filter(|n| !n.is_null()) {
        if n.as_str() != Some(name) {
            let n = n.as_str().map(str::to_string).unwrap_or_else(|| n.to_string());
            return Err(ApiError::bad_request(format!(
                "the name of the object ({n}) does not match the name on the URL ({name})"
            )));
        }
    }
    Registry::check_namespace(info, ns, cfg)?;
    let m = meta_mut(cfg);
    m.insert("name".into(), name.into());
    let text = |v: Option<Value>| v.and_then(|v| v.as_str().map(str::to_string)).filter(|s| !s.is_empty());
    let pre = Preconditions { resource_version: text(m.remove("resourceVersion")), uid: text(m.remove("uid")) };
    for f in ["creationTimestamp", "generation", "selfLink", "deletionTimestamp", "deletionGracePeriodSeconds"] {
        m.remove(f);
    }
    if let Some(o) = cfg.as_object_mut() {
        match sub {
            // Through /status only status is applied; elsewhere status is the status writers'.
            Some(_) => o.retain(|k, _| matches!(k.as_str(), "apiVersion" | "kind" | "metadata" | "status")),
            None if info.has(Subresource::Status) => {
                o.remove("status");
            }
            None => {}
        }
    }
    if sub.is_some() {
        meta_mut(cfg).retain(|k, _| matches!(k.as_str(), "name" | "namespace"));
    }
    Ok(pre)
}

/// Fields of the live object's client-side-apply annotation: `kubectl` may take them over without
/// `force` when it upgrades an object to server-side apply, as Kubernetes allows.
fn last_applied_fields(kind: &str, live: &Value) -> Option<FieldSet> {
    let text = live.pointer("/metadata/annotations")?.get(LAST_APPLIED)?.as_str()?;
    let v: Value = serde_json::from_str(text).ok()?;
    value::to_set(kind, &v, false).ok()
}

/// kubectl's server-side apply keeps an existing client-side-apply annotation current (as the
/// Kubernetes apiserver does), so that going back to client-side apply still works.
fn sync_last_applied(obj: &mut Value, cfg: &Value) {
    let Some(annotations) = obj.pointer_mut("/metadata/annotations").and_then(Value::as_object_mut) else { return };
    if !annotations.contains_key(LAST_APPLIED) {
        return;
    }
    let mut applied = cfg.clone();
    if let Some(a) = applied.pointer_mut("/metadata/annotations").and_then(Value::as_object_mut) {
        a.remove(LAST_APPLIED);
    }
    let text = crate::fieldmanager::fieldpath::canonical(&applied) + "\n";
    annotations.insert(LAST_APPLIED.into(), text.into());
}

fn apply_error(info: &ResourceInfo, ns: Option<&str>, name: &str, err: fieldmanager::Error) -> ApiError {
    match &err {
        fieldmanager::Error::Conflicts(c) => {
            let causes: Vec<Value> = c
                .iter()
                .map(|c| {
                    let message = format!("conflict with {}", c.manager);
                    json!({"reason": "FieldManagerConflict", "message": message, "field": c.field})
                })
                .collect();
            let mut e = ApiError::new(409, "Conflict", err.to_string());
            e.details = Some(json!({"causes": causes}));
            e
        }
        fieldmanager::Error::Invalid(m) => ApiError::bad_request(format!(
            "failed to create typed patch object ({}{name}; {}, Kind={}): {m}",
            ns.map(|n| format!("{n}/")).unwrap_or_default(),
            info.api_version(),
            info.kind
        )),
    }
}

impl Registry {
    /// Drop the configuration's fields the schema does not know (an error with `Strict`, a
    /// warning with `Warn`); a value of the wrong type is an error.
    fn filter_unknown(
        &self,
        info: &ResourceInfo,
        live: &Value,
        cfg: &Value,
        opts: &WriteOptions,
    ) -> ApiResult<(Value, Vec<String>)> {
        // A configuration that does not merge is refused by the apply itself, with its reason.
        let Ok(probe) = value::merge(info.kind, live, cfg) else { return Ok((cfg.clone(), vec![])) };
        let known = kaji_api::schema::normalize(info.kind, &probe)
            .map_err(|e| ApiError::bad_request(format!("error decoding {}: {e}", info.kind)))?;
        if kaji_api::schema::unknown_fields(&probe, &known).is_empty() {
            return Ok((cfg.clone(), vec![]));
        }
        let warnings = self.check_schema(info.kind, &mut probe.clone(), opts.field_validation)?;
        let unknown: FieldSet = value::to_set(info.kind, cfg, false)
            .unwrap_or_default()
            .into_iter()
            .filter(|p| value::value_at(info.kind, cfg, p).is_some_and(|v| !v.is_null()))
            .filter(|p| value::value_at(info.kind, &known, p).is_none())
            .collect();
        let mut out = cfg.clone();
        value::prune(info.kind, &mut out, &unknown, &FieldSet::new());
        Ok((out, warnings))
    }

    /// PATCH with `application/apply-patch+yaml`: merge the configuration into the object (creating
    /// it if missing), record `opts.field_manager` as its applier, refuse conflicts unless `force`.
    #[allow(clippy::too_many_arguments)]
    pub async fn apply(
        &self,
        info: &'static ResourceInfo,
        ns: Option<&str>,
        name: &str,
        body: &[u8],
        sub: Option<Subresource>,
        opts: &WriteOptions,
        force: bool,
    ) -> ApiResult<Outcome> {
        let manager = opts
            .field_manager
            .clone()
            .filter(|m| !m.is_empty())
            .ok_or_else(|| ApiError::bad_request(REQUIRE_MANAGER))?;
        let mut cfg = decode_config(body)?;
        let pre = check_config(info, ns, name, sub, &mut cfg)?;
        let who = Writer {
            manager: manager.clone(),
            operation: Operation::Apply,
            api_version: info.api_version(),
            subresource: subresource(sub, opts),
        };
        let inner = WriteOptions { field_manager: None, ..opts.clone() };
        let mut attempts = 0;
        loop {
            attempts += 1;
            let (live, kv) = match self.get_raw(info, ns, name) {
                Ok((live, kv)) => (live, Some(kv)),
                Err(e) if e.code == 404 && sub.is_none() && pre.resource_version.is_none() && pre.uid.is_none() => {
                    let mut skeleton =
                        json!({"apiVersion": info.api_version(), "kind": info.kind, "metadata": {"name": name}});
                    Self::check_namespace(info, ns, &mut skeleton)?;
                    (skeleton, None)
                }
                Err(e) => return Err(e),
            };
            if let (Some(kv), Some(rv)) = (&kv, &pre.resource_version) {
                if super::parse_rv(rv) != Some(kv.mod_revision) {
                    return Err(ApiError::stale(info.group, info.plural, name));
                }
            }
            if let Some(uid) = &pre.uid {
                let current = meta_str(&live, "uid").unwrap_or("");
                if uid != current {
                    let why = format!("Precondition failed: UID in precondition: {uid}, UID in object meta: {current}");
                    return Err(ApiError::conflict(info.group, info.plural, name, &why));
                }
            }
            let (cfg, warnings) = self.filter_unknown(info, &live, &cfg, opts)?;
            let allowed = if manager == "kubectl" { last_applied_fields(info.kind, &live) } else { None };
            let now = meta::timestamp(meta::now());
            let how = fieldmanager::Options { force, allowed: allowed.as_ref(), now: &now };
            let applied = fieldmanager::apply(info.kind, &live, &cfg, stored_entries(&live), &who, &how)
                .map_err(|e| apply_error(info, ns, name, e))?;
            let mut obj = applied.object;
            set_entries(&mut obj, &applied.entries);
            if manager == "kubectl" {
                sync_last_applied(&mut obj, &cfg);
            }
            let result = match &kv {
                None => self.create_via(info, ns, obj, &inner, super::CreateVia::Update).await,
                // Nothing changed, not even ownership: no write, no new resourceVersion.
                Some(_) if obj == live => return Ok(Outcome { code: 200, body: live, warnings }),
                Some(kv) => self.write_update(info, ns, name, obj, &live, kv, sub, &inner),
            };
            match result {
                Err(e) if attempts < 5 && e.code == 409 && matches!(e.reason, "Conflict" | "AlreadyExists") => continue,
                Err(e) => return Err(e),
                Ok(mut out) => {
                    out.warnings.splice(0..0, warnings);
                    return Ok(out);
                }
            }
        }
    }
}
