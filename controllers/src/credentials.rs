//! `--use-service-account-credentials`: each controller talks to the API as its own
//! ServiceAccount `kube-system/<controller>` (`system:serviceaccount:kube-system:<controller>`),
//! so RBAC grants it exactly its `system:controller:<controller>` role — Kubernetes'
//! `DynamicControllerClientBuilder`. The manager's own identity (`system:kube-controller-manager`)
//! only makes the accounts, asks for their tokens (TokenRequest, an hour each, renewed at 80% of
//! their life), watches through the shared caches and holds the leader Lease.

use k8s_openapi::api::authentication::v1::{TokenRequest, TokenRequestSpec};
use k8s_openapi::api::core::v1::ServiceAccount;
use kube::api::{Api, ObjectMeta, PostParams};
use std::collections::HashMap;
use std::sync::{Arc, RwLock};
use std::time::Duration;
use tokio::sync::watch;

/// Where the controllers' accounts live.
pub const NAMESPACE: &str = "kube-system";
/// How long each token is asked for (Kubernetes' controller client builder asks for an hour).
pub const TOKEN_SECONDS: i64 = 3600;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("cannot make ServiceAccount {NAMESPACE}/{name}")]
    Account {
        name: String,
        #[source]
        source: kube::Error,
    },
    #[error("cannot get a token for ServiceAccount {NAMESPACE}/{name}")]
    Token {
        name: String,
        #[source]
        source: kube::Error,
    },
    #[error("the TokenRequest for {NAMESPACE}/{name} came back without a token")]
    NoToken { name: String },
    #[error("cannot build the client of {name}")]
    Client {
        name: String,
        #[source]
        source: kube::Error,
    },
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// The clients the controllers use: one per controller name, all the manager's own unless
/// `accounts` holds the config (without a client identity) to build account clients from.
pub struct Clients {
    root: kube::Client,
    accounts: Option<kube::Config>,
    built: HashMap<String, kube::Client>,
}

impl Clients {
    pub fn new(root: kube::Client, accounts: Option<kube::Config>) -> Self {
        Self { root, accounts, built: HashMap::new() }
    }

    /// The client of controller `name` (its ServiceAccount's, made and kept fresh on first use).
    pub async fn get(&mut self, name: &str, stop: &watch::Receiver<bool>) -> Result<kube::Client> {
        let Some(config) = &self.accounts else { return Ok(self.root.clone()) };
        if let Some(c) = self.built.get(name) {
            return Ok(c.clone());
        }
        ensure_account(&self.root, name).await?;
        let (token, lifetime) = request_token(&self.root, name).await?;
        let header = Arc::new(RwLock::new(bearer(&token)));
        let client = account_client(config.clone(), header.clone(), name)?;
        tokio::spawn(renew(self.root.clone(), name.to_string(), header, lifetime, stop.clone()));
        self.built.insert(name.to_string(), client.clone());
        Ok(client)
    }
}

/// The ServiceAccount `kube-system/<name>`, created if missing.
async fn ensure_account(root: &kube::Client, name: &str) -> Result<()> {
    let api: Api<ServiceAccount> = Api::namespaced(root.clone(), NAMESPACE);
    let err = |source| Error::Account { name: name.to_string(), source };
    if api.get_opt(name).await.map_err(err)?.is_some() {
        return Ok(());
    }
    let sa = ServiceAccount {
        metadata: ObjectMeta { name: Some(name.into()), namespace: Some(NAMESPACE.into()), ..Default::default() },
        ..Default::default()
    };
    match api.create(&PostParams::default(), &sa).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(s)) if s.code == 409 => Ok(()),
        Err(e) => Err(err(e)),
    }
}

/// A fresh token for the account and how long it lives.
async fn request_token(root: &kube::Client, name: &str) -> Result<(String, Duration)> {
    let api: Api<ServiceAccount> = Api::namespaced(root.clone(), NAMESPACE);
    let tr = TokenRequest {
        spec: TokenRequestSpec { expiration_seconds: Some(TOKEN_SECONDS), ..Default::default() },
        ..Default::default()
    };
    let out = api
        .create_token_request(name, &PostParams::default(), &tr)
        .await
        .map_err(|source| Error::Token { name: name.to_string(), source })?;
    let status = out.status.ok_or_else(|| Error::NoToken { name: name.to_string() })?;
    if status.token.is_empty() {
        return Err(Error::NoToken { name: name.to_string() });
    }
    let lifetime = jiff::Timestamp::from_second(status.expiration_timestamp.0.as_second())
        .ok()
        .map(|exp| exp.duration_since(jiff::Timestamp::now()))
        .and_then(|d| Duration::try_from(d).ok())
        .unwrap_or(Duration::from_secs(TOKEN_SECONDS as u64));
    Ok((status.token, lifetime))
}

fn bearer(token: &str) -> http::HeaderValue {
    let mut v = http::HeaderValue::from_str(&format!("Bearer {token}"))
        .unwrap_or_else(|_| http::HeaderValue::from_static("Bearer invalid"));
    v.set_sensitive(true);
    v
}

/// A client that sends the current token of `header` with every request.
fn account_client(
    mut config: kube::Config,
    header: Arc<RwLock<http::HeaderValue>>,
    name: &str,
) -> Result<kube::Client> {
    config.auth_info = Default::default();
    let builder = kube::client::ClientBuilder::try_from(config)
        .map_err(|source| Error::Client { name: name.to_string(), source })?;
    let layer = tower::util::MapRequestLayer::new(move |mut req: http::Request<kube::client::Body>| {
        if let Ok(h) = header.read() {
            req.headers_mut().insert(http::header::AUTHORIZATION, h.clone());
        }
        req
    });
    Ok(builder.with_layer(&layer).build())
}

/// When a token of `lifetime` is renewed: at 80% of its life.
pub fn renew_after(lifetime: Duration) -> Duration {
    lifetime.mul_f64(0.8)
}

/// Renews the account's token until `stop`; a failed request is retried after 10 s.
async fn renew(
    root: kube::Client,
    name: String,
    header: Arc<RwLock<http::HeaderValue>>,
    lifetime: Duration,
    mut stop: watch::Receiver<bool>,
) {
    let mut wait = renew_after(lifetime);
    loop {
        tokio::select! {
            _ = stop.wait_for(|s| *s) => return,
            _ = tokio::time::sleep(wait) => {}
        }
        match request_token(&root, &name).await {
            Ok((token, lifetime)) => {
                if let Ok(mut h) = header.write() {
                    *h = bearer(&token);
                }
                tracing::debug!(account = %name, "renewed the controller's token");
                wait = renew_after(lifetime);
            }
            Err(e) => {
                tracing::warn!(account = %name, error = %e, "cannot renew the controller's token; retrying");
                wait = Duration::from_secs(10);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_are_renewed_at_four_fifths_of_their_life() {
        assert_eq!(renew_after(Duration::from_secs(3600)), Duration::from_secs(2880));
    }
}
