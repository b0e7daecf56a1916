//! The agent against a real apiserver and a real registry, as root: pods run in real
//! namespaces and cgroups, restart as their policy says, show their state through the API,
//! survive an agent restart, and leave nothing behind when deleted.

mod common;

use common::{container, phase, Node};
use k8s_openapi::api::core::v1::{ConfigMap, Node as KNode, Secret};
use kube::api::{Api, DeleteParams, PostParams};
use serde_json::json;

fn state_reason(p: &k8s_openapi::api::core::v1::Pod, name: &str) -> Option<String> {
    let st = container(p, name)?.state.clone()?;
    st.waiting.and_then(|w| w.reason).or(st.terminated.and_then(|t| t.reason))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pod_runs_with_init_containers_env_volumes_and_logs_then_leaves_nothing() -> anyhow::Result<()> {
    let node = Node::start().await?;
    let n: KNode = Api::all(node.client.clone()).get(&node.config.node_name).await?;
    let status = n.status.clone().unwrap_or_default();
    let ready = status.conditions.iter().flatten().find(|c| c.type_ == "Ready").map(|c| c.status.clone());
    assert_eq!(ready.as_deref(), Some("True"), "the node registers Ready");
    assert!(status.allocatable.as_ref().is_some_and(|a| a.contains_key("cpu") && a.contains_key("memory")));
    assert_eq!(status.node_info.map(|i| i.operating_system), Some("linux".to_string()));

    let cms: Api<ConfigMap> = Api::namespaced(node.client.clone(), "default");
    cms.create(
        &PostParams::default(),
        &serde_json::from_value(json!({
            "metadata": {"name": "cfg"}, "data": {"greeting": "from-configmap", "file.txt": "file-content"}
        }))?,
    )
    .await?;
    let secrets: Api<Secret> = Api::namespaced(node.client.clone(), "default");
    secrets
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({
                "metadata": {"name": "sec"}, "stringData": {"password": "sekret"}
            }))?,
        )
        .await?;

    node.pod("web", json!({
        "volumes": [
            {"name": "work", "emptyDir": {}},
            {"name": "cfg", "configMap": {"name": "cfg", "items": [{"key": "file.txt", "path": "conf/file.txt"}]}},
            {"name": "info", "downwardAPI": {"items": [{"path": "labels", "fieldRef": {"fieldPath": "metadata.name"}}]}}
        ],
        "initContainers": [
            {"name": "first", "command": ["sh", "-c", "echo first >> /work/order"], "volumeMounts": [{"name": "work", "mountPath": "/work"}]},
            {"name": "second", "command": ["sh", "-c", "echo second >> /work/order"], "volumeMounts": [{"name": "work", "mountPath": "/work"}]}
        ],
        "containers": [{
            "name": "app",
            "command": ["sh", "-c", "cat /work/order; echo \"greeting=$GREETING pod=$POD_NAME pw=$PW msg=$MSG\"; cat /cfg/conf/file.txt; echo; cat /info/labels; echo; echo ksh=$KUBERNETES_SERVICE_HOST:$KUBERNETES_SERVICE_PORT; echo host=$(hostname); echo err >&2; exec sleep 3600"],
            "env": [
                {"name": "GREETING", "valueFrom": {"configMapKeyRef": {"name": "cfg", "key": "greeting"}}},
                {"name": "PW", "valueFrom": {"secretKeyRef": {"name": "sec", "key": "password"}}},
                {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
                {"name": "MSG", "value": "hi-$(POD_NAME)"}
            ],
            "volumeMounts": [
                {"name": "work", "mountPath": "/work"},
                {"name": "cfg", "mountPath": "/cfg", "readOnly": true},
                {"name": "info", "mountPath": "/info"}
            ]
        }]
    })).await?;
    let p = node
        .wait_pod("web", "Running and Ready", |p| phase(p) == "Running" && container(p, "app").is_some_and(|c| c.ready))
        .await?;
    for init in ["first", "second"] {
        assert_eq!(state_reason(&p, init).as_deref(), Some("Completed"), "init container {init}");
    }
    let app = container(&p, "app").expect("app status");
    assert!(app.container_id.as_deref().is_some_and(|id| id.starts_with("kaji://")));
    assert!(app.image_id.contains("@sha256:"), "imageID is repo@digest: {}", app.image_id);
    let st = p.status.clone().unwrap_or_default();
    assert_eq!(st.host_ip.as_deref(), Some("127.0.0.1"));
    let conds: Vec<(String, String)> =
        st.conditions.iter().flatten().map(|c| (c.type_.clone(), c.status.clone())).collect();
    for t in ["Initialized", "ContainersReady", "Ready", "PodScheduled"] {
        assert!(conds.contains(&(t.to_string(), "True".to_string())), "{t} True in {conds:?}");
    }

    // The log, through the agent's server, as kubectl logs would show it: wait for the last
    // line of each stream, as stdout and stderr reach the log through separate pipes ("err"
    // may land after "host=" was already there).
    let mut log = String::new();
    for _ in 0..50 {
        let (code, body) = node.get("/containerLogs/default/web/app").await?;
        assert_eq!(code, 200, "{body}");
        log = body;
        if log.contains("host=") && log.lines().any(|l| l == "err") {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    let lines: Vec<&str> = log.lines().collect();
    assert_eq!(&lines[..2], ["first", "second"], "init containers ran in order: {log}");
    assert!(log.contains("greeting=from-configmap pod=web pw=sekret msg=hi-web"), "{log}");
    assert!(log.contains("file-content") && log.contains("host=web") && log.contains("err"), "{log}");
    let ksh = lines.iter().find_map(|l| l.strip_prefix("ksh=")).unwrap_or_default();
    assert!(ksh.starts_with("10.") && ksh.ends_with(":443"), "service links for the kubernetes Service: {log}");
    let (_, tail) = node.get("/containerLogs/default/web/app?tailLines=1&timestamps=true").await?;
    assert_eq!(tail.lines().count(), 1);
    // The last line written (stdout and stderr are pumped separately, so either may be last),
    // with its RFC 3339 timestamp.
    let (ts, text) = tail.trim_end().split_once(' ').unwrap_or_default();
    assert!(ts.parse::<jiff::Timestamp>().is_ok() && (text == "host=web" || text == "err"), "{tail}");
    let (code, _) = node.get("/containerLogs/default/web/nope").await?;
    assert_eq!(code, 400);
    let (code, pods) = node.get("/pods").await?;
    assert!(code == 200 && pods.contains("\"web\""), "{pods}");
    let (_, stats) = node.get("/stats/summary").await?;
    let stats: serde_json::Value = serde_json::from_str(&stats)?;
    let mem = &stats["pods"][0]["containers"][0]["memory"]["usageBytes"];
    assert!(mem.as_u64().is_some_and(|m| m > 0), "memory usage from the cgroup: {stats}");

    node.pods("default").delete("web", &DeleteParams::default().grace_period(1)).await?;
    node.wait_gone("web").await?;
    assert_eq!(node.leftovers(), Vec::<String>::new(), "nothing left after deletion");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restart_policies_back_off_and_oom_kills_show_in_the_status() -> anyhow::Result<()> {
    let node = Node::start().await?;
    node.pod(
        "never",
        json!({"restartPolicy": "Never", "containers": [{"name": "c", "command": ["sh", "-c", "exit 3"]}]}),
    )
    .await?;
    node.pod("onfailure", json!({"restartPolicy": "OnFailure", "containers": [{"name": "c", "command": ["true"]}]}))
        .await?;
    node.pod("always", json!({"containers": [{"name": "c", "command": ["sh", "-c", "exit 1"]}]})).await?;
    node.pod(
        "oom",
        json!({"containers": [{"name": "c",
        "command": ["sh", "-c", "exec dd if=/dev/zero of=/dev/null bs=64M count=1"],
        "resources": {"limits": {"memory": "16Mi"}}}]}),
    )
    .await?;
    node.pod(
        "missing-image",
        json!({"containers": [{"name": "c", "image": format!("{}/kaji/nope:1", node.registry.addr)}]}),
    )
    .await?;
    node.pod("bad-command", json!({"containers": [{"name": "c", "command": ["/no/such/binary"]}]})).await?;
    node.pod(
        "bad-config",
        json!({"containers": [{"name": "c", "command": ["true"],
        "env": [{"name": "X", "valueFrom": {"configMapKeyRef": {"name": "absent", "key": "k"}}}]}]}),
    )
    .await?;

    // A followed log streams lines as they are written and ends when the container exits.
    node.pod(
        "talker",
        json!({"restartPolicy": "Never",
        "containers": [{"name": "c", "command": ["sh", "-c", "echo one; sleep 1; echo two"]}]}),
    )
    .await?;
    // Started: a follow from then on gets both lines, while they are written or (on a slow
    // machine that reported Running late) after the container already exited.
    node.wait_pod("talker", "started", |p| ["Running", "Succeeded"].contains(&phase(p))).await?;
    let (code, followed) = node.get("/containerLogs/default/talker/c?follow=true").await?;
    assert_eq!((code, followed.as_str()), (200, "one\ntwo\n"));
    node.wait_pod("talker", "Succeeded", |p| phase(p) == "Succeeded").await?;
    node.pods("default").delete("talker", &DeleteParams::default().grace_period(0)).await?;
    node.wait_gone("talker").await?;

    let p = node.wait_pod("never", "Failed", |p| phase(p) == "Failed").await?;
    let t = container(&p, "c").and_then(|c| c.state.clone()).and_then(|s| s.terminated).expect("terminated");
    assert_eq!((t.exit_code, t.reason.as_deref()), (3, Some("Error")));
    assert_eq!(container(&p, "c").map(|c| c.restart_count), Some(0), "Never does not restart");
    node.wait_pod("onfailure", "Succeeded", |p| phase(p) == "Succeeded").await?;
    let p = node
        .wait_pod("always", "crash-looping", |p| {
            state_reason(p, "c").as_deref() == Some("CrashLoopBackOff")
                && container(p, "c").is_some_and(|c| c.restart_count >= 1)
        })
        .await?;
    assert_eq!(phase(&p), "Running", "Always keeps the pod Running while it restarts");
    let last = container(&p, "c").and_then(|c| c.last_state.clone()).and_then(|s| s.terminated).expect("last state");
    assert_eq!(last.exit_code, 1);
    let p = node
        .wait_pod("oom", "OOM-killed and restarted", |p| {
            container(p, "c").is_some_and(|c| {
                c.restart_count >= 1
                    && c.last_state.as_ref().and_then(|s| s.terminated.as_ref()).and_then(|t| t.reason.as_deref())
                        == Some("OOMKilled")
            })
        })
        .await?;
    let last = container(&p, "c").and_then(|c| c.last_state.clone()).and_then(|s| s.terminated).expect("last state");
    assert_eq!(last.exit_code, 137);
    let p = node
        .wait_pod("missing-image", "ErrImagePull", |p| {
            matches!(state_reason(p, "c").as_deref(), Some("ErrImagePull" | "ImagePullBackOff"))
        })
        .await?;
    let msg = container(&p, "c")
        .and_then(|c| c.state.clone())
        .and_then(|s| s.waiting)
        .and_then(|w| w.message)
        .unwrap_or_default();
    assert!(msg.contains("kaji/nope:1") && msg.contains("manifest unknown"), "{msg}");
    let p = node
        .wait_pod("bad-command", "CreateContainerError", |p| {
            state_reason(p, "c").as_deref() == Some("CreateContainerError")
        })
        .await?;
    let msg = container(&p, "c")
        .and_then(|c| c.state.clone())
        .and_then(|s| s.waiting)
        .and_then(|w| w.message)
        .unwrap_or_default();
    assert!(msg.contains("/no/such/binary"), "{msg}");
    let p = node
        .wait_pod("bad-config", "CreateContainerConfigError", |p| {
            state_reason(p, "c").as_deref() == Some("CreateContainerConfigError")
        })
        .await?;
    let msg = container(&p, "c")
        .and_then(|c| c.state.clone())
        .and_then(|s| s.waiting)
        .and_then(|w| w.message)
        .unwrap_or_default();
    assert_eq!(msg, "configmap \"absent\" not found");

    for name in ["never", "onfailure", "always", "oom", "missing-image", "bad-command", "bad-config"] {
        node.pods("default").delete(name, &DeleteParams::default().grace_period(0)).await?;
    }
    for name in ["never", "onfailure", "always", "oom", "missing-image", "bad-command", "bad-config"] {
        node.wait_gone(name).await?;
    }
    node.assert_nothing_left(2 * common::WAIT).await; // seven pods torn down at once on a loaded machine
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn containers_survive_an_agent_restart_and_deletion_honours_the_grace_period() -> anyhow::Result<()> {
    let mut node = Node::start().await?;
    let host = node.dir.path().join("host");
    std::fs::create_dir_all(&host)?;
    let script = "trap 'echo got-term > /host/term; exit 0' TERM; echo started; while true; do sleep 0.1; done";
    node.pod("keeper", json!({
        "terminationGracePeriodSeconds": 10,
        "volumes": [{"name": "host", "hostPath": {"path": host, "type": "Directory"}}],
        "containers": [{"name": "c", "command": ["sh", "-c", script], "volumeMounts": [{"name": "host", "mountPath": "/host"}]}]
    })).await?;
    node.pod("orphan", json!({"containers": [{"name": "c", "command": ["sleep", "3600"]}]})).await?;
    let before = node.wait_pod("keeper", "Running", |p| phase(p) == "Running").await?;
    node.wait_pod("orphan", "Running", |p| phase(p) == "Running").await?;
    let id_before = container(&before, "c").and_then(|c| c.container_id.clone()).expect("container id");

    // The agent goes away; the pod named orphan is deleted meanwhile.
    node.stop_agent().await?;
    node.pods("default").delete("orphan", &DeleteParams::default().grace_period(0)).await?;
    node.wait_gone("orphan").await?;
    let running = std::fs::read_dir(node.config.runtime_dir())?.count();
    assert!(running >= 2, "containers keep running without the agent");
    node.start_agent().await?;

    // Re-adopted: same container, no restart, no duplicate; the orphan's containers are gone.
    tokio::time::sleep(std::time::Duration::from_secs(2)).await;
    let after = node.wait_pod("keeper", "Running", |p| phase(p) == "Running").await?;
    let c = container(&after, "c").expect("status");
    assert_eq!(c.container_id.as_deref(), Some(id_before.as_str()), "the same container keeps running");
    assert_eq!(c.restart_count, 0);
    let deadline = tokio::time::Instant::now() + common::WAIT;
    let keeper_uid = node.pods("default").get("keeper").await?.metadata.uid.unwrap_or_default();
    loop {
        let dirs: Vec<String> = std::fs::read_dir(node.config.pods_dir())?
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect();
        if dirs == [keeper_uid.clone()] {
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "orphaned pod not cleaned up: {dirs:?}");
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    assert_eq!(std::fs::read_dir(node.config.containers_dir())?.count(), 1, "no duplicate containers");

    // Graceful deletion: the container gets SIGTERM and exits on its own within the grace period.
    node.pods("default").delete("keeper", &DeleteParams::default()).await?;
    node.wait_gone("keeper").await?;
    assert_eq!(std::fs::read_to_string(host.join("term"))?.trim(), "got-term");
    assert_eq!(node.leftovers(), Vec::<String>::new());
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn probes_gate_readiness_and_restart_unhealthy_containers() -> anyhow::Result<()> {
    let node = Node::start().await?;
    // Serves only after a delay: Running first, Ready only once the HTTP probe answers.
    node.pod(
        "web",
        json!({"containers": [{"name": "c",
        "command": ["sh", "-c", "mkdir -p /www; echo ok > /www/index.html; sleep 2; exec httpd -f -p 8080 -h /www"],
        "ports": [{"name": "http", "containerPort": 8080}],
        "readinessProbe": {"httpGet": {"path": "/index.html", "port": "http"}, "periodSeconds": 1}}]}),
    )
    .await?;
    // Nothing listens on 9: liveness fails, the container is killed and restarted.
    node.pod(
        "sick",
        json!({"terminationGracePeriodSeconds": 1, "containers": [{"name": "c",
        "command": ["sleep", "3600"],
        "livenessProbe": {"tcpSocket": {"port": 9}, "periodSeconds": 1, "failureThreshold": 2}}]}),
    )
    .await?;

    let running = node.wait_pod("web", "Running", |p| phase(p) == "Running").await?;
    assert_eq!(container(&running, "c").map(|c| c.ready), Some(false), "not ready before the probe passes");
    node.wait_pod("web", "Ready", |p| container(p, "c").is_some_and(|c| c.ready)).await?;
    let p = node.wait_pod("sick", "restarted", |p| container(p, "c").is_some_and(|c| c.restart_count >= 1)).await?;
    assert_eq!(phase(&p), "Running");
    let events: Api<k8s_openapi::api::core::v1::Event> = Api::namespaced(node.client.clone(), "default");
    let list = events.list(&Default::default()).await?;
    let unhealthy = list
        .items
        .iter()
        .find(|e| e.involved_object.name.as_deref() == Some("sick") && e.reason.as_deref() == Some("Unhealthy"));
    let msg = unhealthy.and_then(|e| e.message.clone()).unwrap_or_default();
    assert!(msg.starts_with("Liveness probe failed: dial tcp 127.0.0.1:9"), "{msg}");
    for name in ["web", "sick"] {
        node.pods("default").delete(name, &DeleteParams::default().grace_period(0)).await?;
        node.wait_gone(name).await?;
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lifecycle_hooks_run_after_start_and_before_stop() -> anyhow::Result<()> {
    let node = Node::start().await?;
    let host = node.dir.path().join("host");
    std::fs::create_dir_all(&host)?;
    let mount = json!([{"name": "host", "mountPath": "/host"}]);
    let volumes = json!([{"name": "host", "hostPath": {"path": host, "type": "Directory"}}]);
    // The main process writes what it sees on SIGTERM: the preStop hook must have run before.
    let script = "trap 'cat /host/order > /host/at-term; exit 0' TERM; while true; do sleep 0.1; done";
    node.pod(
        "hooked",
        json!({
            "terminationGracePeriodSeconds": 10,
            "volumes": volumes,
            "containers": [{"name": "c", "command": ["sh", "-c", script], "volumeMounts": mount, "lifecycle": {
                "postStart": {"exec": {"command": ["sh", "-c", "echo post-start >> /host/order"]}},
                "preStop": {"exec": {"command": ["sh", "-c", "echo pre-stop >> /host/order"]}},
            }}]
        }),
    )
    .await?;
    node.wait_pod("hooked", "Running", |p| phase(p) == "Running").await?;
    assert_eq!(std::fs::read_to_string(host.join("order"))?, "post-start\n");

    // A failing postStart hook kills the container, which restarts as its policy says.
    node.pod(
        "bad-hook",
        json!({
            // `sleep` as pid 1 ignores SIGTERM: a short grace period keeps the kill quick.
            "terminationGracePeriodSeconds": 1,
            "containers": [{"name": "c", "command": ["sleep", "3600"], "lifecycle": {
                "postStart": {"exec": {"command": ["sh", "-c", "echo nope; exit 3"]}},
            }}]
        }),
    )
    .await?;
    node.wait_pod("bad-hook", "a restart after the failed hook", |p| {
        container(p, "c").is_some_and(|c| c.restart_count >= 1)
    })
    .await?;
    let events: Api<k8s_openapi::api::core::v1::Event> = Api::namespaced(node.client.clone(), "default");
    let deadline = tokio::time::Instant::now() + common::WAIT;
    loop {
        let list = events.list(&Default::default()).await?;
        let failed = list.items.iter().find(|e| e.reason.as_deref() == Some("FailedPostStartHook"));
        if let Some(e) = failed {
            let message = e.message.clone().unwrap_or_default();
            assert!(message.contains("Exec lifecycle hook") && message.contains("\"c\""), "{message}");
            assert_eq!(e.type_.as_deref(), Some("Warning"));
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "no FailedPostStartHook event");
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }

    node.pods("default").delete("hooked", &DeleteParams::default()).await?;
    node.pods("default").delete("bad-hook", &DeleteParams::default().grace_period(0)).await?;
    node.wait_gone("hooked").await?;
    node.wait_gone("bad-hook").await?;
    assert_eq!(std::fs::read_to_string(host.join("order"))?, "post-start\npre-stop\n");
    assert_eq!(std::fs::read_to_string(host.join("at-term"))?, "post-start\npre-stop\n", "preStop ran before SIGTERM");
    assert_eq!(node.leftovers(), Vec::<String>::new());
    Ok(())
}

/// `--container-runtime runc`, as kubelet runs on containerd + runc: an image pod (its layers an
/// overlay the shim mounts for runc) runs, writes into its own layer, logs, and leaves nothing
/// — no container, mount or cgroup — once deleted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_on_runc_runs_image_pods_and_leaves_nothing() -> anyhow::Result<()> {
    let mut node = Node::start().await?;
    let runc = ["/usr/sbin/runc", "/usr/bin/runc"].iter().map(std::path::PathBuf::from).find(|p| p.exists());
    let runc = runc.expect("runc is installed (apt-get install -y runc)");
    node.stop_agent().await?;
    node.config.backend = kaji_agent::Backend::Runc(runc);
    node.start_agent().await?;
    let script = "echo layer > /written && cat /written && grep ' / ' /proc/mounts | cut -d' ' -f3 && sleep 3600";
    node.pod("on-runc", json!({"containers": [{"name": "app", "command": ["sh", "-c", script]}]})).await?;
    node.wait_pod("on-runc", "Running", |p| phase(p) == "Running").await?;
    let mut log = String::new();
    for _ in 0..50 {
        let (code, body) = node.get("/containerLogs/default/on-runc/app").await?;
        assert_eq!(code, 200, "{body}");
        log = body;
        if log.lines().count() >= 2 {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    assert_eq!(log.lines().collect::<Vec<_>>(), ["layer", "overlay"], "the image's layers as an overlay rootfs");
    node.pods("default").delete("on-runc", &DeleteParams::default().grace_period(0)).await?;
    node.wait_gone("on-runc").await?;
    node.assert_nothing_left(common::WAIT).await;
    Ok(())
}
