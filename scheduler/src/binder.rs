//! Writes decisions to the apiserver: the pod's Binding, and what users read when they ask
//! why — Events (Scheduled, FailedScheduling) and the PodScheduled condition.

use crate::nodeinfo::PodInfo;
use futures::StreamExt;
use k8s_openapi::api::core::v1::{Binding, Event, EventSource, ObjectReference, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::runtime::reflector::{ObjectRef, Store};
use serde_json::{json, Value};
use std::sync::Arc;
use tokio::sync::mpsc;

/// Events and status writes waiting beyond this are dropped (they are best effort, like
/// Kubernetes' event broadcaster); bindings never are.
const REPORT_BUFFER: usize = 4096;
const REPORT_CONCURRENCY: usize = 4;

/// POSTs `pods/{name}/binding` to put the pod on `node`.
pub async fn bind(client: &kube::Client, pod: &PodInfo, node: &str) -> Result<(), kube::Error> {
    let binding = Binding {
        metadata: ObjectMeta {
            name: Some(pod.name.clone()),
            namespace: Some(pod.namespace.clone()),
            uid: pod.pod.metadata.uid.clone(),
            ..ObjectMeta::default()
        },
        target: ObjectReference {
            api_version: Some("v1".into()),
            kind: Some("Node".into()),
            name: Some(node.to_string()),
            ..ObjectReference::default()
        },
    };
    let api: Api<Pod> = Api::namespaced(client.clone(), &pod.namespace);
    api.create_subresource::<_, Value>("binding", &pod.name, &PostParams::default(), &binding).await.map(|_| ())
}

/// The merge patch that sets `PodScheduled=False, reason Unschedulable` with `message`, keeping
/// the pod's other conditions; `None` when the pod already says exactly that.
pub fn unschedulable_condition_patch(pod: &Pod, message: &str, now: &Time) -> Option<Value> {
    let conditions = pod.status.as_ref().and_then(|s| s.conditions.clone()).unwrap_or_default();
    let old = conditions.iter().find(|c| c.type_ == "PodScheduled");
    if old.is_some_and(|c| {
        c.status == "False" && c.reason.as_deref() == Some("Unschedulable") && c.message.as_deref() == Some(message)
    }) {
        return None;
    }
    let since = old.filter(|c| c.status == "False").and_then(|c| c.last_transition_time.clone()).unwrap_or(now.clone());
    let mut out: Vec<Value> =
        conditions.iter().filter(|c| c.type_ != "PodScheduled").filter_map(|c| serde_json::to_value(c).ok()).collect();
    out.push(json!({
        "type": "PodScheduled",
        "status": "False",
        "reason": "Unschedulable",
        "message": message,
        "lastProbeTime": null,
        "lastTransitionTime": since,
    }));
    Some(json!({"status": {"conditions": out}}))
}

/// A core/v1 Event about a pod.
pub fn pod_event(pod: &PodInfo, component: &str, type_: &str, reason: &str, message: String, now: Time) -> Event {
    let nanos = now.0.as_nanosecond();
    Event {
        metadata: ObjectMeta {
            name: Some(format!("{}.{:x}", pod.name, nanos)),
            namespace: Some(pod.namespace.clone()),
            ..ObjectMeta::default()
        },
        involved_object: ObjectReference {
            api_version: Some("v1".into()),
            kind: Some("Pod".into()),
            name: Some(pod.name.clone()),
            namespace: Some(pod.namespace.clone()),
            uid: pod.pod.metadata.uid.clone(),
            resource_version: pod.pod.metadata.resource_version.clone(),
            ..ObjectReference::default()
        },
        reason: Some(reason.into()),
        message: Some(message),
        type_: Some(type_.into()),
        source: Some(EventSource { component: Some(component.into()), host: None }),
        first_timestamp: Some(now.clone()),
        last_timestamp: Some(now),
        count: Some(1),
        reporting_component: Some(component.into()),
        action: Some(if reason == "Scheduled" { "Binding" } else { "Scheduling" }.into()),
        ..Event::default()
    }
}

pub enum Report {
    Scheduled { pod: Arc<PodInfo>, node: String },
    Failed { pod: Arc<PodInfo>, message: String },
}

/// Queues reports for the background writer without ever blocking the scheduling loop.
#[derive(Clone)]
pub struct Recorder {
    tx: mpsc::Sender<Report>,
}

impl Recorder {
    /// The recorder, and the writer task to spawn.
    pub fn new(
        client: kube::Client,
        pods: Store<Pod>,
        component: String,
    ) -> (Self, impl std::future::Future<Output = ()> + Send) {
        let (tx, rx) = mpsc::channel(REPORT_BUFFER);
        let stream = tokio_stream_from(rx);
        let writer = stream.for_each_concurrent(REPORT_CONCURRENCY, move |r| {
            let (client, pods, component) = (client.clone(), pods.clone(), component.clone());
            async move { write(&client, &pods, &component, r).await }
        });
        (Self { tx }, writer)
    }

    pub fn report(&self, r: Report) {
        if self.tx.try_send(r).is_err() {
            tracing::debug!("report buffer full: dropping an event");
        }
    }
}

fn tokio_stream_from(mut rx: mpsc::Receiver<Report>) -> impl futures::Stream<Item = Report> {
    futures::stream::poll_fn(move |cx| rx.poll_recv(cx))
}

fn now() -> Time {
    Time(jiff::Timestamp::now())
}

async fn write(client: &kube::Client, pods: &Store<Pod>, component: &str, report: Report) {
    let (pod, event) = match report {
        Report::Scheduled { pod, node } => {
            let msg = format!("Successfully assigned {} to {node}", pod.key());
            let ev = pod_event(&pod, component, "Normal", "Scheduled", msg, now());
            (pod, ev)
        }
        Report::Failed { pod, message } => {
            let current = pods.get(&ObjectRef::new(&pod.name).within(&pod.namespace));
            let current = current.as_deref().unwrap_or(&pod.pod);
            if let Some(patch) = unschedulable_condition_patch(current, &message, &now()) {
                let api: Api<Pod> = Api::namespaced(client.clone(), &pod.namespace);
                if let Err(e) = api.patch_status(&pod.name, &PatchParams::default(), &Patch::Merge(&patch)).await {
                    tracing::warn!(pod = %pod.key(), error = %e, "cannot set the PodScheduled condition");
                }
            }
            let ev = pod_event(&pod, component, "Warning", "FailedScheduling", message, now());
            (pod, ev)
        }
    };
    let api: Api<Event> = Api::namespaced(client.clone(), &pod.namespace);
    if let Err(e) = api.create(&PostParams::default(), &event).await {
        tracing::debug!(pod = %pod.key(), error = %e, "cannot record an event");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plugins::test_util::pod;

    fn with_conditions(conditions: Value) -> Pod {
        let mut p = (*pod(json!({})).pod).clone();
        p.status = Some(serde_json::from_value(json!({"phase": "Pending", "conditions": conditions})).expect("status"));
        p
    }

    fn t(s: &str) -> Time {
        Time(s.parse().expect("timestamp"))
    }

    #[test]
    fn condition_patch_sets_unschedulable_once_and_keeps_other_conditions() {
        let now = t("2025-01-01T00:00:10Z");
        let fresh = with_conditions(json!([{"type": "Initialized", "status": "True"}]));
        let patch =
            unschedulable_condition_patch(&fresh, "0/1 nodes are available: 1 Too many pods.", &now).expect("a patch");
        let conds = &patch["status"]["conditions"];
        assert_eq!(conds[0]["type"], "Initialized");
        assert_eq!(conds[1]["reason"], "Unschedulable");
        assert_eq!(conds[1]["lastTransitionTime"], "2025-01-01T00:00:10Z");

        let same = with_conditions(json!([{"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
            "message": "m", "lastTransitionTime": "2025-01-01T00:00:00Z"}]));
        assert!(unschedulable_condition_patch(&same, "m", &now).is_none());
        let changed = unschedulable_condition_patch(&same, "m2", &now).expect("new message");
        assert_eq!(changed["status"]["conditions"][0]["lastTransitionTime"], "2025-01-01T00:00:00Z");
    }

    #[test]
    fn events_name_the_pod_and_the_reporting_scheduler() {
        let p = pod(json!({}));
        let ev = pod_event(&p, "default-scheduler", "Normal", "Scheduled", "m".into(), t("2025-01-01T00:00:00Z"));
        assert_eq!(ev.involved_object.name.as_deref(), Some("p"));
        assert_eq!(ev.metadata.namespace.as_deref(), Some("default"));
        assert!(ev.metadata.name.as_deref().is_some_and(|n| n.starts_with("p.")));
        assert_eq!(ev.source.and_then(|s| s.component).as_deref(), Some("default-scheduler"));
    }
}
