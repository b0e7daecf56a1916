//! The agent's server (kubelet's port 10250): /healthz, /metrics, /pods, /containerLogs (with
//! follow, tailLines, sinceSeconds, sinceTime, timestamps, previous, limitBytes) and
//! /stats/summary from the cgroups, and the streaming ones: /exec, /attach (WebSocket or SPDY,
//! `exec.rs`, `attach.rs`) and /portForward (SPDY, `portforward.rs`).

use std::collections::HashMap;
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::{Path, Query, State};
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use serde_json::json;
use tokio::net::TcpListener;
use tokio::sync::watch;

use crate::logs;
use crate::pods::Manager;
use crate::runtime::Meta;

async fn healthz() -> &'static str {
    "ok"
}

async fn metrics(State(m): State<Manager>) -> impl IntoResponse {
    let metas = m.shared.runtime.list();
    let running: Vec<&Meta> = metas
        .iter()
        .filter(|c| m.shared.runtime.state(&c.id).is_ok_and(|s| s.status == kaji_runtime::Status::Running))
        .collect();
    let pods: std::collections::HashSet<&str> = running.iter().map(|c| c.pod_uid.as_str()).collect();
    m.shared.metrics.running_containers.set(running.len() as i64);
    m.shared.metrics.running_pods.set(pods.len() as i64);
    ([(header::CONTENT_TYPE, "text/plain; version=0.0.4; charset=utf-8")], m.shared.metrics.render())
}

async fn pods(State(m): State<Manager>) -> impl IntoResponse {
    let items: Vec<serde_json::Value> = m.pods().iter().filter_map(|p| serde_json::to_value(p.as_ref()).ok()).collect();
    axum::Json(json!({"kind": "PodList", "apiVersion": "v1", "metadata": {}, "items": items}))
}

fn error(code: StatusCode, message: String) -> Response {
    (code, message).into_response()
}

/// The run of the container whose log is wanted (the current one, or the one before it).
fn find_run(m: &Manager, ns: &str, pod: &str, container: &str, previous: bool) -> Result<Meta, Box<Response>> {
    let Some(p) = m
        .pods()
        .into_iter()
        .find(|p| p.metadata.namespace.as_deref() == Some(ns) && p.metadata.name.as_deref() == Some(pod))
    else {
        return Err(Box::new(error(StatusCode::NOT_FOUND, format!("pod {ns}/{pod} is not running on this node"))));
    };
    let uid = p.metadata.uid.clone().unwrap_or_default();
    let mut runs: Vec<Meta> =
        m.shared.runtime.list().into_iter().filter(|c| c.pod_uid == uid && c.container_name == container).collect();
    runs.sort_by_key(|r| std::cmp::Reverse(r.restart_count));
    let want = if previous { 1 } else { 0 };
    runs.into_iter().nth(want).ok_or_else(|| {
        let msg = if previous {
            format!("previous terminated container \"{container}\" in pod \"{pod}\" not found")
        } else {
            format!("container \"{container}\" in pod \"{pod}\" is waiting to start")
        };
        Box::new(error(StatusCode::BAD_REQUEST, msg))
    })
}

fn flag(q: &HashMap<String, String>, k: &str) -> bool {
    q.get(k).is_some_and(|v| v.is_empty() || v == "true" || v == "1")
}

async fn container_logs(
    State(m): State<Manager>,
    Path((ns, pod, container)): Path<(String, String, String)>,
    Query(q): Query<HashMap<String, String>>,
) -> Response {
    let run = match find_run(&m, &ns, &pod, &container, flag(&q, "previous")) {
        Ok(r) => r,
        Err(resp) => return *resp,
    };
    let since = match (q.get("sinceSeconds"), q.get("sinceTime")) {
        (Some(s), _) => match s.parse::<i64>() {
            Ok(n) => jiff::Timestamp::now().checked_sub(jiff::SignedDuration::from_secs(n)).ok(),
            Err(_) => return error(StatusCode::BAD_REQUEST, format!("invalid sinceSeconds {s:?}")),
        },
        (None, Some(t)) => match t.parse::<jiff::Timestamp>() {
            Ok(t) => Some(t),
            Err(_) => return error(StatusCode::BAD_REQUEST, format!("invalid sinceTime {t:?}")),
        },
        (None, None) => None,
    };
    let parse_num = |k: &str| -> Result<Option<usize>, Box<Response>> {
        match q.get(k) {
            None => Ok(None),
            Some(v) => v
                .parse::<i64>()
                .map(|n| Some(n.max(0) as usize))
                .map_err(|_| Box::new(error(StatusCode::BAD_REQUEST, format!("invalid {k} {v:?}")))),
        }
    };
    let (tail_lines, limit_bytes) = match (parse_num("tailLines"), parse_num("limitBytes")) {
        (Ok(t), Ok(l)) => (t, l),
        (Err(r), _) | (_, Err(r)) => return *r,
    };
    let opts = logs::Options { tail_lines, since, timestamps: flag(&q, "timestamps"), limit_bytes };
    let text = tokio::fs::read_to_string(&run.log_path).await.unwrap_or_default();
    let (lines, consumed) = logs::parse_lines(&text);
    let first = logs::render(&lines, &opts);
    let plain = [(header::CONTENT_TYPE, "text/plain; charset=utf-8")];
    if !flag(&q, "follow") {
        return (plain, first).into_response();
    }
    // Follow: send what is there, then new lines as they are written, until the container stops.
    let state = (Some(first), consumed as u64, String::new(), m, run, opts.timestamps);
    let stream = futures::stream::unfold(state, |(first, offset, mut buf, m, run, ts)| async move {
        if let Some(f) = first {
            return Some((Ok::<Bytes, std::io::Error>(Bytes::from(f)), (None, offset, buf, m, run, ts)));
        }
        let mut offset = offset;
        loop {
            let stopped =
                m.shared.runtime.state(&run.id).map(|s| s.status == kaji_runtime::Status::Stopped).unwrap_or(true);
            let data = read_from(&run.log_path, offset).await;
            offset += data.len() as u64;
            buf.push_str(&String::from_utf8_lossy(&data));
            let (lines, consumed) = logs::parse_lines(&buf);
            buf.drain(..consumed);
            if !lines.is_empty() {
                let out: String = lines.iter().map(|l| logs::format_line(l, ts)).collect();
                return Some((Ok(Bytes::from(out)), (None, offset, buf, m, run, ts)));
            }
            if stopped && data.is_empty() {
                return None;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    });
    (plain, Body::from_stream(stream)).into_response()
}

async fn read_from(path: &std::path::Path, offset: u64) -> Vec<u8> {
    use tokio::io::{AsyncReadExt, AsyncSeekExt};
    let Ok(mut f) = tokio::fs::File::open(path).await else { return Vec::new() };
    if f.seek(std::io::SeekFrom::Start(offset)).await.is_err() {
        return Vec::new();
    }
    let mut out = Vec::new();
    let _ = f.read_to_end(&mut out).await;
    out
}

async fn stats_summary(State(m): State<Manager>) -> impl IntoResponse {
    let now = jiff::Timestamp::now().to_string();
    let metas = m.shared.runtime.list();
    let mut pods = Vec::new();
    for p in m.pods() {
        let uid = p.metadata.uid.clone().unwrap_or_default();
        let mut containers = Vec::new();
        let (mut cpu, mut mem) = (0u64, 0u64);
        for c in metas.iter().filter(|c| c.pod_uid == uid) {
            let running = m.shared.runtime.state(&c.id).is_ok_and(|s| s.status == kaji_runtime::Status::Running);
            if !running {
                continue;
            }
            let u = m.shared.runtime.usage(&c.id).unwrap_or_default();
            cpu += u.cpu_usage_ns;
            mem += u.memory_bytes;
            containers.push(json!({
                "name": c.container_name,
                "startTime": c.started_at.map(|t| t.to_string()),
                "cpu": {"time": now, "usageCoreNanoSeconds": u.cpu_usage_ns},
                "memory": {"time": now, "usageBytes": u.memory_bytes, "workingSetBytes": u.memory_bytes},
                "processes": {"count": u.pids},
            }));
        }
        pods.push(json!({
            "podRef": {"name": p.metadata.name, "namespace": p.metadata.namespace, "uid": uid},
            "containers": containers,
            "cpu": {"time": now, "usageCoreNanoSeconds": cpu},
            "memory": {"time": now, "usageBytes": mem, "workingSetBytes": mem},
        }));
    }
    let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
    let total = crate::node::meminfo_kib(&meminfo, "MemTotal").unwrap_or(0) * 1024;
    let avail = crate::node::meminfo_kib(&meminfo, "MemAvailable").unwrap_or(0) * 1024;
    axum::Json(json!({
        "node": {
            "nodeName": m.shared.config.node_name,
            "memory": {"time": now, "availableBytes": avail, "usageBytes": total.saturating_sub(avail),
                       "workingSetBytes": total.saturating_sub(avail)},
        },
        "pods": pods,
    }))
}

pub fn router(m: Manager) -> Router {
    Router::new()
        .route("/healthz", get(healthz))
        .route("/metrics", get(metrics))
        .route("/pods", get(pods))
        .route("/containerLogs/{ns}/{pod}/{container}", get(container_logs))
        .route("/stats/summary", get(stats_summary))
        .route("/exec/{ns}/{pod}/{container}", get(crate::exec::serve).post(crate::exec::serve))
        .route("/attach/{ns}/{pod}/{container}", get(crate::attach::serve).post(crate::attach::serve))
        .route("/portForward/{ns}/{pod}", get(crate::portforward::serve).post(crate::portforward::serve))
        .with_state(m)
}

/// The agent's serving certificate and the CA its clients' certificates must chain to.
#[derive(Clone, Debug)]
pub struct Tls {
    pub cert_file: std::path::PathBuf,
    pub key_file: std::path::PathBuf,
    pub client_ca_file: std::path::PathBuf,
}

impl Tls {
    pub fn server_config(&self) -> Result<rustls::ServerConfig, kaji_pki::Error> {
        let ca_pem = kaji_pki::files::read(&self.client_ca_file)?;
        kaji_pki::tls::server_config(
            &kaji_pki::files::read(&self.cert_file)?,
            &kaji_pki::files::read(&self.key_file)?,
            &kaji_pki::tls::ClientAuth::Optional { ca_pem },
        )
    }
}

/// kubelet's healthz port (10248): `/healthz` over plain HTTP, nothing else, until `stop`.
pub async fn serve_healthz(listener: TcpListener, mut stop: watch::Receiver<bool>) {
    let app = Router::new().route("/healthz", get(healthz));
    let shutdown = async move {
        let _ = stop.wait_for(|s| *s).await;
    };
    if let Err(e) = axum::serve(listener, app).with_graceful_shutdown(shutdown).await {
        tracing::error!(error = %e, "healthz server failed");
    }
}

/// Serves until `stop` turns true: HTTPS with kubelet's x509 authorization when `tls` is set
/// (the config is built before, so a bad certificate fails the start), plain HTTP otherwise.
pub async fn serve(
    listener: TcpListener,
    m: Manager,
    tls: Option<rustls::ServerConfig>,
    mut stop: watch::Receiver<bool>,
) {
    let shutdown = async move {
        let _ = stop.wait_for(|s| *s).await;
    };
    let result = match tls {
        None => {
            let app = router(m).into_make_service_with_connect_info::<kaji_pki::listener::Peer>();
            axum::serve(listener, app).with_graceful_shutdown(shutdown).await
        }
        Some(config) => {
            let listener = match kaji_pki::listener::TlsListener::new(listener, config) {
                Ok(l) => l,
                Err(e) => {
                    tracing::error!(error = %e, "agent server failed");
                    return;
                }
            };
            let app = router(m)
                .layer(axum::middleware::from_fn(crate::auth::filter))
                .into_make_service_with_connect_info::<kaji_pki::listener::Peer>();
            axum::serve(listener, app).with_graceful_shutdown(shutdown).await
        }
    };
    if let Err(e) = result {
        tracing::error!(error = %e, "agent server failed");
    }
}
