//! meta.k8s.io/v1 Table conversion: the columns and cells `kubectl get` prints, computed
//! server-side the way Kubernetes' `pkg/printers/internalversion` printers do (always "wide").

mod age;
mod certificates;
pub(crate) mod columns;
mod event;
mod node;
pub(crate) mod obj;
mod pod;
mod quota;
mod service;
mod storage;
#[cfg(test)]
mod test_support;
mod workloads;

pub use age::human_duration;
pub use certificates::condition as csr_condition;
pub use columns::columns;
pub use obj::Obj;
pub use storage::{is_default_class, DEFAULT_CLASS_ANNOTATION};

use jiff::Timestamp;
use serde_json::{json, Map, Value};

use crate::selector::LabelSelector;
use age::since;
use event::event_cells;
use node::node_cells;
use obj::none_if_empty;
use pod::pod_cells;
use service::{format_endpoints, list_with_more, service_cells};

/// One row's cells for `obj`, in the order of `columns(kind)`.
pub fn cells(kind: &str, obj: &Value, now: Timestamp) -> Vec<Value> {
    let o = Obj(obj);
    let name = json!(o.str("metadata.name"));
    let age = json!(since(o.time("metadata.creationTimestamp"), now));
    if let Some((_, s)) = crate::kinds::strategy(kind).filter(|(_, s)| !s.columns().is_empty()) {
        let mut row = vec![name];
        row.extend(s.cells(o, &age));
        return row;
    }
    match kind {
        "Pod" => pod_cells(o, now),
        "Node" => node_cells(o, name, age),
        "Service" => service_cells(o, name, age),
        "Endpoints" => vec![name, json!(format_endpoints(o)), age],
        "Event" => event_cells(o, now),
        "Namespace" => vec![name, json!(o.str("status.phase")), age],
        "ConfigMap" => vec![name, json!(o.map_len("data") + o.map_len("binaryData")), age],
        "Secret" => {
            // stringData is merged into data on write; count the union.
            let mut keys: Vec<&String> = o.map("data").keys().chain(o.map("stringData").keys()).collect();
            keys.sort();
            keys.dedup();
            vec![name, json!(o.str("type")), json!(keys.len()), age]
        }
        "ServiceAccount" => vec![name, age],
        "Lease" => vec![name, json!(o.str("spec.holderIdentity")), age],
        "Deployment" => {
            let (containers, images) = container_cells(o.list("spec.template.spec.containers"));
            let selector = LabelSelector::from_json(o.get("spec.selector").unwrap_or(&Value::Null))
                .map_or_else(|_| "<invalid>".to_owned(), |s| s.to_string());
            vec![
                name,
                json!(format!("{}/{}", o.int("status.readyReplicas"), o.int_or("spec.replicas", 1))),
                json!(o.int("status.updatedReplicas")),
                json!(o.int("status.availableReplicas")),
                age,
                json!(containers),
                json!(images),
                json!(selector),
            ]
        }
        "ReplicaSet" => {
            let (containers, images) = container_cells(o.list("spec.template.spec.containers"));
            let selector = format_label_selector(o.get("spec.selector"));
            vec![
                name,
                json!(o.int_or("spec.replicas", 1)),
                json!(o.int("status.replicas")),
                json!(o.int("status.readyReplicas")),
                age,
                json!(containers),
                json!(images),
                json!(selector),
            ]
        }
        "EndpointSlice" => {
            let ports = o.list("ports").iter().map(|p| {
                let p = Obj(p);
                p.get("port")
                    .and_then(Value::as_i64)
                    .map(|n| n.to_string())
                    .or_else(|| p.get("name").and_then(Value::as_str).map(str::to_owned))
                    .unwrap_or_else(|| "*".to_owned())
            });
            let addresses = o
                .list("endpoints")
                .iter()
                .flat_map(|e| Obj(e).list("addresses"))
                .map(|a| a.as_str().unwrap_or("").to_owned());
            vec![
                name,
                json!(o.str("addressType")),
                json!(list_with_more(ports, "<unset>")),
                json!(list_with_more(addresses, "<unset>")),
                age,
            ]
        }
        "RoleBinding" | "ClusterRoleBinding" => binding_cells(o, name, age),
        other if workloads::columns(other).is_some() => workloads::cells(other, o, name, age, now).unwrap_or_default(),
        other if storage::columns(other).is_some() => storage::cells(other, o, name, age).unwrap_or_default(),
        other if certificates::columns(other).is_some() => certificates::cells(other, o, name, age).unwrap_or_default(),
        other if quota::columns(other).is_some() => quota::cells(other, o, name, age).unwrap_or_default(),
        _ => {
            let created = o.time("metadata.creationTimestamp").unwrap_or(Timestamp::MIN);
            let created = Timestamp::from_second(created.as_second()).unwrap_or(created);
            let created =
                if created == Timestamp::MIN { "0001-01-01T00:00:00Z".to_owned() } else { created.to_string() };
            vec![name, json!(created)]
        }
    }
}

/// `printRoleBinding`: the role as `Kind/name`, and (wide) users, groups and `namespace/name` of
/// service accounts, as `rbac.SubjectsStrings` sorts them.
fn binding_cells(o: Obj<'_>, name: Value, age: Value) -> Vec<Value> {
    let role = format!("{}/{}", o.str("roleRef.kind"), o.str("roleRef.name"));
    let (mut users, mut groups, mut sas) = (Vec::new(), Vec::new(), Vec::new());
    for s in o.list("subjects") {
        let s = Obj(s);
        match s.str("kind") {
            "User" => users.push(s.str("name").to_owned()),
            "Group" => groups.push(s.str("name").to_owned()),
            "ServiceAccount" => sas.push(format!("{}/{}", s.str("namespace"), s.str("name"))),
            _ => {}
        }
    }
    vec![name, json!(role), age, json!(users.join(", ")), json!(groups.join(", ")), json!(sas.join(", "))]
}

/// `labels.FormatLabels`: sorted `k=v` pairs, or `<none>`.
fn format_labels(labels: &Map<String, Value>) -> String {
    let mut pairs: Vec<String> = labels.iter().map(|(k, v)| format!("{k}={}", v.as_str().unwrap_or(""))).collect();
    pairs.sort();
    none_if_empty(&pairs.join(",")).to_owned()
}

/// `metav1.FormatLabelSelector`: `<error>` when unparsable, `<none>` when empty.
fn format_label_selector(sel: Option<&Value>) -> String {
    match LabelSelector::from_json(sel.unwrap_or(&Value::Null)) {
        Err(_) => "<error>".to_owned(),
        Ok(s) if s.is_empty() => "<none>".to_owned(),
        Ok(s) => s.to_string(),
    }
}

/// `layoutContainerCells`: names and images, comma separated.
fn container_cells(containers: &[Value]) -> (String, String) {
    let names: Vec<&str> = containers.iter().map(|c| Obj(c).str("name")).collect();
    let images: Vec<&str> = containers.iter().map(|c| Obj(c).str("image")).collect();
    (names.join(","), images.join(","))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::table::test_support::{cell_strings, now};

    #[test]
    fn every_kind_has_one_cell_per_column() {
        let obj = json!({"metadata": {"name": "x", "creationTimestamp": "2025-01-01T11:00:00Z"}});
        for kind in [
            "Pod",
            "Node",
            "Service",
            "Endpoints",
            "Event",
            "Namespace",
            "ConfigMap",
            "Secret",
            "ServiceAccount",
            "Lease",
            "Deployment",
            "ReplicaSet",
            "ReplicationController",
            "PodTemplate",
            "ResourceQuota",
            "EndpointSlice",
            "RoleBinding",
            "ClusterRoleBinding",
            "Role",
            "DaemonSet",
            "StatefulSet",
            "Job",
            "CronJob",
            "ControllerRevision",
            "PersistentVolume",
            "PersistentVolumeClaim",
            "StorageClass",
            "Widget",
        ] {
            assert_eq!(cells(kind, &obj, now()).len(), columns(kind).len(), "{kind}");
        }
    }

    #[test]
    fn unknown_kinds_print_the_creation_time() {
        let obj = json!({"metadata": {"name": "w1", "creationTimestamp": "2025-01-01T11:00:00.5Z"}});
        assert_eq!(cell_strings("Widget", &obj), ["w1", "2025-01-01T11:00:00Z"]);
    }

    #[test]
    fn workloads_print_replica_counts_containers_and_selectors() {
        let template =
            json!({"spec": {"containers": [{"name": "web", "image": "nginx:1"}, {"name": "log", "image": "busybox"}]}});
        let deploy = json!({
            "metadata": {"name": "web"},
            "spec": {"replicas": 3, "selector": {"matchLabels": {"app": "web"}}, "template": template},
            "status": {"readyReplicas": 2, "updatedReplicas": 3, "availableReplicas": 2}
        });
        assert_eq!(
            cells("Deployment", &deploy, now()),
            [
                json!("web"),
                json!("2/3"),
                json!(3),
                json!(2),
                json!("<unknown>"),
                json!("web,log"),
                json!("nginx:1,busybox"),
                json!("app=web")
            ]
        );
        let rs = json!({"metadata": {"name": "web-1"}, "spec": {"replicas": 3, "template": template},
                        "status": {"replicas": 3, "readyReplicas": 1}});
        assert_eq!(
            cells("ReplicaSet", &rs, now()),
            [
                json!("web-1"),
                json!(3),
                json!(3),
                json!(1),
                json!("<unknown>"),
                json!("web,log"),
                json!("nginx:1,busybox"),
                json!("<none>")
            ]
        );
    }

    #[test]
    fn bindings_print_their_role_and_subjects() {
        let b = json!({"metadata": {"name": "read"}, "roleRef": {"kind": "ClusterRole", "name": "view"},
                       "subjects": [{"kind": "User", "name": "alice"}, {"kind": "Group", "name": "devs"},
                                    {"kind": "User", "name": "bob"},
                                    {"kind": "ServiceAccount", "namespace": "ci", "name": "builder"}]});
        assert_eq!(
            cell_strings("RoleBinding", &b),
            ["read", "ClusterRole/view", "<unknown>", "alice, bob", "devs", "ci/builder"]
        );
    }

    #[test]
    fn config_objects_count_their_data() {
        let cm = json!({"metadata": {"name": "cfg"}, "data": {"a": "1", "b": "2"}, "binaryData": {"c": "AA=="}});
        assert_eq!(cells("ConfigMap", &cm, now())[1], json!(3));
        let secret = json!({"metadata": {"name": "s"}, "type": "Opaque", "data": {"a": "MQ=="}, "stringData": {"a": "1", "b": "2"}});
        assert_eq!(cells("Secret", &secret, now())[1..3], [json!("Opaque"), json!(2)]);
        let lease = json!({"metadata": {"name": "kaji-scheduler"}, "spec": {"holderIdentity": "cp1_abc"}});
        assert_eq!(cell_strings("Lease", &lease)[1], "cp1_abc");
        let ns = json!({"metadata": {"name": "default"}, "status": {"phase": "Active"}});
        assert_eq!(cell_strings("Namespace", &ns)[1], "Active");
    }
}
