//! `/healthz` (the process answers), `/readyz` (the caches are synced and it is not shutting
//! down: the kube-dns Service only sends queries to ready pods) and `/metrics`; `/health` and
//! `/ready` too, CoreDNS's paths, so probes written for CoreDNS work.

use crate::metrics::Metrics;
use crate::zone::Current;
use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::IntoResponse;
use axum::routing::get;
use axum::Router;
use std::sync::Arc;
use tokio::net::TcpListener;
use tokio::sync::watch;

#[derive(Clone)]
pub struct Shared {
    pub current: Arc<Current>,
    pub metrics: Arc<Metrics>,
    /// True once SIGTERM arrived: not ready any more, answering until the lame-duck period ends.
    pub stopping: watch::Receiver<bool>,
}

async fn healthz() -> &'static str {
    "ok"
}

async fn readyz(State(s): State<Shared>) -> impl IntoResponse {
    if *s.stopping.borrow() {
        (StatusCode::SERVICE_UNAVAILABLE, "shutting down")
    } else if !s.current.is_synced() {
        (StatusCode::SERVICE_UNAVAILABLE, "waiting for the first list of services, endpointslices and namespaces")
    } else {
        (StatusCode::OK, "ok")
    }
}

async fn metrics(State(s): State<Shared>) -> impl IntoResponse {
    ([(header::CONTENT_TYPE, "text/plain; version=0.0.4; charset=utf-8")], s.metrics.render())
}

/// Serves until `done` turns true.
pub async fn serve(listener: TcpListener, shared: Shared, mut done: watch::Receiver<bool>) {
    let app = Router::new()
        .route("/healthz", get(healthz))
        .route("/health", get(healthz))
        .route("/readyz", get(readyz))
        .route("/ready", get(readyz))
        .route("/metrics", get(metrics))
        .with_state(shared);
    let shutdown = async move {
        let _ = done.wait_for(|s| *s).await;
    };
    if let Err(e) = axum::serve(listener, app).with_graceful_shutdown(shutdown).await {
        tracing::error!(error = %e, "metrics server failed");
    }
}
