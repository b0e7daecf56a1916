//! The health and metrics endpoints: `/healthz` and `/metrics` (Prometheus text).

use crate::scheduler::Shared;
use axum::extract::State;
use axum::http::header;
use axum::response::IntoResponse;
use axum::routing::get;
use axum::Router;
use std::sync::Arc;
use tokio::net::TcpListener;
use tokio::sync::watch;

async fn healthz() -> &'static str {
    "ok"
}

async fn metrics(State(shared): State<Arc<Shared>>) -> impl IntoResponse {
    let text = shared.metrics.render(shared.queue.depths());
    ([(header::CONTENT_TYPE, "text/plain; version=0.0.4; charset=utf-8")], text)
}

/// Serves until `stop` turns true.
pub async fn serve(listener: TcpListener, shared: Arc<Shared>, mut stop: watch::Receiver<bool>) {
    let app = Router::new().route("/healthz", get(healthz)).route("/metrics", get(metrics)).with_state(shared);
    let shutdown = async move {
        let _ = stop.wait_for(|s| *s).await;
    };
    if let Err(e) = axum::serve(listener, app).with_graceful_shutdown(shutdown).await {
        tracing::error!(error = %e, "metrics server failed");
    }
}
