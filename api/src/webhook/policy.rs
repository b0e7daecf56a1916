//! ValidatingAdmissionPolicy evaluation (k8s.io/apiserver's `policy/validating` validator): the
//! variables in order, then each validation; a false one is a violation with its message
//! (messageExpression, else message, else `failed expression: <expression>`) and reason (Invalid
//! unless given); an expression that cannot be evaluated is a violation under failurePolicy Fail
//! and is ignored under Ignore.

use super::conditions::{run, to_cel};
use serde_json::Value;
use std::collections::HashMap;

/// What a policy's expressions see.
#[derive(Debug, Clone, Copy)]
pub struct Activation<'a> {
    pub object: &'a Value,
    pub old: &'a Value,
    pub request: &'a Value,
    pub params: &'a Value,
    pub namespace_object: &'a Value,
}

/// One failed validation.
#[derive(Debug, Clone, PartialEq)]
pub struct Violation {
    pub message: String,
    /// Forbidden, Invalid or RequestEntityTooLarge.
    pub reason: String,
}

/// The root context of an activation (variables `object`, `oldObject`, `request`, `params`,
/// `namespaceObject`).
pub fn context(a: &Activation<'_>) -> cel::Context<'static, 'static> {
    let mut ctx = cel::Context::default();
    for (name, v) in [
        ("object", a.object),
        ("oldObject", a.old),
        ("request", a.request),
        ("params", a.params),
        ("namespaceObject", a.namespace_object),
    ] {
        ctx.add_variable_from_value(name, to_cel(v));
    }
    ctx
}

/// `spec.variables`, each seeing the ones before it as `variables.<name>`; one that cannot be
/// evaluated is left out (an expression using it fails).
pub fn bind_variables(spec: &Value, ctx: &mut cel::Context<'_, '_>) {
    let mut vars: HashMap<String, cel::Value> = HashMap::new();
    for v in spec.get("variables").and_then(Value::as_array).into_iter().flatten() {
        let name = v.get("name").and_then(Value::as_str).unwrap_or("");
        let expression = v.get("expression").and_then(Value::as_str).unwrap_or("");
        ctx.add_variable_from_value("variables", cel::Value::from(vars.clone()));
        if let Ok(value) = run(expression, ctx) {
            vars.insert(name.to_string(), value);
        }
    }
    ctx.add_variable_from_value("variables", cel::Value::from(vars));
}

/// The violations of `spec.validations` in `ctx` (variables bound).
pub fn validate(spec: &Value, ctx: &cel::Context<'_, '_>) -> Vec<Violation> {
    let fail = spec.get("failurePolicy").and_then(Value::as_str) != Some("Ignore");
    let mut out = Vec::new();
    for v in spec.get("validations").and_then(Value::as_array).into_iter().flatten() {
        let expression = v.get("expression").and_then(Value::as_str).unwrap_or("").trim();
        let reason = v.get("reason").and_then(Value::as_str).unwrap_or("Invalid").to_string();
        match run(expression, ctx) {
            Ok(cel::Value::Bool(true)) => {}
            Ok(cel::Value::Bool(false)) => out.push(Violation { message: message(v, expression, ctx), reason }),
            Ok(other) if fail => out.push(Violation {
                message: format!(
                    "expression '{expression}' resulted in error: expected a bool, got {}",
                    other.type_of()
                ),
                reason,
            }),
            Err(e) if fail => {
                out.push(Violation { message: format!("expression '{expression}' resulted in error: {e}"), reason })
            }
            _ => {}
        }
    }
    out
}

fn message(v: &Value, expression: &str, ctx: &cel::Context<'_, '_>) -> String {
    if let Some(me) = v.get("messageExpression").and_then(Value::as_str).filter(|m| !m.trim().is_empty()) {
        if let Ok(cel::Value::String(s)) = run(me, ctx) {
            let s = s.trim();
            if !s.is_empty() && !s.contains('\n') && s.len() <= 5 * 1024 {
                return s.to_string();
            }
        }
    }
    match v.get("message").and_then(Value::as_str).map(str::trim).filter(|m| !m.is_empty()) {
        Some(m) => m.to_string(),
        None => format!("failed expression: {expression}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn violations(spec: Value, object: Value, params: Value) -> Vec<Violation> {
        let null = Value::Null;
        let request = json!({"operation": "CREATE"});
        let ns = json!({"metadata": {"name": "team-a"}});
        let a = Activation { object: &object, old: &null, request: &request, params: &params, namespace_object: &ns };
        let mut ctx = context(&a);
        bind_variables(&spec, &mut ctx);
        validate(&spec, &ctx)
    }

    #[test]
    fn violations_carry_the_message_kubernetes_would_choose() {
        let spec = json!({"validations": [
            {"expression": "object.spec.replicas > 1", "messageExpression": "'wants replicas > 1, got ' + string(object.spec.replicas)"},
            {"expression": "object.spec.replicas < 0", "message": "  negative only  ", "reason": "Forbidden"},
            {"expression": "namespaceObject.metadata.name == 'team-b'"},
        ]});
        assert_eq!(
            violations(spec, json!({"spec": {"replicas": 1}}), Value::Null),
            vec![
                Violation { message: "wants replicas > 1, got 1".into(), reason: "Invalid".into() },
                Violation { message: "negative only".into(), reason: "Forbidden".into() },
                Violation {
                    message: "failed expression: namespaceObject.metadata.name == 'team-b'".into(),
                    reason: "Invalid".into()
                },
            ]
        );
    }

    #[test]
    fn variables_and_params_are_bound_and_errors_follow_the_failure_policy() {
        let spec = json!({"variables": [{"name": "replicas", "expression": "object.spec.replicas"},
                                         {"name": "odd", "expression": "variables.replicas % 2 == 1"}],
            "validations": [{"expression": "variables.odd"}, {"expression": "variables.replicas <= params.max"}]});
        assert_eq!(violations(spec.clone(), json!({"spec": {"replicas": 3}}), json!({"max": 5})), vec![]);
        let v = violations(spec.clone(), json!({"spec": {"replicas": 8}}), json!({"max": 5}));
        assert_eq!(
            v.iter().map(|v| v.message.as_str()).collect::<Vec<_>>(),
            ["failed expression: variables.odd", "failed expression: variables.replicas <= params.max"]
        );
        let broken = json!({"validations": [{"expression": "object.spec.missing > 1"}]});
        let v = violations(broken.clone(), json!({"spec": {}}), Value::Null);
        assert!(v[0].message.starts_with("expression 'object.spec.missing > 1' resulted in error: "), "{v:?}");
        let mut ignored = broken;
        ignored["failurePolicy"] = json!("Ignore");
        assert_eq!(violations(ignored, json!({"spec": {}}), Value::Null), vec![]);
    }
}
