//! `hostUsers: false` end to end, as root, against a real apiserver and the real agent: the pod
//! runs as root inside a user namespace of its own (65536 host ids from 65536 up, disjoint per
//! pod), which is nobody on the host; its rootfs and volumes are idmapped so it can write its
//! emptyDir and read its configMap and secret; a default pod is unchanged; the API refuses
//! hostUsers=false with hostNetwork as Kubernetes does.

mod common;

use std::os::unix::fs::PermissionsExt;

use common::{container, phase, Node, AGENT};
use k8s_openapi::api::core::v1::{ConfigMap, Pod, Secret};
use kaji_runtime::ContainerRuntime;
use kube::api::{Api, DeleteParams, PostParams};
use serde_json::json;

const SCRIPT: &str = "cat /proc/self/uid_map | tr -s ' ' | sed 's/^ //'; echo id=$(id -u); \
    echo written > /data/f && echo data=$(cat /data/f) $(stat -c %u /data/f); echo cm=$(cat /cm/k); \
    echo sec=$(cat /sec/s); echo rootfs=$(stat -c %u /bin/busybox); echo done; exec sleep 3600";

async fn log_of(node: &Node, pod: &str) -> anyhow::Result<String> {
    let mut log = String::new();
    for _ in 0..100 {
        let (code, body) = node.get(&format!("/containerLogs/default/{pod}/app")).await?;
        assert_eq!(code, 200, "{body}");
        log = body;
        if log.contains("done") {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    Ok(log)
}

/// The host uid of the pod's container process.
fn host_uid(node: &Node, p: &Pod) -> anyhow::Result<u32> {
    let id = container(p, "app").and_then(|c| c.container_id.clone()).unwrap_or_default();
    let id = id.strip_prefix("kaji://").unwrap_or(&id).to_string();
    let state = kaji_runtime::Native::new(node.config.runtime_dir(), AGENT).state(&id)?;
    let status = std::fs::read_to_string(format!("/proc/{}/status", state.pid))?;
    let uid = status.lines().find_map(|l| l.strip_prefix("Uid:")).unwrap_or_default();
    Ok(uid.split_whitespace().next().unwrap_or_default().parse()?)
}

fn pod_spec(host_users: Option<bool>) -> serde_json::Value {
    let mut spec = json!({
        "volumes": [
            {"name": "data", "emptyDir": {}},
            {"name": "cm", "configMap": {"name": "cfg"}},
            {"name": "sec", "secret": {"secretName": "sec"}}
        ],
        "containers": [{
            "name": "app", "command": ["sh", "-c", SCRIPT],
            "volumeMounts": [
                {"name": "data", "mountPath": "/data"},
                {"name": "cm", "mountPath": "/cm"},
                {"name": "sec", "mountPath": "/sec"}
            ]
        }]
    });
    if let Some(h) = host_users {
        spec["hostUsers"] = json!(h);
    }
    spec
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn host_users_false_pods_run_as_root_in_disjoint_user_namespaces() -> anyhow::Result<()> {
    scenario(Node::start().await?).await
}

/// The same with `--container-runtime runc`: runc 1.1 has no idmapped mounts, but kaji-runtime
/// makes them on the host before runc sees the bundle, and runc joins the pod's namespaces.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn host_users_false_pods_run_the_same_on_runc() -> anyhow::Result<()> {
    let mut node = Node::start().await?;
    let runc = ["/usr/sbin/runc", "/usr/bin/runc"].iter().map(std::path::PathBuf::from).find(|p| p.exists());
    node.stop_agent().await?;
    node.config.backend = kaji_agent::Backend::Runc(runc.expect("runc is installed (apt-get install -y runc)"));
    node.start_agent().await?;
    scenario(node).await
}

async fn scenario(mut node: Node) -> anyhow::Result<()> {
    // A node's root dir is usually 0755 (/var/lib); the test's temp dir is 0700.
    std::fs::set_permissions(node.dir.path(), std::fs::Permissions::from_mode(0o711))?;
    let cms: Api<ConfigMap> = Api::namespaced(node.client.clone(), "default");
    cms.create(
        &PostParams::default(),
        &serde_json::from_value(json!({"metadata": {"name": "cfg"}, "data": {"k": "v1"}}))?,
    )
    .await?;
    let secrets: Api<Secret> = Api::namespaced(node.client.clone(), "default");
    let secret = json!({"metadata": {"name": "sec"}, "stringData": {"s": "sekret"}});
    secrets.create(&PostParams::default(), &serde_json::from_value(secret)?).await?;

    // Refused by the API with Kubernetes' message.
    let mut bad = pod_spec(Some(false));
    bad["hostNetwork"] = json!(true);
    let err = node.pod("bad", bad).await.expect_err("hostUsers=false with hostNetwork is invalid");
    let msg = err.to_string();
    assert!(msg.contains("spec.hostNetwork: Forbidden: when `pod.Spec.HostUsers` is false"), "{msg}");

    node.pod("a", pod_spec(Some(false))).await?;
    node.pod("b", pod_spec(Some(false))).await?;
    node.pod("plain", pod_spec(None)).await?;
    let mut starts = Vec::new();
    for name in ["a", "b"] {
        let p = node.wait_pod(name, "Running", |p| phase(p) == "Running").await?;
        let log = log_of(&node, name).await?;
        let lines: Vec<&str> = log.lines().collect();
        let map: Vec<u64> = lines[0].split(' ').filter_map(|f| f.parse().ok()).collect();
        assert!(map.len() == 3 && map[0] == 0 && map[1] >= 65536 && map[2] == 65536, "{name}: {log}");
        assert_eq!(
            &lines[1..],
            ["id=0", "data=written 0", "cm=v1", "sec=sekret", "rootfs=0", "done"],
            "{name}: root inside, owning its rootfs and volumes"
        );
        assert_eq!(
            host_uid(&node, &p)? as u64,
            map[1],
            "{name}: the container's root is its range's start on the host"
        );
        starts.push(map[1]);
    }
    assert!(starts[0].abs_diff(starts[1]) >= 65536, "disjoint ranges: {starts:?}");
    let p = node.wait_pod("plain", "Running", |p| phase(p) == "Running").await?;
    let log = log_of(&node, "plain").await?;
    assert!(log.starts_with("0 0 4294967295\nid=0\n"), "a default pod is unchanged: {log}");
    assert_eq!(host_uid(&node, &p)?, 0);

    // The ranges are recorded in the pods' dirs: a restarted agent hands out neither again.
    node.stop_agent().await?;
    node.start_agent().await?;
    node.pod("c", pod_spec(Some(false))).await?;
    node.wait_pod("c", "Running", |p| phase(p) == "Running").await?;
    let log = log_of(&node, "c").await?;
    let c: u64 = log.split(' ').nth(1).unwrap_or_default().parse()?;
    assert!(c.abs_diff(starts[0]) >= 65536 && c.abs_diff(starts[1]) >= 65536, "{c} vs {starts:?}");
    // A deleted pod's range is free again. With a grace period the agent tears the pod down
    // before it is removed from the API.
    node.pods("default").delete("a", &DeleteParams::default().grace_period(1)).await?;
    node.wait_gone("a").await?;
    node.pod("d", pod_spec(Some(false))).await?;
    node.wait_pod("d", "Running", |p| phase(p) == "Running").await?;
    let log = log_of(&node, "d").await?;
    assert!(log.starts_with(&format!("0 {} 65536\n", starts[0])), "the freed range is handed out again: {log}");
    for name in ["b", "c", "d", "plain"] {
        node.pods("default").delete(name, &DeleteParams::default().grace_period(0)).await?;
    }
    for name in ["b", "c", "d", "plain"] {
        node.wait_gone(name).await?;
    }
    node.assert_nothing_left(std::time::Duration::from_secs(10)).await;
    Ok(())
}
