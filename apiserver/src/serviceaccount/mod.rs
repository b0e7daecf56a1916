//! ServiceAccount tokens: the keys, the JWTs, the TokenRequest subresource that issues them and
//! the authenticator that accepts them.

pub mod authn;
pub mod keys;
pub mod request;
pub mod token;

use std::path::PathBuf;
use std::sync::Arc;

/// Kubernetes' default `--service-account-issuer`.
pub const DEFAULT_ISSUER: &str = "https://kubernetes.default.svc.cluster.local";

/// The ServiceAccount token flags.
#[derive(Debug, Clone, Default)]
pub struct Config {
    /// `--service-account-signing-key-file`: without it no token is issued (TokenRequest is 404).
    pub signing_key_file: Option<PathBuf>,
    /// `--service-account-key-file` (repeatable): public keys that verify; the signing key's own
    /// public half always does.
    pub key_files: Vec<PathBuf>,
    /// `--service-account-issuer` (empty: Kubernetes' default).
    pub issuer: String,
    /// `--api-audiences` (empty: the issuer).
    pub api_audiences: Vec<String>,
    /// `--service-account-max-token-expiration` in seconds (None: no cap).
    pub max_expiration_seconds: Option<i64>,
}

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(transparent)]
    Key(#[from] keys::Error),
    #[error("--service-account-max-token-expiration must be at least 1h (3600 s), got {0} s")]
    MaxExpiration(i64),
}

/// What the apiserver issues and verifies tokens with.
#[derive(Debug)]
pub struct Tokens {
    pub issuer: token::Issuer,
    pub max_expiration_seconds: Option<i64>,
}

impl Config {
    /// The issuer the flags describe; `None` when no signing key is given (nothing is issued,
    /// and with no `--service-account-key-file` either nothing is verified).
    pub fn load(&self) -> Result<Option<Arc<Tokens>>, Error> {
        let Some(path) = &self.signing_key_file else { return Ok(None) };
        if let Some(max) = self.max_expiration_seconds.filter(|m| *m < 3600) {
            return Err(Error::MaxExpiration(max));
        }
        let signing = keys::load_signing_key(path)?;
        let mut verification = vec![signing.public.clone()];
        for f in &self.key_files {
            for k in keys::load_public_keys(f)? {
                if !verification.iter().any(|v| v.kid == k.kid) {
                    verification.push(k);
                }
            }
        }
        let issuer = if self.issuer.is_empty() { DEFAULT_ISSUER.to_string() } else { self.issuer.clone() };
        let api_audiences =
            if self.api_audiences.is_empty() { vec![issuer.clone()] } else { self.api_audiences.clone() };
        tracing::info!(issuer = %issuer, keys = verification.len(), kid = %signing.public.kid, "service account tokens on");
        Ok(Some(Arc::new(Tokens {
            issuer: token::Issuer { issuer, signing, verification, api_audiences },
            max_expiration_seconds: self.max_expiration_seconds,
        })))
    }
}
