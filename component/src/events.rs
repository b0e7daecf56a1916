//! Records core/v1 Events about the objects controllers act on (best effort: failures are logged).

use k8s_openapi::api::core::v1::{Event, EventSource, ObjectReference};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use kube::api::{Api, PostParams};
use kube::Resource;

#[derive(Clone)]
pub struct Recorder {
    client: kube::Client,
    component: String,
}

impl Recorder {
    pub fn new(client: kube::Client, component: &str) -> Self {
        Self { client, component: component.to_string() }
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
        let api: Api<Event> = Api::namespaced(self.client.clone(), &namespace);
        if let Err(e) = api.create(&PostParams::default(), &event).await {
            tracing::warn!(reason, error = %e, "cannot record event");
        }
    }
}
