//! ReplicationController, PodTemplate, DaemonSet, StatefulSet, Job, CronJob and ControllerRevision
//! rows and columns, as `pkg/printers/internalversion` prints them.

use jiff::Timestamp;
use serde_json::{json, Value};

use super::age::{human_duration, since};
use super::columns::{Column, AGE, CONTAINERS_DOC, IMAGES_DOC, NAME};
use super::obj::Obj;
use super::{container_cells, format_label_selector, format_labels};

pub(super) fn columns(kind: &str) -> Option<Vec<Column>> {
    Some(match kind {
        "ReplicationController" => vec![
            NAME,
            ("Desired", "integer", "", 0, "Replicas is the number of desired replicas. This is a pointer to distinguish between explicit zero and unspecified. Defaults to 1. More info: https://kubernetes.io/docs/concepts/workloads/controllers/replicationcontroller#what-is-a-replicationcontroller"),
            ("Current", "integer", "", 0, "Replicas is the most recently observed number of replicas. More info: https://kubernetes.io/docs/concepts/workloads/controllers/replicationcontroller#what-is-a-replicationcontroller"),
            ("Ready", "integer", "", 0, "The number of ready replicas for this replication controller."),
            AGE,
            ("Containers", "string", "", 1, CONTAINERS_DOC),
            ("Images", "string", "", 1, IMAGES_DOC),
            ("Selector", "string", "", 1, "Selector is a label query over pods that should match the Replicas count. If Selector is empty, it is defaulted to the labels present on the Pod template. Label keys and values that must match in order to be controlled by this replication controller, if empty defaulted to labels on Pod template. More info: https://kubernetes.io/docs/concepts/overview/working-with-objects/labels/#label-selectors"),
        ],
        // podTemplateColumnDefinitions: no age, every column shown without -o wide.
        "PodTemplate" => vec![
            NAME,
            ("Containers", "string", "", 0, CONTAINERS_DOC),
            ("Images", "string", "", 0, IMAGES_DOC),
            ("Pod Labels", "string", "", 0, "The labels for the pod template."),
        ],
        "DaemonSet" => vec![
            NAME,
            ("Desired", "integer", "", 0, "The total number of nodes that should be running the daemon pod (including nodes correctly running the daemon pod). More info: https://kubernetes.io/docs/concepts/workloads/controllers/daemonset/"),
            ("Current", "integer", "", 0, "The number of nodes that are running at least 1 daemon pod and are supposed to run the daemon pod. More info: https://kubernetes.io/docs/concepts/workloads/controllers/daemonset/"),
            ("Ready", "integer", "", 0, "numberReady is the number of nodes that should be running the daemon pod and have one or more of the daemon pod running with a Ready Condition."),
            ("Up-to-date", "integer", "", 0, "The total number of nodes that are running updated daemon pod"),
            ("Available", "integer", "", 0, "The number of nodes that should be running the daemon pod and have one or more of the daemon pod running and available (ready for at least spec.minReadySeconds)"),
            ("Node Selector", "string", "", 0, "NodeSelector is a selector which must be true for the pod to fit on a node. Selector which must match a node's labels for the pod to be scheduled on that node. More info: https://kubernetes.io/docs/concepts/configuration/assign-pod-node/"),
            AGE,
            ("Containers", "string", "", 1, CONTAINERS_DOC),
            ("Images", "string", "", 1, IMAGES_DOC),
            ("Selector", "string", "", 1, "A label query over pods that are managed by the daemon set. Must match in order to be controlled. It must match the pod template's labels. More info: https://kubernetes.io/docs/concepts/overview/working-with-objects/labels/#label-selectors"),
        ],
        "StatefulSet" => vec![
            NAME,
            ("Ready", "string", "", 0, "Number of the pod with ready state"),
            AGE,
            ("Containers", "string", "", 1, CONTAINERS_DOC),
            ("Images", "string", "", 1, IMAGES_DOC),
        ],
        "Job" => vec![
            NAME,
            ("Status", "string", "", 0, "Status of the job."),
            ("Completions", "string", "", 0, "The number of pods which reached phase Succeeded. The value increases monotonically for a given spec. However, it may decrease in reaction to scale down of elastic indexed jobs."),
            ("Duration", "string", "", 0, "Time required to complete the job."),
            AGE,
            ("Containers", "string", "", 1, CONTAINERS_DOC),
            ("Images", "string", "", 1, IMAGES_DOC),
            ("Selector", "string", "", 1, JOB_SELECTOR_DOC),
        ],
        "CronJob" => vec![
            NAME,
            ("Schedule", "string", "", 0, "The schedule in Cron format, see https://en.wikipedia.org/wiki/Cron."),
            ("Timezone", "string", "", 0, "The time zone name for the given schedule, see https://en.wikipedia.org/wiki/List_of_tz_database_time_zones. If not specified, this will default to the time zone of the kube-controller-manager process. The set of valid time zone names and the time zone offset is loaded from the system-wide time zone database by the API server during CronJob validation and the controller manager during execution. If no system-wide time zone database can be found a bundled version of the database is used instead. If the time zone name becomes invalid during the lifetime of a CronJob or due to a change in host configuration, the controller will stop creating new new Jobs and will create a system event with the reason UnknownTimeZone. More information can be found in https://kubernetes.io/docs/concepts/workloads/controllers/cron-jobs/#time-zones"),
            ("Suspend", "boolean", "", 0, "This flag tells the controller to suspend subsequent executions, it does not apply to already started executions.  Defaults to false."),
            ("Active", "integer", "", 0, "A list of pointers to currently running jobs."),
            ("Last Schedule", "string", "", 0, "Information when was the last time the job was successfully scheduled."),
            AGE,
            ("Containers", "string", "", 1, CONTAINERS_DOC),
            ("Images", "string", "", 1, IMAGES_DOC),
            ("Selector", "string", "", 1, JOB_SELECTOR_DOC),
        ],
        "ControllerRevision" => vec![
            NAME,
            ("Controller", "string", "", 0, "Controller of the object"),
            ("Revision", "string", "", 0, "Revision indicates the revision of the state represented by Data."),
            AGE,
        ],
        _ => return None,
    })
}

const JOB_SELECTOR_DOC: &str = "A label query over pods that should match the pod count. Normally, the system sets this field for you. More info: https://kubernetes.io/docs/concepts/overview/working-with-objects/labels/#label-selectors";

pub(super) fn cells(kind: &str, o: Obj<'_>, name: Value, age: Value, now: Timestamp) -> Option<Vec<Value>> {
    Some(match kind {
        "ReplicationController" => {
            let (containers, images) = container_cells(o.list("spec.template.spec.containers"));
            vec![
                name,
                json!(o.int_or("spec.replicas", 1)),
                json!(o.int("status.replicas")),
                json!(o.int("status.readyReplicas")),
                age,
                json!(containers),
                json!(images),
                // A plain map, printed as labels.FormatLabels does.
                json!(format_labels(o.map("spec.selector"))),
            ]
        }
        "PodTemplate" => {
            let (containers, images) = container_cells(o.list("template.spec.containers"));
            vec![name, json!(containers), json!(images), json!(format_labels(o.map("template.metadata.labels")))]
        }
        "DaemonSet" => {
            let (containers, images) = container_cells(o.list("spec.template.spec.containers"));
            vec![
                name,
                json!(o.int("status.desiredNumberScheduled")),
                json!(o.int("status.currentNumberScheduled")),
                json!(o.int("status.numberReady")),
                json!(o.int("status.updatedNumberScheduled")),
                json!(o.int("status.numberAvailable")),
                json!(format_labels(o.map("spec.template.spec.nodeSelector"))),
                age,
                json!(containers),
                json!(images),
                json!(format_label_selector(o.get("spec.selector"))),
            ]
        }
        "StatefulSet" => {
            let (containers, images) = container_cells(o.list("spec.template.spec.containers"));
            let ready = format!("{}/{}", o.int("status.readyReplicas"), o.int("spec.replicas"));
            vec![name, json!(ready), age, json!(containers), json!(images)]
        }
        "Job" => {
            let (containers, images) = container_cells(o.list("spec.template.spec.containers"));
            vec![
                name,
                json!(job_status(o)),
                json!(job_completions(o)),
                json!(job_duration(o, now)),
                age,
                json!(containers),
                json!(images),
                json!(format_label_selector(o.get("spec.selector"))),
            ]
        }
        "CronJob" => {
            let (containers, images) = container_cells(o.list("spec.jobTemplate.spec.template.spec.containers"));
            let last = match o.time("status.lastScheduleTime") {
                Some(t) => since(Some(t), now),
                None => "<none>".to_owned(),
            };
            let tz = o.get("spec.timeZone").and_then(Value::as_str).unwrap_or("<none>");
            let suspend = match o.get("spec.suspend").and_then(Value::as_bool) {
                Some(b) => b.to_string(),
                None => "<unset>".to_owned(),
            };
            vec![
                name,
                json!(o.str("spec.schedule")),
                json!(tz),
                json!(suspend),
                json!(o.list("status.active").len()),
                json!(last),
                age,
                json!(containers),
                json!(images),
                json!(format_label_selector(o.get("spec.jobTemplate.spec.selector"))),
            ]
        }
        "ControllerRevision" => {
            let controller = o
                .list("metadata.ownerReferences")
                .iter()
                .find(|r| Obj(r).bool("controller"))
                .map_or_else(|| "<none>".to_owned(), |r| resource_name(Obj(r)));
            vec![name, json!(controller), json!(o.int("revision")), age]
        }
        _ => return None,
    })
}

/// `formatResourceName` with its kind: `daemonset.apps/web`.
fn resource_name(owner: Obj<'_>) -> String {
    let kind = owner.str("kind").to_lowercase();
    match owner.str("apiVersion").split_once('/') {
        Some((group, _)) => format!("{kind}.{group}/{}", owner.str("name")),
        None => format!("{kind}/{}", owner.str("name")),
    }
}

fn job_status(o: Obj<'_>) -> &'static str {
    let is = |t: &str| o.condition("status.conditions", t) == Some("True");
    if is("Complete") {
        "Complete"
    } else if is("Failed") {
        "Failed"
    } else if o.get("metadata.deletionTimestamp").is_some_and(|d| !d.is_null()) {
        "Terminating"
    } else if is("Suspended") {
        "Suspended"
    } else if is("FailureTarget") {
        "FailureTarget"
    } else {
        "Running"
    }
}

fn job_completions(o: Obj<'_>) -> String {
    let succeeded = o.int("status.succeeded");
    match o.get("spec.completions").and_then(Value::as_i64) {
        Some(c) => format!("{succeeded}/{c}"),
        None => match o.int("spec.parallelism") {
            p if p > 1 => format!("{succeeded}/1 of {p}"),
            _ => format!("{succeeded}/1"),
        },
    }
}

fn job_duration(o: Obj<'_>, now: Timestamp) -> String {
    let Some(start) = o.time("status.startTime") else { return String::new() };
    let end = o.time("status.completionTime").unwrap_or(now);
    human_duration(end.duration_since(start).unsigned_abs())
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use crate::table::test_support::cell_strings;

    fn template() -> serde_json::Value {
        json!({"spec": {"nodeSelector": {"disk": "ssd"}, "containers": [{"name": "agent", "image": "busybox"}]}})
    }

    #[test]
    fn replication_controllers_print_desired_current_ready_and_their_selector_map() {
        let rc = json!({"metadata": {"name": "web"}, "spec": {"replicas": 3, "selector": {"tier": "x", "app": "web"},
            "template": template()}, "status": {"replicas": 2, "readyReplicas": 1}});
        assert_eq!(
            cell_strings("ReplicationController", &rc),
            ["web", "3", "2", "1", "<unknown>", "agent", "busybox", "app=web,tier=x"]
        );
        let bare = json!({"metadata": {"name": "empty"}, "spec": {}});
        assert_eq!(
            cell_strings("ReplicationController", &bare),
            ["empty", "1", "0", "0", "<unknown>", "", "", "<none>"]
        );
    }

    #[test]
    fn pod_templates_print_containers_images_and_the_pods_labels() {
        let columns = crate::table::columns("PodTemplate");
        let names: Vec<&str> = columns.iter().filter_map(|c| c["name"].as_str()).collect();
        assert_eq!(names, ["Name", "Containers", "Images", "Pod Labels"]);
        assert!(columns.iter().all(|c| c["priority"] == 0), "none is wide-only");
        let t = json!({"metadata": {"name": "template-0000", "labels": {"own": "x"}}, "template": {
            "metadata": {"labels": {"tier": "fe", "app": "web"}},
            "spec": {"containers": [{"name": "test", "image": "test2"}, {"name": "side", "image": "busybox"}]}}});
        assert_eq!(cell_strings("PodTemplate", &t), ["template-0000", "test,side", "test2,busybox", "app=web,tier=fe"]);
        let bare = json!({"metadata": {"name": "bare"}, "template": {"spec": {}}});
        assert_eq!(cell_strings("PodTemplate", &bare), ["bare", "", "", "<none>"]);
    }

    #[test]
    fn daemon_sets_print_their_counts_and_node_selector() {
        let ds = json!({"metadata": {"name": "agent"}, "spec": {"selector": {"matchLabels": {"app": "agent"}},
            "template": template()}, "status": {"desiredNumberScheduled": 3, "currentNumberScheduled": 3,
            "numberReady": 2, "updatedNumberScheduled": 3, "numberAvailable": 2}});
        assert_eq!(
            cell_strings("DaemonSet", &ds),
            ["agent", "3", "3", "2", "3", "2", "disk=ssd", "<unknown>", "agent", "busybox", "app=agent"]
        );
    }

    #[test]
    fn jobs_print_status_completions_and_duration() {
        let job = json!({"metadata": {"name": "pi"}, "spec": {"completions": 5, "parallelism": 2, "template": template()},
            "status": {"succeeded": 5, "startTime": "2025-01-01T11:58:00Z", "completionTime": "2025-01-01T11:58:42Z",
                "conditions": [{"type": "SuccessCriteriaMet", "status": "True"}, {"type": "Complete", "status": "True"}]}});
        assert_eq!(cell_strings("Job", &job)[..4], ["pi", "Complete", "5/5", "42s"]);
        let queue = json!({"metadata": {"name": "q"}, "spec": {"parallelism": 3}, "status": {"startTime": "2025-01-01T11:59:00Z"}});
        assert_eq!(cell_strings("Job", &queue)[..4], ["q", "Running", "0/1 of 3", "60s"]);
        let failed = json!({"metadata": {"name": "f"}, "spec": {"completions": 1},
            "status": {"conditions": [{"type": "Failed", "status": "True"}]}});
        assert_eq!(cell_strings("Job", &failed)[..4], ["f", "Failed", "0/1", ""]);
    }

    #[test]
    fn cron_jobs_print_schedule_zone_and_last_run() {
        let cj = json!({"metadata": {"name": "hello"}, "spec": {"schedule": "*/1 * * * *", "suspend": false,
            "jobTemplate": {"spec": {"template": template()}}},
            "status": {"active": [{"name": "hello-1"}], "lastScheduleTime": "2025-01-01T11:59:00Z"}});
        assert_eq!(
            cell_strings("CronJob", &cj),
            ["hello", "*/1 * * * *", "<none>", "false", "1", "60s", "<unknown>", "agent", "busybox", "<none>"]
        );
    }

    #[test]
    fn stateful_sets_and_revisions_print_readiness_and_owner() {
        let sts = json!({"metadata": {"name": "web"}, "spec": {"replicas": 3, "template": template()}, "status": {"readyReplicas": 1}});
        assert_eq!(cell_strings("StatefulSet", &sts), ["web", "1/3", "<unknown>", "agent", "busybox"]);
        let cr = json!({"metadata": {"name": "web-6d4b", "ownerReferences": [{"apiVersion": "apps/v1",
            "kind": "StatefulSet", "name": "web", "uid": "u", "controller": true}]}, "revision": 2});
        assert_eq!(cell_strings("ControllerRevision", &cr), ["web-6d4b", "statefulset.apps/web", "2", "<unknown>"]);
    }
}
