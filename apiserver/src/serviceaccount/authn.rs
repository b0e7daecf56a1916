//! The ServiceAccount token authenticator (Kubernetes' `serviceaccount.JWTTokenAuthenticator`
//! with its legacy-free validator): a JWT of our issuer, signed by one of the verification keys,
//! for one of the API audiences and not expired, is `system:serviceaccount:<ns>:<name>` in
//! `system:serviceaccounts` and `system:serviceaccounts:<ns>` — while the ServiceAccount and the
//! pod or secret it is bound to still exist with the uids the token names (read from the watch
//! cache, as kube-apiserver reads its informers). A JWT of another issuer is not ours to judge.

use super::token::{Claims, ObjectRef};
use super::Tokens;
use crate::auth::authn::{intersect, AudienceResult, AuthnError, AuthnResult, TokenAuthenticator};
use crate::auth::UserInfo;
use crate::cache::Cache;
use serde_json::Value;
use std::sync::Arc;

pub const ALL_SERVICE_ACCOUNTS_GROUP: &str = "system:serviceaccounts";
pub const POD_NAME_KEY: &str = "authentication.kubernetes.io/pod-name";
pub const POD_UID_KEY: &str = "authentication.kubernetes.io/pod-uid";
pub const NODE_NAME_KEY: &str = "authentication.kubernetes.io/node-name";
pub const NODE_UID_KEY: &str = "authentication.kubernetes.io/node-uid";
pub const CREDENTIAL_ID_KEY: &str = "authentication.kubernetes.io/credential-id";

pub struct ServiceAccountTokens {
    tokens: Arc<Tokens>,
    cache: Arc<Cache>,
}

impl ServiceAccountTokens {
    pub fn new(tokens: Arc<Tokens>, cache: Arc<Cache>) -> Self {
        Self { tokens, cache }
    }

    fn lookup(&self, kind: &str, ns: &str, name: &str) -> Option<Value> {
        let info = kaji_api::resources::by_kind(kind)?;
        self.cache.resource(kind)?.get(&info.key(Some(ns), name)).map(|o| o.value())
    }
}

impl ServiceAccountTokens {
    /// The token's user and the audiences it names among `audiences`.
    fn judge_for(&self, token: &str, audiences: &[String]) -> AudienceResult {
        let now = jiff::Timestamp::now();
        let claims = match self.tokens.issuer.check_for(token, now.as_second(), audiences) {
            Ok(None) => return Ok(None),
            Ok(Some(c)) => c,
            Err(why) => return Err(AuthnError(why)),
        };
        let k = &claims.kubernetes;
        let sa = self.lookup("ServiceAccount", &k.namespace, &k.serviceaccount.name);
        let pod = k.pod.as_ref().and_then(|p| self.lookup("Pod", &k.namespace, &p.name));
        let secret = k.secret.as_ref().and_then(|s| self.lookup("Secret", &k.namespace, &s.name));
        let user = judge(&claims, sa.as_ref(), pod.as_ref(), secret.as_ref(), now).map_err(|why| {
            tracing::info!(user = %super::token::username(&k.namespace, &k.serviceaccount.name), "service account token refused: {why}");
            AuthnError(why)
        })?;
        Ok(Some((user, intersect(&claims.audiences, audiences))))
    }
}

impl TokenAuthenticator for ServiceAccountTokens {
    fn authenticate_token(&self, token: &str) -> AuthnResult {
        Ok(self.judge_for(token, &self.tokens.issuer.api_audiences)?.map(|(user, _)| user))
    }

    /// Judged for the audiences asked, not the API's: a token made for another audience (a
    /// vault, say) is what its relying party reviews.
    fn authenticate_for(&self, token: &str, audiences: &[String], _api: &[String]) -> AudienceResult {
        self.judge_for(token, audiences)
    }
}

fn uid(v: &Value) -> &str {
    v.pointer("/metadata/uid").and_then(Value::as_str).unwrap_or("")
}

fn deletion(v: &Value) -> Option<jiff::Timestamp> {
    v.pointer("/metadata/deletionTimestamp").and_then(Value::as_str).and_then(|t| t.parse().ok())
}

/// Whether the objects the claims name still vouch for them (Kubernetes' `validator.Validate`,
/// in its order and words); the user they make.
pub fn judge(
    claims: &Claims,
    sa: Option<&Value>,
    pod: Option<&Value>,
    secret: Option<&Value>,
    now: jiff::Timestamp,
) -> Result<UserInfo, String> {
    let k = &claims.kubernetes;
    let ns = &k.namespace;
    let check = |kind: &str, want: &ObjectRef, got: Option<&Value>| -> Result<(), String> {
        let Some(got) = got else { return Err(format!("{kind}s \"{}\" not found", want.name)) };
        if uid(got) != want.uid {
            return Err(format!("{kind} UID ({}) does not match claim ({})", uid(got), want.uid));
        }
        Ok(())
    };
    let Some(account) = sa else { return Err(format!("serviceaccounts \"{}\" not found", k.serviceaccount.name)) };
    if deletion(account).is_some() {
        return Err(format!("service account {ns}/{} has been deleted", k.serviceaccount.name));
    }
    if uid(account) != k.serviceaccount.uid {
        return Err(format!("service account UID ({}) does not match claim ({})", uid(account), k.serviceaccount.uid));
    }
    if let Some(s) = &k.secret {
        check("secret", s, secret)?;
        if secret.and_then(deletion).is_some() {
            return Err(format!("secret {ns}/{} has been deleted", s.name));
        }
    }
    let mut user = UserInfo {
        name: super::token::username(ns, &k.serviceaccount.name),
        uid: k.serviceaccount.uid.clone(),
        groups: vec![ALL_SERVICE_ACCOUNTS_GROUP.into(), format!("{ALL_SERVICE_ACCOUNTS_GROUP}:{ns}")],
        ..Default::default()
    };
    if let Some(p) = &k.pod {
        if pod.and_then(deletion).is_some_and(|at| at < now) {
            return Err(format!("pod {ns}/{} has been deleted", p.name));
        }
        check("pod", p, pod)?;
        user.extra.insert(POD_NAME_KEY.into(), vec![p.name.clone()]);
        user.extra.insert(POD_UID_KEY.into(), vec![p.uid.clone()]);
    }
    if let Some(n) = &k.node {
        user.extra.insert(NODE_NAME_KEY.into(), vec![n.name.clone()]);
        if !n.uid.is_empty() {
            user.extra.insert(NODE_UID_KEY.into(), vec![n.uid.clone()]);
        }
    }
    if !claims.id.is_empty() {
        user.extra.insert(CREDENTIAL_ID_KEY.into(), vec![format!("JTI={}", claims.id)]);
    }
    Ok(user)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::serviceaccount::token::tests::{issuer, request};
    use serde_json::json;

    fn obj(uid: &str) -> Value {
        json!({"metadata": {"uid": uid}})
    }

    fn now() -> jiff::Timestamp {
        jiff::Timestamp::from_second(1_000_000).expect("time")
    }

    fn claims(pod: Option<(&str, &str)>) -> Claims {
        let i = issuer();
        let (t, _) = i.issue(&request(pod), 1_000_000).expect("signs");
        i.check(&t, 1_000_000).expect("valid").expect("ours")
    }

    #[test]
    fn a_bound_token_is_its_service_account_with_the_pod_in_extra() {
        let c = claims(Some(("web-1", "pod-uid")));
        let u = judge(&c, Some(&obj("sa-uid")), Some(&obj("pod-uid")), None, now()).expect("valid");
        assert_eq!(u.name, "system:serviceaccount:app:web");
        assert_eq!(u.groups, ["system:serviceaccounts", "system:serviceaccounts:app"]);
        assert_eq!(u.extra[POD_NAME_KEY], ["web-1"]);
        assert_eq!(u.extra[POD_UID_KEY], ["pod-uid"]);
        assert!(u.extra[CREDENTIAL_ID_KEY][0].starts_with("JTI="));
    }

    #[test]
    fn a_deleted_or_recreated_account_or_pod_ends_the_token() {
        let c = claims(Some(("web-1", "pod-uid")));
        let (sa, pod) = (obj("sa-uid"), obj("pod-uid"));
        assert_eq!(judge(&c, None, Some(&pod), None, now()), Err("serviceaccounts \"web\" not found".into()));
        assert!(judge(&c, Some(&obj("other")), Some(&pod), None, now()).expect_err("recreated").contains("UID"));
        assert_eq!(judge(&c, Some(&sa), None, None, now()), Err("pods \"web-1\" not found".into()));
        assert!(judge(&c, Some(&sa), Some(&obj("new-pod")), None, now()).expect_err("recreated").contains("pod UID"));
        let mut gone = pod.clone();
        gone["metadata"]["deletionTimestamp"] = json!("1970-01-12T13:46:30Z");
        assert!(judge(&c, Some(&sa), Some(&gone), None, now()).expect_err("deleted").contains("has been deleted"));
        let mut leaving = sa.clone();
        leaving["metadata"]["deletionTimestamp"] = json!("1970-01-12T13:46:30Z");
        assert!(judge(&c, Some(&leaving), Some(&pod), None, now()).is_err());
    }
}
