//! Impersonation (`kubectl --as`, `--as-group`, `--as-uid`), as kube-apiserver's `WithImpersonation`
//! filter: after authentication, each `Impersonate-*` header is one thing the requester asks to act
//! as, each authorized for the requester with verb `impersonate`; then the request runs as the
//! identity they make, the requester kept beside it ([`Impersonator`]) for audit, the headers gone.

use super::{names, Attributes, Authorizer, Decision, UserInfo};
use crate::http::errors::ApiError;
use axum::http::HeaderMap;
use std::sync::Arc;

/// Kubernetes' `authenticationv1.Impersonate*Header` names (HTTP header names match in any case).
pub const USER_HEADER: &str = "impersonate-user";
pub const GROUP_HEADER: &str = "impersonate-group";
pub const UID_HEADER: &str = "impersonate-uid";
pub const EXTRA_HEADER_PREFIX: &str = "impersonate-extra-";

/// The group of the `userextras` and `uids` resources (`authentication.k8s.io/v1`).
const AUTHENTICATION_GROUP: &str = "authentication.k8s.io";

/// One thing a request asks to act as (Kubernetes builds an `ObjectReference` for each).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    /// `Impersonate-User: system:serviceaccount:<namespace>:<name>`.
    ServiceAccount {
        namespace: String,
        name: String,
    },
    User(String),
    Group(String),
    /// One value of `Impersonate-Extra-<key>`.
    Extra {
        key: String,
        value: String,
    },
    Uid(String),
}

/// The identity a request was authenticated as, when it runs as another: Kubernetes' audit event
/// names it `user` and the identity it acts as `impersonatedUser`. A request extension.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Impersonator(pub Arc<UserInfo>);

/// Why the headers ask for nothing that can be granted.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    /// Groups, extras or a uid without `Impersonate-User` (a 400 in Kubernetes).
    #[error("requested [{0}] without impersonating a user")]
    WithoutUser(String),
}

impl Target {
    /// What the requester must be allowed to act as this: verb `impersonate` on `users`,
    /// `serviceaccounts` (in their namespace), `groups`, `uids` or `userextras/<key>`.
    pub fn attributes(&self, requester: Arc<UserInfo>) -> Attributes {
        let (group, resource, subresource, namespace, name) = match self {
            Target::ServiceAccount { namespace, name } => ("", "serviceaccounts", "", namespace.as_str(), name),
            Target::User(name) => ("", "users", "", "", name),
            Target::Group(name) => ("", "groups", "", "", name),
            Target::Extra { key, value } => (AUTHENTICATION_GROUP, "userextras", key.as_str(), "", value),
            Target::Uid(uid) => (AUTHENTICATION_GROUP, "uids", "", "", uid),
        };
        Attributes {
            user: requester,
            verb: "impersonate".into(),
            namespace: namespace.into(),
            api_group: group.into(),
            api_version: "v1".into(),
            resource: resource.into(),
            subresource: subresource.into(),
            name: name.clone(),
            path: String::new(),
            resource_request: true,
        }
    }

    /// The target as Go's `%v` prints its `ObjectReference` (Kind Namespace Name UID APIVersion
    /// ResourceVersion FieldPath), which Kubernetes' 400 message quotes.
    fn go_value(&self) -> String {
        let api = "authentication.k8s.io/v1";
        let fields: [&str; 7] = match self {
            Target::ServiceAccount { namespace, name } => ["ServiceAccount", namespace, name, "", "", "", ""],
            Target::User(name) => ["User", "", name, "", "", "", ""],
            Target::Group(name) => ["Group", "", name, "", "", "", ""],
            Target::Extra { key, value } => ["UserExtra", "", value, "", api, "", key],
            Target::Uid(uid) => ["UID", "", uid, "", api, "", ""],
        };
        format!("{{{}}}", fields.join(" "))
    }
}

/// The targets the headers name, in Kubernetes' order: the user (a ServiceAccount when its name
/// splits as one), the groups, the extras (one per value), the uid. None: no impersonation.
pub fn targets(headers: &HeaderMap) -> Result<Vec<Target>, Error> {
    let text = |v: &axum::http::HeaderValue| String::from_utf8_lossy(v.as_bytes()).into_owned();
    let mut out = Vec::new();
    let user = headers.get(USER_HEADER).map(text).filter(|u| !u.is_empty());
    if let Some(user) = &user {
        out.push(match split_service_account(user) {
            Some((namespace, name)) => Target::ServiceAccount { namespace: namespace.into(), name: name.into() },
            None => Target::User(user.clone()),
        });
    }
    out.extend(headers.get_all(GROUP_HEADER).iter().map(|g| Target::Group(text(g))));
    for name in headers.keys() {
        let lower = name.as_str().to_ascii_lowercase();
        let Some(encoded) = lower.strip_prefix(EXTRA_HEADER_PREFIX) else { continue };
        let key = unescape_extra_key(encoded);
        out.extend(headers.get_all(name).iter().map(|v| Target::Extra { key: key.clone(), value: text(v) }));
    }
    if let Some(uid) = headers.get(UID_HEADER).map(text).filter(|u| !u.is_empty()) {
        out.push(Target::Uid(uid));
    }
    if user.is_none() && !out.is_empty() {
        let shown: Vec<String> = out.iter().map(Target::go_value).collect();
        return Err(Error::WithoutUser(shown.join(" ")));
    }
    Ok(out)
}

/// Kubernetes' `serviceaccount.SplitUsername`: `system:serviceaccount:<ns>:<name>` with a valid
/// namespace (DNS label) and account name (DNS subdomain), else not a ServiceAccount.
fn split_service_account(user: &str) -> Option<(&str, &str)> {
    let rest = user.strip_prefix(names::SERVICE_ACCOUNT_USER_PREFIX)?;
    let (namespace, name) = rest.split_once(':')?;
    let valid = !name.contains(':')
        && kaji_api::validation::dns1123_label_errors(namespace).is_empty()
        && kaji_api::validation::dns1123_subdomain_errors(name).is_empty();
    valid.then_some((namespace, name))
}

/// Go's `url.PathUnescape` of an extra's key (`Impersonate-Extra-Acme.com%2Fproject`); a key that
/// does not decode is kept as sent, as Kubernetes keeps it.
fn unescape_extra_key(encoded: &str) -> String {
    let bytes = encoded.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = bytes.get(i + 1..i + 3).and_then(|h| std::str::from_utf8(h).ok());
            match hex.and_then(|h| u8::from_str_radix(h, 16).ok()) {
                Some(b) => out.push(b),
                None => return encoded.to_string(),
            }
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).unwrap_or_else(|_| encoded.to_string())
}

/// The identity the (authorized) targets make: the user, the groups given — or a
/// ServiceAccount's own groups when none are —, `system:authenticated` unless a group already says
/// whether it is (`system:unauthenticated` for `system:anonymous`), the extras, the uid.
pub fn impersonated_user(targets: &[Target]) -> UserInfo {
    let groups_specified = targets.iter().any(|t| matches!(t, Target::Group(_)));
    let mut user = UserInfo::default();
    for t in targets {
        match t {
            Target::ServiceAccount { namespace, name } => {
                user.name = format!("{}{namespace}:{name}", names::SERVICE_ACCOUNT_USER_PREFIX);
                if !groups_specified {
                    let all = names::SERVICE_ACCOUNTS_GROUP;
                    user.groups = vec![all.to_string(), format!("{all}:{namespace}")];
                }
            }
            Target::User(name) => user.name = name.clone(),
            Target::Group(g) => user.groups.push(g.clone()),
            Target::Extra { key, value } => user.extra.entry(key.clone()).or_default().push(value.clone()),
            Target::Uid(uid) => user.uid = uid.clone(),
        }
    }
    let has = |g: &str| user.groups.iter().any(|x| x == g);
    if user.name == names::ANONYMOUS {
        if !has(names::ALL_UNAUTHENTICATED) {
            user.groups.push(names::ALL_UNAUTHENTICATED.into());
        }
    } else if !has(names::ALL_AUTHENTICATED) && !has(names::ALL_UNAUTHENTICATED) {
        user.groups.push(names::ALL_AUTHENTICATED.into());
    }
    user
}

/// Who the request runs as: the requester when nothing is impersonated, else the identity the
/// targets make once the requester may act as each (the first refused is the 403, worded as
/// Kubernetes' `responsewriters.Forbidden`; an authorizer error refuses too).
pub fn decide(authz: &dyn Authorizer, requester: &Arc<UserInfo>, targets: &[Target]) -> Result<UserInfo, ApiError> {
    for t in targets {
        let attrs = t.attributes(requester.clone());
        let verdict = authz.authorize(&attrs);
        if verdict.decision != Decision::Allow {
            if let Some(err) = &verdict.error {
                tracing::warn!(error = %err, requester = %requester.name, "authorizing impersonation failed");
            }
            return Err(crate::http::pipeline::forbidden(&attrs, &verdict.reason));
        }
    }
    Ok(impersonated_user(targets))
}

/// The pipeline's step: the user the request runs as from here on. When it impersonates, the
/// requester is kept as [`Impersonator`] and every `Impersonate-*` header is removed, so nothing
/// downstream (an agent an exec is proxied to) sees them.
pub fn apply(
    authz: &dyn Authorizer,
    requester: Arc<UserInfo>,
    req: &mut axum::extract::Request,
) -> Result<Arc<UserInfo>, ApiError> {
    let targets = targets(req.headers()).map_err(|e| ApiError::bad_request(e.to_string()))?;
    if targets.is_empty() {
        return Ok(requester);
    }
    let user = Arc::new(decide(authz, &requester, &targets)?);
    tracing::debug!(requester = %requester.name, user = %user.name, groups = ?user.groups, "impersonating");
    strip(req.headers_mut());
    req.extensions_mut().insert(Impersonator(requester));
    Ok(user)
}

/// Removes `Impersonate-User`, `-Group`, `-Uid` and every `Impersonate-Extra-*`.
pub fn strip(headers: &mut HeaderMap) {
    let extras: Vec<_> =
        headers.keys().filter(|k| k.as_str().to_ascii_lowercase().starts_with(EXTRA_HEADER_PREFIX)).cloned().collect();
    for name in [USER_HEADER, GROUP_HEADER, UID_HEADER] {
        headers.remove(name);
    }
    for name in extras {
        headers.remove(name);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::auth::Verdict;
    use std::sync::Mutex;

    fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            let name = axum::http::HeaderName::from_bytes(k.as_bytes()).expect("header name");
            h.append(name, v.parse().expect("header value"));
        }
        h
    }

    /// Allows what `allow` says and records every question.
    struct Recorder {
        asked: Mutex<Vec<Attributes>>,
        allow: fn(&Attributes) -> bool,
    }

    impl Authorizer for Recorder {
        fn authorize(&self, a: &Attributes) -> Verdict {
            self.asked.lock().expect("lock").push(a.clone());
            if (self.allow)(a) {
                Verdict::allow("")
            } else {
                Verdict::no_opinion("")
            }
        }
    }

    fn recorder(allow: fn(&Attributes) -> bool) -> Recorder {
        Recorder { asked: Mutex::new(Vec::new()), allow }
    }

    fn requester() -> Arc<UserInfo> {
        Arc::new(UserInfo::new("admin-less", &["system:authenticated"]))
    }

    #[test]
    fn headers_name_the_user_groups_extras_and_uid_in_kubernetes_order() {
        let h = headers(&[
            ("Impersonate-Uid", "u-1"),
            ("Impersonate-Extra-Scopes", "view"),
            ("Impersonate-Group", "devs"),
            ("Impersonate-User", "jane"),
            ("impersonate-group", "ops"),
            ("Impersonate-Extra-scopes", "edit"),
        ]);
        let want = vec![
            Target::User("jane".into()),
            Target::Group("devs".into()),
            Target::Group("ops".into()),
            Target::Extra { key: "scopes".into(), value: "view".into() },
            Target::Extra { key: "scopes".into(), value: "edit".into() },
            Target::Uid("u-1".into()),
        ];
        assert_eq!(targets(&h), Ok(want));
        assert_eq!(targets(&headers(&[("Accept", "application/json")])), Ok(vec![]));
        assert_eq!(targets(&headers(&[("Impersonate-User", "")])), Ok(vec![]), "an empty user is no user");
    }

    #[test]
    fn groups_extras_or_a_uid_without_a_user_are_refused_with_kubernetes_message() {
        let h =
            headers(&[("Impersonate-Group", "devs"), ("Impersonate-Extra-Scopes", "view"), ("Impersonate-Uid", "u")]);
        let err = targets(&h).expect_err("no user");
        assert_eq!(
            err.to_string(),
            "requested [{Group  devs    } {UserExtra  view  authentication.k8s.io/v1  scopes} \
             {UID  u  authentication.k8s.io/v1  }] without impersonating a user"
        );
    }

    #[test]
    fn a_service_account_name_is_a_service_account_only_when_it_splits_as_one() {
        let sa = |user: &str| targets(&headers(&[("Impersonate-User", user)])).expect("targets");
        assert_eq!(
            sa("system:serviceaccount:team:builder"),
            vec![Target::ServiceAccount { namespace: "team".into(), name: "builder".into() }]
        );
        for user in ["system:serviceaccount:team", "system:serviceaccount:a:b:c", "system:serviceaccount:Team:x"] {
            assert_eq!(sa(user), vec![Target::User(user.into())], "{user}");
        }
    }

    #[test]
    fn extra_keys_are_percent_decoded_and_kept_as_sent_when_they_do_not_decode() {
        assert_eq!(unescape_extra_key("acme.com%2fproject"), "acme.com/project");
        assert_eq!(unescape_extra_key("plain"), "plain");
        assert_eq!(unescape_extra_key("bad%zz"), "bad%zz");
        assert_eq!(unescape_extra_key("cut%2"), "cut%2");
        let h = headers(&[("Impersonate-User", "jane"), ("Impersonate-Extra-Acme.com%2FProject", "kaji")]);
        let extra = Target::Extra { key: "acme.com/project".into(), value: "kaji".into() };
        assert_eq!(targets(&h).expect("targets")[1], extra);
    }

    #[test]
    fn the_impersonated_user_is_authenticated_unless_anonymous_or_a_group_says_otherwise() {
        let user = |t: &[Target]| impersonated_user(t);
        let jane = Target::User("jane".into());
        assert_eq!(user(std::slice::from_ref(&jane)).groups, vec!["system:authenticated"]);
        assert_eq!(user(&[jane.clone(), Target::Group("devs".into())]).groups, vec!["devs", "system:authenticated"]);
        let unauth = Target::Group("system:unauthenticated".into());
        assert_eq!(user(&[jane.clone(), unauth.clone()]).groups, vec!["system:unauthenticated"]);
        let anon = Target::User("system:anonymous".into());
        assert_eq!(user(&[anon]).groups, vec!["system:unauthenticated"]);
        let full = user(&[
            jane,
            Target::Extra { key: "scopes".into(), value: "a".into() },
            Target::Extra { key: "scopes".into(), value: "b".into() },
            Target::Uid("u-1".into()),
        ]);
        assert_eq!((full.name.as_str(), full.uid.as_str()), ("jane", "u-1"));
        assert_eq!(full.extra["scopes"], vec!["a", "b"]);
    }

    #[test]
    fn a_service_account_gets_its_own_groups_unless_groups_are_given() {
        let sa = Target::ServiceAccount { namespace: "team".into(), name: "builder".into() };
        let u = impersonated_user(std::slice::from_ref(&sa));
        assert_eq!(u.name, "system:serviceaccount:team:builder");
        assert_eq!(u.groups, vec!["system:serviceaccounts", "system:serviceaccounts:team", "system:authenticated"]);
        let u = impersonated_user(&[sa, Target::Group("devs".into())]);
        assert_eq!(u.groups, vec!["devs", "system:authenticated"]);
    }

    #[test]
    fn each_target_is_authorized_for_the_requester_with_verb_impersonate() {
        let authz = recorder(|_| true);
        let ts = [
            Target::ServiceAccount { namespace: "team".into(), name: "builder".into() },
            Target::Group("devs".into()),
            Target::Extra { key: "scopes".into(), value: "view".into() },
            Target::Uid("u-1".into()),
        ];
        decide(&authz, &requester(), &ts).expect("allowed");
        let asked = authz.asked.lock().expect("lock");
        let seen: Vec<_> = asked
            .iter()
            .map(|a| {
                assert_eq!(
                    (a.user.name.as_str(), a.verb.as_str(), a.resource_request),
                    ("admin-less", "impersonate", true)
                );
                (
                    a.api_group.as_str(),
                    a.resource.as_str(),
                    a.subresource.as_str(),
                    a.namespace.as_str(),
                    a.name.as_str(),
                )
            })
            .collect();
        assert_eq!(
            seen,
            vec![
                ("", "serviceaccounts", "", "team", "builder"),
                ("", "groups", "", "", "devs"),
                ("authentication.k8s.io", "userextras", "scopes", "", "view"),
                ("authentication.k8s.io", "uids", "", "", "u-1"),
            ]
        );
    }

    #[test]
    fn the_first_refused_target_is_a_403_worded_as_kubernetes_words_it() {
        let users_only = recorder(|a| a.resource == "users");
        let err = decide(&users_only, &requester(), &[Target::User("x".into())]);
        assert!(err.is_ok());
        let err = decide(&recorder(|_| false), &requester(), &[Target::User("x".into())]).expect_err("refused");
        assert_eq!((err.code, err.reason), (403, "Forbidden"));
        assert_eq!(
            err.message,
            r#"users "x" is forbidden: User "admin-less" cannot impersonate resource "users" in API group "" at the cluster scope"#
        );
        let ts = [Target::User("x".into()), Target::Group("system:masters".into())];
        let err = decide(&users_only, &requester(), &ts).expect_err("group refused");
        assert_eq!(
            err.message,
            r#"groups "system:masters" is forbidden: User "admin-less" cannot impersonate resource "groups" in API group "" at the cluster scope"#
        );
        let sa = [Target::ServiceAccount { namespace: "team".into(), name: "builder".into() }];
        let err = decide(&users_only, &requester(), &sa).expect_err("a service account is not a user");
        assert_eq!(
            err.message,
            r#"serviceaccounts "builder" is forbidden: User "admin-less" cannot impersonate resource "serviceaccounts" in API group "" in the namespace "team""#
        );
        let extra = [Target::User("x".into()), Target::Extra { key: "scopes".into(), value: "view".into() }];
        let err = decide(&users_only, &requester(), &extra).expect_err("extra refused");
        assert_eq!(
            err.message,
            r#"userextras.authentication.k8s.io "view" is forbidden: User "admin-less" cannot impersonate resource "userextras/scopes" in API group "authentication.k8s.io" at the cluster scope"#
        );
    }

    #[test]
    fn applying_impersonation_keeps_the_requester_and_strips_every_impersonation_header() {
        let mut req = axum::extract::Request::new(axum::body::Body::empty());
        *req.headers_mut() = headers(&[
            ("Impersonate-User", "jane"),
            ("Impersonate-Group", "devs"),
            ("Impersonate-Uid", "u"),
            ("Impersonate-Extra-Scopes", "view"),
            ("Accept", "application/json"),
        ]);
        let user = apply(&recorder(|_| true), requester(), &mut req).expect("allowed");
        assert_eq!(user.name, "jane");
        assert_eq!(req.extensions().get::<Impersonator>(), Some(&Impersonator(requester())));
        let left: Vec<_> = req.headers().keys().map(|k| k.as_str().to_string()).collect();
        assert_eq!(left, vec!["accept"]);

        let mut plain = axum::extract::Request::new(axum::body::Body::empty());
        let same = apply(&recorder(|_| false), requester(), &mut plain).expect("nothing to authorize");
        assert_eq!(*same, *requester());
        assert!(plain.extensions().get::<Impersonator>().is_none());
    }
}
