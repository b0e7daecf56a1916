//! `kaji logs` through the in-process apiserver's `pods/log`, which asks the node's agent; the
//! agent here is a small HTTP server on a loopback port with canned logs (registered as node
//! n1's InternalIP and kubelet port), recording what it was asked.

mod common;

use common::{stderr, stdout, Cluster};
use serde_json::json;
use std::sync::{Arc, Mutex};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::Notify;

#[derive(Default)]
struct Kubelet {
    requests: Mutex<Vec<String>>,
    /// A followed log sends its second line when notified, then ends.
    more: Notify,
}

/// Serves `/containerLogs/<ns>/<pod>/<container>?...`, one request per connection.
async fn serve(listener: tokio::net::TcpListener, k: Arc<Kubelet>) {
    while let Ok((mut sock, _)) = listener.accept().await {
        let k = k.clone();
        tokio::spawn(async move {
            let mut buf = Vec::new();
            let mut chunk = [0u8; 1024];
            while !buf.windows(4).any(|w| w == b"\r\n\r\n") {
                match sock.read(&mut chunk).await {
                    Ok(0) | Err(_) => return,
                    Ok(n) => buf.extend_from_slice(&chunk[..n]),
                }
            }
            let head = String::from_utf8_lossy(&buf).to_string();
            let target = head.split_whitespace().nth(1).unwrap_or("").to_string();
            k.requests.lock().expect("lock").push(target.clone());
            let path = target.split('?').next().unwrap_or("");
            let parts: Vec<&str> = path.trim_start_matches("/containerLogs/").split('/').collect();
            let ok = "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nConnection: close\r\n\r\n";
            if target.contains("follow=true") {
                let _ = sock.write_all(format!("{ok}line 1\n").as_bytes()).await;
                k.more.notified().await;
                let _ = sock.write_all(b"line 2\n").await;
                return;
            }
            let body = match parts.as_slice() {
                [_, "web", "web"] => "hello from web\nsecond line\n".to_string(),
                [_, pod, container] => format!("log of {pod}/{container}\n"),
                _ => String::new(),
            };
            let _ = sock.write_all(format!("{ok}{body}").as_bytes()).await;
        });
    }
}

fn cluster() -> (Cluster, Arc<Kubelet>) {
    let c = Cluster::start();
    let k = Arc::new(Kubelet::default());
    let listener = c.rt.block_on(tokio::net::TcpListener::bind("127.0.0.1:0")).expect("bind");
    let port = listener.local_addr().expect("addr").port();
    c.rt.spawn(serve(listener, k.clone()));
    c.create(
        "/api/v1/nodes",
        json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1"},
               "status": {"addresses": [{"type": "InternalIP", "address": "127.0.0.1"}],
                          "daemonEndpoints": {"kubeletEndpoint": {"Port": port}}}}),
    );
    for (name, containers) in [("web", vec!["web"]), ("multi", vec!["a", "b"])] {
        let containers: Vec<_> = containers.iter().map(|n| json!({"name": n, "image": "busybox"})).collect();
        c.create(
            "/api/v1/namespaces/default/pods",
            json!({"metadata": {"name": name, "labels": {"app": name}},
                   "spec": {"nodeName": "n1", "containers": containers}}),
        );
    }
    (c, k)
}

#[test]
fn logs_come_from_the_nodes_agent_with_the_options_passed_on() {
    let (c, k) = cluster();
    assert_eq!(c.ok(&["logs", "web"]), "hello from web\nsecond line\n");
    c.ok(&["logs", "pod/web", "--tail", "1", "--timestamps", "--previous"]);
    let reqs = k.requests.lock().expect("lock").clone();
    assert!(reqs[0].starts_with("/containerLogs/default/web/web"), "{reqs:?}");
    let q = &reqs[1];
    assert!(q.contains("tailLines=1") && q.contains("timestamps=true") && q.contains("previous=true"), "{q}");
}

#[test]
fn a_pod_with_several_containers_defaults_to_the_first_and_says_so() {
    let (c, _k) = cluster();
    let out = c.run(&["logs", "multi"]);
    assert_eq!(stdout(&out), "log of multi/a\n");
    assert_eq!(stderr(&out), "Defaulted container \"a\" out of: a, b\n");
    assert_eq!(c.ok(&["logs", "multi", "-c", "b"]), "log of multi/b\n");
}

#[test]
fn a_workload_names_one_of_its_pods() {
    let (c, _k) = cluster();
    let f = c.file(
        "d.yaml",
        "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: front}\nspec:\n  selector: {matchLabels: {app: web}}\n  \
         template:\n    metadata: {labels: {app: web}}\n    spec: {containers: [{name: web, image: busybox}]}\n",
    );
    c.ok(&["apply", "-f", f.to_str().expect("utf8")]);
    assert_eq!(c.ok(&["logs", "deploy/front"]), "hello from web\nsecond line\n");
}

#[test]
fn follow_streams_until_the_log_ends() {
    let (c, k) = cluster();
    let r = c.spawn(&["logs", "-f", "web"]);
    assert_eq!(r.next_line("first"), "line 1");
    k.more.notify_one();
    assert_eq!(r.next_line("second"), "line 2");
    let (status, err) = r.finish();
    assert!(status.success(), "{err}");
}

#[test]
fn missing_pods_and_containers_are_one_line_errors() {
    let (c, _k) = cluster();
    assert_eq!(c.fails(&["logs", "nope"]), "Error from server (NotFound): pods \"nope\" not found");
    let err = c.fails(&["logs", "web", "-c", "nope"]);
    assert!(err.starts_with("Error from server (BadRequest): ") && err.contains("nope"), "{err}");
}
