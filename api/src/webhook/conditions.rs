//! A webhook's `matchConditions`: CEL expressions over `object`, `oldObject` and `request` that
//! must all be true for the webhook to be called (k8s.io/apiserver's `matchconditions.Matcher`).
//! Compiled and evaluated with cel-rust. The `authorizer` library is not available yet: a
//! condition that uses it is refused when the configuration is written.

use serde_json::Value;

/// What the conditions decided for one request.
#[derive(Debug, Clone, PartialEq)]
pub enum Outcome {
    Matches,
    /// The first condition that evaluated to false: the webhook is not called.
    Excluded(String),
    /// Conditions that could not be evaluated (joined as Kubernetes aggregates them): the
    /// webhook's failurePolicy decides.
    Error(String),
}

/// Why `expression` cannot be a condition, as the API reports it (`compilation failed: ...`).
pub fn check(expression: &str) -> Result<(), String> {
    let program = cel::Program::compile(expression).map_err(|e| format!("compilation failed: {e}"))?;
    if program.references().has_variable("authorizer") {
        return Err("compilation failed: kaji does not evaluate the CEL authorizer library yet".into());
    }
    Ok(())
}

/// A JSON value as CEL sees it: integers as `int` where they fit (Kubernetes' ints are int64),
/// objects as maps.
pub fn to_cel(v: &Value) -> cel::Value {
    match v {
        Value::Null => cel::Value::Null,
        Value::Bool(b) => cel::Value::Bool(*b),
        Value::Number(n) => match (n.as_i64(), n.as_u64()) {
            (Some(i), _) => cel::Value::Int(i),
            (None, Some(u)) => cel::Value::UInt(u),
            _ => cel::Value::Float(n.as_f64().unwrap_or(f64::NAN)),
        },
        Value::String(s) => cel::Value::String(std::sync::Arc::new(s.clone())),
        Value::Array(a) => cel::Value::List(std::sync::Arc::new(a.iter().map(to_cel).collect())),
        Value::Object(o) => {
            let m: std::collections::HashMap<String, cel::Value> =
                o.iter().map(|(k, v)| (k.clone(), to_cel(v))).collect();
            cel::Value::from(m)
        }
    }
}

/// Evaluates one expression; a compile error or runtime error is the error's text.
pub fn run(expression: &str, ctx: &cel::Context<'_, '_>) -> Result<cel::Value, String> {
    cel::Program::compile(expression)
        .map_err(|e| format!("compilation failed: {e}"))
        .and_then(|p| p.execute(ctx).map_err(|e| e.to_string()))
}

/// Evaluates the conditions (`name`, `expression` objects) in order: false excludes at once,
/// errors are collected and reported only if none is false.
pub fn evaluate(conditions: &[Value], object: &Value, old: &Value, request: &Value) -> Outcome {
    let mut ctx = cel::Context::default();
    for (name, v) in [("object", object), ("oldObject", old), ("request", request)] {
        ctx.add_variable_from_value(name, to_cel(v));
    }
    evaluate_in(conditions, &ctx)
}

/// [`evaluate`] with the variables already bound (policies add `params` and `namespaceObject`).
pub fn evaluate_in(conditions: &[Value], ctx: &cel::Context<'_, '_>) -> Outcome {
    let mut errors = Vec::new();
    for c in conditions {
        let name = c.get("name").and_then(Value::as_str).unwrap_or("");
        let expression = c.get("expression").and_then(Value::as_str).unwrap_or("");
        match run(expression, ctx) {
            Ok(cel::Value::Bool(true)) => {}
            Ok(cel::Value::Bool(false)) => return Outcome::Excluded(name.to_string()),
            Ok(other) => errors
                .push(format!("matchCondition '{name}': expression must evaluate to bool, got {}", other.type_of())),
            Err(e) => errors.push(format!("matchCondition '{name}': {e}")),
        }
    }
    match errors.as_slice() {
        [] => Outcome::Matches,
        [one] => Outcome::Error(one.clone()),
        many => Outcome::Error(format!("[{}]", many.join(", "))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn cond(name: &str, expression: &str) -> Value {
        json!({"name": name, "expression": expression})
    }

    #[test]
    fn bad_expressions_fail_to_compile_with_cel_messages() {
        assert_eq!(check("object.metadata.name != 'skip-me'"), Ok(()));
        let err = check("... [] bad expression").expect_err("a syntax error");
        assert!(err.starts_with("compilation failed: ERROR: <input>:1:"), "{err}");
        assert!(check("authorizer.group('').resource('pods').check('get').allowed()").is_err());
    }

    #[test]
    fn conditions_exclude_on_the_first_false_and_report_errors_otherwise() {
        let obj = json!({"metadata": {"name": "skip-me", "namespace": "production"}});
        let req = json!({"operation": "CREATE"});
        let all_true =
            [cond("ns", "object.metadata.namespace == 'production'"), cond("op", "request.operation == 'CREATE'")];
        assert_eq!(evaluate(&all_true, &obj, &Value::Null, &req), Outcome::Matches);
        let skip = [cond("not-skipped", "object.metadata.name != 'skip-me'"), cond("broken", "object.nope.deeper")];
        assert_eq!(evaluate(&skip, &obj, &Value::Null, &req), Outcome::Excluded("not-skipped".into()));
        let broken = [cond("broken", "object.nope.deeper"), cond("ns", "object.metadata.namespace == 'production'")];
        let Outcome::Error(e) = evaluate(&broken, &obj, &Value::Null, &req) else { panic!("an error") };
        assert!(e.starts_with("matchCondition 'broken': "), "{e}");
        let not_bool = [cond("name", "object.metadata.name")];
        assert_eq!(
            evaluate(&not_bool, &obj, &Value::Null, &req),
            Outcome::Error("matchCondition 'name': expression must evaluate to bool, got string".into())
        );
        // oldObject is null on a create.
        assert_eq!(evaluate(&[cond("new", "oldObject == null")], &obj, &Value::Null, &req), Outcome::Matches);
    }
}
