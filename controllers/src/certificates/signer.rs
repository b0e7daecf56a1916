//! `csrsigning` (kube-controller-manager's signer with `--cluster-signing-cert-file`). Desired:
//! every approved, not failed request of the `kubernetes.io` signers kaji runs
//! (kube-apiserver-client-kubelet, kube-apiserver-client, kubelet-serving) holds a certificate
//! from the cluster CA; one its signer's rules refuse gets a Failed condition instead.
//! Observed: the requests.

use super::{
    has_condition, is_issued, parse_request, usages, validate_apiserver_client, validate_kubelet_client,
    validate_kubelet_serving, APISERVER_CLIENT, KUBELET_CLIENT, KUBELET_SERVING,
};
use crate::shared::Shared;
use futures::Stream;
use k8s_openapi::api::certificates::v1::{CertificateSigningRequest, CertificateSigningRequestCondition};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::ByteString;
use kaji_pki::csr::Request;
use kaji_pki::{Ca, CertSpec, Usage};
use kube::api::{Api, PostParams};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::reflector::Store;
use kube::runtime::watcher;
use kube::ResourceExt;
use std::sync::Arc;
use std::time::Duration;

pub const NAME: &str = "csrsigning";
/// `--cluster-signing-duration`'s default.
pub const DEFAULT_DURATION: Duration = Duration::from_secs(8760 * 3600);
/// The shortest certificate issued, whatever a request asks (twice the backdate).
pub const MIN_DURATION: Duration = Duration::from_secs(600);

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{0}")]
    Parse(String),
    #[error("error auto signing csr {csr}")]
    Sign {
        csr: String,
        #[source]
        source: kaji_pki::Error,
    },
    #[error("error updating signature for csr {csr}")]
    Update {
        csr: String,
        #[source]
        source: kube::Error,
    },
}

/// The cluster CA and how long its certificates last.
#[derive(Clone)]
pub struct Settings {
    pub ca: Arc<Ca>,
    pub duration: Duration,
}

impl std::fmt::Debug for Settings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Settings").field("duration", &self.duration).finish_non_exhaustive()
    }
}

pub struct Ctx {
    pub shared: Shared,
    pub settings: Settings,
    pub csrs: Store<CertificateSigningRequest>,
}

/// What to do with one request.
#[derive(Debug, PartialEq)]
pub enum Plan {
    /// Not ours, not approved, failed or issued already.
    Ignore,
    /// Its signer refuses it: a Failed condition with reason SignerValidationFailure.
    Fail(String),
    Sign(CertSpec),
}

/// `duration`: the requested one within [10 min, the configured one].
pub fn duration(configured: Duration, expiration_seconds: Option<i32>) -> Duration {
    match expiration_seconds {
        None => configured,
        Some(s) => Duration::from_secs(u64::try_from(s).unwrap_or(0)).clamp(MIN_DURATION, configured.max(MIN_DURATION)),
    }
}

/// The decision for `csr` (whose parsed request is `req`): the pure core of the controller.
pub fn plan(csr: &CertificateSigningRequest, req: &Request, configured: Duration) -> Plan {
    if !has_condition(csr, "Approved") || has_condition(csr, "Failed") || is_issued(csr) {
        return Plan::Ignore;
    }
    let listed: Vec<String> = csr.spec.usages.clone().unwrap_or_default();
    let checked = match csr.spec.signer_name.as_str() {
        KUBELET_CLIENT => validate_kubelet_client(req, &usages(csr)),
        KUBELET_SERVING => validate_kubelet_serving(req, &usages(csr)),
        APISERVER_CLIENT => validate_apiserver_client(&listed),
        _ => return Plan::Ignore,
    };
    if let Err(why) = checked {
        return Plan::Fail(why);
    }
    let mut parsed = Vec::new();
    for u in &listed {
        match Usage::parse(u) {
            Some(p) if !parsed.contains(&p) => parsed.push(p),
            Some(_) => {}
            None => return Plan::Fail(format!("unrecognized usage: {u}")),
        }
    }
    Plan::Sign(CertSpec {
        common_name: req.common_name.clone(),
        organizations: req.organizations.clone(),
        dns_names: req.dns_names.clone(),
        ips: req.ips.clone(),
        emails: req.emails.clone(),
        uris: req.uris.clone(),
        usages: parsed,
        validity: duration(configured, csr.spec.expiration_seconds),
    })
}

#[tracing::instrument(skip_all, fields(controller = NAME, object = %csr.name_any()))]
pub async fn reconcile(csr: Arc<CertificateSigningRequest>, ctx: Arc<Ctx>) -> Result<Action, Error> {
    let name = csr.name_any();
    ctx.shared.reconciled(NAME, &name, sync(&csr, &ctx, &name)).await
}

pub fn error_policy(csr: Arc<CertificateSigningRequest>, err: &Error, ctx: Arc<Ctx>) -> Action {
    ctx.shared.failed(NAME, &csr.name_any(), err)
}

async fn sync(csr: &CertificateSigningRequest, ctx: &Ctx, name: &str) -> Result<Action, Error> {
    if !has_condition(csr, "Approved") || has_condition(csr, "Failed") || is_issued(csr) {
        return Ok(Action::await_change());
    }
    let req = parse_request(csr).map_err(Error::Parse)?;
    let mut next = csr.clone();
    let status = next.status.get_or_insert_with(Default::default);
    match plan(csr, &req, ctx.settings.duration) {
        Plan::Ignore => return Ok(Action::await_change()),
        Plan::Fail(why) => {
            tracing::info!(csr = %name, reason = %why, "refused by its signer");
            status.conditions.get_or_insert_with(Vec::new).push(CertificateSigningRequestCondition {
                type_: "Failed".into(),
                status: "True".into(),
                reason: Some("SignerValidationFailure".into()),
                message: Some(why),
                last_update_time: Some(Time(jiff::Timestamp::now())),
                ..Default::default()
            });
        }
        Plan::Sign(spec) => {
            let pem = ctx
                .settings
                .ca
                .sign(req.public_key(), &spec)
                .map_err(|source| Error::Sign { csr: name.into(), source })?;
            status.certificate = Some(ByteString(pem.into_bytes()));
            tracing::info!(csr = %name, subject = %spec.common_name, "signed");
        }
    }
    let api: Api<CertificateSigningRequest> = Api::all(ctx.shared.client.clone());
    match api.replace_subresource("status", name, &PostParams::default(), &next).await {
        Ok(_) => {}
        Err(kube::Error::Api(e)) if e.code == 409 => {}
        Err(source) => return Err(Error::Update { csr: name.into(), source }),
    }
    Ok(Action::await_change())
}

/// Runs the controller until `stop` resolves.
pub async fn run(
    ctx: Arc<Ctx>,
    csrs: impl Stream<Item = Result<CertificateSigningRequest, watcher::Error>> + Send + 'static,
    stop: impl std::future::Future<Output = ()> + Send + Sync + 'static,
) {
    let controller = Controller::for_stream(csrs, ctx.csrs.clone());
    crate::shared::drive(controller, reconcile, error_policy, ctx, stop).await;
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::certificates::testing::{csr, kubelet};
    use k8s_openapi::api::certificates::v1::CertificateSigningRequestStatus;

    fn with(mut c: CertificateSigningRequest, conditions: &[&str]) -> CertificateSigningRequest {
        c.status = Some(CertificateSigningRequestStatus {
            conditions: Some(
                conditions
                    .iter()
                    .map(|t| CertificateSigningRequestCondition {
                        type_: t.to_string(),
                        status: "True".into(),
                        ..Default::default()
                    })
                    .collect(),
            ),
            certificate: None,
        });
        c
    }

    fn planned(c: &CertificateSigningRequest) -> Plan {
        plan(c, &parse_request(c).expect("parses"), DEFAULT_DURATION)
    }

    #[test]
    fn only_approved_unfailed_unissued_requests_are_signed() {
        let c = kubelet("system:node:n1", "system:bootstrap:abcdef");
        assert_eq!(planned(&c), Plan::Ignore, "pending");
        assert_eq!(planned(&with(c.clone(), &["Denied"])), Plan::Ignore);
        assert_eq!(planned(&with(c.clone(), &["Approved", "Failed"])), Plan::Ignore);
        let Plan::Sign(spec) = planned(&with(c, &["Approved"])) else { panic!("signs") };
        assert_eq!(
            (spec.common_name.as_str(), spec.organizations.clone()),
            ("system:node:n1", vec!["system:nodes".into()])
        );
        assert_eq!(spec.usages, vec![Usage::DigitalSignature, Usage::ClientAuth]);
        assert_eq!(spec.validity, DEFAULT_DURATION);
    }

    #[test]
    fn each_signer_allows_only_its_usages() {
        let client =
            |usages: &[&str]| with(csr("alice", &["dev"], (&[], &[]), APISERVER_CLIENT, usages, "u"), &["Approved"]);
        assert!(matches!(planned(&client(&["client auth"])), Plan::Sign(_)));
        assert_eq!(
            planned(&client(&["client auth", "server auth"])),
            Plan::Fail("invalid usage for client certificate: server auth".into())
        );
        assert_eq!(
            planned(&client(&["digital signature"])),
            Plan::Fail("missing required usage for client certificate: client auth".into())
        );
        let kubelet_server = |usages: &[&str]| {
            let ip = "10.0.0.1".parse().expect("ip");
            with(
                csr("system:node:n1", &["system:nodes"], (&[], &[ip]), KUBELET_SERVING, usages, "system:node:n1"),
                &["Approved"],
            )
        };
        assert!(matches!(planned(&kubelet_server(&["digital signature", "server auth"])), Plan::Sign(_)));
        assert_eq!(
            planned(&kubelet_server(&["digital signature", "client auth"])),
            Plan::Fail("usages did not match [digital signature key encipherment server auth]".into())
        );
        let named = csr(
            "system:node:n1",
            &["system:nodes"],
            (&["n1".into()], &[]),
            KUBELET_CLIENT,
            &["digital signature", "client auth"],
            "u",
        );
        assert_eq!(planned(&with(named, &["Approved"])), Plan::Fail("DNS subjectAltNames are not allowed".into()));
        let other = csr("x", &[], (&[], &[]), "example.com/signer", &["client auth"], "u");
        assert_eq!(planned(&with(other, &["Approved"])), Plan::Ignore, "another signer's request");
    }

    #[test]
    fn requested_durations_are_kept_within_ten_minutes_and_the_configured_one() {
        assert_eq!(duration(DEFAULT_DURATION, None), DEFAULT_DURATION);
        assert_eq!(duration(DEFAULT_DURATION, Some(3600)), Duration::from_secs(3600));
        assert_eq!(duration(DEFAULT_DURATION, Some(60)), MIN_DURATION);
        assert_eq!(duration(Duration::from_secs(7200), Some(86400)), Duration::from_secs(7200));
        let mut c = with(kubelet("system:node:n1", "u"), &["Approved"]);
        c.spec.expiration_seconds = Some(1800);
        let Plan::Sign(spec) = planned(&c) else { panic!("signs") };
        assert_eq!(spec.validity, Duration::from_secs(1800));
    }

    #[test]
    fn the_certificate_is_for_the_requests_key_and_subject() {
        let ca = Ca::generate("kubernetes", kaji_pki::ca::CA_VALIDITY).expect("ca");
        let c = with(kubelet("system:node:n1", "u"), &["Approved"]);
        let req = parse_request(&c).expect("parses");
        let Plan::Sign(spec) = plan(&c, &req, DEFAULT_DURATION) else { panic!("signs") };
        let pem = ca.sign(req.public_key(), &spec).expect("sign");
        let der = kaji_pki::cert::first_cert(&pem, "issued").expect("pem");
        let id = kaji_pki::Identity::parse(der.as_ref()).expect("parse");
        assert_eq!(
            (id.common_name.as_str(), id.organizations.clone()),
            ("system:node:n1", vec!["system:nodes".to_string()])
        );
        let verifier = kaji_pki::tls::ChainVerifier::new(ca.cert_pem()).expect("verifier");
        assert!(verifier.verify(&[der.as_ref().to_vec()]).is_ok());
    }
}
