//! `GET pods/{name}/log`: find the container's agent and stream its answer through unchanged.

use super::errors::{ApiError, ApiResult};
use super::{Query, Shared};
use crate::agent_client;
use crate::registry::pod_log::{agent_error, LogOptions, MAX_ERROR_BODY};
use axum::body::Body;
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use futures::StreamExt;
use http_body_util::BodyExt;
use hyper::body::Incoming;

/// The subresource's name in the path.
pub const SUBRESOURCE: &str = "log";

pub async fn serve(s: &Shared, ns: &str, name: &str, q: &Query) -> ApiResult<Response> {
    let opts = LogOptions::parse(|k| q.get(k))?;
    opts.validate(name)?;
    let Some(loc) = s.registry.log_location(ns, name, &opts)? else {
        // Kubernetes streams nothing for a pod no node has taken yet.
        return Ok(StatusCode::NO_CONTENT.into_response());
    };
    tracing::debug!(node = %loc.node, agent = %loc.addr, path = %loc.path_and_query, "proxying log request");
    let resp = s.agents.get(loc.addr, &loc.path_and_query).await.map_err(|e| {
        let message = format!("node {:?}: {e}", loc.node);
        match e {
            agent_client::Error::Timeout { .. } => ApiError::timeout(message),
            _ => ApiError::internal(message),
        }
    })?;
    let code = resp.status().as_u16();
    if !(200..=206).contains(&code) {
        let body = read_error_body(resp.into_body(), s.agents.timeout()).await;
        return Err(agent_error(code, &body, name));
    }
    let body = if opts.follow {
        // A followed log ends with the server, like a watch, or it would hold up shutdown.
        let mut shutdown = s.shutdown.clone();
        let stop = async move {
            let _ = shutdown.wait_for(|stopping| *stopping).await;
        };
        Body::from_stream(resp.into_body().into_data_stream().take_until(Box::pin(stop)))
    } else {
        Body::new(resp.into_body())
    };
    Ok(([(header::CONTENT_TYPE, "text/plain")], body).into_response())
}

/// Up to `MAX_ERROR_BODY` bytes of an agent's error answer (pods/log and pods/exec refusals).
pub(crate) async fn read_error_bytes(mut body: Incoming, timeout: std::time::Duration) -> Vec<u8> {
    let mut out = Vec::new();
    let read = async {
        while out.len() < MAX_ERROR_BODY {
            match body.frame().await {
                Some(Ok(frame)) => {
                    if let Ok(data) = frame.into_data() {
                        out.extend_from_slice(&data);
                    }
                }
                Some(Err(_)) | None => break,
            }
        }
    };
    let _ = tokio::time::timeout(timeout, read).await;
    out.truncate(MAX_ERROR_BODY);
    out
}

/// The same, as text.
async fn read_error_body(body: Incoming, timeout: std::time::Duration) -> String {
    String::from_utf8_lossy(&read_error_bytes(body, timeout).await).into_owned()
}
