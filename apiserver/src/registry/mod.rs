//! The write path shared by every resource: decode, default, validate, allocate, store —
//! plus the per-kind rules (pods, pod logs, services, namespaces, scale) in submodules.

pub mod alloc;
mod apply;
mod certificates;
mod delete;
pub mod endpoints_adapter;
mod eviction;
pub mod meta;
mod namespaces;
pub mod patch_limits;
pub mod pod_log;
mod pods;
mod scale;
pub(crate) mod services;
mod volumes;

use crate::auth::{compound, Admission, AdmissionRequest, Authorizer, Operation, UserInfo};
use crate::cache::Cache;
use crate::http::errors::{ApiError, ApiResult};
use crate::storage::{self, KeyValue, Store};
use kaji_api::resources::{ResourceInfo, Subresource};
use kaji_api::{defaults, schema, validation};
use meta::{meta_mut, meta_str};
use serde_json::{json, Value};
use std::sync::Arc;

pub use apply::REQUIRE_MANAGER;
pub use delete::Propagation;
pub use scale::ScaleOp;

/// How unknown fields in a write are treated (`fieldValidation`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum FieldValidation {
    Ignore,
    #[default]
    Warn,
    Strict,
}

impl FieldValidation {
    pub fn parse(s: Option<&str>) -> ApiResult<Self> {
        match s {
            None | Some("") | Some("Warn") => Ok(Self::Warn),
            Some("Ignore") => Ok(Self::Ignore),
            Some("Strict") => Ok(Self::Strict),
            Some(other) => Err(ApiError::bad_request(format!("fieldValidation parameter unsupported: {other}"))),
        }
    }
}

#[derive(Debug, Clone)]
pub struct WriteOptions {
    /// Who writes (the pipeline's user; admission judges it).
    pub user: Arc<UserInfo>,
    pub dry_run: bool,
    pub field_validation: FieldValidation,
    /// Who an ordinary write is recorded under in `metadata.managedFields` (`fieldManager`, else
    /// the User-Agent's product); `None` stores the body's managedFields untouched.
    pub field_manager: Option<String>,
    /// `scale` for writes through the scale subresource (status is known from the path).
    pub subresource: Option<&'static str>,
}

impl Default for WriteOptions {
    /// The apiserver's own write.
    fn default() -> Self {
        Self {
            user: Arc::new(UserInfo::apiserver()),
            dry_run: false,
            field_validation: FieldValidation::default(),
            field_manager: None,
            subresource: None,
        }
    }
}

/// What a write answers: HTTP code, body, and `Warning` headers.
#[derive(Debug)]
pub struct Outcome {
    pub code: u16,
    pub body: Value,
    pub warnings: Vec<String>,
}

/// Which JSON patch flavour a PATCH carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PatchType {
    Merge,
    Json,
    Strategic,
}

/// Parsed DeleteOptions (body and query merged).
#[derive(Debug, Clone)]
pub struct DeleteOptions {
    /// Who deletes (admission judges it).
    pub user: Arc<UserInfo>,
    pub grace_period_seconds: Option<i64>,
    pub precondition_uid: Option<String>,
    pub precondition_rv: Option<String>,
    pub dry_run: bool,
    /// `propagationPolicy` (or what `orphanDependents` stands for); `None` leaves it to the
    /// object's own GC finalizer.
    pub propagation: Option<Propagation>,
    /// The legacy `orphanDependents` as sent: `false` makes a deletion that waits answer 202.
    pub orphan_dependents: Option<bool>,
}

impl Default for DeleteOptions {
    /// The apiserver's own delete, with no options.
    fn default() -> Self {
        Self {
            user: Arc::new(UserInfo::apiserver()),
            grace_period_seconds: None,
            precondition_uid: None,
            precondition_rv: None,
            dry_run: false,
            propagation: None,
            orphan_dependents: None,
        }
    }
}

pub struct Registry {
    pub store: Arc<dyn Store>,
    pub cache: Arc<Cache>,
    pub ips: alloc::IpAllocator,
    pub ports: alloc::PortAllocator,
    /// The admission plugins every write passes (mutating after defaulting, validating last).
    pub admission: Arc<dyn Admission>,
    /// Asked once more when an update or apply turns out to create: the writer needs `create`.
    pub authorizer: Arc<dyn Authorizer>,
    /// `--max-request-body-bytes`: also what all `copy`s of one JSON patch may add (0: no limit).
    pub max_request_body_bytes: usize,
}

/// How a create came about: a POST, or an update or apply of a name that did not exist (which
/// needs `create` authorization besides the request's own verb, as Kubernetes' handlers check).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum CreateVia {
    Post,
    Update,
}

/// A stored object as the API shows it: its JSON with `resourceVersion` set.
pub fn decode_stored(kv: &KeyValue) -> ApiResult<Value> {
    let mut v: Value = serde_json::from_slice(&kv.value).map_err(ApiError::internal)?;
    meta_mut(&mut v).insert("resourceVersion".into(), Value::String(kv.mod_revision.to_string()));
    Ok(v)
}

/// The object as it is stored: without `resourceVersion`.
pub(crate) fn encode_for_store(obj: &Value) -> ApiResult<Vec<u8>> {
    let mut v = obj.clone();
    meta_mut(&mut v).remove("resourceVersion");
    serde_json::to_vec(&v).map_err(ApiError::internal)
}

pub(crate) fn with_rv(mut obj: Value, rev: u64) -> Value {
    meta_mut(&mut obj).insert("resourceVersion".into(), Value::String(rev.to_string()));
    obj
}

pub(crate) fn parse_rv(s: &str) -> Option<u64> {
    s.parse().ok()
}

impl Registry {
    pub(crate) fn store_err(&self, info: &ResourceInfo, name: &str, err: storage::Error) -> ApiError {
        match err {
            storage::Error::AlreadyExists(_) => ApiError::already_exists(info.group, info.plural, name),
            storage::Error::NotFound(_) => ApiError::not_found(info.group, info.plural, name),
            storage::Error::Conflict { .. } => ApiError::stale(info.group, info.plural, name),
            other => ApiError::internal(other),
        }
    }

    /// The current stored object and its key-value record.
    pub fn get_raw(&self, info: &ResourceInfo, ns: Option<&str>, name: &str) -> ApiResult<(Value, KeyValue)> {
        let key = info.key(ns, name);
        match self.store.get(&key).map_err(ApiError::internal)? {
            Some(kv) => Ok((decode_stored(&kv)?, kv)),
            None => Err(ApiError::not_found(info.group, info.plural, name)),
        }
    }

    pub fn get(&self, info: &ResourceInfo, ns: Option<&str>, name: &str) -> ApiResult<Value> {
        Ok(self.get_raw(info, ns, name)?.0)
    }

    /// Type-check against the schema and apply the fieldValidation policy.
    fn check_schema(&self, kind: &str, body: &mut Value, fv: FieldValidation) -> ApiResult<Vec<String>> {
        let known =
            schema::normalize(kind, body).map_err(|e| ApiError::bad_request(format!("error decoding {kind}: {e}")))?;
        let unknown = schema::unknown_fields(body, &known);
        if unknown.is_empty() {
            return Ok(vec![]);
        }
        let msgs: Vec<String> = unknown.iter().map(|f| format!("unknown field \"{f}\"")).collect();
        match fv {
            FieldValidation::Strict => {
                Err(ApiError::bad_request(format!("strict decoding error: {}", msgs.join(", "))))
            }
            FieldValidation::Warn => {
                schema::strip_unknown(body, &known);
                Ok(msgs)
            }
            FieldValidation::Ignore => {
                schema::strip_unknown(body, &known);
                Ok(vec![])
            }
        }
    }

    /// Check apiVersion/kind in a body and fill them in.
    fn check_type(info: &ResourceInfo, kind: &str, api_version: &str, body: &mut Value) -> ApiResult<()> {
        if !body.is_object() {
            return Err(ApiError::bad_request("the request body must be a JSON object"));
        }
        if let Some(av) = body.get("apiVersion").and_then(Value::as_str).filter(|s| !s.is_empty()) {
            if av != api_version {
                return Err(ApiError::bad_request(format!(
                    "the API version in the data ({av}) does not match the expected API version ({api_version})"
                )));
            }
        }
        if let Some(k) = body.get("kind").and_then(Value::as_str).filter(|s| !s.is_empty()) {
            if k != kind {
                return Err(ApiError::bad_request(format!(
                    "the kind in the data ({k}) does not match the expected kind ({kind}) for {}",
                    info.plural
                )));
            }
        }
        body["apiVersion"] = api_version.into();
        body["kind"] = kind.into();
        Ok(())
    }

    fn check_namespace(info: &ResourceInfo, ns: Option<&str>, body: &mut Value) -> ApiResult<()> {
        let m = meta_mut(body);
        if info.namespaced {
            let ns = ns.ok_or_else(|| ApiError::bad_request("the namespace of the object must be set in the URL"))?;
            match m.get("namespace").and_then(Value::as_str) {
                Some(b) if !b.is_empty() && b != ns => {
                    return Err(ApiError::bad_request(
                        "the namespace of the provided object does not match the namespace sent on the request",
                    ))
                }
                _ => {
                    m.insert("namespace".into(), ns.into());
                }
            }
        } else {
            m.remove("namespace");
        }
        Ok(())
    }

    /// 404 when the namespace is missing, 403 when it is terminating.
    fn check_namespace_open(&self, info: &ResourceInfo, ns: &str, name: &str) -> ApiResult<()> {
        let nsinfo = kaji_api::resources::by_kind("Namespace").expect("namespaces are served");
        let (nsobj, _) = self.get_raw(nsinfo, None, ns)?;
        if nsobj.pointer("/status/phase").and_then(Value::as_str) == Some("Terminating") || meta::is_deleting(&nsobj) {
            return Err(ApiError::forbidden(format!(
                "{} \"{name}\" is forbidden: unable to create new content in namespace {ns} because it is being terminated",
                crate::http::errors::qualify(info.group, info.plural)
            )));
        }
        Ok(())
    }

    /// POST to a collection.
    pub async fn create(
        &self,
        info: &'static ResourceInfo,
        ns: Option<&str>,
        body: Value,
        opts: &WriteOptions,
    ) -> ApiResult<Outcome> {
        self.create_via(info, ns, body, opts, CreateVia::Post).await
    }

    /// A create, authorized for `create` here when it came through an update or apply: after
    /// mutating admission and validation, before validating admission, where Kubernetes' store
    /// calls the handler's `createValidation`.
    pub(crate) async fn create_via(
        &self,
        info: &'static ResourceInfo,
        ns: Option<&str>,
        mut body: Value,
        opts: &WriteOptions,
        via: CreateVia,
    ) -> ApiResult<Outcome> {
        Self::check_type(info, info.kind, &info.api_version(), &mut body)?;
        let warnings = self.check_schema(info.kind, &mut body, opts.field_validation)?;
        Self::check_namespace(info, ns, &mut body)?;
        {
            let m = meta_mut(&mut body);
            let has_name = m.get("name").and_then(Value::as_str).is_some_and(|s| !s.is_empty());
            if !has_name {
                match m.get("generateName").and_then(Value::as_str).filter(|s| !s.is_empty()) {
                    Some(g) => {
                        let n = format!("{g}{}", meta::random_suffix());
                        m.insert("name".into(), n.into());
                    }
                    None => {
                        let cause = validation::Cause {
                            reason: "FieldValueRequired".into(),
                            message: "Required value: name or generateName is required".into(),
                            field: "metadata.name".into(),
                        };
                        return Err(ApiError::invalid(info.group, info.kind, "", &[cause]));
                    }
                }
            }
        }
        let name = meta::name(&body).to_string();
        if let (true, Some(ns)) = (info.namespaced, ns) {
            self.check_namespace_open(info, ns, &name)?;
        }
        {
            let m = meta_mut(&mut body);
            for f in ["resourceVersion", "deletionTimestamp", "deletionGracePeriodSeconds", "selfLink"] {
                m.remove(f);
            }
            m.insert("uid".into(), uuid::Uuid::new_v4().to_string().into());
            m.insert("creationTimestamp".into(), meta::timestamp(meta::now()).into());
            if info.tracks_generation() {
                m.insert("generation".into(), 1.into());
            } else {
                m.remove("generation");
            }
        }
        if info.resets_status_on_create() {
            // Status is the controllers' and agents' to write; Nodes register with theirs.
            if let Some(o) = body.as_object_mut() {
                o.remove("status");
            }
        }
        match info.kind {
            "PersistentVolume" => volumes::new_volume_status(&mut body),
            "CertificateSigningRequest" => certificates::prepare_create(&mut body, &opts.user),
            _ => {}
        }
        if info.kind == "Service" {
            body["status"] = json!({"loadBalancer": {}});
        }
        defaults::apply_defaults(info.kind, &mut body);
        let req = AdmissionRequest {
            user: &opts.user,
            operation: Operation::Create,
            resource: info,
            subresource: opts.subresource,
            namespace: ns,
            name: &name,
            old: None,
            dry_run: opts.dry_run,
            options: None,
        };
        self.admission.admit(&req, Some(&mut body))?;
        let causes = validation::validate_create(info.kind, &body);
        if !causes.is_empty() {
            return Err(ApiError::invalid(info.group, info.kind, &name, &causes));
        }
        if via == CreateVia::Update {
            compound::require(&*self.authorizer, &compound::create_on_update(opts.user.clone(), info, ns, &name))?;
        }
        self.admission.validate(&req, Some(&body))?;
        let mut warnings = warnings;
        warnings.extend(self.admission.warnings(&req, Some(&body)));
        let sent = meta_mut(&mut body).remove("managedFields");
        apply::track(info, &name, None, &mut body, sent, None, opts)?;
        let allocated = if info.kind == "Service" { Some(services::allocate(self, &mut body, None)?) } else { None };
        if opts.dry_run {
            if let Some(a) = allocated {
                a.release(self);
            }
            return Ok(Outcome { code: 201, body, warnings });
        }
        let bytes = encode_for_store(&body)?;
        match self.store.create(&info.key(ns, &name), &bytes) {
            Ok(rev) => Ok(Outcome { code: 201, body: with_rv(body, rev), warnings }),
            Err(err) => {
                if let Some(a) = allocated {
                    a.release(self);
                }
                Err(self.store_err(info, &name, err))
            }
        }
    }

    /// PUT on an object (or on its status subresource).
    pub async fn update(
        &self,
        info: &'static ResourceInfo,
        ns: Option<&str>,
        name: &str,
        body: Value,
        sub: Option<Subresource>,
        opts: &WriteOptions,
    ) -> ApiResult<Outcome> {
        // Without a resourceVersion a PUT is unconditional: a write that lost a race with another
        // (a controller's status) is decided again on the new object, as GuaranteedUpdate does.
        let unconditional = meta_str(&body, "resourceVersion").is_none_or(str::is_empty);
        let mut attempts = 0;
        loop {
            attempts += 1;
            match self.update_once(info, ns, name, body.clone(), sub, opts).await {
                Err(e) if unconditional && e.code == 409 && e.reason == "Conflict" && attempts < 5 => continue,
                other => return other,
            }
        }
    }

    async fn update_once(
        &self,
        info: &'static ResourceInfo,
        ns: Option<&str>,
        name: &str,
        mut body: Value,
        sub: Option<Subresource>,
        opts: &WriteOptions,
    ) -> ApiResult<Outcome> {
        Self::check_type(info, info.kind, &info.api_version(), &mut body)?;
        let warnings = self.check_schema(info.kind, &mut body, opts.field_validation)?;
        Self::check_namespace(info, ns, &mut body)?;
        match meta_str(&body, "name") {
            Some(n) if n != name => {
                return Err(ApiError::bad_request(format!(
                    "the name of the object ({n}) does not match the name on the URL ({name})"
                )))
            }
            _ => {
                meta_mut(&mut body).insert("name".into(), name.into());
            }
        }
        let (old, kv) = match self.get_raw(info, ns, name) {
            Ok(x) => x,
            Err(e) if e.code == 404 && info.create_on_update && sub.is_none() => {
                let mut out = self.create_via(info, ns, body, opts, CreateVia::Update).await?;
                out.warnings.splice(0..0, warnings);
                return Ok(out);
            }
            Err(e) => return Err(e),
        };
        if let Some(rv) = meta_str(&body, "resourceVersion") {
            if parse_rv(rv) != Some(kv.mod_revision) {
                return Err(ApiError::stale(info.group, info.plural, name));
            }
        }
        // A uid in the body is a precondition: the write was meant for that object, not a namesake.
        if let Some(uid) = meta_str(&body, "uid") {
            let current = meta_str(&old, "uid").unwrap_or("");
            if uid != current {
                let why = format!("Precondition failed: UID in precondition: {uid}, UID in object meta: {current}");
                return Err(ApiError::conflict(info.group, info.plural, name, &why));
            }
        }
        let mut out = self.write_update(info, ns, name, body, &old, &kv, sub, opts)?;
        out.warnings.splice(0..0, warnings);
        Ok(out)
    }

    /// The shared tail of update and patch: merge system fields, default, validate, CAS-write.
    #[allow(clippy::too_many_arguments)]
    fn write_update(
        &self,
        info: &'static ResourceInfo,
        ns: Option<&str>,
        name: &str,
        mut new: Value,
        old: &Value,
        kv: &KeyValue,
        sub: Option<Subresource>,
        opts: &WriteOptions,
    ) -> ApiResult<Outcome> {
        let sent = new.pointer("/metadata/managedFields").cloned();
        match sub {
            Some(Subresource::Status | Subresource::Approval) => {
                // Status and metadata change through /status, never the rest (the status
                // strategies' PrepareForUpdate: `new.Spec = old.Spec`), so a controller may label or
                // annotate what it reports on; a pod's owners stay (podStatusStrategy).
                let status = new.get("status").cloned();
                let metadata = new.get("metadata").filter(|m| m.is_object()).cloned();
                new = old.clone();
                if let Some(m) = metadata {
                    new["metadata"] = m;
                    meta::carry_system_meta(&mut new, old);
                    if info.kind == "Pod" {
                        match old.pointer("/metadata/ownerReferences") {
                            Some(o) => new["metadata"]["ownerReferences"] = o.clone(),
                            None => {
                                meta_mut(&mut new).remove("ownerReferences");
                            }
                        }
                    }
                }
                match status {
                    Some(s) => new["status"] = s,
                    None => {
                        if let Some(o) = new.as_object_mut() {
                            o.remove("status");
                        }
                    }
                }
            }
            _ => {
                meta::carry_system_meta(&mut new, old);
                if info.has(Subresource::Status) {
                    match old.get("status") {
                        Some(s) => new["status"] = s.clone(),
                        None => {
                            if let Some(o) = new.as_object_mut() {
                                o.remove("status");
                            }
                        }
                    }
                }
                if info.kind == "Service" {
                    services::keep_allocated(&mut new, old);
                }
                if info.kind == "Namespace" {
                    // spec.finalizers changes only through /finalize.
                    if let Some(f) = old.pointer("/spec/finalizers") {
                        new["spec"]["finalizers"] = f.clone();
                    }
                }
            }
        }
        if info.kind == "CertificateSigningRequest" {
            certificates::prepare_update(&mut new, old, sub == Some(Subresource::Approval));
        }
        defaults::apply_defaults(info.kind, &mut new);
        let req = AdmissionRequest {
            user: &opts.user,
            operation: Operation::Update,
            resource: info,
            subresource: sub.map(Subresource::name).or(opts.subresource),
            namespace: ns,
            name,
            old: Some(old),
            dry_run: opts.dry_run,
            options: None,
        };
        self.admission.admit(&req, Some(&mut new))?;
        if info.kind == "PersistentVolume" && sub == Some(Subresource::Status) {
            volumes::stamp_phase_transition(&mut new, old);
        }
        if info.tracks_generation() && meta::spec_part(&new) != meta::spec_part(old) {
            let g = meta::generation(old) + 1;
            meta_mut(&mut new).insert("generation".into(), g.into());
        }
        let causes = match sub {
            Some(Subresource::Status) => validation::validate_status_update(info.kind, &new, old),
            Some(Subresource::Approval) => validation::validate_approval_update(&new, old),
            _ => validation::validate_update(info.kind, &new, old),
        };
        if !causes.is_empty() {
            return Err(ApiError::invalid(info.group, info.kind, name, &causes));
        }
        self.admission.validate(&req, Some(&new))?;
        let warnings = self.admission.warnings(&req, Some(&new));
        apply::track(info, name, Some(old), &mut new, sent, sub, opts)?;
        let allocated = if info.kind == "Service" && sub.is_none() {
            Some(services::allocate(self, &mut new, Some(old))?)
        } else {
            None
        };
        if opts.dry_run {
            if let Some(a) = allocated {
                a.release(self);
            }
            return Ok(Outcome { code: 200, body: with_rv(new, kv.mod_revision), warnings });
        }
        // Removing the last finalizer of an object being deleted completes the deletion.
        if meta::is_deleting(&new)
            && meta::finalizers(&new).is_empty()
            && namespaces::spec_finalizers_done(info, &new)
            && new.pointer("/metadata/deletionGracePeriodSeconds").and_then(Value::as_i64).unwrap_or(0) == 0
        {
            let key = info.key(ns, name);
            // Persist the final state first so watchers see it, then delete at that revision.
            let rev = self
                .store
                .update(&key, &encode_for_store(&new)?, kv.mod_revision)
                .map_err(|e| self.store_err(info, name, e))?;
            let (drev, _) = self.store.delete(&key, Some(rev)).map_err(|e| self.store_err(info, name, e))?;
            self.after_delete(info, &new);
            return Ok(Outcome { code: 200, body: with_rv(new, drev), warnings });
        }
        // A write that changes nothing is not written (no new resourceVersion, no watch event):
        // the answer is the stored object, as Kubernetes' GuaranteedUpdate does — unless what is
        // stored is stale (encrypted with an older key, or not at all), which it rewrites.
        if meta::unchanged(&new, old) && !kv.stale {
            if let Some(a) = allocated {
                a.release(self);
            }
            return Ok(Outcome { code: 200, body: old.clone(), warnings });
        }
        let bytes = encode_for_store(&new)?;
        match self.store.update(&info.key(ns, name), &bytes, kv.mod_revision) {
            Ok(rev) => {
                if let Some(a) = allocated {
                    a.commit(self);
                }
                Ok(Outcome { code: 200, body: with_rv(new, rev), warnings })
            }
            Err(err) => {
                if let Some(a) = allocated {
                    a.release(self);
                }
                Err(self.store_err(info, name, err))
            }
        }
    }

    /// PATCH (JSON merge patch or JSON patch) on an object or its status; retried on races.
    #[allow(clippy::too_many_arguments)]
    pub async fn patch(
        &self,
        info: &'static ResourceInfo,
        ns: Option<&str>,
        name: &str,
        kind: PatchType,
        patch: &[u8],
        sub: Option<Subresource>,
        opts: &WriteOptions,
    ) -> ApiResult<Outcome> {
        let patch_json: Value =
            serde_json::from_slice(patch).map_err(|e| ApiError::bad_request(format!("error decoding patch: {e}")))?;
        let json_patch = match kind {
            PatchType::Json => Some(patch_limits::decode(patch_json.clone())?),
            PatchType::Merge | PatchType::Strategic => {
                if !patch_json.is_object() {
                    return Err(ApiError::bad_request("a merge patch must be a JSON object"));
                }
                None
            }
        };
        let mut attempts = 0;
        loop {
            attempts += 1;
            let (old, kv) = self.get_raw(info, ns, name)?;
            let mut new = old.clone();
            match &json_patch {
                Some(p) => patch_limits::apply(&mut new, p, self.max_request_body_bytes as u64)?,
                None if kind == PatchType::Strategic => {
                    new = kaji_api::strategic::apply(info.kind, &old, &patch_json)
                        .map_err(|e| ApiError::bad_request(format!("invalid strategic merge patch: {e}")))?
                }
                None => json_patch::merge(&mut new, &patch_json),
            }
            Self::check_type(info, info.kind, &info.api_version(), &mut new)?;
            let warnings = self.check_schema(info.kind, &mut new, opts.field_validation)?;
            if meta_str(&new, "name") != Some(name) || meta_str(&new, "namespace") != ns.filter(|_| info.namespaced) {
                return Err(ApiError::bad_request("a patch may not change metadata.name or metadata.namespace"));
            }
            // A resourceVersion in the patch is a precondition; otherwise retry on races.
            let pinned = meta_str(&new, "resourceVersion").map(str::to_string);
            if let Some(rv) = &pinned {
                if parse_rv(rv) != Some(kv.mod_revision) {
                    return Err(ApiError::stale(info.group, info.plural, name));
                }
            }
            let pinned_by_patch = patch_json.pointer("/metadata/resourceVersion").is_some();
            match self.write_update(info, ns, name, new, &old, &kv, sub, opts) {
                Err(e) if e.code == 409 && e.reason == "Conflict" && !pinned_by_patch && attempts < 5 => continue,
                Err(e) => return Err(e),
                Ok(mut out) => {
                    out.warnings.splice(0..0, warnings);
                    return Ok(out);
                }
            }
        }
    }

    /// POST pods/{name}/binding.
    pub async fn bind(&self, ns: &str, name: &str, body: Value, opts: &WriteOptions) -> ApiResult<Outcome> {
        pods::bind(self, ns, name, body, opts)
    }

    /// GET/PUT/PATCH .../scale.
    pub async fn scale(
        &self,
        info: &'static ResourceInfo,
        ns: &str,
        name: &str,
        op: ScaleOp<'_>,
        opts: &WriteOptions,
    ) -> ApiResult<Outcome> {
        scale::handle(self, info, ns, name, op, opts).await
    }

    /// PUT namespaces/{name}/finalize.
    pub async fn finalize_namespace(&self, name: &str, body: Value, opts: &WriteOptions) -> ApiResult<Outcome> {
        namespaces::finalize(self, name, body, opts)
    }

    /// Admission for a streaming subresource (exec, attach, portforward): a CONNECT on the pod.
    pub fn admit_connect(
        &self,
        user: &UserInfo,
        info: &'static ResourceInfo,
        ns: &str,
        name: &str,
        subresource: &str,
        options: Value,
    ) -> ApiResult<()> {
        let (old, _) = self.get_raw(info, Some(ns), name)?;
        let req = AdmissionRequest {
            user,
            operation: Operation::Connect,
            resource: info,
            subresource: Some(subresource),
            namespace: Some(ns),
            name,
            old: Some(&old),
            dry_run: false,
            options: Some(&options),
        };
        self.admission.admit(&req, None)?;
        self.admission.validate(&req, None)
    }

    /// Create the namespaces and the `kubernetes` Service every cluster has; rebuild allocators.
    /// With `endpoint_leases` the `kubernetes` Endpoints, once they exist, are left to the lease
    /// reconciler (other apiservers are in them too).
    pub fn bootstrap(&self, advertise: std::net::SocketAddr, endpoint_leases: bool) -> ApiResult<()> {
        services::repair_allocators(self)?;
        namespaces::bootstrap(self)?;
        namespaces::bootstrap_builtin_objects(self)?;
        services::bootstrap_service_cidr(self)?;
        services::bootstrap_kubernetes(self, advertise, endpoint_leases)
    }
}
