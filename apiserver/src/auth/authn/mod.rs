//! Authentication: who sent a request. Kubernetes' chain, in its order: x509 client
//! certificates, then bearer tokens (a union of token authenticators: the static token file,
//! bootstrap tokens, ServiceAccount JWTs), all in a union whose users get `system:authenticated`;
//! then, only if nothing failed, the fallback — anonymous (on the paths it is allowed on) on the
//! secure port, the insecure superuser on the explicit plain-HTTP port.

pub mod bootstrap_token;
pub mod token_file;
pub mod x509;

use super::{names, UserInfo};
use axum::http::{header, HeaderMap};
use std::path::PathBuf;
use std::sync::Arc;

/// The authentication flags.
#[derive(Debug, Clone)]
pub struct Config {
    /// `--client-ca-file`: client certificates signed by this CA authenticate (CN user, O groups).
    pub client_ca_file: Option<PathBuf>,
    /// `--token-auth-file`: static bearer tokens (CSV).
    pub token_auth_file: Option<PathBuf>,
    /// `--anonymous-auth`: anonymous requests on the public paths (on by default, as Kubernetes).
    pub anonymous: bool,
    /// `--enable-bootstrap-token-auth`: bootstrap tokens (Secrets in kube-system) authenticate.
    pub bootstrap_tokens: bool,
    /// ServiceAccount JWTs (`--service-account-*`): what verifies them.
    pub service_accounts: Option<Arc<crate::serviceaccount::Tokens>>,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            client_ca_file: None,
            token_auth_file: None,
            anonymous: true,
            bootstrap_tokens: false,
            service_accounts: None,
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(transparent)]
    TokenFile(#[from] token_file::Error),
    #[error("--client-ca-file {path}: {source}")]
    ClientCa {
        path: String,
        #[source]
        source: kaji_pki::Error,
    },
}

/// The chain `config` asks for, ending in `fallback` (what a listener allows without credentials;
/// `--anonymous-auth=false` turns anonymous off). Authenticators that read the cluster's state
/// (bootstrap tokens) read it from `cache`.
pub fn chain(config: &Config, fallback: Fallback, cache: &Arc<crate::cache::Cache>) -> Result<Chain, Error> {
    let mut tokens: Vec<Arc<dyn TokenAuthenticator>> = Vec::new();
    if let Some(path) = &config.token_auth_file {
        let file = token_file::TokenFile::load(path)?;
        tracing::info!(path = %path.display(), tokens = file.len(), "static token file loaded");
        tokens.push(Arc::new(file));
    }
    if config.bootstrap_tokens {
        tokens.push(Arc::new(bootstrap_token::BootstrapTokens::new(cache.clone())));
    }
    if let Some(sa) = &config.service_accounts {
        tokens.push(Arc::new(crate::serviceaccount::authn::ServiceAccountTokens::new(sa.clone(), cache.clone())));
    }
    let mut authenticators: Vec<Arc<dyn Authenticator>> = Vec::new();
    if let Some(path) = &config.client_ca_file {
        let ca_err = |source| Error::ClientCa { path: path.display().to_string(), source };
        let pem = kaji_pki::files::read(path).map_err(ca_err)?;
        authenticators.push(Arc::new(x509::X509::new(&pem).map_err(ca_err)?));
    }
    let tokens = Arc::new(BearerToken(tokens));
    if !tokens.0.is_empty() {
        authenticators.push(tokens.clone());
    }
    let fallback = match fallback {
        Fallback::Anonymous { .. } if !config.anonymous => Fallback::None,
        other => other,
    };
    let api_audiences = config.service_accounts.as_ref().map(|t| t.issuer.api_audiences.clone()).unwrap_or_default();
    Ok(Chain { authenticators: Union(authenticators), tokens, api_audiences, fallback })
}

/// What an authenticator may look at.
#[derive(Clone, Copy)]
pub struct AuthnRequest<'a> {
    pub headers: &'a HeaderMap,
    pub path: &'a str,
    /// The TLS client's certificate chain (leaf first), unverified: the x509 authenticator
    /// verifies it. Empty on plain HTTP or when the client sent none.
    pub client_chain: &'a [Vec<u8>],
}

/// Why credentials were refused (logged; the client only sees `401 Unauthorized`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct AuthnError(pub String);

/// `Ok(None)`: these credentials are not mine to judge (none sent, another format).
pub type AuthnResult = Result<Option<UserInfo>, AuthnError>;

/// Authenticates a whole request (Kubernetes' `authenticator.Request`).
pub trait Authenticator: Send + Sync {
    fn authenticate(&self, req: &AuthnRequest<'_>) -> AuthnResult;
}

/// A token judged for a set of audiences: its user and the audiences it is good for.
pub type AudienceResult = Result<Option<(UserInfo, Vec<String>)>, AuthnError>;

/// Authenticates a bearer token (Kubernetes' `authenticator.Token`). Token authenticators are
/// tried in order; one that does not recognise a token's format answers `Ok(None)`.
pub trait TokenAuthenticator: Send + Sync {
    fn authenticate_token(&self, token: &str) -> AuthnResult;

    /// The token judged for `audiences` (a TokenReview's; Kubernetes' `WithAudiences`), `api`
    /// being the apiserver's own. An authenticator that knows no audiences (this default,
    /// Kubernetes' `WrapAudienceAgnosticToken`) speaks for the API audiences only: asked for none
    /// of them it does not know the token.
    fn authenticate_for(&self, token: &str, audiences: &[String], api: &[String]) -> AudienceResult {
        let good = intersect(api, audiences);
        if !api.is_empty() && good.is_empty() {
            return Ok(None);
        }
        Ok(self.authenticate_token(token)?.map(|u| (u, good)))
    }
}

/// The audiences of `a` that `b` also names, in `a`'s order (`authenticator.Audiences.Intersect`).
pub fn intersect(a: &[String], b: &[String]) -> Vec<String> {
    a.iter().filter(|x| b.contains(x)).cloned().collect()
}

/// The first user any authenticator finds; errors are kept and returned only if none does.
pub struct Union(pub Vec<Arc<dyn Authenticator>>);

impl Authenticator for Union {
    fn authenticate(&self, req: &AuthnRequest<'_>) -> AuthnResult {
        let mut errors = Vec::new();
        for a in &self.0 {
            match a.authenticate(req) {
                Ok(Some(u)) => return Ok(Some(u)),
                Ok(None) => {}
                Err(e) => errors.push(e.0),
            }
        }
        if errors.is_empty() {
            Ok(None)
        } else {
            Err(AuthnError(errors.join(", ")))
        }
    }
}

/// `Authorization: Bearer <token>` through a union of token authenticators. A token nobody
/// recognises is an error ("invalid bearer token"), so it never falls back to anonymous.
pub struct BearerToken(pub Vec<Arc<dyn TokenAuthenticator>>);

impl BearerToken {
    /// The first authenticator's answer for `token`; the errors of all of them if none knows it.
    fn first<T>(
        &self,
        mut each: impl FnMut(&dyn TokenAuthenticator) -> Result<Option<T>, AuthnError>,
    ) -> Result<T, AuthnError> {
        let mut errors = Vec::new();
        for a in &self.0 {
            match each(a.as_ref()) {
                Ok(Some(found)) => return Ok(found),
                Ok(None) => {}
                Err(e) => errors.push(e.0),
            }
        }
        if errors.is_empty() {
            errors.push("invalid bearer token".into());
        }
        Err(AuthnError(errors.join(", ")))
    }

    /// A TokenReview's question: `token` for `audiences` (see [`TokenAuthenticator::authenticate_for`]).
    pub fn review(
        &self,
        token: &str,
        audiences: &[String],
        api: &[String],
    ) -> Result<(UserInfo, Vec<String>), AuthnError> {
        self.first(|a| a.authenticate_for(token, audiences, api))
    }
}

impl Authenticator for BearerToken {
    fn authenticate(&self, req: &AuthnRequest<'_>) -> AuthnResult {
        let Some(token) = bearer_token(req.headers) else { return Ok(None) };
        self.first(|a| a.authenticate_token(token)).map(Some)
    }
}

/// The token of `Authorization: Bearer <token>` (scheme case-insensitive), as Kubernetes'
/// bearertoken authenticator reads it; an empty token is no token.
pub fn bearer_token(headers: &HeaderMap) -> Option<&str> {
    let auth = headers.get(header::AUTHORIZATION)?.to_str().ok()?.trim();
    let mut parts = auth.splitn(3, ' ');
    let scheme = parts.next()?;
    let token = parts.next()?;
    (scheme.eq_ignore_ascii_case("bearer") && !token.is_empty()).then_some(token)
}

/// What answers when no authenticator knew the request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Fallback {
    /// Nothing: 401.
    None,
    /// `system:anonymous`, only on these exact paths (Kubernetes' anonymous authenticator with
    /// `conditions`); 401 anywhere else.
    Anonymous { paths: Vec<String> },
    /// Everyone is `system:unsecured` in `system:masters` (the explicit plain-HTTP port).
    InsecureSuperuser,
}

impl Fallback {
    /// kube-apiserver's health and version endpoints, which `system:public-info-viewer` allows.
    pub fn public_paths() -> Self {
        Fallback::Anonymous { paths: ["/healthz", "/livez", "/readyz", "/version"].map(String::from).to_vec() }
    }
}

/// The whole chain: authenticators, `system:authenticated` added, then the fallback unless an
/// authenticator refused the credentials it was given.
pub struct Chain {
    pub authenticators: Union,
    /// The bearer token authenticators alone, for TokenReview.
    pub tokens: Arc<BearerToken>,
    /// `--api-audiences`: what a token is judged for when no audience is asked.
    pub api_audiences: Vec<String>,
    pub fallback: Fallback,
}

/// The group adder every authenticated user passes (kube-apiserver's AuthenticatedGroupAdder).
fn add_authenticated(user: &mut UserInfo) {
    if !user.in_group(names::ALL_AUTHENTICATED) && !user.in_group(names::ALL_UNAUTHENTICATED) {
        user.groups.push(names::ALL_AUTHENTICATED.into());
    }
}

impl Chain {
    pub fn authenticate(&self, req: &AuthnRequest<'_>) -> AuthnResult {
        if let Some(mut user) = self.authenticators.authenticate(req)? {
            add_authenticated(&mut user);
            return Ok(Some(user));
        }
        Ok(match &self.fallback {
            Fallback::None => None,
            Fallback::Anonymous { paths } => paths.iter().any(|p| p == req.path).then(UserInfo::anonymous),
            Fallback::InsecureSuperuser => Some(UserInfo::new(
                names::INSECURE_SUPERUSER,
                &[names::SYSTEM_PRIVILEGED_GROUP, names::ALL_AUTHENTICATED],
            )),
        })
    }

    /// A TokenReview: the bearer token authenticators alone, behind the same group adder as
    /// requests (kube-apiserver's NewTokenGroupAdder), so the user is `system:authenticated`.
    pub fn review_token(&self, token: &str, audiences: &[String]) -> Result<(UserInfo, Vec<String>), AuthnError> {
        let (mut user, good) = self.tokens.review(token, audiences, &self.api_audiences)?;
        add_authenticated(&mut user);
        Ok((user, good))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    struct Tokens;
    impl TokenAuthenticator for Tokens {
        fn authenticate_token(&self, token: &str) -> AuthnResult {
            match token {
                "good" => Ok(Some(UserInfo::new("alice", &["dev"]))),
                "broken" => Err(AuthnError("token expired".into())),
                _ => Ok(None),
            }
        }
    }

    fn chain(fallback: Fallback) -> Chain {
        let tokens = Arc::new(BearerToken(vec![Arc::new(Tokens)]));
        Chain { authenticators: Union(vec![tokens.clone()]), tokens, api_audiences: vec![], fallback }
    }

    #[test]
    fn a_token_without_audiences_speaks_only_for_the_api_audiences() {
        let api = ["https://kubernetes.default.svc".to_string()];
        let (user, auds) = Tokens.authenticate_for("good", &api, &api).expect("ok").expect("known");
        assert_eq!((user.name.as_str(), auds), ("alice", api.to_vec()));
        assert_eq!(Tokens.authenticate_for("good", &["vault".to_string()], &api), Ok(None));
        let b = BearerToken(vec![Arc::new(Tokens)]);
        assert_eq!(b.review("good", &["vault".to_string()], &api), Err(AuthnError("invalid bearer token".into())));
    }

    fn auth(chain: &Chain, authorization: Option<&str>, path: &str) -> AuthnResult {
        let mut headers = HeaderMap::new();
        if let Some(a) = authorization {
            headers.insert(header::AUTHORIZATION, HeaderValue::from_str(a).expect("header"));
        }
        chain.authenticate(&AuthnRequest { headers: &headers, path, client_chain: &[] })
    }

    #[test]
    fn a_known_token_is_its_user_and_authenticated() {
        let c = chain(Fallback::public_paths());
        let u = auth(&c, Some("Bearer good"), "/api").expect("ok").expect("user");
        assert_eq!((u.name.as_str(), u.groups.clone()), ("alice", vec!["dev".into(), "system:authenticated".into()]));
        assert!(auth(&c, Some("bearer good"), "/api").expect("ok").is_some(), "the scheme is case-insensitive");
    }

    #[test]
    fn bad_tokens_never_become_anonymous() {
        let c = chain(Fallback::public_paths());
        assert_eq!(
            auth(&c, Some("Bearer nobody-knows-me"), "/healthz"),
            Err(AuthnError("invalid bearer token".into()))
        );
        assert_eq!(auth(&c, Some("Bearer broken"), "/healthz"), Err(AuthnError("token expired".into())));
        assert_eq!(auth(&c, Some("Bearer broken"), "/api"), Err(AuthnError("token expired".into())));
    }

    #[test]
    fn anonymous_only_on_the_public_paths() {
        let c = chain(Fallback::public_paths());
        for path in ["/healthz", "/livez", "/readyz", "/version"] {
            let u = auth(&c, None, path).expect("ok").expect("anonymous");
            assert_eq!(
                (u.name.as_str(), u.groups.clone()),
                ("system:anonymous", vec!["system:unauthenticated".into()])
            );
        }
        for path in ["/api", "/api/v1/pods", "/healthz/etcd", "/metrics"] {
            assert_eq!(auth(&c, None, path), Ok(None), "{path}");
        }
        // An empty bearer token or another scheme is no credential at all.
        assert!(auth(&c, Some("Bearer "), "/healthz").expect("ok").is_some());
        assert_eq!(auth(&c, Some("Basic YTpi"), "/api"), Ok(None));
        assert_eq!(auth(&chain(Fallback::None), None, "/healthz"), Ok(None));
    }

    #[test]
    fn the_insecure_port_makes_everyone_a_superuser_unless_a_token_says_otherwise() {
        let c = chain(Fallback::InsecureSuperuser);
        let u = auth(&c, None, "/api/v1/pods").expect("ok").expect("user");
        assert_eq!(u.name, "system:unsecured");
        assert!(u.in_group("system:masters"));
        assert_eq!(auth(&c, Some("Bearer good"), "/api").expect("ok").expect("user").name, "alice");
        assert!(auth(&c, Some("Bearer nope"), "/api").is_err());
    }
}
