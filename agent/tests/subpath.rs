//! subPath as a tenant with no privileges would use it against the node (CVE-2017-1002101): a
//! symlink to `/` left in an emptyDir by an init container, then mounted through `subPath`, must
//! not give the next container the node's root; the pod fails with kubelet's reason and message
//! and the node's files are untouched. subPaths that stay inside the volume keep working.

mod common;

use common::{container, phase, Node};
use kube::api::DeleteParams;
use serde_json::json;

fn waiting(p: &k8s_openapi::api::core::v1::Pod, name: &str) -> Option<(String, String)> {
    let w = container(p, name)?.state.clone()?.waiting?;
    Some((w.reason.unwrap_or_default(), w.message.unwrap_or_default()))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_subpath_symlink_out_of_its_volume_fails_the_container_and_leaves_the_node_untouched() -> anyhow::Result<()> {
    common::require_root();
    let node = Node::start().await?;
    // A file the container would create on the node if the subPath reached the node's root.
    let marker = format!("kaji-subpath-escape-{}", std::process::id());
    let host_marker = std::path::Path::new("/tmp").join(&marker);
    let _ = std::fs::remove_file(&host_marker);
    node.pod("escape", json!({
        "restartPolicy": "Never",
        "volumes": [{"name": "work", "emptyDir": {}}],
        "initContainers": [{"name": "plant", "command": ["sh", "-c", "ln -s / /work/root && ln -s ../../../../../../../.. /work/up"],
            "volumeMounts": [{"name": "work", "mountPath": "/work"}]}],
        "containers": [{"name": "app", "command": ["sh", "-c", format!("touch /host/tmp/{marker}; cat /host/etc/hostname")],
            "securityContext": {"capabilities": {"drop": ["ALL"]}},
            "volumeMounts": [{"name": "work", "mountPath": "/host", "subPath": "root"}]},
            {"name": "up", "command": ["sh", "-c", format!("touch /host/tmp/{marker}")],
            "volumeMounts": [{"name": "work", "mountPath": "/host", "subPath": "up"}]}]
    })).await?;
    let p = node
        .wait_pod("escape", "refused to start its containers", |p| {
            ["app", "up"].iter().all(|c| waiting(p, c).is_some_and(|(r, _)| r == "CreateContainerConfigError"))
        })
        .await?;
    assert_eq!(
        waiting(&p, "app").map(|w| w.1).as_deref(),
        Some("failed to prepare subPath for volumeMount \"work\" of container \"app\""),
        "kubelet's message, nothing of the node's paths"
    );
    assert_eq!(
        waiting(&p, "up").map(|w| w.1).as_deref(),
        Some("failed to prepare subPath for volumeMount \"work\" of container \"up\"")
    );
    assert!(!host_marker.exists(), "the container wrote on the node");
    let events: kube::Api<k8s_openapi::api::core::v1::Event> = kube::Api::namespaced(node.client.clone(), "default");
    let evs = events.list(&Default::default()).await?;
    assert!(
        evs.items.iter().any(|e| e.reason.as_deref() == Some("Failed")
            && e.message.as_deref()
                == Some("Error: failed to prepare subPath for volumeMount \"work\" of container \"app\"")),
        "a Failed event on the pod"
    );

    // subPaths inside the volume: a directory made on demand, a relative symlink that stays in
    // the volume, a file, and subPathExpr from the container's environment.
    node.pod("inside", json!({
        "volumes": [{"name": "work", "emptyDir": {}}],
        "initContainers": [{"name": "prep", "command": ["sh", "-c",
            "mkdir -p /work/data/conf && echo hello > /work/data/conf/greeting && ln -s data/conf /work/link"],
            "volumeMounts": [{"name": "work", "mountPath": "/work"}]}],
        "containers": [{"name": "app",
            "command": ["sh", "-c", "cat /conf/greeting; cat /greeting; echo made > /new/x; echo mine > /mine/y; cat /work/made/by/kubelet/x /work/inside/y; echo done; exec sleep 3600"],
            "env": [{"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}],
            "volumeMounts": [
                {"name": "work", "mountPath": "/work"},
                {"name": "work", "mountPath": "/conf", "subPath": "link"},
                {"name": "work", "mountPath": "/greeting", "subPath": "data/conf/greeting"},
                {"name": "work", "mountPath": "/new", "subPath": "made/by/kubelet"},
                {"name": "work", "mountPath": "/mine", "subPathExpr": "$(POD_NAME)"}
            ]}]
    })).await?;
    node.wait_pod("inside", "Running", |p| phase(p) == "Running").await?;
    let mut log = String::new();
    for _ in 0..100 {
        log = node.get("/containerLogs/default/inside/app").await?.1;
        if log.contains("done") {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    assert_eq!(log, "hello\nhello\nmade\nmine\ndone\n");

    for name in ["escape", "inside"] {
        node.pods("default").delete(name, &DeleteParams::default().grace_period(1)).await?;
    }
    for name in ["escape", "inside"] {
        node.wait_gone(name).await?;
    }
    node.assert_nothing_left(std::time::Duration::from_secs(10)).await;
    assert!(!host_marker.exists());
    Ok(())
}
