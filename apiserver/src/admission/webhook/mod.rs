//! MutatingAdmissionWebhook and ValidatingAdmissionWebhook (on by default in Kubernetes, and
//! here): every write a webhook's rules and selectors match is sent to it as an AdmissionReview.
//! Mutating webhooks run one after another (configurations by name, webhooks in order) at the
//! end of the mutating phase and may patch the object, which is then defaulted again; validating
//! webhooks run together at the end of the validating phase, before ResourceQuota. A webhook that
//! cannot be called refuses the write (failurePolicy Fail, a 500) or is skipped (Ignore). The
//! admission configuration kinds themselves are never sent to webhooks.
//!
//! `matchConditions` (CEL over object, oldObject and request) decide after the selectors. Not yet:
//! the CEL authorizer library (refused at validation), reinvocation (`reinvocationPolicy: IfNeeded` runs once), webhook warnings and audit
//! annotations.

pub mod client;

use crate::auth::authz::message::resource_forbidden;
use crate::auth::{Admission, AdmissionRequest, Operation};
use crate::cache::Cache;
use crate::http::errors::{ApiError, ApiResult};
use kaji_api::resources::ResourceInfo;
use kaji_api::selector::{FieldSelector, LabelSelector};
use kaji_api::webhook::conditions::{self, Outcome};
use kaji_api::webhook::matching::{self, Attributes};
use kaji_api::webhook::review::{self, Gvk, Verdict};
use serde_json::{json, Map, Value};
use std::sync::{Arc, RwLock};
use std::time::Duration;

pub const MUTATING: &str = "MutatingAdmissionWebhook";
pub const VALIDATING: &str = "ValidatingAdmissionWebhook";

const KINDS: [&str; 2] = ["MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"];

/// One webhook of a configuration, as registered.
#[derive(Debug)]
struct Hook {
    name: String,
    spec: Value,
}

/// The webhooks of every configuration, by kind, in call order.
#[derive(Debug, Default)]
struct Registered {
    mutating: Vec<Hook>,
    validating: Vec<Hook>,
}

pub struct Webhooks {
    pub cache: Arc<Cache>,
    current: RwLock<(Option<[u64; 2]>, Arc<Registered>)>,
}

impl Webhooks {
    pub fn new(cache: Arc<Cache>) -> Self {
        Self { cache, current: RwLock::new((None, Arc::new(Registered::default()))) }
    }

    /// The configurations as the cache holds them now, rebuilt only when one changed.
    fn registered(&self) -> Arc<Registered> {
        let stamp = KINDS.map(|k| self.cache.resource(k).map_or(0, |rc| rc.revision()));
        {
            let cur = self.current.read().unwrap_or_else(|p| p.into_inner());
            if cur.0 == Some(stamp) {
                return cur.1.clone();
            }
        }
        let hooks = |kind: &str| -> Vec<Hook> {
            let Some(rc) = self.cache.resource(kind) else { return Vec::new() };
            let listed = rc.list(None, &LabelSelector::default(), &FieldSelector::default(), None, None, 0);
            // The cache lists by key, so configurations come in name order.
            listed
                .items
                .iter()
                .map(|o| o.value())
                .flat_map(|c| c.get("webhooks").and_then(Value::as_array).cloned().unwrap_or_default())
                .map(|spec| Hook { name: spec.get("name").and_then(Value::as_str).unwrap_or("").to_string(), spec })
                .collect()
        };
        let reg = Arc::new(Registered { mutating: hooks(KINDS[0]), validating: hooks(KINDS[1]) });
        *self.current.write().unwrap_or_else(|p| p.into_inner()) = (Some(stamp), reg.clone());
        reg
    }

    fn namespace_labels(&self, name: &str) -> Option<Option<Map<String, Value>>> {
        let ns = namespace_object(&self.cache, name)?;
        Some(ns.pointer("/metadata/labels").and_then(Value::as_object).cloned())
    }

    /// The webhooks of `hooks` this request goes to; a namespace that does not exist is a 404.
    fn matching<'h>(&self, hooks: &'h [Hook], a: &Attributes<'_>) -> ApiResult<Vec<&'h Hook>> {
        let mut out = Vec::new();
        for h in hooks {
            if !matching::rules_match(&h.spec, a) {
                continue;
            }
            let ns = matching::namespace_selector_matches(&h.spec, a, |n| self.namespace_labels(n))
                .map_err(|e| ApiError::internal(format!("webhook {:?}: invalid namespaceSelector: {e}", h.name)))?
                .map_err(|e| ApiError::new(404, "NotFound", e.0))?;
            let obj = matching::object_selector_matches(&h.spec, a)
                .map_err(|e| ApiError::internal(format!("webhook {:?}: invalid objectSelector: {e}", h.name)))?;
            if ns && obj {
                out.push(h);
            }
        }
        Ok(out)
    }
}

/// The hooks whose `matchConditions` hold (`ShouldCallHook`): a false condition skips the webhook;
/// conditions that cannot be evaluated skip it under failurePolicy Ignore and refuse the request
/// (403) under Fail.
fn meeting_conditions<'h>(
    hooks: Vec<&'h Hook>,
    prepared: &Prepared<'_>,
    object: Option<&Value>,
) -> ApiResult<Vec<&'h Hook>> {
    if hooks.iter().all(|h| h.spec.get("matchConditions").and_then(Value::as_array).is_none_or(Vec::is_empty)) {
        return Ok(hooks);
    }
    let review = prepared.review(object);
    let request = review::review(&review, "v1")["request"].take();
    let (obj, old) = (review.object.cloned().unwrap_or(Value::Null), review.old.cloned().unwrap_or(Value::Null));
    let mut out = Vec::new();
    for h in hooks {
        let conditions = h.spec.get("matchConditions").and_then(Value::as_array).map(Vec::as_slice).unwrap_or(&[]);
        if conditions.is_empty() {
            out.push(h);
            continue;
        }
        match conditions::evaluate(conditions, &obj, &old, &request) {
            Outcome::Matches => out.push(h),
            Outcome::Excluded(_) => {}
            Outcome::Error(e) if ignores_failure(h) => {
                tracing::warn!(webhook = %h.name, error = %e, "failed evaluating match conditions, skipping the webhook");
            }
            Outcome::Error(e) => {
                let r = prepared.req;
                return Err(resource_forbidden(r.resource.group, r.resource.plural, r.name, &e));
            }
        }
    }
    Ok(out)
}

/// A namespace as the watch cache holds it.
pub(crate) fn namespace_object(cache: &Cache, name: &str) -> Option<Value> {
    let info = kaji_api::resources::by_kind("Namespace")?;
    Some(cache.resource("Namespace")?.get(&info.key(None, name))?.value())
}

/// The request's kind (a subresource's own kind where it has one).
fn request_kind(info: &'static ResourceInfo, sub: &str) -> Gvk<'static> {
    let (group, version, kind) = match sub {
        "scale" => ("autoscaling", "v1", "Scale"),
        "eviction" => ("policy", "v1", "Eviction"),
        "binding" => ("", "v1", "Binding"),
        "attach" => ("", "v1", "PodAttachOptions"),
        "exec" => ("", "v1", "PodExecOptions"),
        "portforward" => ("", "v1", "PodPortForwardOptions"),
        "proxy" => ("", "v1", "PodProxyOptions"),
        "token" => ("authentication.k8s.io", "v1", "TokenRequest"),
        _ => (info.group, info.version, info.kind),
    };
    Gvk { group, version, kind }
}

/// One call: the review sent, the verdict read; `Err` is a failed call.
fn call(
    cache: &Cache,
    hook: &Hook,
    req: &review::Request<'_>,
    mutating: bool,
) -> impl std::future::Future<Output = Result<Verdict, String>> + Send + 'static {
    let timeout =
        Duration::from_secs(hook.spec.get("timeoutSeconds").and_then(Value::as_u64).unwrap_or(10).clamp(1, 30));
    let prepared = (|| {
        let version = review::version_for(&hook.spec)
            .ok_or_else(|| "webhook does not accept known AdmissionReview versions".to_string())?;
        let target = client::target(cache, &hook.spec, timeout)?;
        let tls = client::tls_config(&hook.spec).map_err(|e| format!("failed to call webhook: {e}"))?;
        let body = serde_json::to_vec(&review::review(req, version)).map_err(|e| e.to_string())?;
        Ok::<_, String>((version, target, tls, body))
    })();
    let (uid, name) = (req.uid.to_string(), hook.name.clone());
    async move {
        let (version, target, tls, body) = prepared?;
        let answer = client::post(&target, tls, body, timeout).await?;
        review::verdict(&answer, version, &uid, mutating, &name)
    }
}

/// Runs `fut` to completion from the synchronous write path: on a worker of the multi-threaded
/// runtime (the apiserver's), which may block as the store does; anywhere else (a thread without
/// a runtime, a current-thread runtime) on a thread and runtime of its own.
fn block_on<F>(fut: F) -> Result<F::Output, String>
where
    F: std::future::Future + Send,
    F::Output: Send,
{
    use tokio::runtime::{Handle, RuntimeFlavor};
    match Handle::try_current() {
        Ok(handle) if handle.runtime_flavor() == RuntimeFlavor::MultiThread => {
            Ok(tokio::task::block_in_place(|| handle.block_on(fut)))
        }
        _ => std::thread::scope(|s| {
            s.spawn(|| {
                let rt = tokio::runtime::Builder::new_current_thread().enable_all().build();
                rt.map(|rt| rt.block_on(fut)).map_err(|e| format!("cannot start a runtime to call webhooks: {e}"))
            })
            .join()
            .unwrap_or_else(|p| std::panic::resume_unwind(p))
        }),
    }
}

fn failed(hook: &Hook, reason: &str) -> ApiError {
    let mut e = ApiError::internal(format!("failed calling webhook {:?}: {reason}", hook.name));
    e.details = Some(json!({"causes": [{"message": format!("failed calling webhook {:?}: {reason}", hook.name)}]}));
    e
}

fn ignores_failure(hook: &Hook) -> bool {
    hook.spec.get("failurePolicy").and_then(Value::as_str) == Some("Ignore")
}

fn denied(d: review::Denial) -> ApiError {
    let reason: &'static str = match d.reason.as_str() {
        "Forbidden" => "Forbidden",
        "Invalid" => "Invalid",
        "NotFound" => "NotFound",
        "AlreadyExists" => "AlreadyExists",
        "Conflict" => "Conflict",
        "BadRequest" => "BadRequest",
        "Unauthorized" => "Unauthorized",
        "TooManyRequests" => "TooManyRequests",
        "RequestEntityTooLarge" => "RequestEntityTooLarge",
        _ => "",
    };
    let mut e = ApiError::new(d.code, reason, d.message);
    e.details = d.details;
    e
}

pub(crate) struct Prepared<'a> {
    uid: String,
    kind: Gvk<'static>,
    extra: Map<String, Value>,
    options: Value,
    req: &'a AdmissionRequest<'a>,
}

impl<'a> Prepared<'a> {
    pub(crate) fn new(req: &'a AdmissionRequest<'a>) -> Self {
        let extra = req.user.extra.iter().map(|(k, v)| (k.clone(), json!(v))).collect();
        Self {
            uid: uuid::Uuid::new_v4().to_string(),
            kind: request_kind(req.resource, req.subresource.unwrap_or("")),
            extra,
            options: review::options(req.operation.as_str(), req.dry_run, None),
            req,
        }
    }

    pub(crate) fn review<'b>(&'b self, object: Option<&'b Value>) -> review::Request<'b> {
        let r = self.req;
        let (object, old) = objects(r, object);
        review::Request {
            uid: &self.uid,
            kind: self.kind,
            resource: Gvk { group: r.resource.group, version: r.resource.version, kind: r.resource.plural },
            subresource: r.subresource.unwrap_or(""),
            name: r.name,
            namespace: r.namespace.unwrap_or(""),
            operation: r.operation.as_str(),
            username: &r.user.name,
            user_uid: &r.user.uid,
            groups: &r.user.groups,
            extra: &self.extra,
            object,
            old,
            dry_run: r.dry_run,
            options: &self.options,
        }
    }
}

/// What webhooks see as the object and the old object: a CONNECT's options and nothing.
fn objects<'a>(req: &'a AdmissionRequest<'a>, object: Option<&'a Value>) -> (Option<&'a Value>, Option<&'a Value>) {
    match req.operation {
        Operation::Connect => (req.options, None),
        _ => (object, req.old),
    }
}

pub(crate) fn attributes<'a>(req: &'a AdmissionRequest<'a>, object: Option<&'a Value>) -> Option<Attributes<'a>> {
    let r = req.resource;
    if matching::exempt(r.group, r.plural) {
        return None;
    }
    let (object, old) = objects(req, object);
    Some(Attributes {
        operation: req.operation.as_str(),
        group: r.group,
        version: r.version,
        resource: r.plural,
        subresource: req.subresource.unwrap_or(""),
        namespace: req.namespace.unwrap_or(""),
        object,
        old,
    })
}

impl Admission for Webhooks {
    fn admit(&self, req: &AdmissionRequest<'_>, mut object: Option<&mut Value>) -> ApiResult<()> {
        let registered = self.registered();
        if registered.mutating.is_empty() {
            return Ok(());
        }
        let snapshot = object.as_deref().cloned();
        let Some(a) = attributes(req, snapshot.as_ref()) else { return Ok(()) };
        let hooks = self.matching(&registered.mutating, &a)?;
        if hooks.is_empty() {
            return Ok(());
        }
        let prepared = Prepared::new(req);
        let hooks = meeting_conditions(hooks, &prepared, snapshot.as_ref())?;
        drop(snapshot);
        for hook in hooks {
            let current = object.as_deref().cloned();
            let verdict = block_on(call(&self.cache, hook, &prepared.review(current.as_ref()), true)).and_then(|v| v);
            match verdict {
                Err(reason) if ignores_failure(hook) => {
                    tracing::warn!(webhook = %hook.name, error = %reason, "failed calling webhook, failing open");
                }
                Err(reason) => return Err(failed(hook, &reason)),
                Ok(Verdict::Denied(d)) => return Err(denied(d)),
                Ok(Verdict::Allowed { patch: None, .. }) => {}
                Ok(Verdict::Allowed { patch: Some(ops), .. }) => {
                    let Some(obj) = object.as_deref_mut() else { continue };
                    apply_patch(hook, req.resource.kind, obj, ops)?;
                }
            }
        }
        Ok(())
    }

    fn validate(&self, req: &AdmissionRequest<'_>, object: Option<&Value>) -> ApiResult<()> {
        let registered = self.registered();
        if registered.validating.is_empty() {
            return Ok(());
        }
        let Some(a) = attributes(req, object) else { return Ok(()) };
        let hooks = self.matching(&registered.validating, &a)?;
        if hooks.is_empty() {
            return Ok(());
        }
        let prepared = Prepared::new(req);
        let hooks = meeting_conditions(hooks, &prepared, object)?;
        if hooks.is_empty() {
            return Ok(());
        }
        let review = prepared.review(object);
        let calls: Vec<_> = hooks.iter().map(|h| call(&self.cache, h, &review, false)).collect();
        let verdicts = match block_on(futures::future::join_all(calls)) {
            Ok(v) => v,
            Err(e) => hooks.iter().map(|_| Err(e.clone())).collect(),
        };
        for (hook, verdict) in hooks.iter().zip(verdicts) {
            match verdict {
                Err(reason) if ignores_failure(hook) => {
                    tracing::warn!(webhook = %hook.name, error = %reason, "failed calling webhook, failing open");
                }
                Err(reason) => return Err(failed(hook, &reason)),
                Ok(Verdict::Denied(d)) => return Err(denied(d)),
                Ok(Verdict::Allowed { .. }) => {}
            }
        }
        Ok(())
    }
}

/// Applies a mutating webhook's JSON patch, then the kind's schema and defaults, as Kubernetes
/// decodes the patched object into its type.
fn apply_patch(hook: &Hook, kind: &str, obj: &mut Value, ops: Value) -> ApiResult<()> {
    let patch: json_patch::Patch = serde_json::from_value(ops)
        .map_err(|e| failed(hook, &format!("received invalid webhook response: invalid patch: {e}")))?;
    let mut patched = obj.clone();
    json_patch::patch(&mut patched, &patch).map_err(|e| ApiError::internal(format!("JSON Patch: {e}")))?;
    let mut normalized = kaji_api::schema::normalize(kind, &patched).map_err(|e| {
        ApiError::internal(format!("failed to decode the object {hook} patched: {e}", hook = hook.name))
    })?;
    kaji_api::defaults::apply_defaults(kind, &mut normalized);
    *obj = normalized;
    Ok(())
}

/// Both plugins are one object: the configurations are read once for both phases.
pub fn plugin(cache: Arc<Cache>) -> Arc<Webhooks> {
    Arc::new(Webhooks::new(cache))
}

#[cfg(test)]
mod tests {
    use super::block_on;

    #[test]
    fn calls_complete_without_a_runtime() {
        assert_eq!(block_on(async { 1 }), Ok(1));
    }

    #[tokio::test]
    async fn calls_complete_in_a_current_thread_runtime() {
        assert_eq!(
            block_on(async {
                tokio::task::yield_now().await;
                2
            }),
            Ok(2)
        );
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn calls_complete_on_a_worker_of_the_apiservers_runtime() {
        assert_eq!(
            block_on(async {
                tokio::task::yield_now().await;
                3
            }),
            Ok(3)
        );
    }
}
