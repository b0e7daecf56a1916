//! `pods/portforward` and `pods/attach` through the in-process kaji-apiserver: each goes to
//! the node's agent at kubelet's path, and the upgraded connection — here a native SPDY/3.1
//! upgrade, as kubectl ≤ 1.30 sends it — is carried both ways unchanged, negotiated protocol
//! header included. The node's agent is a raw loopback server that answers every upgrade with
//! 101 and echoes the bytes; SPDY itself is tested in the agent crate, with real kubectl.

mod common;

use anyhow::{ensure, Context};
use serde_json::{json, Value};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

type Seen = Arc<Mutex<Vec<String>>>;

/// Reads an HTTP head (up to the blank line).
async fn head(s: &mut TcpStream) -> anyhow::Result<String> {
    let mut buf = Vec::new();
    let mut byte = [0u8; 1];
    while !buf.ends_with(b"\r\n\r\n") {
        ensure!(s.read(&mut byte).await? == 1, "connection closed in the head: {buf:?}");
        buf.push(byte[0]);
    }
    Ok(String::from_utf8_lossy(&buf).into_owned())
}

fn header<'a>(head: &'a str, name: &str) -> Vec<&'a str> {
    head.lines()
        .filter_map(|l| l.split_once(':'))
        .filter(|(k, _)| k.trim().eq_ignore_ascii_case(name))
        .map(|(_, v)| v.trim())
        .collect()
}

/// The fake agent: records `METHOD path [offered protocols]`, answers 101 agreeing to the first
/// offered protocol, then echoes.
async fn agent(listener: TcpListener, seen: Seen) {
    while let Ok((mut s, _)) = listener.accept().await {
        let seen = seen.clone();
        tokio::spawn(async move {
            let Ok(h) = head(&mut s).await else { return };
            let line = h.lines().next().unwrap_or("").trim_end_matches(" HTTP/1.1").to_string();
            let offered = header(&h, "X-Stream-Protocol-Version");
            seen.lock().expect("lock").push(format!("{line} [{}]", offered.join(", ")));
            let agreed = offered.first().copied().unwrap_or("");
            let resp = format!(
                "HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: SPDY/3.1\r\nX-Stream-Protocol-Version: {agreed}\r\n\r\n"
            );
            if s.write_all(resp.as_bytes()).await.is_ok() {
                let (mut r, mut w) = s.split();
                let _ = tokio::io::copy(&mut r, &mut w).await;
            }
        });
    }
}

/// Upgrades `path` on the apiserver to SPDY offering `protocol`; returns the 101's head and
/// the echo of some bytes sent through it.
async fn upgrade(server: SocketAddr, method: &str, path: &str, protocol: &str) -> anyhow::Result<(String, Vec<u8>)> {
    let mut s = TcpStream::connect(server).await?;
    let req = format!(
        "{method} {path} HTTP/1.1\r\nHost: {server}\r\nConnection: Upgrade\r\nUpgrade: SPDY/3.1\r\nX-Stream-Protocol-Version: {protocol}\r\nContent-Length: 0\r\n\r\n"
    );
    s.write_all(req.as_bytes()).await?;
    let h = tokio::time::timeout(Duration::from_secs(10), head(&mut s)).await??;
    ensure!(h.starts_with("HTTP/1.1 101"), "{h}");
    // A SPDY PING frame, and back.
    let ping = [0x80, 0x03, 0x00, 0x06, 0, 0, 0, 4, 0, 0, 0, 1];
    s.write_all(&ping).await?;
    let mut back = vec![0u8; ping.len()];
    tokio::time::timeout(Duration::from_secs(10), s.read_exact(&mut back)).await??;
    Ok((h, back))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn portforward_and_attach_reach_the_agent_and_carry_spdy_both_ways() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let mut config = kaji_apiserver::Config::new(([127, 0, 0, 1], 0).into(), dir.path().join("data"));
    config.agent_timeout = Duration::from_secs(2);
    let server = kaji_apiserver::start(config).await?;
    let listener = TcpListener::bind("127.0.0.1:0").await?;
    let port = listener.local_addr()?.port();
    let seen = Seen::default();
    tokio::spawn(agent(listener, seen.clone()));
    let addr = server.addr.to_string();
    let create = |path: &str, body: Value| -> anyhow::Result<()> {
        let (code, out) = common::http(&addr, "POST", path, Some(&body.to_string()), "application/json");
        ensure!(code == 201, "POST {path}: {code} {out}");
        Ok(())
    };
    create(
        "/api/v1/nodes",
        json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1"},
            "status": {"addresses": [{"type": "InternalIP", "address": "127.0.0.1"}],
                       "daemonEndpoints": {"kubeletEndpoint": {"Port": port}}}}),
    )?;
    for (name, node) in [("multi", Some("n1")), ("pending", None)] {
        let mut pod = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
            "spec": {"containers": [{"name": "a", "image": "busybox"}, {"name": "b", "image": "busybox"}]}});
        if let Some(n) = node {
            pod["spec"]["nodeName"] = n.into();
        }
        create("/api/v1/namespaces/default/pods", pod)?;
    }

    let ping = vec![0x80, 0x03, 0x00, 0x06, 0, 0, 0, 4, 0, 0, 0, 1];
    let (h, back) =
        upgrade(server.addr, "POST", "/api/v1/namespaces/default/pods/multi/portforward", "portforward.k8s.io").await?;
    assert_eq!(header(&h, "X-Stream-Protocol-Version"), ["portforward.k8s.io"], "{h}");
    assert_eq!(back, ping, "the bytes went through unchanged");
    let (h, back) = upgrade(
        server.addr,
        "GET",
        "/api/v1/namespaces/default/pods/multi/attach?container=b&stdout=true&stderr=true",
        "v4.channel.k8s.io",
    )
    .await?;
    assert_eq!(header(&h, "X-Stream-Protocol-Version"), ["v4.channel.k8s.io"]);
    assert_eq!(back, ping);
    assert_eq!(
        std::mem::take(&mut *seen.lock().expect("lock")),
        [
            "POST /portForward/default/multi [portforward.k8s.io]",
            "GET /attach/default/multi/b?error=1&output=1 [v4.channel.k8s.io]"
        ],
        "kubelet's paths and query, the protocol offer passed on"
    );

    // Refusals before anything reaches the agent, in Kubernetes' words.
    let cases = [
        ("/api/v1/namespaces/default/pods/pending/portforward", "pod pending does not have a host assigned"),
        (
            "/api/v1/namespaces/default/pods/multi/attach?stdout=true",
            "a container name must be specified for pod multi",
        ),
        ("/api/v1/namespaces/default/pods/ghost/portforward", "pods \"ghost\" not found"),
    ];
    for (path, want) in cases {
        let (code, body) = common::http(&addr, "POST", path, None, "");
        let status: Value = serde_json::from_str(&body).with_context(|| format!("{path}: {body}"))?;
        let message = status["message"].as_str().unwrap_or("");
        ensure!((400..=404).contains(&code) && message.starts_with(want), "{path}: {code} {body}");
    }
    assert!(seen.lock().expect("lock").is_empty());
    server.shutdown().await
}
