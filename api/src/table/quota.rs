//! ResourceQuota rows and columns, as `pkg/printers/internalversion`'s printResourceQuota prints
//! them: `NAME AGE REQUEST LIMIT`, each `<resource>: <used>/<hard>` sorted by name, `limits.*`
//! under LIMIT and everything else under REQUEST.

use serde_json::{json, Value};

use super::columns::{Column, AGE, NAME};
use super::obj::Obj;
use crate::quota::{list, Quantity};

pub(super) fn columns(kind: &str) -> Option<Vec<Column>> {
    (kind == "ResourceQuota").then(|| {
        vec![
            NAME,
            AGE,
            ("Request", "string", "", 0, "Request represents a minimum amount of cpu/memory that a container may consume."),
            ("Limit", "string", "", 0, "Limits control the maximum amount of cpu/memory that a container may use independent of contention on the node."),
        ]
    })
}

pub(super) fn cells(kind: &str, o: Obj<'_>, name: Value, age: Value) -> Option<Vec<Value>> {
    if kind != "ResourceQuota" {
        return None;
    }
    let hard = list::from_json(o.get("status.hard"));
    let used = list::from_json(o.get("status.used"));
    let (mut request, mut limit) = (Vec::new(), Vec::new());
    for (resource, h) in &hard {
        let u = used.get(resource).copied().unwrap_or_else(Quantity::zero);
        let cell = format!("{resource}: {u}/{h}");
        if resource.split('.').next() == Some("limits") && resource.contains('.') {
            limit.push(cell);
        } else {
            request.push(cell);
        }
    }
    Some(vec![name, age, json!(request.join(", ")), json!(limit.join(", "))])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limits_go_to_their_own_column_and_the_rest_to_request() {
        let q = json!({"status": {"hard": {"pods": "5", "limits.cpu": "2", "requests.memory": "1Gi", "cpu": "1"},
            "used": {"pods": "1", "limits.cpu": "500m", "cpu": "1000m"}}});
        let row = cells("ResourceQuota", Obj(&q), json!("q"), json!("5m")).expect("a quota row");
        assert_eq!(row[2], "cpu: 1/1, pods: 1/5, requests.memory: 0/1Gi");
        assert_eq!(row[3], "limits.cpu: 500m/2");
        assert_eq!(columns("ResourceQuota").expect("columns")[1].0, "Age");
    }
}
