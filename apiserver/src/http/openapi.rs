//! OpenAPI: a v3 index plus one document per group-version whose PATCH operations declare
//! `fieldValidation` (what kubectl's validation needs), and an empty v2 protobuf document.

use kaji_api::resources::{groups, RESOURCES};
use serde_json::{json, Map, Value};

fn gv_path(group: &str) -> String {
    if group.is_empty() {
        "api/v1".into()
    } else {
        format!("apis/{group}/v1")
    }
}

/// A stable short hash of a document, for the index's `?hash=` (cache busting).
fn hash(doc: &Value) -> String {
    // FNV-1a over the serialized document.
    let mut h: u64 = 0xcbf29ce484222325;
    for b in doc.to_string().bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x100000001b3);
    }
    format!("{h:016X}")
}

pub fn index() -> Value {
    let mut paths = Map::new();
    for g in groups() {
        let doc = document(&gv_path(g)).unwrap_or(Value::Null);
        paths.insert(
            gv_path(g),
            json!({"serverRelativeURL": format!("/openapi/v3/{}?hash={}", gv_path(g), hash(&doc))}),
        );
    }
    json!({"paths": paths})
}

/// The document for `api/v1` or `apis/<group>/v1`.
pub fn document(gv: &str) -> Option<Value> {
    let group = match gv.trim_matches('/') {
        "api/v1" => "",
        other => other.strip_prefix("apis/")?.strip_suffix("/v1")?,
    };
    if !groups().contains(&group) {
        return None;
    }
    let prefix = if group.is_empty() { "/api/v1".to_string() } else { format!("/apis/{group}/v1") };
    let mut paths = Map::new();
    for r in RESOURCES.iter().filter(|r| r.group == group) {
        let path = if r.namespaced {
            format!("{prefix}/namespaces/{{namespace}}/{}/{{name}}", r.plural)
        } else {
            format!("{prefix}/{}/{{name}}", r.plural)
        };
        let q = |n: &str, t: &str| json!({"name": n, "in": "query", "schema": {"type": t}});
        paths.insert(path, json!({"patch": {
            "operationId": format!("patch{}", r.kind),
            "x-kubernetes-action": "patch",
            "x-kubernetes-group-version-kind": {"group": r.group, "version": r.version, "kind": r.kind},
            "parameters": [q("dryRun", "string"), q("fieldManager", "string"), q("fieldValidation", "string"), q("force", "boolean")],
            "requestBody": {"content": {"application/json-patch+json": {}, "application/merge-patch+json": {}, "application/apply-patch+yaml": {}}},
            "responses": {"200": {"description": "OK"}},
        }}));
    }
    Some(json!({"openapi": "3.0.0", "info": {"title": "Kubernetes", "version": "v1.32.0"},
                "components": {"schemas": {}}, "paths": paths}))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn index_points_at_every_group_version_document() {
        let idx = index();
        let url = idx["paths"]["apis/apps/v1"]["serverRelativeURL"].as_str().expect("apps entry");
        assert!(url.starts_with("/openapi/v3/apis/apps/v1?hash="));
        let doc = document("apis/apps/v1").expect("apps document");
        let op = &doc["paths"]["/apis/apps/v1/namespaces/{namespace}/deployments/{name}"]["patch"];
        assert_eq!(op["x-kubernetes-group-version-kind"]["kind"], "Deployment");
        assert!(op["parameters"].as_array().expect("params").iter().any(|p| p["name"] == "fieldValidation"));
        assert!(document("apis/nope/v1").is_none());
    }
}
