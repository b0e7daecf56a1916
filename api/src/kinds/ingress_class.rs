//! networking.k8s.io/v1 IngressClass: which controller implements a class of Ingresses.

use k8s_openapi::api::networking::v1 as net;
use serde_json::{json, Value};

use super::{roundtrip, Strategy};
use crate::resources::ResourceInfo;
use crate::schema::SchemaError;
use crate::table::columns::{Column, AGE};
use crate::table::obj::Obj;
use crate::validation::json::st;
use crate::validation::names::{dns1123_label_errors, dns1123_subdomain_errors, IMMUTABLE_MSG};
use crate::validation::Cause;

pub struct IngressClass;

pub const INFO: ResourceInfo = crate::kind_info!(
    "networking.k8s.io",
    "IngressClass",
    "ingressclasses",
    "ingressclass",
    false,
    &[],
    &[],
    &IngressClass
);

/// The annotation that makes a class the default for Ingresses that name none.
pub const DEFAULT_CLASS_ANNOTATION: &str = "ingressclass.kubernetes.io/is-default-class";

const MAX_CONTROLLER_LEN: usize = 250;

impl Strategy for IngressClass {
    fn normalize(&self, obj: &Value) -> Result<Value, SchemaError> {
        roundtrip::<net::IngressClass>(obj)
    }

    fn defaults(&self, obj: &mut Value) {
        // SetDefaults_IngressClass: parameters are cluster-scoped unless said.
        if let Some(p) = obj.pointer_mut("/spec/parameters").and_then(Value::as_object_mut) {
            if p.get("scope").is_none_or(Value::is_null) {
                p.insert("scope".into(), json!("Cluster"));
            }
        }
    }

    fn validate(&self, obj: &Value, out: &mut Vec<Cause>) {
        let spec = obj.get("spec").unwrap_or(&Value::Null);
        let controller = st(spec, "controller");
        if controller.is_empty() {
            out.push(Cause::required("spec.controller", ""));
        } else if controller.len() > MAX_CONTROLLER_LEN {
            out.push(Cause::too_long("spec.controller", MAX_CONTROLLER_LEN));
        } else {
            domain_prefixed_path(controller, "spec.controller", out);
        }
        if let Some(p) = spec.get("parameters").filter(|p| p.is_object()) {
            validate_parameters(p, out);
        }
    }

    fn validate_update(&self, new: &Value, old: &Value, out: &mut Vec<Cause>) {
        let (n, o) = (controller(new), controller(old));
        if n != o {
            out.push(Cause::invalid("spec.controller", n, IMMUTABLE_MSG));
        }
    }

    fn tracks_generation(&self) -> bool {
        true
    }

    fn columns(&self) -> Vec<Column> {
        vec![
            ("Controller", "string", "", 0, "Controller that is responsible for handling this class"),
            ("Parameters", "string", "", 0, "A reference to a resource with additional parameters"),
            AGE,
        ]
    }

    fn cells(&self, o: Obj<'_>, age: &Value) -> Vec<Value> {
        let parameters = match o.get("spec.parameters").filter(|p| p.is_object()) {
            None => "<none>".to_owned(),
            Some(p) => {
                let p = Obj(p);
                let group = p.get("apiGroup").and_then(Value::as_str);
                let kind = match group {
                    Some(g) => format!("{}.{g}", p.str("kind")),
                    None => p.str("kind").to_owned(),
                };
                format!("{kind}/{}", p.str("name"))
            }
        };
        vec![json!(o.str("spec.controller")), json!(parameters), age.clone()]
    }
}

fn controller(obj: &Value) -> &str {
    obj.pointer("/spec/controller").and_then(Value::as_str).unwrap_or("")
}

/// `validation.IsDomainPrefixedPath`: `<DNS-1123 subdomain>/<path>`.
fn domain_prefixed_path(v: &str, path: &str, out: &mut Vec<Cause>) {
    let Some((host, rest)) = v.split_once('/') else {
        out.push(Cause::invalid(path, v, "must be a domain-prefixed path (such as \"acme.io/foo\")"));
        return;
    };
    out.extend(dns1123_subdomain_errors(host).iter().map(|m| Cause::invalid(path, host, m)));
    let ok = |c: char| c.is_ascii_alphanumeric() || "-._~%!$&'()*+,;=:/".contains(c);
    if let Some(bad) = rest.chars().find(|c| !ok(*c)) {
        out.push(Cause::invalid(path, v, &format!("Invalid path: {:?}", bad.to_string())));
    }
}

/// `validateIngressClassParametersReference`.
fn validate_parameters(p: &Value, out: &mut Vec<Cause>) {
    let base = "spec.parameters";
    let kind = st(p, "kind");
    if kind.is_empty() {
        out.push(Cause::required(format!("{base}.kind"), "kind is required"));
    }
    if st(p, "name").is_empty() {
        out.push(Cause::required(format!("{base}.name"), "name is required"));
    }
    if let Some(g) = p.get("apiGroup").and_then(Value::as_str) {
        out.extend(dns1123_subdomain_errors(g).iter().map(|m| Cause::invalid(format!("{base}.apiGroup"), g, m)));
    }
    let ns = p.get("namespace").and_then(Value::as_str);
    match st(p, "scope") {
        "Cluster" if ns.is_some() => {
            out.push(Cause::forbidden(format!("{base}.namespace"), "`parameters.scope` is set to 'Cluster'"));
        }
        "Namespace" => match ns {
            None => out.push(Cause::required(format!("{base}.namespace"), "`parameters.scope` is set to 'Namespace'")),
            Some(ns) => {
                out.extend(dns1123_label_errors(ns).iter().map(|m| Cause::invalid(format!("{base}.namespace"), ns, m)))
            }
        },
        "Cluster" => {}
        other => out.push(Cause::not_supported(format!("{base}.scope"), other, &["Cluster", "Namespace"])),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kinds::test_support::{create_causes, defaulted, fields, update_causes};

    fn class(spec: Value) -> Value {
        json!({"metadata": {"name": "kaji"}, "spec": spec})
    }

    #[test]
    fn a_controller_is_required_and_domain_prefixed() {
        assert_eq!(create_causes("IngressClass", &class(json!({"controller": "kaji.dev/ingress"}))), vec![]);
        assert_eq!(fields(&create_causes("IngressClass", &class(json!({})))), ["spec.controller"]);
        let bad = create_causes("IngressClass", &class(json!({"controller": "nginx"})));
        assert_eq!(
            bad[0].message,
            "Invalid value: \"nginx\": must be a domain-prefixed path (such as \"acme.io/foo\")"
        );
    }

    #[test]
    fn parameters_default_to_cluster_scope_and_namespace_follows_scope() {
        let c =
            defaulted("IngressClass", class(json!({"controller": "k.io/c", "parameters": {"kind": "P", "name": "p"}})));
        assert_eq!(c["spec"]["parameters"]["scope"], "Cluster");
        let ns = class(json!({"controller": "k.io/c",
            "parameters": {"kind": "P", "name": "p", "scope": "Namespace"}}));
        assert_eq!(fields(&create_causes("IngressClass", &ns)), ["spec.parameters.namespace"]);
    }

    #[test]
    fn the_controller_cannot_change() {
        let old = class(json!({"controller": "k.io/a"}));
        let new = class(json!({"controller": "k.io/b"}));
        assert_eq!(fields(&update_causes("IngressClass", &new, &old)), ["spec.controller"]);
    }

    #[test]
    fn kubectl_prints_controller_and_parameters() {
        let c = class(json!({"controller": "k.io/c", "parameters": {"apiGroup": "k.io", "kind": "P", "name": "p"}}));
        let cells = crate::kinds::test_support::cells("IngressClass", &c);
        assert_eq!(cells[..3], [json!("kaji"), json!("k.io/c"), json!("P.k.io/p")]);
    }
}
