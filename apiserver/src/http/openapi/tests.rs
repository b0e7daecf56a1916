use super::*;
use kaji_api::strategic::{list_strategy, ListStrategy};
use prost::Message;

fn v3(gv: &str) -> Value {
    serde_json::from_slice(&documents().v3[gv].body).expect("v3 document is JSON")
}

fn kind_schema<'a>(doc: &'a Value, group: &str, version: &str, kind: &str) -> Option<(&'a String, &'a Value)> {
    doc["components"]["schemas"].as_object()?.iter().find(|(_, s)| {
        s["x-kubernetes-group-version-kind"]
            .as_array()
            .is_some_and(|a| a.iter().any(|g| g["group"] == group && g["version"] == version && g["kind"] == kind))
    })
}

/// The schema at `path` (field names; arrays are stepped into) under `schema`, following refs.
fn at<'a>(doc: &'a Value, mut schema: &'a Value, path: &[&str]) -> &'a Value {
    let deref = |s: &'a Value| -> &'a Value {
        let r = s["$ref"].as_str().or_else(|| s["allOf"][0]["$ref"].as_str());
        match r {
            Some(r) => &doc["components"]["schemas"][r.trim_start_matches(REF)],
            None => s,
        }
    };
    for field in path {
        let mut s = deref(schema);
        if s["type"] == "array" {
            s = deref(&s["items"]);
        }
        schema = &s["properties"][*field];
        assert!(!schema.is_null(), "no {field} in {path:?}");
    }
    schema
}

#[test]
fn every_served_kind_is_in_its_group_versions_document_with_its_gvk() {
    let docs = documents();
    for r in RESOURCES {
        let gv = gv_path(r.group, r.version);
        let doc = v3(&gv);
        let (name, schema) = kind_schema(&doc, r.group, r.version, r.kind)
            .unwrap_or_else(|| panic!("{}/{} has no schema with its GVK in {gv}", r.api_version(), r.kind));
        assert!(schema["properties"]["metadata"].is_object(), "{name}");
        assert!(kind_schema(&doc, r.group, r.version, &r.list_kind()).is_some(), "{}", r.list_kind());
        let url = docs.index_url(&gv);
        assert_eq!(url, format!("/openapi/v3/{gv}?hash={}", docs.v3[&gv].hash));
    }
}

#[test]
fn fields_have_their_descriptions_types_and_references() {
    let doc = v3("apis/apps/v1");
    let (_, deployment) = kind_schema(&doc, "apps", "v1", "Deployment").expect("Deployment");
    let replicas = at(&doc, deployment, &["spec", "replicas"]);
    assert_eq!((replicas["type"].as_str(), replicas["format"].as_str()), (Some("integer"), Some("int32")));
    assert!(replicas["description"].as_str().is_some_and(|d| d.starts_with("Number of desired pods")));
    // A described reference is an allOf, as Kubernetes writes it for OpenAPI 3.0.
    let spec = &deployment["properties"]["spec"];
    assert_eq!(spec["allOf"][0]["$ref"], "#/components/schemas/io.k8s.api.apps.v1.DeploymentSpec");
    assert!(spec["description"].is_string() && spec.get("$ref").is_none());
    let image = at(&doc, deployment, &["spec", "template", "spec", "containers", "image"]);
    assert_eq!(image["type"], "string");
    let cpu = at(&doc, deployment, &["spec", "template", "spec", "containers", "resources", "limits"]);
    let quantity = &cpu["additionalProperties"];
    assert!(quantity["$ref"].as_str().is_some_and(|r| r.ends_with("api.resource.Quantity")), "{quantity}");
}

#[test]
fn lists_carry_their_merge_keys_and_types_as_the_strategic_merge_patch_uses_them() {
    let cases: &[(&str, &str, &[&str])] = &[
        ("", "Pod", &["spec", "containers"]),
        ("", "Pod", &["spec", "volumes"]),
        ("", "Pod", &["spec", "containers", "ports"]),
        ("", "Pod", &["spec", "containers", "env"]),
        ("", "Pod", &["spec", "containers", "volumeMounts"]),
        ("", "Pod", &["status", "conditions"]),
        ("", "Pod", &["metadata", "ownerReferences"]),
        ("", "Service", &["spec", "ports"]),
        ("", "Node", &["status", "addresses"]),
        ("apps", "Deployment", &["spec", "template", "spec", "containers", "env"]),
        ("apps", "Deployment", &["status", "conditions"]),
    ];
    for (group, kind, path) in cases {
        let doc = v3(&gv_path(group, "v1"));
        let (_, schema) = kind_schema(&doc, group, "v1", kind).expect("kind");
        let field = at(&doc, schema, path);
        let ListStrategy::MergeByKey(key) = list_strategy(kind, path) else { panic!("{kind} {path:?}") };
        assert_eq!(field["x-kubernetes-patch-merge-key"], key, "{kind} {path:?}: {field}");
        assert!(field["x-kubernetes-patch-strategy"].as_str().is_some_and(|s| s.contains("merge")), "{field}");
    }
    let doc = v3("api/v1");
    let (_, pod) = kind_schema(&doc, "", "v1", "Pod").expect("Pod");
    let containers = at(&doc, pod, &["spec", "containers"]);
    assert_eq!(containers["x-kubernetes-list-type"], "map");
    assert_eq!(containers["x-kubernetes-list-map-keys"], json!(["name"]));
    let finalizers = at(&doc, pod, &["metadata", "finalizers"]);
    assert_eq!(list_strategy("Pod", &["metadata", "finalizers"]), ListStrategy::MergePrimitives);
    assert_eq!(finalizers["x-kubernetes-patch-strategy"], "merge");
    let selector = at(&doc, pod, &["metadata", "ownerReferences"]);
    assert_eq!(selector["type"], "array");
}

#[test]
fn patch_operations_offer_field_validation_for_their_kind() {
    let doc = v3("apis/apps/v1");
    let op = &doc["paths"]["/apis/apps/v1/namespaces/{namespace}/deployments/{name}"]["patch"];
    assert_eq!(op["x-kubernetes-group-version-kind"], json!({"group": "apps", "version": "v1", "kind": "Deployment"}));
    assert_eq!(op["operationId"], "patchAppsV1NamespacedDeployment");
    assert!(op["parameters"].as_array().expect("params").iter().any(|p| p["name"] == "fieldValidation"));
    assert!(op["requestBody"]["content"]["application/strategic-merge-patch+json"].is_object());
    let scale = &doc["paths"]["/apis/apps/v1/namespaces/{namespace}/deployments/{name}/scale"]["get"];
    assert_eq!(scale["x-kubernetes-group-version-kind"]["kind"], "Scale");
    let core = v3("api/v1");
    assert_eq!(core["paths"]["/api/v1/nodes/{name}"]["get"]["operationId"], "readCoreV1Node");
    assert_eq!(core["paths"]["/api/v1/pods"]["get"]["operationId"], "listCoreV1PodForAllNamespaces");
}

#[test]
fn v2_is_the_same_schemas_as_gnostic_protobuf() {
    let docs = documents();
    let json: Value = serde_json::from_slice(&docs.v2_json.body).expect("v2 JSON");
    let spec = &json["definitions"]["io.k8s.api.apps.v1.Deployment"]["properties"]["spec"];
    assert_eq!(spec["$ref"], "#/definitions/io.k8s.api.apps.v1.DeploymentSpec", "v2 keeps $ref beside description");
    let proto = gnostic::Document::decode(docs.v2_protobuf.body.as_ref()).expect("protobuf");
    assert_eq!(proto.swagger, "2.0");
    let defs = proto.definitions.expect("definitions").additional_properties;
    let find = |n: &str| defs.iter().find(|d| d.name == n).and_then(|d| d.value.clone()).expect(n);
    let deployment = find("io.k8s.api.apps.v1.Deployment");
    let gvk = deployment.vendor_extension.iter().find(|e| e.name == "x-kubernetes-group-version-kind").expect("gvk");
    let gvk: Value = serde_json::from_str(&gvk.value.as_ref().expect("yaml").yaml).expect("JSON is YAML");
    assert_eq!(gvk, json!([{"group": "apps", "kind": "Deployment", "version": "v1"}]));
    let pod_spec = find("io.k8s.api.core.v1.PodSpec");
    let props = pod_spec.properties.expect("properties").additional_properties;
    let containers = props.iter().find(|p| p.name == "containers").and_then(|p| p.value.clone()).expect("containers");
    assert!(containers
        .vendor_extension
        .iter()
        .any(|e| e.name == "x-kubernetes-patch-merge-key" && e.value.as_ref().is_some_and(|v| v.yaml == "\"name\"")));
    assert_eq!(containers.items.expect("items").schema[0].r#ref, "#/definitions/io.k8s.api.core.v1.Container");
}
