//! Registry credentials: picking them out of a Kubernetes `.dockerconfigjson` payload and parsing
//! the `WWW-Authenticate` challenges a registry answers 401 with.

use std::collections::HashMap;

use base64::Engine as _;
use serde::Deserialize;

use crate::reference::DOCKER_HUB;

/// Username and password (or token) for one registry.
#[derive(Clone, PartialEq, Eq)]
pub struct Credentials {
    pub username: String,
    pub password: String,
}

impl std::fmt::Debug for Credentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Credentials").field("username", &self.username).finish_non_exhaustive()
    }
}

#[derive(Deserialize)]
struct DockerConfig {
    auths: Option<HashMap<String, AuthEntry>>,
    #[serde(flatten)]
    legacy: HashMap<String, serde_json::Value>,
}

#[derive(Deserialize, Default)]
struct AuthEntry {
    auth: Option<String>,
    username: Option<String>,
    password: Option<String>,
}

/// Picks the credentials for `registry_host` (`docker.io`, `quay.io`, `127.0.0.1:5000`) out of a
/// `.dockerconfigjson` (or legacy `.dockercfg`) secret payload. Keys may carry a scheme and path
/// (`https://index.docker.io/v1/`) or a leading `*.` wildcard; an exact host match wins.
pub fn credentials_from_docker_config(json: &[u8], registry_host: &str) -> Option<Credentials> {
    let config: DockerConfig = serde_json::from_slice(json).ok()?;
    let entries: HashMap<String, AuthEntry> = match config.auths {
        Some(auths) => auths,
        None => config.legacy.into_iter().filter_map(|(k, v)| Some((k, AuthEntry::deserialize(v).ok()?))).collect(),
    };
    let want = canonical_host(registry_host);
    let exact = entries.iter().find(|(key, _)| canonical_host(key) == want);
    let wildcard = || {
        entries.iter().find(|(key, _)| {
            let key = canonical_host(key);
            key.strip_prefix("*.").is_some_and(|suffix| want.ends_with(&format!(".{suffix}")))
        })
    };
    let (_, entry) = exact.or_else(wildcard)?;
    entry_credentials(entry)
}

fn entry_credentials(entry: &AuthEntry) -> Option<Credentials> {
    if let (Some(username), Some(password)) = (&entry.username, &entry.password) {
        if !username.is_empty() {
            return Some(Credentials { username: username.clone(), password: password.clone() });
        }
    }
    let decoded = base64::engine::general_purpose::STANDARD.decode(entry.auth.as_deref()?.trim()).ok()?;
    let decoded = String::from_utf8(decoded).ok()?;
    let (username, password) = decoded.split_once(':')?;
    Some(Credentials { username: username.to_string(), password: password.to_string() })
}

/// `https://index.docker.io/v1/` → `docker.io`; `http://host:5000/x` → `host:5000`.
fn canonical_host(key: &str) -> String {
    let key = key.trim();
    let key = key.strip_prefix("https://").or_else(|| key.strip_prefix("http://")).unwrap_or(key);
    let host = key.split('/').next().unwrap_or(key).to_ascii_lowercase();
    match host.as_str() {
        "index.docker.io" | "registry-1.docker.io" | "registry.hub.docker.com" => DOCKER_HUB.to_string(),
        _ => host,
    }
}

/// A parsed `WWW-Authenticate` challenge.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Challenge {
    Basic,
    Bearer { realm: String, service: Option<String>, scope: Option<String> },
}

/// Parses the first challenge we understand (`Bearer` or `Basic`) from a `WWW-Authenticate` value.
pub fn parse_challenge(header: &str) -> Option<Challenge> {
    let header = header.trim();
    let (scheme, params) = header.split_once(char::is_whitespace).unwrap_or((header, ""));
    if scheme.eq_ignore_ascii_case("basic") {
        return Some(Challenge::Basic);
    }
    if !scheme.eq_ignore_ascii_case("bearer") {
        return None;
    }
    let params = parse_params(params);
    Some(Challenge::Bearer {
        realm: params.get("realm")?.clone(),
        service: params.get("service").cloned(),
        scope: params.get("scope").cloned(),
    })
}

/// `key="value", key2=token` pairs; quoted values may contain commas and `\"` escapes.
fn parse_params(input: &str) -> HashMap<String, String> {
    let mut out = HashMap::new();
    let mut chars = input.chars().peekable();
    loop {
        while chars.peek().is_some_and(|c| c.is_whitespace() || *c == ',') {
            chars.next();
        }
        let key: String = chars.by_ref().take_while(|c| *c != '=').collect::<String>().trim().to_ascii_lowercase();
        if key.is_empty() {
            return out;
        }
        while chars.next_if(|c| c.is_whitespace()).is_some() {}
        let mut value = String::new();
        if chars.peek() == Some(&'"') {
            chars.next();
            while let Some(c) = chars.next() {
                match c {
                    '\\' => value.extend(chars.next()),
                    '"' => break,
                    c => value.push(c),
                }
            }
        } else {
            while let Some(c) = chars.next_if(|c| *c != ',') {
                value.push(c);
            }
            value = value.trim().to_string();
        }
        out.insert(key, value);
    }
}

/// The token endpoint's answer; registries use either field name.
#[derive(Deserialize)]
pub(crate) struct TokenResponse {
    token: Option<String>,
    access_token: Option<String>,
}

impl TokenResponse {
    pub(crate) fn into_token(self) -> Option<String> {
        self.token.filter(|t| !t.is_empty()).or(self.access_token).filter(|t| !t.is_empty())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn creds(user: &str, pass: &str) -> Option<Credentials> {
        Some(Credentials { username: user.into(), password: pass.into() })
    }

    #[test]
    fn parses_bearer_challenge_with_commas_in_scope() {
        let h = r#"Bearer realm="https://auth.docker.io/token",service="registry.docker.io",scope="repository:library/busybox:pull,push""#;
        assert_eq!(
            parse_challenge(h),
            Some(Challenge::Bearer {
                realm: "https://auth.docker.io/token".into(),
                service: Some("registry.docker.io".into()),
                scope: Some("repository:library/busybox:pull,push".into()),
            })
        );
    }

    #[test]
    fn parses_bearer_challenge_with_unquoted_values_and_spaces() {
        let h = r#"bearer realm=https://r.example/t , service = "svc""#;
        assert_eq!(
            parse_challenge(h),
            Some(Challenge::Bearer { realm: "https://r.example/t".into(), service: Some("svc".into()), scope: None })
        );
    }

    #[test]
    fn parses_basic_and_ignores_unknown_schemes() {
        assert_eq!(parse_challenge(r#"Basic realm="kaji""#), Some(Challenge::Basic));
        assert_eq!(parse_challenge("Negotiate abc"), None);
        assert_eq!(parse_challenge("Bearer service=\"no-realm\""), None);
    }

    #[test]
    fn finds_credentials_by_host_in_docker_config() {
        let json = br#"{"auths":{
            "https://index.docker.io/v1/":{"auth":"aHViOmh1YnBhc3M="},
            "127.0.0.1:5000":{"username":"alice","password":"secret"},
            "http://quay.io/v2":{"auth":"cTpwOmFzcw=="},
            "*.corp.example":{"auth":"dzp3"}
        }}"#;
        assert_eq!(credentials_from_docker_config(json, "docker.io"), creds("hub", "hubpass"));
        assert_eq!(credentials_from_docker_config(json, "127.0.0.1:5000"), creds("alice", "secret"));
        // Passwords may contain ':'; only the first one separates.
        assert_eq!(credentials_from_docker_config(json, "quay.io"), creds("q", "p:ass"));
        assert_eq!(credentials_from_docker_config(json, "r.corp.example"), creds("w", "w"));
        assert_eq!(credentials_from_docker_config(json, "127.0.0.1:5001"), None);
        assert_eq!(credentials_from_docker_config(b"not json", "docker.io"), None);
    }

    #[test]
    fn reads_legacy_dockercfg_layout() {
        let json = br#"{"registry.example:443":{"auth":"dTpw","email":"x@y"}}"#;
        assert_eq!(credentials_from_docker_config(json, "registry.example:443"), creds("u", "p"));
    }

    #[test]
    fn token_response_accepts_either_field() {
        let t: TokenResponse = serde_json::from_str(r#"{"access_token":"a"}"#).expect("json");
        assert_eq!(t.into_token().as_deref(), Some("a"));
        let t: TokenResponse = serde_json::from_str(r#"{"token":"b","access_token":"a"}"#).expect("json");
        assert_eq!(t.into_token().as_deref(), Some("b"));
    }
}
