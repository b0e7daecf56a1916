//! The health and metrics endpoints: `/healthz` and `/metrics` (Prometheus text).

use crate::metrics::Metrics;
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

async fn metrics(State(metrics): State<Arc<Metrics>>) -> impl IntoResponse {
    ([(header::CONTENT_TYPE, "text/plain; version=0.0.4; charset=utf-8")], metrics.render())
}

/// Serves until `stop` turns true.
pub async fn serve(listener: TcpListener, metrics_: Arc<Metrics>, mut stop: watch::Receiver<bool>) {
    let app = Router::new().route("/healthz", get(healthz)).route("/metrics", get(metrics)).with_state(metrics_);
    let shutdown = async move {
        let _ = stop.wait_for(|s| *s).await;
    };
    if let Err(e) = axum::serve(listener, app).with_graceful_shutdown(shutdown).await {
        tracing::error!(error = %e, "metrics server failed");
    }
}
