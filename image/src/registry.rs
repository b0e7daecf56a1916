//! OCI distribution (v2) client for one pull: scheme choice (HTTPS, or HTTP for loopback and
//! insecure registries), the 401 → token/basic dance, manifest fetches and verified blob downloads,
//! and turning registry error bodies into [`Error`]s a person can act on.

use std::net::IpAddr;
use std::path::Path;
use std::sync::atomic::Ordering;
use std::sync::Mutex;
use std::time::Duration;

use reqwest::header::{ACCEPT, AUTHORIZATION, CONTENT_TYPE, WWW_AUTHENTICATE};
use reqwest::{Client, Response, StatusCode};
use serde::Deserialize;
use tokio::io::AsyncWriteExt;

use crate::auth::{parse_challenge, Challenge, Credentials, TokenResponse};
use crate::digest::{self, Hasher};
use crate::error::{Error, IoContext, Result};
use crate::manifest::{Descriptor, MANIFEST_ACCEPT};
use crate::reference::Reference;
use crate::store::{Inner, StoreOptions};

const MAX_MANIFEST_BYTES: usize = 4 << 20;

/// The HTTP client every pull shares. rustls with the `ring` provider, system roots plus
/// `extra_ca_pem`.
pub(crate) fn build_client(opts: &StoreOptions) -> Result<Client> {
    install_crypto_provider();
    let mut certs = Vec::new();
    for pem in &opts.extra_ca_pem {
        certs.extend(
            reqwest::Certificate::from_pem_bundle(pem)
                .map_err(|e| Error::invalid("extra CA certificate", error_chain(&e)))?,
        );
    }
    let mut builder = Client::builder()
        .user_agent(concat!("kaji/", env!("CARGO_PKG_VERSION")))
        .connect_timeout(Duration::from_secs(30))
        .read_timeout(Duration::from_secs(120));
    if !certs.is_empty() {
        builder = builder.tls_certs_merge(certs);
    }
    builder.build().map_err(|e| Error::invalid("registry client configuration", error_chain(&e)))
}

/// Makes `ring` the process-wide rustls provider unless one is installed already. reqwest is built
/// without a provider of its own, so call this before building any other reqwest client.
pub fn install_crypto_provider() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}

/// Plain HTTP for loopback hosts and configured insecure registries, as docker and containerd do.
pub fn uses_plain_http(host: &str, insecure_registries: &[String]) -> bool {
    if insecure_registries.iter().any(|r| r == host) {
        return true;
    }
    let bare = match host.rsplit_once(':') {
        Some((h, port)) if port.bytes().all(|b| b.is_ascii_digit()) && !h.ends_with(':') => h,
        _ => host,
    };
    let bare = bare.trim_start_matches('[').trim_end_matches(']');
    bare == "localhost" || bare.parse::<IpAddr>().is_ok_and(|ip| ip.is_loopback())
}

/// One pull's conversation with one registry repository.
pub(crate) struct Session<'a> {
    inner: &'a Inner,
    reference: String,
    registry: String,
    repository: String,
    base: String,
    creds: Option<&'a Credentials>,
    /// The `Authorization` value that worked, reused for every later request of this pull.
    auth: Mutex<Option<String>>,
}

impl<'a> Session<'a> {
    pub(crate) fn new(inner: &'a Inner, reference: &Reference, creds: Option<&'a Credentials>) -> Session<'a> {
        let host = reference.api_host();
        let scheme = if uses_plain_http(host, &inner.opts.insecure_registries)
            || uses_plain_http(&reference.registry, &inner.opts.insecure_registries)
        {
            "http"
        } else {
            "https"
        };
        Session {
            inner,
            reference: reference.to_string(),
            registry: reference.registry.clone(),
            repository: reference.repository.clone(),
            base: format!("{scheme}://{host}/v2/{}", reference.repository),
            creds,
            auth: Mutex::new(None),
        }
    }

    /// The manifest (or index) body and its `Content-Type` for a tag or digest.
    pub(crate) async fn manifest(&self, tag_or_digest: &str) -> Result<(Vec<u8>, Option<String>)> {
        let url = format!("{}/manifests/{tag_or_digest}", self.base);
        let mut resp = self.get(&url, Some(MANIFEST_ACCEPT)).await?;
        let content_type = resp.headers().get(CONTENT_TYPE).and_then(|v| v.to_str().ok()).map(str::to_string);
        let mut body = Vec::new();
        while let Some(chunk) = resp.chunk().await.map_err(|e| self.network(&url, &e))? {
            body.extend_from_slice(&chunk);
            if body.len() > MAX_MANIFEST_BYTES {
                return Err(Error::invalid("manifest", format!("{url} is larger than {MAX_MANIFEST_BYTES} bytes")));
            }
        }
        Ok((body, content_type))
    }

    /// A small blob (config) in memory, verified.
    pub(crate) async fn blob_bytes(&self, desc: &Descriptor) -> Result<Vec<u8>> {
        let url = format!("{}/blobs/{}", self.base, desc.digest);
        let resp = self.get(&url, None).await?;
        let body = resp.bytes().await.map_err(|e| self.network(&url, &e))?;
        self.inner.blobs_downloaded.fetch_add(1, Ordering::Relaxed);
        digest::verify(|| self.blob_name(desc), &desc.digest, &digest::sha256(&body))?;
        Ok(body.to_vec())
    }

    /// Streams a blob to `path`, hashing as it goes; fails if digest or size do not match.
    pub(crate) async fn blob_to_file(&self, desc: &Descriptor, path: &Path) -> Result<()> {
        let url = format!("{}/blobs/{}", self.base, desc.digest);
        let mut resp = self.get(&url, None).await?;
        self.inner.blobs_downloaded.fetch_add(1, Ordering::Relaxed);
        let mut file = tokio::fs::File::create(path).await.ctx("create", path)?;
        let mut hasher = Hasher::default();
        while let Some(chunk) = resp.chunk().await.map_err(|e| self.network(&url, &e))? {
            hasher.update(&chunk);
            if hasher.bytes() > desc.size {
                return Err(Error::DigestMismatch {
                    what: format!("{} (more than the {} bytes the manifest declares)", self.blob_name(desc), desc.size),
                    expected: desc.digest.clone(),
                    actual: "(truncated)".into(),
                });
            }
            file.write_all(&chunk).await.ctx("write", path)?;
        }
        file.flush().await.ctx("write", path)?;
        digest::verify(|| self.blob_name(desc), &desc.digest, &hasher.finish())
    }

    fn blob_name(&self, desc: &Descriptor) -> String {
        format!("blob {} of {}/{}", desc.digest, self.registry, self.repository)
    }

    /// GET with whatever auth worked so far; on 401 answer the challenge once and retry.
    async fn get(&self, url: &str, accept: Option<&str>) -> Result<Response> {
        let resp = self.send(url, accept).await?;
        let resp = if resp.status() == StatusCode::UNAUTHORIZED {
            let challenge =
                resp.headers().get(WWW_AUTHENTICATE).and_then(|v| v.to_str().ok()).and_then(parse_challenge);
            match challenge {
                Some(challenge) => {
                    let header = self.authenticate(challenge).await?;
                    *self.auth.lock().unwrap_or_else(|p| p.into_inner()) = Some(header);
                    self.send(url, accept).await?
                }
                None => resp,
            }
        } else {
            resp
        };
        if resp.status().is_success() {
            Ok(resp)
        } else {
            Err(self.status_error(resp).await)
        }
    }

    async fn send(&self, url: &str, accept: Option<&str>) -> Result<Response> {
        let mut req = self.inner.client.get(url);
        if let Some(accept) = accept {
            req = req.header(ACCEPT, accept);
        }
        if let Some(auth) = self.auth.lock().unwrap_or_else(|p| p.into_inner()).clone() {
            req = req.header(AUTHORIZATION, auth);
        }
        req.send().await.map_err(|e| self.network(url, &e))
    }

    /// The `Authorization` header value that answers `challenge`.
    async fn authenticate(&self, challenge: Challenge) -> Result<String> {
        match challenge {
            Challenge::Basic => {
                let creds = self
                    .creds
                    .ok_or_else(|| self.unauthorized("authentication required and no credentials were given"))?;
                Ok(basic(creds))
            }
            Challenge::Bearer { realm, service, scope } => {
                let mut url = reqwest::Url::parse(&realm)
                    .map_err(|e| self.unauthorized(&format!("token realm {realm:?} is not a URL: {e}")))?;
                {
                    let mut query = url.query_pairs_mut();
                    if let Some(service) = &service {
                        query.append_pair("service", service);
                    }
                    let scope = scope.unwrap_or_else(|| format!("repository:{}:pull", self.repository));
                    query.append_pair("scope", &scope);
                }
                let mut req = self.inner.client.get(url.clone());
                if let Some(creds) = self.creds {
                    req = req.header(AUTHORIZATION, basic(creds));
                }
                let resp = req.send().await.map_err(|e| self.network(url.as_str(), &e))?;
                if !resp.status().is_success() {
                    return Err(self.status_error(resp).await);
                }
                let body = resp.bytes().await.map_err(|e| self.network(url.as_str(), &e))?;
                let token = serde_json::from_slice::<TokenResponse>(&body).ok().and_then(TokenResponse::into_token);
                let token =
                    token.ok_or_else(|| self.unauthorized(&format!("token server {realm} returned no token")))?;
                Ok(format!("Bearer {token}"))
            }
        }
    }

    fn unauthorized(&self, message: &str) -> Error {
        Error::Unauthorized {
            reference: self.reference.clone(),
            registry: self.registry.clone(),
            message: message.into(),
        }
    }

    fn network(&self, url: &str, e: &reqwest::Error) -> Error {
        let url = url.split('?').next().unwrap_or(url).to_string();
        Error::Network { reference: self.reference.clone(), url, detail: error_chain(e) }
    }

    async fn status_error(&self, resp: Response) -> Error {
        let status = resp.status();
        let body = resp.bytes().await.unwrap_or_default();
        let (code, message) = parse_error_body(&body, status);
        let (reference, registry) = (self.reference.clone(), self.registry.clone());
        match status {
            StatusCode::NOT_FOUND => Error::NotFound { reference, registry, status: status.as_u16(), message },
            StatusCode::UNAUTHORIZED => Error::Unauthorized { reference, registry, message },
            StatusCode::FORBIDDEN => Error::Denied { reference, registry, message },
            _ => Error::Registry { reference, registry, status: status.as_u16(), code, message },
        }
    }
}

fn basic(creds: &Credentials) -> String {
    use base64::Engine as _;
    let raw = format!("{}:{}", creds.username, creds.password);
    format!("Basic {}", base64::engine::general_purpose::STANDARD.encode(raw))
}

/// The registry's `{"errors":[{"code","message"}]}` as (code, message), falling back to the
/// status text. Several errors are joined with "; ".
pub fn parse_error_body(body: &[u8], status: StatusCode) -> (String, String) {
    #[derive(Deserialize)]
    struct Body {
        #[serde(default)]
        errors: Vec<Item>,
    }
    #[derive(Deserialize)]
    struct Item {
        #[serde(default)]
        code: String,
        #[serde(default)]
        message: String,
    }
    let fallback = status.canonical_reason().unwrap_or("error").to_ascii_lowercase();
    match serde_json::from_slice::<Body>(body) {
        Ok(parsed) if !parsed.errors.is_empty() => {
            let code = parsed.errors[0].code.clone();
            let message = parsed
                .errors
                .iter()
                .map(|e| {
                    if e.message.is_empty() {
                        e.code.to_ascii_lowercase().replace('_', " ")
                    } else {
                        e.message.clone()
                    }
                })
                .collect::<Vec<_>>()
                .join("; ");
            (code, message)
        }
        _ => {
            let text = String::from_utf8_lossy(body).trim().chars().take(200).collect::<String>();
            (String::new(), if text.is_empty() || text.starts_with('<') { fallback } else { text })
        }
    }
}

/// `error sending request: tcp connect error: Connection refused (os error 111)` and the like:
/// every cause, since the top-level reqwest message alone rarely says what went wrong.
fn error_chain(e: &dyn std::error::Error) -> String {
    let mut parts: Vec<String> = vec![e.to_string()];
    let mut source = e.source();
    while let Some(s) = source {
        let text = s.to_string();
        if !parts.iter().any(|p| p.contains(&text)) {
            parts.push(text);
        }
        source = s.source();
    }
    // The first part repeats the URL reqwest was given; drop it when causes follow.
    if parts.len() > 1 && parts[0].contains("for url") {
        parts.remove(0);
    }
    parts.join(": ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_and_listed_registries_use_plain_http() {
        let insecure = vec!["registry.lan:5000".to_string()];
        for host in ["localhost", "localhost:5000", "127.0.0.1:5000", "127.9.9.9", "[::1]:5000", "registry.lan:5000"] {
            assert!(uses_plain_http(host, &insecure), "{host}");
        }
        for host in ["docker.io", "registry-1.docker.io", "10.0.0.1:5000", "registry.lan", "localhost.evil.com"] {
            assert!(!uses_plain_http(host, &insecure), "{host}");
        }
    }

    #[test]
    fn parses_registry_error_bodies() {
        let body = br#"{"errors":[{"code":"MANIFEST_UNKNOWN","message":"manifest unknown","detail":{"Tag":"1"}}]}"#;
        assert_eq!(
            parse_error_body(body, StatusCode::NOT_FOUND),
            ("MANIFEST_UNKNOWN".to_string(), "manifest unknown".to_string())
        );
        let two = br#"{"errors":[{"code":"DENIED","message":"no"},{"code":"TOOMANYREQUESTS"}]}"#;
        assert_eq!(parse_error_body(two, StatusCode::FORBIDDEN).1, "no; toomanyrequests");
        assert_eq!(parse_error_body(b"<html>", StatusCode::BAD_GATEWAY), (String::new(), "bad gateway".to_string()));
        assert_eq!(parse_error_body(b"rate limited", StatusCode::TOO_MANY_REQUESTS).1, "rate limited");
    }
}
