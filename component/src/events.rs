//! Records core/v1 Events about the objects controllers act on (best effort: failures are logged).
//!
//! Recording never waits for the apiserver: events go into a queue that one background task
//! writes in order (as client-go's broadcaster does). A controller that recorded one event per
//! pod while awaiting each write spent most of a 1,000-pod scale-up on those writes.

use k8s_openapi::api::core::v1::{Event, EventSource, ObjectReference};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use kube::api::{Api, PostParams};
use kube::Resource;

#[derive(Clone)]
pub struct Recorder {
    component: String,
    queue: tokio::sync::mpsc::UnboundedSender<Event>,
}

impl Recorder {
    /// Starts the writer task (needs a tokio runtime); it ends when the last clone is dropped.
    pub fn new(client: kube::Client, component: &str) -> Self {
        let (queue, mut rx) = tokio::sync::mpsc::unbounded_channel::<Event>();
        tokio::spawn(async move {
            while let Some(event) = rx.recv().await {
                let namespace = event.metadata.namespace.clone().unwrap_or_else(|| "default".into());
                let api: Api<Event> = Api::namespaced(client.clone(), &namespace);
                if let Err(e) = api.create(&PostParams::default(), &event).await {
                    tracing::warn!(reason = ?event.reason, error = %e, "cannot record event");
                }
            }
        });
        Self { component: component.to_string(), queue }
    }

    pub async fn normal<K: Resource<DynamicType = ()>>(&self, obj: &K, reason: &str, message: String) {
        self.record(obj, "Normal", reason, message).await
    }

    pub async fn warning<K: Resource<DynamicType = ()>>(&self, obj: &K, reason: &str, message: String) {
        self.record(obj, "Warning", reason, message).await
    }

    async fn record<K: Resource<DynamicType = ()>>(&self, obj: &K, type_: &str, reason: &str, message: String) {
        let meta = obj.meta();
        let namespace = meta.namespace.clone().unwrap_or_else(|| "default".into());
        let name = meta.name.clone().unwrap_or_default();
        let now = jiff::Timestamp::now();
        let event = Event {
            metadata: ObjectMeta {
                name: Some(format!("{name}.{:016x}", fastrand::u64(..))),
                namespace: Some(namespace.clone()),
                ..ObjectMeta::default()
            },
            involved_object: ObjectReference {
                api_version: Some(K::api_version(&()).to_string()),
                kind: Some(K::kind(&()).to_string()),
                name: Some(name),
                namespace: meta.namespace.clone(),
                uid: meta.uid.clone(),
                resource_version: meta.resource_version.clone(),
                ..ObjectReference::default()
            },
            reason: Some(reason.to_string()),
            message: Some(message),
            type_: Some(type_.to_string()),
            count: Some(1),
            first_timestamp: Some(Time(now)),
            last_timestamp: Some(Time(now)),
            source: Some(EventSource { component: Some(self.component.clone()), host: None }),
            reporting_component: Some(self.component.clone()),
            ..Event::default()
        };
        if self.queue.send(event).is_err() {
            tracing::warn!(reason, "cannot record event: the event writer has stopped");
        }
    }
}
