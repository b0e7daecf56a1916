//! The apiserver as kube-rs sees it: the client that kaji's own controllers, scheduler and
//! agent use must read, write, watch and get the same errors as against Kubernetes.

use anyhow::{bail, Context};
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams, WatchEvent, WatchParams};
use kube::runtime::watcher;
use kube::ResourceExt;
use serde_json::json;
use std::collections::BTreeMap;
use std::future::Future;
use std::time::Duration;

/// Every wait in this file is bounded by this, so a bug fails the test instead of hanging it.
const WAIT: Duration = Duration::from_secs(10);

/// An in-process apiserver on a free port over a fresh store, and a kube client for it.
struct Cluster {
    server: kaji_apiserver::Server,
    client: kube::Client,
    _data: tempfile::TempDir,
}

impl Cluster {
    async fn start() -> anyhow::Result<Self> {
        let data = tempfile::tempdir()?;
        let config = kaji_apiserver::Config::new("127.0.0.1:0".parse()?, data.path().to_path_buf());
        let server = kaji_apiserver::start(config).await?;
        let addr = server.addr;
        let client = kube::Client::try_from(kube::Config::new(format!("http://{addr}").parse()?))?;
        Ok(Self { server, client, _data: data })
    }

    fn api<K>(&self) -> Api<K>
    where
        K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope>,
        K::DynamicType: Default,
    {
        Api::namespaced(self.client.clone(), "default")
    }

    async fn stop(self) -> anyhow::Result<()> {
        within(self.server.shutdown()).await?
    }
}

async fn within<T>(fut: impl Future<Output = T>) -> anyhow::Result<T> {
    tokio::time::timeout(WAIT, fut).await.context("timed out waiting for the apiserver")
}

fn pod(name: &str, labels: &[(&str, &str)]) -> anyhow::Result<Pod> {
    let labels: BTreeMap<&str, &str> = labels.iter().copied().collect();
    Ok(serde_json::from_value(json!({
        "metadata": {"name": name, "labels": labels},
        "spec": {"containers": [{"name": "app", "image": "registry.example/app:1"}]},
    }))?)
}

fn config_map(name: &str, value: &str) -> anyhow::Result<ConfigMap> {
    Ok(serde_json::from_value(json!({"metadata": {"name": name}, "data": {"key": value}}))?)
}

fn deployment(name: &str, replicas: i32) -> anyhow::Result<Deployment> {
    Ok(serde_json::from_value(json!({
        "metadata": {"name": name},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {"containers": [{"name": "app", "image": "registry.example/app:1"}]},
            },
        },
    }))?)
}

/// The Status inside a failed call, or a test failure naming what came back instead.
fn api_status<T: std::fmt::Debug>(result: Result<T, kube::Error>) -> anyhow::Result<kube::core::Status> {
    match result {
        Err(kube::Error::Api(status)) => Ok(*status),
        Err(other) => bail!("expected an API error Status, got {other}"),
        Ok(value) => bail!("expected an API error, the call succeeded with {value:?}"),
    }
}

fn names<K: kube::Resource>(items: &[K]) -> Vec<String> {
    let mut names: Vec<String> = items.iter().map(|o| o.meta().name.clone().unwrap_or_default()).collect();
    names.sort();
    names
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn created_objects_read_back_with_server_set_metadata() -> anyhow::Result<()> {
    let cluster = Cluster::start().await?;
    let pods: Api<Pod> = cluster.api();
    let deployments: Api<Deployment> = cluster.api();
    let config_maps: Api<ConfigMap> = cluster.api();

    let created = within(pods.create(&PostParams::default(), &pod("web", &[("app", "web")])?)).await??;
    within(deployments.create(&PostParams::default(), &deployment("api", 2)?)).await??;
    within(config_maps.create(&PostParams::default(), &config_map("settings", "on")?)).await??;

    let got = within(pods.get("web")).await??;
    assert!(got.uid().is_some_and(|u| !u.is_empty()), "a created pod has a uid");
    assert!(got.resource_version().is_some_and(|v| !v.is_empty()), "a created pod has a resourceVersion");
    assert!(got.creation_timestamp().is_some(), "a created pod has a creationTimestamp");
    assert_eq!(got.uid(), created.uid(), "get returns the object create made");
    assert_eq!(got.namespace().as_deref(), Some("default"));
    assert_eq!(got.labels().get("app").map(String::as_str), Some("web"));
    let image = got.spec.as_ref().and_then(|s| s.containers.first()).and_then(|c| c.image.clone());
    assert_eq!(image.as_deref(), Some("registry.example/app:1"));

    let got = within(deployments.get("api")).await??;
    assert_eq!(got.spec.replicas, Some(2));
    assert_eq!(got.metadata.generation, Some(1), "a new deployment is at generation 1");

    let got = within(config_maps.get("settings")).await??;
    assert_eq!(got.data.as_ref().and_then(|d| d.get("key")).map(String::as_str), Some("on"));

    let again = api_status(within(config_maps.create(&PostParams::default(), &config_map("settings", "off")?)).await?)?;
    assert_eq!((again.code, again.reason.as_str()), (409, "AlreadyExists"));
    cluster.stop().await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn list_returns_only_objects_matching_the_label_and_field_selectors() -> anyhow::Result<()> {
    let cluster = Cluster::start().await?;
    let pods: Api<Pod> = cluster.api();
    for (name, app, tier) in [("web-1", "web", "front"), ("web-2", "web", "back"), ("db-1", "db", "back")] {
        within(pods.create(&PostParams::default(), &pod(name, &[("app", app), ("tier", tier)])?)).await??;
    }

    let web = within(pods.list(&ListParams::default().labels("app=web"))).await??;
    assert_eq!(names(&web.items), ["web-1", "web-2"]);
    let back_web = within(pods.list(&ListParams::default().labels("app=web,tier=back"))).await??;
    assert_eq!(names(&back_web.items), ["web-2"]);
    let not_web = within(pods.list(&ListParams::default().labels("app notin (web)"))).await??;
    assert_eq!(names(&not_web.items), ["db-1"]);

    let by_name = within(pods.list(&ListParams::default().fields("metadata.name=web-1"))).await??;
    assert_eq!(names(&by_name.items), ["web-1"]);
    let unscheduled = within(pods.list(&ListParams::default().fields("spec.nodeName=").labels("tier=back"))).await??;
    assert_eq!(names(&unscheduled.items), ["db-1", "web-2"]);
    let others = within(pods.list(&ListParams::default().fields("metadata.name!=web-1"))).await??;
    assert_eq!(names(&others.items), ["db-1", "web-2"]);

    assert!(
        web.metadata.resource_version.is_some_and(|v| !v.is_empty()),
        "a list carries a resourceVersion to watch from"
    );
    cluster.stop().await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replace_with_a_stale_resource_version_is_a_conflict() -> anyhow::Result<()> {
    let cluster = Cluster::start().await?;
    let config_maps: Api<ConfigMap> = cluster.api();
    let original = within(config_maps.create(&PostParams::default(), &config_map("settings", "v1")?)).await??;

    let mut first = original.clone();
    first.data = Some(BTreeMap::from([("key".to_string(), "v2".to_string())]));
    let updated = within(config_maps.replace("settings", &PostParams::default(), &first)).await??;
    assert_ne!(updated.resource_version(), original.resource_version(), "an update moves the resourceVersion");

    let mut stale = original.clone();
    stale.data = Some(BTreeMap::from([("key".to_string(), "lost".to_string())]));
    let status = api_status(within(config_maps.replace("settings", &PostParams::default(), &stale)).await?)?;
    assert_eq!((status.code, status.reason.as_str()), (409, "Conflict"));
    let current = within(config_maps.get("settings")).await??;
    assert_eq!(
        current.data.as_ref().and_then(|d| d.get("key")).map(String::as_str),
        Some("v2"),
        "a conflict writes nothing"
    );

    let mut fresh = current.clone();
    fresh.data = Some(BTreeMap::from([("key".to_string(), "v3".to_string())]));
    within(config_maps.replace("settings", &PostParams::default(), &fresh)).await??;
    let current = within(config_maps.get("settings")).await??;
    assert_eq!(current.data.as_ref().and_then(|d| d.get("key")).map(String::as_str), Some("v3"));
    cluster.stop().await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pod_status_changes_only_through_the_status_subresource() -> anyhow::Result<()> {
    let cluster = Cluster::start().await?;
    let pods: Api<Pod> = cluster.api();
    within(pods.create(&PostParams::default(), &pod("web", &[])?)).await??;

    let status_patch = json!({"status": {"phase": "Running", "podIP": "10.244.0.7"}});
    let patched = within(pods.patch_status("web", &PatchParams::default(), &Patch::Merge(&status_patch))).await??;
    let phase = |p: &Pod| p.status.as_ref().and_then(|s| s.phase.clone());
    assert_eq!(phase(&patched).as_deref(), Some("Running"));
    let got = within(pods.get("web")).await??;
    assert_eq!(phase(&got).as_deref(), Some("Running"));
    assert_eq!(got.status.as_ref().and_then(|s| s.pod_ip.clone()).as_deref(), Some("10.244.0.7"));

    let main_patch = json!({"metadata": {"labels": {"seen": "yes"}}, "status": {"phase": "Failed"}});
    within(pods.patch("web", &PatchParams::default(), &Patch::Merge(&main_patch))).await??;
    let got = within(pods.get("web")).await??;
    assert_eq!(got.labels().get("seen").map(String::as_str), Some("yes"), "the rest of the patch applies");
    assert_eq!(phase(&got).as_deref(), Some("Running"), "status sent to the main resource is ignored");

    let mut replaced = got.clone();
    replaced.status.get_or_insert_with(Default::default).phase = Some("Succeeded".into());
    within(pods.replace("web", &PostParams::default(), &replaced)).await??;
    let got = within(pods.get("web")).await??;
    assert_eq!(phase(&got).as_deref(), Some("Running"), "status in a replace of the main resource is ignored");
    cluster.stop().await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleting_an_unscheduled_pod_removes_it_at_once() -> anyhow::Result<()> {
    let cluster = Cluster::start().await?;
    let pods: Api<Pod> = cluster.api();
    within(pods.create(&PostParams::default(), &pod("web", &[])?)).await??;

    let deleted = within(pods.delete("web", &DeleteParams::default())).await??;
    let deleted = deleted.left().context("deleting a pod answers with the pod, as Kubernetes does")?;
    assert_eq!(deleted.name_any(), "web");
    let status = api_status(within(pods.get("web")).await?)?;
    assert_eq!((status.code, status.reason.as_str()), (404, "NotFound"));
    assert!(within(pods.get_opt("web")).await??.is_none());
    let status = api_status(within(pods.delete("web", &DeleteParams::default())).await?)?;
    assert_eq!((status.code, status.reason.as_str()), (404, "NotFound"), "a second delete finds nothing");
    cluster.stop().await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleting_a_config_map_answers_with_a_success_status() -> anyhow::Result<()> {
    let cluster = Cluster::start().await?;
    let config_maps: Api<ConfigMap> = cluster.api();
    let created = within(config_maps.create(&PostParams::default(), &config_map("settings", "on")?)).await??;

    let answer = within(config_maps.delete("settings", &DeleteParams::default())).await??;
    assert!(within(config_maps.get_opt("settings")).await??.is_none(), "the config map is gone");
    // Kubernetes returns the object only for resources with ReturnDeletedObject (pods,
    // services, namespaces); for config maps it answers a Success Status.
    let status = answer.right().context("deleting a config map answers with a Status, not the object")?;
    assert!(status.is_success(), "the Status says Success: {status:?}");
    let details = status.details.context("the Status names what was deleted")?;
    assert_eq!((details.name.as_str(), details.kind.as_str()), ("settings", "configmaps"));
    assert_eq!(Some(details.uid.as_str()), created.uid().as_deref());
    cluster.stop().await
}

/// The next event that is not a bookmark, within `WAIT`.
async fn next_event<S>(stream: &mut S) -> anyhow::Result<WatchEvent<ConfigMap>>
where
    S: futures::Stream<Item = Result<WatchEvent<ConfigMap>, kube::Error>> + Unpin,
{
    loop {
        match within(stream.try_next()).await?? {
            Some(WatchEvent::Bookmark(_)) => continue,
            Some(event) => return Ok(event),
            None => bail!("the watch ended early"),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watch_reports_changes_made_after_it_starts_in_order() -> anyhow::Result<()> {
    let cluster = Cluster::start().await?;
    let config_maps: Api<ConfigMap> = cluster.api();
    within(config_maps.create(&PostParams::default(), &config_map("before", "old")?)).await??;
    let list = within(config_maps.list(&ListParams::default())).await??;
    let from = list.metadata.resource_version.unwrap_or_default();

    let mut events = within(config_maps.watch(&WatchParams::default().timeout(30), &from)).await??.boxed();
    within(config_maps.create(&PostParams::default(), &config_map("settings", "v1")?)).await??;
    let merge = json!({"data": {"key": "v2"}});
    within(config_maps.patch("settings", &PatchParams::default(), &Patch::Merge(&merge))).await??;
    within(config_maps.delete("settings", &DeleteParams::default())).await??;

    let value = |c: &ConfigMap| c.data.as_ref().and_then(|d| d.get("key")).cloned();
    match next_event(&mut events).await? {
        WatchEvent::Added(c) => assert_eq!((c.name_any(), value(&c)), ("settings".into(), Some("v1".into()))),
        other => {
            bail!("expected ADDED settings first (nothing from before the watch), got {other:?}")
        }
    }
    match next_event(&mut events).await? {
        WatchEvent::Modified(c) => assert_eq!((c.name_any(), value(&c)), ("settings".into(), Some("v2".into()))),
        other => bail!("expected MODIFIED settings, got {other:?}"),
    }
    match next_event(&mut events).await? {
        WatchEvent::Deleted(c) => assert_eq!(c.name_any(), "settings"),
        other => bail!("expected DELETED settings, got {other:?}"),
    }
    cluster.stop().await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_runtime_watcher_lists_then_follows_changes() -> anyhow::Result<()> {
    let cluster = Cluster::start().await?;
    let config_maps: Api<ConfigMap> = cluster.api();
    within(config_maps.create(&PostParams::default(), &config_map("before", "old")?)).await??;

    let mut events = watcher(config_maps.clone(), watcher::Config::default()).boxed();
    let mut initial = Vec::new();
    loop {
        match within(events.try_next()).await?? {
            Some(watcher::Event::Init) => {}
            Some(watcher::Event::InitApply(c)) => initial.push(c.name_any()),
            Some(watcher::Event::InitDone) => break,
            other => bail!("expected the initial list, got {other:?}"),
        }
    }
    assert_eq!(initial, ["before"], "the initial list holds what existed before the watcher");

    within(config_maps.create(&PostParams::default(), &config_map("settings", "v1")?)).await??;
    match within(events.try_next()).await?? {
        Some(watcher::Event::Apply(c)) => assert_eq!(c.name_any(), "settings"),
        other => bail!("expected an Apply of the new config map, got {other:?}"),
    }
    within(config_maps.delete("settings", &DeleteParams::default())).await??;
    match within(events.try_next()).await?? {
        Some(watcher::Event::Delete(c)) => assert_eq!(c.name_any(), "settings"),
        other => bail!("expected a Delete of the config map, got {other:?}"),
    }
    drop(events);
    cluster.stop().await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_invalid_pod_is_rejected_with_the_field_at_fault() -> anyhow::Result<()> {
    let cluster = Cluster::start().await?;
    let pods: Api<Pod> = cluster.api();
    let no_image: Pod = serde_json::from_value(json!({
        "metadata": {"name": "broken"},
        "spec": {"containers": [{"name": "app"}]},
    }))?;

    let status = api_status(within(pods.create(&PostParams::default(), &no_image)).await?)?;
    assert_eq!((status.code, status.reason.as_str()), (422, "Invalid"));
    let causes = status.details.map(|d| d.causes).unwrap_or_default();
    assert!(
        causes.iter().any(|c| c.field == "spec.containers[0].image"),
        "the causes name the missing image, got {causes:?}"
    );
    assert!(status.message.contains("broken"), "the message names the pod: {}", status.message);
    assert!(within(pods.get_opt("broken")).await??.is_none(), "an invalid pod is not stored");
    cluster.stop().await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deployment_scale_subresource_reads_and_sets_replicas() -> anyhow::Result<()> {
    let cluster = Cluster::start().await?;
    let deployments: Api<Deployment> = cluster.api();
    within(deployments.create(&PostParams::default(), &deployment("api", 2)?)).await??;

    let scale = within(deployments.get_scale("api")).await??;
    assert_eq!(scale.metadata.name.as_deref(), Some("api"));
    assert_eq!(scale.spec.and_then(|s| s.replicas), Some(2));

    let patch = json!({"spec": {"replicas": 5}});
    let scaled = within(deployments.patch_scale("api", &PatchParams::default(), &Patch::Merge(&patch))).await??;
    assert_eq!(scaled.spec.and_then(|s| s.replicas), Some(5));
    let got = within(deployments.get("api")).await??;
    assert_eq!(got.spec.replicas, Some(5), "scaling changes the deployment");
    assert_eq!(got.metadata.generation, Some(2), "a scale is a spec change");
    cluster.stop().await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_agent_creates_and_renews_its_lease() -> anyhow::Result<()> {
    let cluster = Cluster::start().await?;
    let leases: Api<Lease> = Api::namespaced(cluster.client.clone(), "kube-node-lease");
    let first = MicroTime("2023-11-14T22:13:20.123456Z".parse()?);
    let lease: Lease = serde_json::from_value(json!({
        "metadata": {"name": "node-1"},
        "spec": {"holderIdentity": "node-1", "leaseDurationSeconds": 40, "renewTime": first},
    }))?;
    let created = within(leases.create(&PostParams::default(), &lease)).await??;
    let renew_time = |l: &Lease| l.spec.as_ref().and_then(|s| s.renew_time.clone());
    assert_eq!(renew_time(&created), Some(first.clone()), "renewTime keeps its microseconds");

    // The agent's loop: keep the last lease it wrote and replace it with a new renewTime.
    let later = MicroTime("2023-11-14T22:13:30.654321Z".parse()?);
    let mut renewal = created.clone();
    renewal.spec.get_or_insert_with(Default::default).renew_time = Some(later.clone());
    let renewed = within(leases.replace("node-1", &PostParams::default(), &renewal)).await??;
    assert_eq!(renew_time(&renewed), Some(later.clone()));
    let got = within(leases.get("node-1")).await??;
    assert_eq!(renew_time(&got), Some(later));
    assert_eq!(got.spec.as_ref().and_then(|s| s.holder_identity.clone()).as_deref(), Some("node-1"));

    let status = api_status(within(leases.replace("node-1", &PostParams::default(), &renewal)).await?)?;
    assert_eq!((status.code, status.reason.as_str()), (409, "Conflict"), "a renewal from a stale copy conflicts");
    cluster.stop().await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn generate_name_gives_each_object_its_own_name() -> anyhow::Result<()> {
    let cluster = Cluster::start().await?;
    let pods: Api<Pod> = cluster.api();
    let mut template = pod("", &[])?;
    template.metadata.name = None;
    template.metadata.generate_name = Some("web-".into());

    let a = within(pods.create(&PostParams::default(), &template)).await??.name_any();
    let b = within(pods.create(&PostParams::default(), &template)).await??.name_any();
    for name in [&a, &b] {
        assert!(
            name.starts_with("web-") && name.len() == "web-".len() + 5,
            "a generated name is the prefix and 5 characters: {name}"
        );
    }
    assert_ne!(a, b);
    let listed = within(pods.list(&ListParams::default())).await??;
    let mut expected = vec![a, b];
    expected.sort();
    assert_eq!(names(&listed.items), expected, "both generated pods are stored under their names");
    cluster.stop().await
}
