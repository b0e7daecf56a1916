//! The client for the nodes' agents (their kubelet port): HTTPS with the apiserver's kubelet
//! client certificate (kube-apiserver's `--kubelet-client-certificate`), verifying the agent
//! against `--kubelet-certificate-authority` when given — or plain HTTP/1.1 for test agents —
//! with a connect and a response-header timeout so a dead node is an error, not a hang, and TCP
//! keepalive so a node that dies mid-stream ends the stream.

use axum::body::Bytes;
use axum::http::{header, Request, Response};
use http_body_util::Empty;
use hyper::body::Incoming;
use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite};

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
    #[error("failed to reach the agent at {addr}: {source}")]
    Stream {
        addr: SocketAddr,
        #[source]
        source: std::io::Error,
    },
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// A byte stream to an agent (TLS or plain).
pub trait AgentStream: AsyncRead + AsyncWrite + Unpin + Send {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send> AgentStream for T {}

/// Shared by every request; clones share the connection pool.
#[derive(Clone)]
pub struct AgentClient {
    client: Client<HttpsConnector<HttpConnector>, Empty<Bytes>>,
    /// None: plain HTTP (test agents).
    tls: Option<Arc<tokio_rustls::rustls::ClientConfig>>,
    timeout: Duration,
}

fn http_connector(timeout: Duration) -> HttpConnector {
    let mut conn = HttpConnector::new();
    conn.set_connect_timeout(Some(timeout));
    conn.set_nodelay(true);
    conn.set_keepalive(Some(Duration::from_secs(30)));
    conn.set_keepalive_interval(Some(Duration::from_secs(10)));
    conn.set_keepalive_retries(Some(3));
    conn.enforce_http(false);
    conn
}

impl AgentClient {
    /// `timeout` bounds connecting and waiting for the response headers, not the body: a
    /// followed log streams for as long as the container runs. With `tls`, agents are reached
    /// over HTTPS only.
    pub fn new(timeout: Duration, tls: Option<tokio_rustls::rustls::ClientConfig>) -> Self {
        let tls = tls.map(Arc::new);
        let builder = hyper_rustls::HttpsConnectorBuilder::new();
        // hyper-rustls sets ALPN itself (from enable_http1) and refuses a config that has it.
        let pooled = |mut c: tokio_rustls::rustls::ClientConfig| {
            c.alpn_protocols.clear();
            c
        };
        let conn = match &tls {
            Some(config) => builder.with_tls_config(pooled((**config).clone())).https_only(),
            None => builder
                .with_tls_config(pooled(kaji_pki::tls::unverified_client_config(None).expect("a config without files")))
                .https_or_http(),
        }
        .enable_http1()
        .wrap_connector(http_connector(timeout));
        let client = Client::builder(TokioExecutor::new()).pool_idle_timeout(Duration::from_secs(60)).build(conn);
        Self { client, tls, timeout }
    }

    fn scheme(&self) -> &'static str {
        if self.tls.is_some() {
            "https"
        } else {
            "http"
        }
    }

    /// A raw connection to an agent (TLS when configured), for the upgraded streams of exec,
    /// attach and port-forward; bounded by the timeout.
    pub async fn connect(&self, addr: SocketAddr) -> Result<Box<dyn AgentStream>> {
        let timed_out = || Error::Timeout { addr, timeout: self.timeout };
        let stream = tokio::time::timeout(self.timeout, tokio::net::TcpStream::connect(addr))
            .await
            .map_err(|_| timed_out())?
            .map_err(|source| Error::Stream { addr, source })?;
        let _ = stream.set_nodelay(true);
        let Some(config) = &self.tls else { return Ok(Box::new(stream)) };
        let name = tokio_rustls::rustls::pki_types::ServerName::IpAddress(addr.ip().into());
        let tls =
            tokio::time::timeout(self.timeout, tokio_rustls::TlsConnector::from(config.clone()).connect(name, stream))
                .await
                .map_err(|_| timed_out())?
                .map_err(|source| Error::Stream { addr, source })?;
        Ok(Box::new(tls))
    }

    /// How long connecting and waiting for response headers may take.
    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    /// `GET http://{addr}{path_and_query}`; any status is returned, the caller judges it.
    pub async fn get(&self, addr: SocketAddr, path_and_query: &str) -> Result<Response<Incoming>> {
        let req = Request::get(format!("{}://{addr}{path_and_query}", self.scheme()))
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
