//! The request limits against the real binary: a body over `--max-request-body-bytes` is 413 on
//! every write, a JSON patch may not hold more than 10000 operations nor copy its way past the
//! body limit, deeply nested bodies are 400s, requests past `--request-timeout` are 504s and
//! requests past the in-flight limits are 429s — and the apiserver serves on after each.

mod common;

use common::{http, http_with, ApiServer};
use serde_json::{json, Value};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

const TOKENS: &str = "alice-token,alice,1001,dev\n";

/// A raw request: the head and what of the body there is, the connection left open.
fn send_partial(addr: &str, method: &str, path: &str, headers: &[(&str, &str)], body: &str) -> TcpStream {
    let mut s = TcpStream::connect(addr).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(20))).expect("read timeout");
    let mut head = format!("{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n");
    for (k, v) in headers {
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    write!(s, "{head}\r\n{body}").expect("send");
    s
}

/// The whole answer on `s`: (status, head, body).
fn answer(mut s: TcpStream) -> (u16, String, String) {
    let mut out = Vec::new();
    let _ = s.read_to_end(&mut out);
    let text = String::from_utf8_lossy(&out).to_string();
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let status = head.split(' ').nth(1).and_then(|c| c.parse().ok()).unwrap_or(0);
    (status, head.to_ascii_lowercase(), body.to_string())
}

fn status(body: &str) -> Value {
    serde_json::from_str(body).unwrap_or_else(|e| panic!("not a Status ({e}): {body}"))
}

fn create_config_map(s: &ApiServer, name: &str) {
    let cm = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": {"a": "b"}});
    let (code, body) =
        http(&s.addr, "POST", "/api/v1/namespaces/default/configmaps", Some(&cm.to_string()), "application/json");
    assert_eq!(code, 201, "{body}");
}

fn still_serves(s: &ApiServer) {
    let (code, body) = http(&s.addr, "GET", "/api/v1/namespaces/default/configmaps", None, "");
    assert_eq!(code, 200, "the apiserver serves on: {body}");
}

/// The apiserver's peak resident memory (VmHWM) in KiB.
fn peak_rss_kib(s: &ApiServer) -> u64 {
    let text = std::fs::read_to_string(format!("/proc/{}/status", s.child.id())).expect("proc status");
    let line = text.lines().find(|l| l.starts_with("VmHWM:")).expect("VmHWM");
    line.split_whitespace().nth(1).and_then(|n| n.parse().ok()).expect("a number")
}

#[test]
fn a_body_over_the_limit_is_413_on_every_write() {
    let dir = tempfile::tempdir().expect("tempdir");
    let s = ApiServer::start(&dir.path().join("data"));
    create_config_map(&s, "cm");
    let cm = "/api/v1/namespaces/default/configmaps/cm";
    let writes = [
        ("POST", "/api/v1/namespaces/default/configmaps", "application/json"),
        ("PUT", cm, "application/json"),
        ("PUT", cm, "application/yaml"),
        ("PATCH", cm, "application/merge-patch+json"),
        ("PATCH", cm, "application/json-patch+json"),
        ("PATCH", cm, "application/strategic-merge-patch+json"),
        ("PATCH", &format!("{cm}?fieldManager=m"), "application/apply-patch+yaml"),
        ("PUT", "/api/v1/namespaces/default/pods/p/status", "application/json"),
        ("PATCH", "/apis/apps/v1/namespaces/default/deployments/d/scale", "application/merge-patch+json"),
        ("POST", "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews", "application/json"),
        ("DELETE", cm, "application/json"),
    ];
    // kube-apiserver's default limit, 3 MiB: one byte more is refused before it is read.
    for (method, path, ct) in writes {
        let conn = send_partial(&s.addr, method, path, &[("Content-Type", ct), ("Content-Length", "3145729")], "");
        let (code, _, body) = answer(conn);
        assert_eq!(code, 413, "{method} {path} ({ct}): {body}");
        let st = status(&body);
        assert_eq!(st["reason"], "RequestEntityTooLarge", "{body}");
        assert_eq!(st["message"], "Request entity too large: limit is 3145728", "{body}");
    }
    still_serves(&s);
    let (code, body) = http(&s.addr, "GET", cm, None, "");
    assert_eq!((code, status(&body)["data"]["a"].clone()), (200, json!("b")), "nothing was written: {body}");
}

#[test]
fn a_body_read_past_a_configured_limit_is_413() {
    let dir = tempfile::tempdir().expect("tempdir");
    let s = ApiServer::start_with(&dir.path().join("data"), &["--max-request-body-bytes", "1000"]);
    let big =
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "big"}, "data": {"a": "x".repeat(1000)}});
    let (code, body) =
        http(&s.addr, "POST", "/api/v1/namespaces/default/configmaps", Some(&big.to_string()), "application/json");
    assert_eq!(code, 413, "{body}");
    assert_eq!(status(&body)["message"], "Request entity too large: limit is 1000");
    // A chunked body has no length to refuse up front: it is counted as it is read.
    let chunk = big.to_string();
    let conn = send_partial(
        &s.addr,
        "POST",
        "/api/v1/namespaces/default/configmaps",
        &[("Content-Type", "application/json"), ("Transfer-Encoding", "chunked")],
        &format!("{:x}\r\n{chunk}\r\n0\r\n\r\n", chunk.len()),
    );
    let (code, _, body) = answer(conn);
    assert_eq!(code, 413, "{body}");
    assert_eq!(status(&body)["message"], "Request entity too large: limit is 1000");
    create_config_map(&s, "small");
}

/// `copy` a value onto itself `n` times: 64 bytes become 64 * 2^n.
fn doubling_patch(n: usize) -> String {
    let mut ops = vec![json!({"op": "add", "path": "/x", "value": ["y".repeat(64)]})];
    for _ in 0..n {
        ops.push(json!({"op": "copy", "from": "/x", "path": "/z"}));
        ops.push(json!({"op": "add", "path": "/x/-", "value": 0}));
        ops.push(json!({"op": "move", "from": "/z", "path": "/x/-"}));
    }
    Value::Array(ops).to_string()
}

#[test]
fn a_json_patch_cannot_copy_past_the_body_limit() {
    let dir = tempfile::tempdir().expect("tempdir");
    let s = ApiServer::start(&dir.path().join("data"));
    create_config_map(&s, "cm");
    let path = "/api/v1/namespaces/default/configmaps/cm";
    let before = peak_rss_kib(&s);
    // 24 doublings would be a GiB; the copies stop once they add 3 MiB.
    let (code, body) = http(&s.addr, "PATCH", path, Some(&doubling_patch(24)), "application/json-patch+json");
    assert_eq!(code, 422, "{body}");
    let st = status(&body);
    assert_eq!(st["reason"], "Invalid");
    let msg = st["message"].as_str().unwrap_or_default();
    assert!(msg.contains("Unable to complete the copy, the accumulated size increase of copy is "), "{msg}");
    assert!(msg.ends_with(", exceeding the limit 3145728"), "{msg}");
    let grown = peak_rss_kib(&s).saturating_sub(before);
    assert!(grown < 64 * 1024, "the apiserver's peak memory grew by {grown} KiB");
    // The same patch on the scale subresource is held to the same limit.
    let scale = "/apis/apps/v1/namespaces/default/replicasets/rs/scale";
    let rs = json!({"apiVersion": "apps/v1", "kind": "ReplicaSet", "metadata": {"name": "rs"}, "spec": {
        "replicas": 1, "selector": {"matchLabels": {"a": "b"}},
        "template": {"metadata": {"labels": {"a": "b"}}, "spec": {"containers": [{"name": "c", "image": "i"}]}}}});
    let (code, body) = http(
        &s.addr,
        "POST",
        "/apis/apps/v1/namespaces/default/replicasets",
        Some(&rs.to_string()),
        "application/json",
    );
    assert_eq!(code, 201, "{body}");
    let (code, body) = http(&s.addr, "PATCH", scale, Some(&doubling_patch(24)), "application/json-patch+json");
    assert_eq!(code, 422, "{body}");
    // A few copies are fine.
    let (code, body) = http(&s.addr, "PATCH", path, Some(&doubling_patch(2)), "application/json-patch+json");
    assert_eq!(code, 200, "{body}");
    still_serves(&s);
}

#[test]
fn a_json_patch_holds_at_most_ten_thousand_operations() {
    let dir = tempfile::tempdir().expect("tempdir");
    let s = ApiServer::start(&dir.path().join("data"));
    create_config_map(&s, "cm");
    let path = "/api/v1/namespaces/default/configmaps/cm";
    let ops = |n: usize| Value::Array(vec![json!({"op": "test", "path": "/data/a", "value": "b"}); n]).to_string();
    let (code, body) = http(&s.addr, "PATCH", path, Some(&ops(10_001)), "application/json-patch+json");
    assert_eq!(code, 413, "{body}");
    let st = status(&body);
    assert_eq!(st["reason"], "RequestEntityTooLarge");
    assert_eq!(
        st["message"],
        "Request entity too large: The allowed maximum operations in a JSON patch is 10000, got 10001"
    );
    let (code, body) = http(&s.addr, "PATCH", path, Some(&ops(10_000)), "application/json-patch+json");
    assert_eq!(code, 200, "{body}");
}

#[test]
fn deeply_nested_bodies_are_400_in_every_format() {
    let dir = tempfile::tempdir().expect("tempdir");
    let s = ApiServer::start(&dir.path().join("data"));
    create_config_map(&s, "cm");
    let deep_json =
        format!("{{\"metadata\":{{\"name\":\"deep\"}},\"x\":{}1{}}}", "[".repeat(100_000), "]".repeat(100_000));
    let deep_yaml = format!("metadata: {{name: deep}}\nx: {}1{}\n", "[".repeat(100_000), "]".repeat(100_000));
    let cm = "/api/v1/namespaces/default/configmaps/cm";
    let cases = [
        ("POST", "/api/v1/namespaces/default/configmaps".to_string(), "application/json", &deep_json),
        ("POST", "/api/v1/namespaces/default/configmaps".to_string(), "application/yaml", &deep_yaml),
        ("PUT", cm.to_string(), "application/json", &deep_json),
        ("PATCH", cm.to_string(), "application/merge-patch+json", &deep_json),
        ("PATCH", cm.to_string(), "application/strategic-merge-patch+json", &deep_json),
        ("PATCH", format!("{cm}?fieldManager=m"), "application/apply-patch+yaml", &deep_yaml),
    ];
    for (method, path, ct, body) in cases {
        let (code, answer) = http(&s.addr, method, &path, Some(body), ct);
        assert_eq!(code, 400, "{method} {path} ({ct}): {answer}");
        let st = status(&answer);
        assert_eq!(st["reason"], "BadRequest");
        let msg = st["message"].as_str().unwrap_or_default().to_ascii_lowercase();
        assert!(msg.contains("recursion limit") || msg.contains("depth"), "{ct}: {msg}");
    }
    still_serves(&s);
}

#[test]
fn a_request_past_the_request_timeout_is_504() {
    let dir = tempfile::tempdir().expect("tempdir");
    let s = ApiServer::start_with(&dir.path().join("data"), &["--request-timeout", "1s"]);
    // A client that sends half its body: the handler waits for the rest, past the timeout.
    let started = Instant::now();
    let conn = send_partial(
        &s.addr,
        "POST",
        "/api/v1/namespaces/default/configmaps",
        &[("Content-Type", "application/json"), ("Content-Length", "100")],
        "{\"apiVersion\":",
    );
    let (code, _, body) = answer(conn);
    assert_eq!(code, 504, "{body}");
    assert!(started.elapsed() >= Duration::from_secs(1));
    let st = status(&body);
    assert_eq!(st["reason"], "Timeout");
    assert_eq!(st["message"], "Timeout: request did not complete within requested timeout - context deadline exceeded");
    // A watch is long-running: it outlives the timeout.
    let mut watch = common::open_watch(&s, "/api/v1/namespaces/default/configmaps?watch=true");
    std::thread::sleep(Duration::from_millis(1500));
    create_config_map(&s, "after");
    let event = common::next_event(&mut watch).expect("the watch still streams");
    assert_eq!(event["object"]["metadata"]["name"], "after");
}

fn inflight_now(s: &ApiServer, kind: &str) -> Option<u64> {
    let (_, text) = http(&s.addr, "GET", "/metrics", None, "");
    let key = format!("apiserver_current_inflight_requests{{request_kind=\"{kind}\"}} ");
    text.lines().find_map(|l| l.strip_prefix(&key)).and_then(|n| n.trim().parse().ok())
}

#[test]
fn requests_over_the_inflight_limits_are_429_but_masters_and_long_running_ones_pass() {
    let dir = tempfile::tempdir().expect("tempdir");
    let tokens = dir.path().join("tokens.csv");
    std::fs::write(&tokens, TOKENS).expect("token file");
    let tokens = tokens.to_string_lossy().to_string();
    let s = ApiServer::start_with(
        &dir.path().join("data"),
        &["--token-auth-file", &tokens, "--max-requests-inflight", "1", "--max-mutating-requests-inflight", "1"],
    );
    let alice = [("Authorization", "Bearer alice-token")];
    let cms = "/api/v1/namespaces/default/configmaps";
    // alice's watch is long-running: it takes no read-only slot.
    let mut watch = TcpStream::connect(&s.addr).expect("connect");
    write!(watch, "GET {cms}?watch=true HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer alice-token\r\n\r\n")
        .expect("send");
    // A create that has sent half its body holds the only mutating slot while it waits.
    let held = send_partial(
        &s.addr,
        "POST",
        cms,
        &[alice[0], ("Content-Type", "application/json"), ("Content-Length", "80")],
        "{\"apiVersion\":\"v1\",\"kind\":\"ConfigMap\",",
    );
    let deadline = Instant::now() + Duration::from_secs(10);
    while inflight_now(&s, "mutating") != Some(1) {
        assert!(Instant::now() < deadline, "the held create never took its slot");
        std::thread::sleep(Duration::from_millis(10));
    }
    let cm = |name: &str| json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}}).to_string();
    let refused = send_partial(
        &s.addr,
        "POST",
        cms,
        &[alice[0], ("Content-Type", "application/json"), ("Content-Length", &cm("b").len().to_string())],
        &cm("b"),
    );
    let (code, head, body) = answer(refused);
    assert_eq!(code, 429, "{body}");
    assert_eq!(body, "Too many requests, please try again later.\n");
    assert!(head.contains("\r\nretry-after: 1\r\n"), "{head}");
    // Reads have their own slots, and the watch holds none.
    let (code, body) = http_with(&s.addr, "GET", cms, &alice, None, "");
    assert_eq!(code, 200, "{body}");
    // system:masters (everyone on this insecure port without a token) is never refused.
    let (code, body) = http(&s.addr, "POST", cms, Some(&cm("admin")), "application/json");
    assert_eq!(code, 201, "{body}");
    // The held create finishes, and gives its slot back.
    let rest = "\"metadata\":{\"name\":\"held\"}}";
    let mut held = held;
    let pad = 80 - "{\"apiVersion\":\"v1\",\"kind\":\"ConfigMap\",".len() - rest.len();
    write!(held, "{rest}{}", " ".repeat(pad)).expect("the rest of the body");
    let (code, _, body) = answer(held);
    assert_eq!(code, 201, "{body}");
    assert_eq!(inflight_now(&s, "mutating"), Some(0));
    let (code, body) = http_with(&s.addr, "POST", cms, &alice, Some(&cm("b")), "application/json");
    assert_eq!(code, 201, "{body}");
}

/// Whether the server closes `s` within `within`: EOF (or a reset) before any answer.
fn closed_by_server(mut s: TcpStream, within: Duration) -> bool {
    s.set_read_timeout(Some(within)).expect("read timeout");
    let mut buf = [0u8; 1024];
    loop {
        match s.read(&mut buf) {
            Ok(0) => return true,
            Ok(_) => continue,
            Err(e) if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) => {
                return false
            }
            Err(_) => return true,
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_that_stall_their_headers_or_idle_are_closed() {
    let data = tempfile::tempdir().expect("tempdir");
    let mut config = kaji_apiserver::Config::new("127.0.0.1:0".parse().expect("addr"), data.path().to_path_buf());
    config.limits.header_read_timeout = Duration::from_secs(1);
    let server = kaji_apiserver::start(config).await.expect("starts");
    let addr = server.addr.to_string();
    let result = tokio::task::spawn_blocking(move || {
        // Half a request line, then nothing: dropped once the header-read timeout passes.
        let mut slow = TcpStream::connect(&addr).expect("connect");
        write!(slow, "GET /api/v1/namespaces HTTP/1.1\r\nHost: x\r\n").expect("send");
        let started = Instant::now();
        assert!(closed_by_server(slow, Duration::from_secs(10)), "a stalled client is dropped");
        assert!(started.elapsed() >= Duration::from_millis(900), "not before the timeout");
        // A kept-alive connection is answered, then closed once idle that long.
        let mut idle = TcpStream::connect(&addr).expect("connect");
        write!(idle, "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n").expect("send");
        let mut buf = [0u8; 256];
        let n = idle.read(&mut buf).expect("the answer");
        assert!(String::from_utf8_lossy(&buf[..n]).starts_with("HTTP/1.1 200"), "served while active");
        assert!(closed_by_server(idle, Duration::from_secs(10)), "an idle connection is dropped");
        // A watch is no idle connection: it streams past the timeout.
        let mut watch = TcpStream::connect(&addr).expect("connect");
        watch.set_read_timeout(Some(Duration::from_secs(10))).expect("read timeout");
        write!(watch, "GET /api/v1/namespaces/default/configmaps?watch=true HTTP/1.1\r\nHost: x\r\n\r\n")
            .expect("send");
        std::thread::sleep(Duration::from_millis(2500));
        let cm = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "late"}});
        let (code, body) =
            http(&addr, "POST", "/api/v1/namespaces/default/configmaps", Some(&cm.to_string()), "application/json");
        assert_eq!(code, 201, "clients that finish their requests are served as ever: {body}");
        let mut seen = Vec::new();
        let deadline = Instant::now() + Duration::from_secs(10);
        while !String::from_utf8_lossy(&seen).contains("\"name\":\"late\"") {
            assert!(Instant::now() < deadline, "the watch never saw the ConfigMap");
            let mut buf = [0u8; 4096];
            let n = watch.read(&mut buf).expect("the watch is still open");
            assert!(n > 0, "the watch was closed");
            seen.extend_from_slice(&buf[..n]);
        }
    })
    .await;
    server.shutdown().await.expect("stops");
    result.expect("the checks pass");
}
