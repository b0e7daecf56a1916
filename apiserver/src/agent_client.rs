//! The client for the nodes' agents (their kubelet port): plain HTTP/1.1, with a connect and a
//! response-header timeout so a dead node is an error, not a hang, and TCP keepalive so a
//! node that dies mid-stream ends the stream.

use axum::body::Bytes;
use axum::http::{header, Request, Response};
use http_body_util::Empty;
use hyper::body::Incoming;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use std::net::SocketAddr;
use std::time::Duration;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("invalid agent request {path:?}: {source}")]
    Request {
        path: String,
        #[source]
        source: axum::http::Error,
    },
    #[error("failed to reach the agent at {addr}: {detail}")]
    Connect {
        addr: SocketAddr,
        /// The error with its sources, which hyper's own message leaves out.
        detail: String,
        #[source]
        source: hyper_util::client::legacy::Error,
    },
    #[error("the agent at {addr} did not answer within {}s", timeout.as_secs_f64())]
    Timeout { addr: SocketAddr, timeout: Duration },
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Shared by every request; clones share the connection pool.
#[derive(Clone)]
pub struct AgentClient {
    client: Client<HttpConnector, Empty<Bytes>>,
    timeout: Duration,
}

impl AgentClient {
    /// `timeout` bounds connecting and waiting for the response headers, not the body: a
    /// followed log streams for as long as the container runs.
    pub fn new(timeout: Duration) -> Self {
        let mut conn = HttpConnector::new();
        conn.set_connect_timeout(Some(timeout));
        conn.set_nodelay(true);
        conn.set_keepalive(Some(Duration::from_secs(30)));
        conn.set_keepalive_interval(Some(Duration::from_secs(10)));
        conn.set_keepalive_retries(Some(3));
        let client = Client::builder(TokioExecutor::new()).pool_idle_timeout(Duration::from_secs(60)).build(conn);
        Self { client, timeout }
    }

    /// How long connecting and waiting for response headers may take.
    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    /// `GET http://{addr}{path_and_query}`; any status is returned, the caller judges it.
    pub async fn get(&self, addr: SocketAddr, path_and_query: &str) -> Result<Response<Incoming>> {
        let req = Request::get(format!("http://{addr}{path_and_query}"))
            .header(header::USER_AGENT, concat!("kaji-apiserver/", env!("CARGO_PKG_VERSION")))
            .body(Empty::new())
            .map_err(|source| Error::Request { path: path_and_query.to_string(), source })?;
        match tokio::time::timeout(self.timeout, self.client.request(req)).await {
            Ok(Ok(resp)) => Ok(resp),
            Ok(Err(source)) => Err(Error::Connect { addr, detail: with_sources(&source), source }),
            Err(_) => Err(Error::Timeout { addr, timeout: self.timeout }),
        }
    }
}

/// `a: b: c` from an error and its sources.
fn with_sources(err: &dyn std::error::Error) -> String {
    let mut out = err.to_string();
    let mut next = err.source();
    while let Some(e) = next {
        out.push_str(": ");
        out.push_str(&e.to_string());
        next = e.source();
    }
    out
}
