//! `/healthz` (healthy while the last successful sync is recent) and `/metrics`.

use crate::controller::Shared;
use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::IntoResponse;
use axum::routing::get;
use axum::Router;
use std::sync::Arc;
use tokio::net::TcpListener;
use tokio::sync::watch;

async fn healthz(State(shared): State<Arc<Shared>>) -> impl IntoResponse {
    match shared.last_sync_age() {
        None => (StatusCode::SERVICE_UNAVAILABLE, "no successful sync yet".to_string()),
        Some(age) if age > shared.sync_period * 2 => {
            (StatusCode::SERVICE_UNAVAILABLE, format!("last successful sync {:.1}s ago", age.as_secs_f64()))
        }
        Some(age) => (StatusCode::OK, format!("ok: last successful sync {:.1}s ago", age.as_secs_f64())),
    }
}

async fn metrics(State(shared): State<Arc<Shared>>) -> impl IntoResponse {
    ([(header::CONTENT_TYPE, "text/plain; version=0.0.4; charset=utf-8")], shared.metrics.render())
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
