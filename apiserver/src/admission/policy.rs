//! ValidatingAdmissionPolicy (on by default in Kubernetes, and here): every binding's policy is
//! evaluated in-process on the writes both select (the policy's matchConstraints, the binding's
//! matchResources, the policy's matchConditions), with the binding's parameters. A violation
//! under a `Deny` binding refuses the write — `<resource> "<name>" is forbidden:
//! ValidatingAdmissionPolicy '<p>' with binding '<b>' denied request: <message>`, with the code of
//! the validation's reason (422 Invalid, 403 Forbidden, 413) —; under `Warn` it becomes a
//! `Warning` header. `Audit` (audit annotations) is not recorded yet, nor are `auditAnnotations`.
//! The CEL is kaji_api::webhook (cel-rust); cel-go's type check (status.typeChecking) is not done.

use super::webhook::{attributes, namespace_object, Prepared};
use crate::auth::authz::message::resource_forbidden;
use crate::auth::{Admission, AdmissionRequest};
use crate::cache::Cache;
use crate::http::errors::{ApiError, ApiResult};
use kaji_api::selector::{FieldSelector, LabelSelector};
use kaji_api::webhook::conditions::{self, Outcome};
use kaji_api::webhook::matching::{self, Attributes};
use kaji_api::webhook::policy::{self as eval, Activation, Violation};
use kaji_api::webhook::review;
use serde_json::{json, Value};
use std::sync::{Arc, RwLock};

pub const NAME: &str = "ValidatingAdmissionPolicy";

const KINDS: [&str; 2] = ["ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"];

/// A binding with the policy it names.
struct Bound {
    policy: Value,
    binding: Value,
}

/// The bindings as compiled at the kinds' cache revisions.
type Snapshot = (Option<[u64; 2]>, Arc<Vec<Bound>>);

/// Per selected binding: the policy's name, the binding's, and what the policy found wrong.
type Found = Vec<(String, String, Vec<Violation>)>;

pub struct ValidatingAdmissionPolicy {
    cache: Arc<Cache>,
    current: RwLock<Snapshot>,
}

fn name(v: &Value) -> &str {
    v.pointer("/metadata/name").and_then(Value::as_str).unwrap_or("")
}

fn list(cache: &Cache, kind: &str, ns: Option<&str>, selector: &LabelSelector) -> Vec<Value> {
    let Some(rc) = cache.resource(kind) else { return Vec::new() };
    rc.list(ns, selector, &FieldSelector::default(), None, None, 0).items.iter().map(|o| o.value()).collect()
}

impl ValidatingAdmissionPolicy {
    pub fn new(cache: Arc<Cache>) -> Self {
        Self { cache, current: RwLock::new((None, Arc::new(Vec::new()))) }
    }

    /// Every binding whose policy exists, in binding name order; rebuilt when either kind changed.
    fn bound(&self) -> Arc<Vec<Bound>> {
        let stamp = KINDS.map(|k| self.cache.resource(k).map_or(0, |rc| rc.revision()));
        {
            let cur = self.current.read().unwrap_or_else(|p| p.into_inner());
            if cur.0 == Some(stamp) {
                return cur.1.clone();
            }
        }
        let policies = list(&self.cache, KINDS[0], None, &LabelSelector::default());
        let bound: Vec<Bound> = list(&self.cache, KINDS[1], None, &LabelSelector::default())
            .into_iter()
            .filter_map(|binding| {
                let wanted = binding.pointer("/spec/policyName").and_then(Value::as_str).unwrap_or("");
                let policy = policies.iter().find(|p| name(p) == wanted)?.clone();
                Some(Bound { policy, binding })
            })
            .collect();
        let bound = Arc::new(bound);
        *self.current.write().unwrap_or_else(|p| p.into_inner()) = (Some(stamp), bound.clone());
        bound
    }

    /// Whether a match criteria object (a policy's matchConstraints or a binding's
    /// matchResources) selects the request.
    fn selects(&self, m: &Value, a: &Attributes<'_>, object_name: &str) -> ApiResult<bool> {
        let ns = matching::namespace_selector_matches(m, a, |n| {
            namespace_object(&self.cache, n).map(|o| o.pointer("/metadata/labels").and_then(Value::as_object).cloned())
        })
        .map_err(ApiError::internal)?
        .map_err(|e| ApiError::new(404, "NotFound", e.0))?;
        let obj = matching::object_selector_matches(m, a).map_err(ApiError::internal)?;
        Ok(ns && obj && matching::resource_rules_match(m, a, object_name))
    }

    /// The parameter objects of a binding (`CollectParams`): none needed → one null; a name or
    /// selector → what it finds; nothing found → `Err` under parameterNotFoundAction Deny, no
    /// evaluation under Allow.
    fn params(&self, policy: &Value, binding: &Value, request_ns: &str) -> Result<Vec<Value>, String> {
        let Some(kind) = policy.pointer("/spec/paramKind").filter(|p| p.is_object()) else {
            return Ok(vec![Value::Null]);
        };
        let Some(pr) = binding.pointer("/spec/paramRef").filter(|p| p.is_object()) else {
            return Err(format!(
                "policy '{}' has a paramKind but binding '{}' has no paramRef",
                name(policy),
                name(binding)
            ));
        };
        let api_version = kind.get("apiVersion").and_then(Value::as_str).unwrap_or("");
        let kind_name = kind.get("kind").and_then(Value::as_str).unwrap_or("");
        let (group, version) = api_version.rsplit_once('/').unwrap_or(("", api_version));
        let info = kaji_api::resources::RESOURCES
            .iter()
            .find(|r| r.group == group && r.version == version && r.kind == kind_name)
            .ok_or_else(|| {
                format!("failed to find resource referenced by paramKind: '{api_version}, Kind={kind_name}'")
            })?;
        let ns = match (info.namespaced, pr.get("namespace").and_then(Value::as_str).filter(|n| !n.is_empty())) {
            (false, _) => None,
            (true, Some(n)) => Some(n.to_string()),
            (true, None) if request_ns.is_empty() => {
                return Err(
                    "cannot use namespaced paramRef in policy binding that matches cluster-scoped resources".into()
                )
            }
            (true, None) => Some(request_ns.to_string()),
        };
        let found: Vec<Value> = match pr.get("name").and_then(Value::as_str).filter(|n| !n.is_empty()) {
            Some(n) => self
                .cache
                .resource(info.kind)
                .and_then(|rc| rc.get(&info.key(ns.as_deref(), n)))
                .map(|o| vec![o.value()])
                .unwrap_or_default(),
            None => {
                let sel =
                    LabelSelector::from_json(pr.get("selector").unwrap_or(&Value::Null)).map_err(|e| e.to_string())?;
                list(&self.cache, info.kind, ns.as_deref(), &sel)
            }
        };
        if found.is_empty() && pr.get("parameterNotFoundAction").and_then(Value::as_str) == Some("Deny") {
            return Err("no params found for policy binding with `Deny` parameterNotFoundAction".into());
        }
        Ok(found)
    }

    /// The violations each selected binding with `action` finds: (policy, binding, violations).
    fn evaluate(&self, req: &AdmissionRequest<'_>, object: Option<&Value>, action: &str) -> ApiResult<Found> {
        let bound = self.bound();
        let wanted: Vec<&Bound> = bound
            .iter()
            .filter(|b| {
                b.binding
                    .pointer("/spec/validationActions")
                    .and_then(Value::as_array)
                    .is_some_and(|a| a.iter().any(|x| x == action))
            })
            .collect();
        if wanted.is_empty() {
            return Ok(Vec::new());
        }
        let Some(a) = attributes(req, object) else { return Ok(Vec::new()) };
        let object_name = match req.name {
            "" => object.and_then(|o| o.pointer("/metadata/name")).and_then(Value::as_str).unwrap_or(""),
            n => n,
        };
        let prepared = Prepared::new(req);
        let r = prepared.review(object);
        let request = review::review(&r, "v1")["request"].take();
        let (obj, old) = (r.object.cloned().unwrap_or(Value::Null), r.old.cloned().unwrap_or(Value::Null));
        let namespace = match (a.namespace, a.resource) {
            ("", _) | (_, "namespaces") => Value::Null,
            (ns, _) => namespace_object(&self.cache, ns).unwrap_or(Value::Null),
        };
        let mut out = Vec::new();
        for b in wanted {
            let spec = b.policy.get("spec").unwrap_or(&Value::Null);
            let constraints = spec.get("matchConstraints").unwrap_or(&Value::Null);
            if !self.selects(constraints, &a, object_name)? {
                continue;
            }
            if let Some(m) = b.binding.pointer("/spec/matchResources").filter(|m| m.is_object()) {
                if !self.selects(m, &a, object_name)? {
                    continue;
                }
            }
            let (policy_name, binding_name) = (name(&b.policy).to_string(), name(&b.binding).to_string());
            let fail = spec.get("failurePolicy").and_then(Value::as_str) != Some("Ignore");
            let params = match self.params(&b.policy, &b.binding, a.namespace) {
                Ok(p) => p,
                Err(e) if fail => {
                    out.push((policy_name, binding_name, vec![Violation { message: e, reason: "Invalid".into() }]));
                    continue;
                }
                Err(_) => continue,
            };
            let mut violations = Vec::new();
            for p in &params {
                let act =
                    Activation { object: &obj, old: &old, request: &request, params: p, namespace_object: &namespace };
                let mut ctx = eval::context(&act);
                let conds = spec.get("matchConditions").and_then(Value::as_array).map(Vec::as_slice).unwrap_or(&[]);
                match conditions::evaluate_in(conds, &ctx) {
                    Outcome::Matches => {}
                    Outcome::Excluded(_) => continue,
                    Outcome::Error(e) if fail => {
                        violations.push(Violation { message: e, reason: "Invalid".into() });
                        continue;
                    }
                    Outcome::Error(_) => continue,
                }
                eval::bind_variables(spec, &mut ctx);
                violations.extend(eval::validate(spec, &ctx));
            }
            if !violations.is_empty() {
                out.push((policy_name, binding_name, violations));
            }
        }
        Ok(out)
    }
}

fn code(reason: &str) -> (u16, &'static str) {
    match reason {
        "Forbidden" => (403, "Forbidden"),
        "RequestEntityTooLarge" => (413, "RequestEntityTooLarge"),
        _ => (422, "Invalid"),
    }
}

impl Admission for ValidatingAdmissionPolicy {
    fn validate(&self, req: &AdmissionRequest<'_>, object: Option<&Value>) -> ApiResult<()> {
        let denied = self.evaluate(req, object, "Deny")?;
        let Some((policy, binding, violations)) = denied.first() else { return Ok(()) };
        let v = &violations[0];
        let message =
            format!("ValidatingAdmissionPolicy '{policy}' with binding '{binding}' denied request: {}", v.message);
        let r = req.resource;
        let name = match req.name {
            "" => object.and_then(|o| o.pointer("/metadata/name")).and_then(Value::as_str).unwrap_or(""),
            n => n,
        };
        let mut e = resource_forbidden(r.group, r.plural, name, &message);
        let (status, reason) = code(&v.reason);
        e.code = status;
        e.reason = reason;
        let mut details = e.details.take().unwrap_or_else(|| json!({}));
        let causes = details.get("causes").and_then(Value::as_array).cloned().unwrap_or_default();
        let mut causes = causes;
        causes.push(json!({"message": message}));
        details["causes"] = Value::Array(causes);
        e.details = Some(details);
        Err(e)
    }

    fn warnings(&self, req: &AdmissionRequest<'_>, object: Option<&Value>) -> Vec<String> {
        match self.evaluate(req, object, "Warn") {
            Ok(found) => found
                .into_iter()
                .flat_map(|(policy, binding, violations)| {
                    violations.into_iter().map(move |v| {
                        format!(
                            "Validation failed for ValidatingAdmissionPolicy '{policy}' with binding '{binding}': {}",
                            v.message
                        )
                    })
                })
                .collect(),
            Err(e) => vec![e.message],
        }
    }
}
