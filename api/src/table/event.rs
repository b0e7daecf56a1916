//! Event rows: last seen, type, reason, object, source and count.

use jiff::Timestamp;
use serde_json::{json, Value};

use super::age::since;
use super::obj::Obj;

pub(super) fn event_cells(ev: Obj<'_>, now: Timestamp) -> Vec<Value> {
    let first_seen = match ev.time("firstTimestamp") {
        Some(t) => since(Some(t), now),
        None => since(ev.time("eventTime"), now),
    };
    let mut last_seen = match ev.time("lastTimestamp") {
        Some(t) => since(Some(t), now),
        None => first_seen.clone(),
    };
    let mut count = ev.int("count");
    if ev.get("series").is_some_and(Value::is_object) {
        last_seen = since(ev.time("series.lastObservedTime"), now);
        count = ev.int("series.count");
    } else if count == 0 {
        count = 1;
    }
    let kind = ev.str("involvedObject.kind").to_lowercase();
    let object = match ev.str("involvedObject.name") {
        "" => kind,
        name => format!("{kind}/{name}"),
    };
    let non_empty = |a: &'static str, b: &'static str| match ev.str(a) {
        "" => ev.str(b),
        v => v,
    };
    let component = non_empty("source.component", "reportingComponent");
    let source = match non_empty("source.host", "reportingInstance") {
        "" => component.to_owned(),
        host => format!("{component}, {host}"),
    };
    vec![
        json!(last_seen),
        json!(ev.str("type")),
        json!(ev.str("reason")),
        json!(object),
        json!(ev.str("involvedObject.fieldPath")),
        json!(source),
        json!(ev.str("message").trim()),
        json!(first_seen),
        json!(count),
        json!(ev.str("metadata.name")),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::table::test_support::cell_strings;

    #[test]
    fn events_print_object_source_and_count() {
        let ev = json!({
            "metadata": {"name": "nginx.17a"},
            "involvedObject": {"kind": "Pod", "name": "nginx", "fieldPath": "spec.containers{nginx}"},
            "type": "Normal", "reason": "Pulled", "message": " pulled image \n",
            "source": {"component": "kubelet", "host": "node1"},
            "firstTimestamp": "2025-01-01T11:00:00Z", "lastTimestamp": "2025-01-01T11:50:00Z", "count": 3
        });
        assert_eq!(
            cell_strings("Event", &ev),
            [
                "10m",
                "Normal",
                "Pulled",
                "pod/nginx",
                "spec.containers{nginx}",
                "kubelet, node1",
                "pulled image",
                "60m",
                "3",
                "nginx.17a"
            ]
        );
        let new_api = json!({
            "involvedObject": {"kind": "Node"}, "reportingComponent": "kaji-controllers",
            "eventTime": "2025-01-01T11:59:00.000000Z"
        });
        let c = cell_strings("Event", &new_api);
        assert_eq!([&c[0], &c[3], &c[5], &c[7], &c[8]], ["60s", "node", "kaji-controllers", "60s", "1"]);
    }
}
