//! The AdmissionReview a webhook is sent (admission.k8s.io/v1, or v1beta1 for a webhook that
//! accepts only that) and what its answer means (`VerifyAdmissionResponse`, `ToStatusErr`).

use base64::Engine as _;
use serde_json::{json, Map, Value};

/// Group, version and kind (or resource) as AdmissionReview spells them.
#[derive(Debug, Clone, Copy)]
pub struct Gvk<'a> {
    pub group: &'a str,
    pub version: &'a str,
    pub kind: &'a str,
}

/// Everything a review request carries.
#[derive(Debug, Clone, Copy)]
pub struct Request<'a> {
    pub uid: &'a str,
    pub kind: Gvk<'a>,
    /// `kind` holds the resource's plural here.
    pub resource: Gvk<'a>,
    pub subresource: &'a str,
    pub name: &'a str,
    pub namespace: &'a str,
    pub operation: &'a str,
    pub username: &'a str,
    pub user_uid: &'a str,
    pub groups: &'a [String],
    pub extra: &'a Map<String, Value>,
    pub object: Option<&'a Value>,
    pub old: Option<&'a Value>,
    pub dry_run: bool,
    /// The operation's options (CreateOptions, UpdateOptions, DeleteOptions, or Null).
    pub options: &'a Value,
}

/// The review versions kaji speaks, in preference order.
pub const VERSIONS: [&str; 2] = ["v1", "v1beta1"];

/// The first of the webhook's `admissionReviewVersions` kaji speaks.
pub fn version_for(hook: &Value) -> Option<&'static str> {
    let accepted = hook.get("admissionReviewVersions").and_then(Value::as_array)?;
    accepted.iter().filter_map(Value::as_str).find_map(|v| VERSIONS.iter().copied().find(|k| *k == v))
}

/// The options object of an operation (`CreateOptions` etc., meta.k8s.io/v1).
pub fn options(operation: &str, dry_run: bool, field_manager: Option<&str>) -> Value {
    let kind = match operation {
        "CREATE" => "CreateOptions",
        "UPDATE" => "UpdateOptions",
        "DELETE" => "DeleteOptions",
        _ => return Value::Null,
    };
    let mut o = json!({"apiVersion": "meta.k8s.io/v1", "kind": kind});
    if dry_run {
        o["dryRun"] = json!(["All"]);
    }
    if let Some(m) = field_manager.filter(|m| !m.is_empty() && operation != "DELETE") {
        o["fieldManager"] = json!(m);
    }
    o
}

/// The AdmissionReview body for `version` (v1 or v1beta1: the same fields).
pub fn review(r: &Request<'_>, version: &str) -> Value {
    let kind = json!({"group": r.kind.group, "version": r.kind.version, "kind": r.kind.kind});
    let resource = json!({"group": r.resource.group, "version": r.resource.version, "resource": r.resource.kind});
    let mut user = json!({"username": r.username, "groups": r.groups});
    if !r.user_uid.is_empty() {
        user["uid"] = json!(r.user_uid);
    }
    if !r.extra.is_empty() {
        user["extra"] = Value::Object(r.extra.clone());
    }
    let mut req = json!({
        "uid": r.uid,
        "kind": kind,
        "resource": resource,
        "requestKind": kind,
        "requestResource": resource,
        "namespace": r.namespace,
        "operation": r.operation,
        "userInfo": user,
        "object": r.object.cloned().unwrap_or(Value::Null),
        "oldObject": r.old.cloned().unwrap_or(Value::Null),
        "dryRun": r.dry_run,
        "options": r.options,
    });
    if !r.subresource.is_empty() {
        req["subResource"] = json!(r.subresource);
        req["requestSubResource"] = json!(r.subresource);
    }
    if !r.name.is_empty() {
        req["name"] = json!(r.name);
    }
    json!({"apiVersion": format!("admission.k8s.io/{version}"), "kind": "AdmissionReview", "request": req})
}

/// What a webhook answered.
#[derive(Debug, Clone, PartialEq)]
pub enum Verdict {
    /// Admitted, with a JSON patch (mutating webhooks only) and warnings for the client.
    Allowed { patch: Option<Value>, warnings: Vec<String> },
    /// Refused: the Status to answer with (`ToStatusErr` applied).
    Denied(Denial),
}

/// A refusal, as the API returns it.
#[derive(Debug, Clone, PartialEq)]
pub struct Denial {
    pub code: u16,
    pub reason: String,
    pub message: String,
    pub details: Option<Value>,
}

/// `VerifyAdmissionResponse`: the body must be an AdmissionReview of `version` answering `uid`;
/// only a mutating webhook may patch, and only with a JSONPatch. An error is a failed call
/// (the webhook's failurePolicy decides).
pub fn verdict(body: &[u8], version: &str, uid: &str, mutating: bool, webhook: &str) -> Result<Verdict, String> {
    let review: Value = serde_json::from_slice(body).map_err(|e| format!("received invalid webhook response: {e}"))?;
    let (api_version, kind) = (
        review.get("apiVersion").and_then(Value::as_str).unwrap_or(""),
        review.get("kind").and_then(Value::as_str).unwrap_or(""),
    );
    let expected = format!("admission.k8s.io/{version}");
    if api_version != expected || kind != "AdmissionReview" {
        let (group, v) = api_version.split_once('/').unwrap_or(("", api_version));
        return Err(format!(
            "received invalid webhook response: expected webhook response of admission.k8s.io/{version}, Kind=AdmissionReview, got {group}/{v}, Kind={kind}"
        ));
    }
    let Some(resp) = review.get("response").filter(|r| r.is_object()) else {
        return Err("received invalid webhook response: webhook response was absent".into());
    };
    let got = resp.get("uid").and_then(Value::as_str).unwrap_or("");
    if got != uid {
        return Err(format!("received invalid webhook response: expected response.uid={uid:?}, got {got:?}"));
    }
    let patch = resp.get("patch").and_then(Value::as_str).filter(|p| !p.is_empty());
    let patch_type = resp.get("patchType").and_then(Value::as_str).unwrap_or("");
    let patch = match (mutating, patch) {
        (false, Some(_)) => {
            return Err("received invalid webhook response: validating webhook may not return response.patch".into())
        }
        (false, None) if !patch_type.is_empty() => {
            return Err("received invalid webhook response: validating webhook may not return response.patchType".into())
        }
        (true, Some(_)) if patch_type.is_empty() => {
            return Err(
                "received invalid webhook response: webhook returned response.patch but not response.patchType".into()
            )
        }
        (true, Some(_)) if patch_type != "JSONPatch" => {
            return Err(format!(
                "received invalid webhook response: webhook returned invalid response.patchType of {patch_type:?}"
            ))
        }
        (true, Some(p)) => {
            let bytes = base64::engine::general_purpose::STANDARD.decode(p).map_err(|e| {
                format!("received invalid webhook response: illegal base64 data in response.patch: {e}")
            })?;
            let ops: Value = serde_json::from_slice(&bytes)
                .map_err(|e| format!("the server rejected our request due to an error in our request: {e}"))?;
            Some(ops)
        }
        _ => None,
    };
    let warnings = resp
        .get("warnings")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .map(str::to_string)
        .collect();
    if resp.get("allowed").and_then(Value::as_bool).unwrap_or(false) {
        return Ok(Verdict::Allowed { patch, warnings });
    }
    Ok(Verdict::Denied(denial(webhook, resp.get("result").or(resp.get("status")).unwrap_or(&Value::Null))))
}

/// `ToStatusErr`: at least a 400, never "Success", the message naming the webhook.
pub fn denial(webhook: &str, status: &Value) -> Denial {
    let denied_by = format!("admission webhook {webhook:?} denied the request");
    let code = status.get("code").and_then(Value::as_u64).unwrap_or(0);
    let code = if code < 400 { 400 } else { u16::try_from(code).unwrap_or(500) };
    let message = status.get("message").and_then(Value::as_str).unwrap_or("");
    let reason = status.get("reason").and_then(Value::as_str).unwrap_or("");
    let message = match (message, reason) {
        (m, _) if !m.is_empty() => format!("{denied_by}: {m}"),
        (_, r) if !r.is_empty() => format!("{denied_by}: {r}"),
        _ => format!("{denied_by} without explanation"),
    };
    Denial {
        code,
        reason: reason.to_string(),
        message,
        details: status.get("details").filter(|d| d.is_object()).cloned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn answer(resp: Value) -> Vec<u8> {
        serde_json::to_vec(&json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": resp}))
            .expect("json")
    }

    #[test]
    fn a_review_carries_the_request_as_kubernetes_sends_it() {
        let obj = json!({"metadata": {"name": "p"}});
        let extra = Map::new();
        let groups = vec!["system:authenticated".to_string()];
        let r = Request {
            uid: "u-1",
            kind: Gvk { group: "", version: "v1", kind: "Pod" },
            resource: Gvk { group: "", version: "v1", kind: "pods" },
            subresource: "",
            name: "p",
            namespace: "ns",
            operation: "CREATE",
            username: "alice",
            user_uid: "",
            groups: &groups,
            extra: &extra,
            object: Some(&obj),
            old: None,
            dry_run: true,
            options: &options("CREATE", true, Some("kubectl")),
        };
        let v = review(&r, "v1");
        assert_eq!(v["apiVersion"], "admission.k8s.io/v1");
        let req = &v["request"];
        assert_eq!(
            (&req["uid"], &req["operation"], &req["resource"]["resource"]),
            (&json!("u-1"), &json!("CREATE"), &json!("pods"))
        );
        assert_eq!((&req["object"], &req["oldObject"], &req["dryRun"]), (&obj, &Value::Null, &json!(true)));
        assert_eq!(
            req["options"],
            json!({"apiVersion": "meta.k8s.io/v1", "kind": "CreateOptions", "dryRun": ["All"], "fieldManager": "kubectl"})
        );
        assert_eq!(req["userInfo"], json!({"username": "alice", "groups": ["system:authenticated"]}));
        assert!(req.get("subResource").is_none());
    }

    #[test]
    fn answers_are_checked_for_kind_uid_and_patch_rules() {
        let ok = answer(json!({"uid": "u", "allowed": true}));
        assert_eq!(verdict(&ok, "v1", "u", false, "w"), Ok(Verdict::Allowed { patch: None, warnings: vec![] }));
        assert_eq!(
            verdict(&ok, "v1", "other", false, "w"),
            Err("received invalid webhook response: expected response.uid=\"other\", got \"u\"".into())
        );
        let bare = serde_json::to_vec(&json!({"response": {"uid": "u", "allowed": true}})).expect("json");
        assert!(verdict(&bare, "v1", "u", false, "w").expect_err("no kind").contains("got /, Kind="));
        let patch = base64::engine::general_purpose::STANDARD.encode(br#"[{"op":"add","path":"/data/a","value":"b"}]"#);
        let patched = answer(
            json!({"uid": "u", "allowed": true, "patch": patch, "patchType": "JSONPatch", "warnings": ["careful"]}),
        );
        assert_eq!(
            verdict(&patched, "v1", "u", true, "w"),
            Ok(Verdict::Allowed {
                patch: Some(json!([{"op": "add", "path": "/data/a", "value": "b"}])),
                warnings: vec!["careful".into()]
            })
        );
        assert_eq!(
            verdict(&patched, "v1", "u", false, "w"),
            Err("received invalid webhook response: validating webhook may not return response.patch".into())
        );
    }

    #[test]
    fn a_refusal_names_the_webhook_and_is_at_least_a_400() {
        let denied = answer(json!({"uid": "u", "allowed": false, "status": {"code": 200, "message": "no pods today"}}));
        let Ok(Verdict::Denied(d)) = verdict(&denied, "v1", "u", false, "deny.k8s.io") else { panic!("denied") };
        assert_eq!(
            (d.code, d.message.as_str()),
            (400, "admission webhook \"deny.k8s.io\" denied the request: no pods today")
        );
        let silent = denial("w", &json!({"code": 403}));
        assert_eq!(
            (silent.code, silent.message.as_str()),
            (403, "admission webhook \"w\" denied the request without explanation")
        );
    }

    #[test]
    fn the_review_version_is_the_first_kaji_speaks() {
        assert_eq!(version_for(&json!({"admissionReviewVersions": ["v2", "v1beta1", "v1"]})), Some("v1beta1"));
        assert_eq!(version_for(&json!({"admissionReviewVersions": ["v2"]})), None);
    }
}
