//! Kubelet's ServiceAccount token manager: the tokens of pods' projected `serviceAccountToken`
//! sources, asked for with a TokenRequest bound to the pod (audience and expirationSeconds from
//! the source), cached per pod and source, and asked for again once 80 % of a token's life has
//! passed or it is older than 24 h — kubelet's `requiresRefresh` (without its jitter). The
//! volume code writes what is cached; the pod worker wakes at the next refresh.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::api::authentication::v1::{BoundObjectReference, TokenRequest, TokenRequestSpec};
use k8s_openapi::api::core::v1::{Pod, ServiceAccount, ServiceAccountTokenProjection};
use kube::api::{Api, PostParams};

/// kubelet's `maxTTL`: a token older than this is replaced whatever its expiry.
pub const MAX_TTL: Duration = Duration::from_secs(24 * 3600);
/// The projection's default `expirationSeconds` (Kubernetes' API default).
pub const DEFAULT_EXPIRATION_SECONDS: i64 = 3600;

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct Key {
    pod_uid: String,
    namespace: String,
    account: String,
    audience: String,
    expiration_seconds: i64,
}

/// One issued token: what it is, when it was asked for and when it expires.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Issued {
    pub token: String,
    pub issued: Timestamp,
    pub expires: Timestamp,
}

impl Issued {
    /// When kubelet would ask again: 80 % into its life, or at 24 h, whichever is first.
    pub fn refresh_at(&self) -> Timestamp {
        let life = self.expires.as_second() - self.issued.as_second();
        let at = self.issued.as_second() + (life * 4 / 5).min(MAX_TTL.as_secs() as i64);
        Timestamp::from_second(at).unwrap_or(self.expires)
    }

    pub fn requires_refresh(&self, now: Timestamp) -> bool {
        now >= self.refresh_at()
    }
}

#[derive(Default)]
pub struct TokenManager {
    cache: Mutex<HashMap<Key, Issued>>,
}

impl TokenManager {
    /// The token for `source` of `pod`: the cached one unless it needs refreshing, else a new
    /// one from the apiserver (a failed refresh keeps a still-valid cached token, as kubelet).
    pub async fn get(
        &self,
        client: &kube::Client,
        pod: &Pod,
        source: &ServiceAccountTokenProjection,
    ) -> Result<Issued, String> {
        let account = pod.spec.as_ref().and_then(|s| s.service_account_name.clone()).unwrap_or_default();
        if account.is_empty() {
            return Err("the pod has no serviceAccountName".into());
        }
        let key = Key {
            pod_uid: pod.metadata.uid.clone().unwrap_or_default(),
            namespace: pod.metadata.namespace.clone().unwrap_or_else(|| "default".into()),
            account,
            audience: source.audience.clone().unwrap_or_default(),
            expiration_seconds: source.expiration_seconds.unwrap_or(DEFAULT_EXPIRATION_SECONDS),
        };
        let now = Timestamp::now();
        let cached = self.cache.lock().ok().and_then(|c| c.get(&key).cloned());
        if let Some(c) = &cached {
            if !c.requires_refresh(now) {
                return Ok(c.clone());
            }
        }
        match request(client, pod, &key, now).await {
            Ok(issued) => {
                if let Ok(mut c) = self.cache.lock() {
                    c.insert(key, issued.clone());
                }
                Ok(issued)
            }
            Err(e) => match cached {
                Some(c) if c.expires > now => {
                    tracing::warn!(pod_uid = %key.pod_uid, error = %e, "cannot refresh a service account token; keeping the current one");
                    Ok(c)
                }
                _ => Err(e),
            },
        }
    }

    /// Forget a pod's tokens (kubelet's `DeleteServiceAccountToken`, when the pod is gone).
    pub fn forget(&self, pod_uid: &str) {
        if let Ok(mut c) = self.cache.lock() {
            c.retain(|k, _| k.pod_uid != pod_uid);
        }
    }
}

async fn request(client: &kube::Client, pod: &Pod, key: &Key, now: Timestamp) -> Result<Issued, String> {
    let tr = TokenRequest {
        spec: Some(TokenRequestSpec {
            audiences: Some(if key.audience.is_empty() { vec![] } else { vec![key.audience.clone()] }),
            expiration_seconds: Some(key.expiration_seconds),
            bound_object_ref: Some(BoundObjectReference {
                api_version: Some("v1".into()),
                kind: Some("Pod".into()),
                name: pod.metadata.name.clone(),
                uid: pod.metadata.uid.clone(),
            }),
            ..Default::default()
        }),
        ..Default::default()
    };
    let api: Api<ServiceAccount> = Api::namespaced(client.clone(), &key.namespace);
    let out = api.create_token_request(&key.account, &PostParams::default(), &tr).await.map_err(|e| e.to_string())?;
    let status = out.status.ok_or("the TokenRequest came back without a status")?;
    let token = status.token.ok_or("the TokenRequest came back without a token")?;
    let expires = status.expiration_timestamp.ok_or("the TokenRequest came back without an expiration")?.0;
    Ok(Issued { token, issued: now, expires })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn issued(life: i64) -> Issued {
        let t0 = Timestamp::from_second(1_000_000).expect("time");
        Issued { token: "t".into(), issued: t0, expires: Timestamp::from_second(1_000_000 + life).expect("time") }
    }

    fn at(s: i64) -> Timestamp {
        Timestamp::from_second(1_000_000 + s).expect("time")
    }

    #[test]
    fn a_token_is_refreshed_at_four_fifths_of_its_life() {
        let t = issued(3600);
        assert_eq!(t.refresh_at(), at(2880));
        assert!(!t.requires_refresh(at(2879)));
        assert!(t.requires_refresh(at(2880)));
    }

    #[test]
    fn a_long_lived_token_is_refreshed_after_a_day() {
        let t = issued(7 * 24 * 3600);
        assert_eq!(t.refresh_at(), at(24 * 3600));
        assert!(t.requires_refresh(at(24 * 3600 + 1)));
    }
}
