//! Issuing and checking ServiceAccount JWTs with Kubernetes' claims (`pkg/serviceaccount`):
//! `iss`, `sub` = `system:serviceaccount:<ns>:<name>`, `aud`, `exp`/`iat`/`nbf`, `jti`, and the
//! private `kubernetes.io` claim naming the namespace, the ServiceAccount and the object the
//! token is bound to (pod, with its node; or secret). Pure: time and lookups come from outside.

use super::keys::{PublicKey, SigningKey};
use jsonwebtoken::{Algorithm, Header, Validation};
use serde::{Deserialize, Serialize};

/// An object a token names, by name and uid.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
pub struct ObjectRef {
    pub name: String,
    pub uid: String,
}

/// The `kubernetes.io` claim.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
pub struct KubeClaims {
    pub namespace: String,
    pub serviceaccount: ObjectRef,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod: Option<ObjectRef>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node: Option<ObjectRef>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret: Option<ObjectRef>,
}

/// `aud` as an array; a single string is read too.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
enum Audience {
    Many(Vec<String>),
    One(String),
}

impl Audience {
    fn list(&self) -> Vec<String> {
        match self {
            Audience::Many(v) => v.clone(),
            Audience::One(s) => vec![s.clone()],
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct RawClaims {
    aud: Audience,
    exp: i64,
    iat: i64,
    iss: String,
    jti: String,
    #[serde(rename = "kubernetes.io")]
    kubernetes: KubeClaims,
    nbf: i64,
    sub: String,
}

/// What a valid token says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Claims {
    pub audiences: Vec<String>,
    pub expires: i64,
    pub issued: i64,
    pub id: String,
    pub kubernetes: KubeClaims,
}

/// `system:serviceaccount:<ns>:<name>`.
pub fn username(namespace: &str, name: &str) -> String {
    format!("system:serviceaccount:{namespace}:{name}")
}

/// What a new token is for.
#[derive(Debug, Clone)]
pub struct Request {
    pub claims: KubeClaims,
    pub audiences: Vec<String>,
    pub expiration_seconds: i64,
}

/// The issuer: one signing key, every verification key, the `iss` it writes and accepts, and the
/// audiences the apiserver itself answers to (`--api-audiences`).
#[derive(Debug)]
pub struct Issuer {
    pub issuer: String,
    pub signing: SigningKey,
    pub verification: Vec<PublicKey>,
    pub api_audiences: Vec<String>,
}

impl Issuer {
    /// A signed token for `req`, issued at `now`; returns it with its expiry (unix seconds).
    pub fn issue(&self, req: &Request, now: i64) -> Result<(String, i64), String> {
        let exp = now + req.expiration_seconds;
        let claims = RawClaims {
            aud: Audience::Many(req.audiences.clone()),
            exp,
            iat: now,
            iss: self.issuer.clone(),
            jti: uuid::Uuid::new_v4().to_string(),
            nbf: now,
            sub: username(&req.claims.namespace, &req.claims.serviceaccount.name),
            kubernetes: req.claims.clone(),
        };
        let mut header = Header::new(Algorithm::ES256);
        header.kid = Some(self.signing.public.kid.clone());
        let token = jsonwebtoken::encode(&header, &claims, &self.signing.encoding).map_err(|e| e.to_string())?;
        Ok((token, exp))
    }

    /// `Ok(None)` when the token is not a JWT of this issuer (another authenticator may know it);
    /// an error when it is ours but invalid (bad signature, expired, not for the API audiences).
    pub fn check(&self, token: &str, now: i64) -> Result<Option<Claims>, String> {
        self.check_for(token, now, &self.api_audiences)
    }

    /// [`check`](Self::check) for the audiences a TokenReview asks: the token must name one of
    /// them (Kubernetes' `jwtTokenAuthenticator` with audiences in its context).
    pub fn check_for(&self, token: &str, now: i64, audiences: &[String]) -> Result<Option<Claims>, String> {
        if token.matches('.').count() != 2 {
            return Ok(None);
        }
        let Ok(header) = jsonwebtoken::decode_header(token) else { return Ok(None) };
        // Peek at the issuer before trusting anything: a foreign token is not ours to refuse.
        let Some(iss) = unverified_issuer(token) else { return Ok(None) };
        if iss != self.issuer {
            return Ok(None);
        }
        if header.alg != Algorithm::ES256 {
            return Err(format!("unsupported signing algorithm {:?}", header.alg));
        }
        let mut v = Validation::new(Algorithm::ES256);
        v.validate_exp = false;
        v.validate_aud = false;
        v.required_spec_claims.clear();
        let keys = self.verification.iter().filter(|k| header.kid.as_ref().is_none_or(|kid| *kid == k.kid));
        let mut last = "no key matches the token's key ID".to_string();
        for k in keys {
            match jsonwebtoken::decode::<RawClaims>(token, &k.decoding_key(), &v) {
                Ok(data) => return self.validate(data.claims, now, audiences).map(Some),
                Err(e) => last = e.to_string(),
            }
        }
        Err(format!("invalid token: {last}"))
    }

    fn validate(&self, c: RawClaims, now: i64, audiences: &[String]) -> Result<Claims, String> {
        // Kubernetes' jwt validation allows a minute of clock skew.
        const LEEWAY: i64 = 60;
        if now > c.exp + LEEWAY {
            return Err("service account token has expired".into());
        }
        if now + LEEWAY < c.nbf {
            return Err("service account token is not valid yet".into());
        }
        let aud = c.aud.list();
        if !aud.iter().any(|a| audiences.contains(a)) {
            return Err(format!("token audiences {aud:?} is invalid for the target audiences {audiences:?}"));
        }
        if c.sub != username(&c.kubernetes.namespace, &c.kubernetes.serviceaccount.name) {
            return Err("the token's subject does not match its service account".into());
        }
        Ok(Claims { audiences: aud, expires: c.exp, issued: c.iat, id: c.jti, kubernetes: c.kubernetes })
    }
}

fn unverified_issuer(token: &str) -> Option<String> {
    use base64::Engine as _;
    let payload = token.split('.').nth(1)?;
    let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD.decode(payload).ok()?;
    let v: serde_json::Value = serde_json::from_slice(&bytes).ok()?;
    v.get("iss")?.as_str().map(str::to_string)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::serviceaccount::keys;

    pub const ISS: &str = "https://kubernetes.default.svc.cluster.local";

    pub fn issuer() -> Issuer {
        let (private, _) = keys::generate_pem().expect("key");
        let der = pem::parse(private).expect("pem");
        let signing = keys::signing_key_from_pkcs8(der.contents()).expect("key");
        let verification = vec![signing.public.clone()];
        Issuer { issuer: ISS.into(), signing, verification, api_audiences: vec![ISS.into()] }
    }

    pub fn request(pod: Option<(&str, &str)>) -> Request {
        Request {
            claims: KubeClaims {
                namespace: "app".into(),
                serviceaccount: ObjectRef { name: "web".into(), uid: "sa-uid".into() },
                pod: pod.map(|(n, u)| ObjectRef { name: n.into(), uid: u.into() }),
                ..Default::default()
            },
            audiences: vec![ISS.into()],
            expiration_seconds: 3600,
        }
    }

    #[test]
    fn a_token_carries_kubernetes_claims_and_checks_back() {
        let i = issuer();
        let (token, exp) = i.issue(&request(Some(("web-1", "pod-uid"))), 1_000_000).expect("signs");
        assert_eq!(exp, 1_003_600);
        let c = i.check(&token, 1_000_010).expect("valid").expect("ours");
        assert_eq!(c.kubernetes.pod.as_ref().map(|p| p.uid.as_str()), Some("pod-uid"));
        assert_eq!(c.audiences, [ISS]);
        let header = jsonwebtoken::decode_header(&token).expect("header");
        assert_eq!((header.alg, header.kid.as_deref()), (Algorithm::ES256, Some(i.signing.public.kid.as_str())));
        let payload: serde_json::Value = {
            use base64::Engine as _;
            let p = token.split('.').nth(1).expect("payload");
            serde_json::from_slice(&base64::engine::general_purpose::URL_SAFE_NO_PAD.decode(p).expect("b64"))
                .expect("json")
        };
        assert_eq!(payload["sub"], "system:serviceaccount:app:web");
        assert_eq!(payload["kubernetes.io"]["serviceaccount"]["name"], "web");
        assert_eq!(payload["aud"], serde_json::json!([ISS]));
    }

    #[test]
    fn expired_foreign_or_forged_tokens_are_told_apart() {
        let i = issuer();
        let (token, _) = i.issue(&request(None), 1_000_000).expect("signs");
        assert_eq!(i.check(&token, 1_003_600 + 61), Err("service account token has expired".into()));
        assert_eq!(i.check("abcdef.ghijk", 0), Ok(None), "not a JWT");
        let other = Issuer { issuer: "https://elsewhere".into(), ..issuer() };
        let (foreign, _) = other.issue(&request(None), 1_000_000).expect("signs");
        assert_eq!(i.check(&foreign, 1_000_000), Ok(None), "another issuer's token is not ours to judge");
        let impostor = Issuer { issuer: ISS.into(), ..issuer() };
        let (forged, _) = impostor.issue(&request(None), 1_000_000).expect("signs");
        assert!(i.check(&forged, 1_000_000).is_err(), "signed by another key");
        let mut wrong_aud = request(None);
        wrong_aud.audiences = vec!["vault".into()];
        let (t, _) = i.issue(&wrong_aud, 1_000_000).expect("signs");
        assert!(i.check(&t, 1_000_000).expect_err("audience").contains("invalid for the target audiences"));
    }
}
