//! Bootstrap tokens (`--enable-bootstrap-token-auth`): a bearer token `<id>.<secret>` is the
//! user `system:bootstrap:<id>` in `system:bootstrappers` while the Secret
//! `kube-system/bootstrap-token-<id>` of type `bootstrap.kubernetes.io/token` holds that secret,
//! allows authentication and has not expired — Kubernetes' bootstrap authenticator, read from
//! the watch cache as kube-apiserver reads it from its Secret informer. A token the Secret does
//! not vouch for is "not mine" (the chain then answers 401); why is logged, never sent.

use super::{AuthnResult, TokenAuthenticator};
use crate::auth::UserInfo;
use crate::cache::Cache;
use base64::Engine;
use serde_json::Value;
use std::sync::Arc;

pub const SECRET_TYPE: &str = "bootstrap.kubernetes.io/token";
pub const SECRET_PREFIX: &str = "bootstrap-token-";
pub const USER_PREFIX: &str = "system:bootstrap:";
pub const GROUP: &str = "system:bootstrappers";

/// Kubernetes' bootstrap authenticator over this apiserver's cache of Secrets.
pub struct BootstrapTokens {
    cache: Arc<Cache>,
}

impl BootstrapTokens {
    pub fn new(cache: Arc<Cache>) -> Self {
        Self { cache }
    }
}

impl TokenAuthenticator for BootstrapTokens {
    fn authenticate_token(&self, token: &str) -> AuthnResult {
        let Some((id, secret)) = parse_token(token) else { return Ok(None) };
        let name = format!("{SECRET_PREFIX}{id}");
        let stored = self.cache.resource("Secret").and_then(|rc| {
            let info = kaji_api::resources::by_kind("Secret")?;
            rc.get(&info.key(Some("kube-system"), &name))
        });
        let Some(stored) = stored else {
            tracing::debug!(secret = %name, "no secret to match the bootstrap bearer token");
            return Ok(None);
        };
        match judge(&stored.value(), id, secret, jiff::Timestamp::now()) {
            Ok(user) => Ok(Some(user)),
            Err(why) => {
                tracing::info!(secret = %format!("kube-system/{name}"), "bootstrap token refused: {why}");
                Ok(None)
            }
        }
    }
}

/// `<6 of [a-z0-9]>.<16 of [a-z0-9]>`, Kubernetes' `BootstrapTokenPattern`.
pub fn parse_token(token: &str) -> Option<(&str, &str)> {
    let (id, secret) = token.split_once('.')?;
    let ok = |s: &str, n: usize| s.len() == n && s.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit());
    (ok(id, 6) && ok(secret, 16)).then_some((id, secret))
}

/// One `data` value of a Secret, decoded (absent or not base64: empty, as `GetData`).
fn data(secret: &Value, key: &str) -> String {
    secret
        .pointer(&format!("/data/{key}"))
        .and_then(Value::as_str)
        .and_then(|b| base64::engine::general_purpose::STANDARD.decode(b).ok())
        .and_then(|b| String::from_utf8(b).ok())
        .unwrap_or_default()
}

/// Whether `secret` vouches for the token `<id>.<token_secret>` at `now`; the user it names,
/// or why not (in the order and words of Kubernetes' checks).
pub fn judge(secret: &Value, id: &str, token_secret: &str, now: jiff::Timestamp) -> Result<UserInfo, String> {
    if secret.pointer("/metadata/deletionTimestamp").is_some_and(|v| !v.is_null()) {
        return Err("is deleted and awaiting removal".into());
    }
    if secret.get("type").and_then(Value::as_str) != Some(SECRET_TYPE) || secret.get("data").is_none() {
        return Err(format!("has invalid type, expected {SECRET_TYPE}."));
    }
    // Constant time: the comparison must not tell an attacker how much of the secret matched.
    if !constant_time_eq(data(secret, "token-secret").as_bytes(), token_secret.as_bytes()) {
        return Err("has invalid value for key token-secret.".into());
    }
    if data(secret, "token-id") != id {
        return Err("has invalid value for key token-id.".into());
    }
    let expiration = data(secret, "expiration");
    if !expiration.is_empty() {
        match expiration.parse::<jiff::Timestamp>() {
            Ok(at) if at <= now => return Err(format!("has expired at {expiration}")),
            Ok(_) => {}
            Err(_) => return Err(format!("has unparsable expiration time {expiration:?}")),
        }
    }
    if data(secret, "usage-bootstrap-authentication") != "true" {
        return Err("not marked usage-bootstrap-authentication=true.".into());
    }
    let groups = groups(&data(secret, "auth-extra-groups"))
        .map_err(|e| format!("has invalid value for key auth-extra-groups: {e}."))?;
    Ok(UserInfo { name: format!("{USER_PREFIX}{id}"), groups, ..Default::default() })
}

/// Equal bytes, in a time that depends only on the lengths (Go's `subtle.ConstantTimeCompare`).
fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && std::hint::black_box(a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y))) == 0
}

/// `system:bootstrappers` and the `auth-extra-groups` (comma separated, each
/// `system:bootstrappers:[a-z0-9:-]{0,255}[a-z0-9]`), without repeats, in order.
fn groups(extra: &str) -> Result<Vec<String>, String> {
    let mut groups = vec![GROUP.to_string()];
    for g in extra.split(',').map(str::trim).filter(|g| !g.is_empty()) {
        let rest = g.strip_prefix("system:bootstrappers:").unwrap_or("");
        let ok = !rest.is_empty()
            && rest.len() <= 256
            && rest.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b':' || b == b'-')
            && rest.bytes().last().is_some_and(|b| b.is_ascii_lowercase() || b.is_ascii_digit());
        if !ok {
            return Err(format!(
                "bootstrap group {g:?} is invalid (must match system:bootstrappers:[a-z0-9:-]{{0,255}}[a-z0-9])"
            ));
        }
        if !groups.iter().any(|x| x == g) {
            groups.push(g.to_string());
        }
    }
    Ok(groups)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn b64(s: &str) -> String {
        base64::engine::general_purpose::STANDARD.encode(s)
    }

    fn secret(extra: &[(&str, &str)]) -> Value {
        let mut data = serde_json::Map::new();
        for (k, v) in
            [("token-id", "abcdef"), ("token-secret", "0123456789abcdef"), ("usage-bootstrap-authentication", "true")]
                .iter()
                .chain(extra)
        {
            data.insert(k.to_string(), json!(b64(v)));
        }
        json!({"metadata": {"name": "bootstrap-token-abcdef", "namespace": "kube-system"},
               "type": SECRET_TYPE, "data": data})
    }

    fn now() -> jiff::Timestamp {
        "2026-12-02T12:00:00Z".parse().expect("time")
    }

    #[test]
    fn tokens_have_kubernetes_shape() {
        assert_eq!(parse_token("abcdef.0123456789abcdef"), Some(("abcdef", "0123456789abcdef")));
        for bad in [
            "ABCDEF.0123456789abcdef",
            "abcde.0123456789abcdef",
            "abcdef.0123456789abcde",
            "abcdef0123456789abcdef",
            "abcdef.0123456789abcdef.x",
            "",
        ] {
            assert_eq!(parse_token(bad), None, "{bad}");
        }
    }

    #[test]
    fn a_valid_token_is_its_bootstrap_user() {
        let u = judge(&secret(&[]), "abcdef", "0123456789abcdef", now()).expect("valid");
        assert_eq!(u.name, "system:bootstrap:abcdef");
        assert_eq!(u.groups, vec!["system:bootstrappers"]);
        let extra = secret(&[(
            "auth-extra-groups",
            "system:bootstrappers:kaji:default-node-token, system:bootstrappers:kaji:default-node-token",
        )]);
        let u = judge(&extra, "abcdef", "0123456789abcdef", now()).expect("valid");
        assert_eq!(u.groups, vec!["system:bootstrappers", "system:bootstrappers:kaji:default-node-token"], "once each");
        // The base group itself is not an extra group Kubernetes accepts.
        let base = secret(&[("auth-extra-groups", "system:bootstrappers")]);
        assert!(judge(&base, "abcdef", "0123456789abcdef", now()).is_err());
    }

    #[test]
    fn what_the_secret_does_not_vouch_for_is_refused() {
        let s = secret(&[]);
        assert!(judge(&s, "abcdef", "0123456789abcdeX", now()).expect_err("refused").contains("token-secret"));
        let mut other = s.clone();
        other["type"] = json!("Opaque");
        assert!(judge(&other, "abcdef", "0123456789abcdef", now()).expect_err("refused").contains("invalid type"));
        let mut deleted = s.clone();
        deleted["metadata"]["deletionTimestamp"] = json!("2026-12-01T00:00:00Z");
        assert!(judge(&deleted, "abcdef", "0123456789abcdef", now()).expect_err("refused").contains("deleted"));
        assert!(judge(&s, "abcdeg", "0123456789abcdef", now()).expect_err("refused").contains("token-id"));
        let unmarked = secret(&[("usage-bootstrap-authentication", "false")]);
        assert!(judge(&unmarked, "abcdef", "0123456789abcdef", now())
            .expect_err("refused")
            .contains("usage-bootstrap"));
        let bad_group = secret(&[("auth-extra-groups", "system:masters")]);
        assert!(judge(&bad_group, "abcdef", "0123456789abcdef", now())
            .expect_err("refused")
            .contains("auth-extra-groups"));
    }

    #[test]
    fn expiry_is_checked_and_a_bad_time_counts_as_expired() {
        let later = secret(&[("expiration", "2026-12-03T00:00:00Z")]);
        assert!(judge(&later, "abcdef", "0123456789abcdef", now()).is_ok());
        let past = secret(&[("expiration", "2026-12-02T11:59:59Z")]);
        assert!(judge(&past, "abcdef", "0123456789abcdef", now()).expect_err("refused").contains("expired"));
        let garbage = secret(&[("expiration", "tomorrow")]);
        assert!(judge(&garbage, "abcdef", "0123456789abcdef", now()).expect_err("refused").contains("expiration"));
    }
}
