//! `csrcleaner` (kube-controller-manager's CSR cleaner). Desired: no request outlives its use —
//! pending ones 24 h after creation, approved-and-issued, denied and failed ones an hour after
//! that condition was last updated, issued ones once their certificate expired. Observed: the
//! requests, swept every hour as Kubernetes does.

use super::{has_condition, is_issued};
use crate::shared::Shared;
use k8s_openapi::api::certificates::v1::CertificateSigningRequest;
use kube::api::{Api, DeleteParams};
use kube::runtime::reflector::Store;
use kube::ResourceExt;
use std::sync::Arc;
use std::time::Duration;

pub const NAME: &str = "csrcleaner";
pub const PERIOD: Duration = Duration::from_secs(3600);
const HANDLED: i64 = 3600;
const PENDING: i64 = 24 * 3600;

pub struct Ctx {
    pub shared: Shared,
    pub csrs: Store<CertificateSigningRequest>,
}

fn updated(csr: &CertificateSigningRequest, ty: &str) -> Option<i64> {
    let conditions = csr.status.as_ref()?.conditions.as_ref()?;
    let c = conditions.iter().find(|c| c.type_ == ty)?;
    c.last_update_time.as_ref().or(c.last_transition_time.as_ref()).map(|t| t.0.as_second())
}

fn not_after(csr: &CertificateSigningRequest) -> Option<i64> {
    let pem = csr.status.as_ref()?.certificate.as_ref()?;
    let der = kaji_pki::cert::first_cert(std::str::from_utf8(&pem.0).ok()?, "issued certificate").ok()?;
    kaji_pki::Identity::parse(der.as_ref()).ok().map(|id| id.not_after)
}

/// Why `csr` should go at `now` (Unix seconds), in Kubernetes' words; None to keep it.
pub fn expired(csr: &CertificateSigningRequest, now: i64) -> Option<String> {
    if is_issued(csr) && not_after(csr).is_some_and(|t| now > t) {
        return Some("Cleaning CSR as the associated certificate is expired.".into());
    }
    let past = |ty: &str| has_condition(csr, ty) && updated(csr, ty).is_some_and(|t| now - t > HANDLED);
    if is_issued(csr) && past("Approved") {
        return Some("Cleaning CSR as it is more than 1h0m0s old and approved.".into());
    }
    if past("Denied") {
        return Some("Cleaning CSR as it is more than 1h0m0s old and denied.".into());
    }
    if past("Failed") {
        return Some("Cleaning CSR as it is more than 1h0m0s old and failed.".into());
    }
    let handled = has_condition(csr, "Approved") || has_condition(csr, "Denied");
    let created = csr.metadata.creation_timestamp.as_ref().map(|t| t.0.as_second());
    if !handled && created.is_some_and(|t| now - t > PENDING) {
        return Some("Cleaning CSR as it is more than 24h0m0s old and unhandled.".into());
    }
    None
}

/// One sweep: delete what [`expired`] names.
pub async fn sweep(ctx: &Ctx) -> Result<(), kube::Error> {
    let now = jiff::Timestamp::now().as_second();
    let api: Api<CertificateSigningRequest> = Api::all(ctx.shared.client.clone());
    for csr in ctx.csrs.state() {
        let Some(why) = expired(&csr, now) else { continue };
        let name = csr.name_any();
        match api.delete(&name, &DeleteParams::default()).await {
            Ok(_) => tracing::info!(controller = NAME, csr = %name, reason = %why, "deleted"),
            Err(kube::Error::Api(e)) if e.code == 404 => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// Sweeps every hour until `stop` resolves; a failed sweep is retried with back-off.
pub async fn run(ctx: Arc<Ctx>, stop: impl std::future::Future<Output = ()> + Send + Sync + 'static) {
    let sweep = || async {
        match sweep(&ctx).await {
            Ok(()) => PERIOD,
            Err(e) => {
                tracing::warn!(controller = NAME, error = %e, "sweep failed; backing off");
                crate::shared::backoff_delay(1).max(Duration::from_secs(5))
            }
        }
    };
    crate::shared::every(sweep, stop).await;
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::certificates::testing::kubelet;
    use k8s_openapi::api::certificates::v1::{CertificateSigningRequestCondition, CertificateSigningRequestStatus};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
    use k8s_openapi::ByteString;

    const NOW: i64 = 1_800_000_000;

    fn at(s: i64) -> Time {
        Time(jiff::Timestamp::from_second(s).expect("time"))
    }

    fn csr(created: i64, condition: Option<(&str, i64)>, cert: Option<String>) -> CertificateSigningRequest {
        let mut c = kubelet("system:node:n1", "u");
        c.metadata.creation_timestamp = Some(at(created));
        c.status = Some(CertificateSigningRequestStatus {
            conditions: condition.map(|(t, s)| {
                vec![CertificateSigningRequestCondition {
                    type_: t.into(),
                    status: "True".into(),
                    last_update_time: Some(at(s)),
                    ..Default::default()
                }]
            }),
            certificate: cert.map(|p| ByteString(p.into_bytes())),
        });
        c
    }

    #[test]
    fn requests_go_once_handled_for_an_hour_or_pending_for_a_day() {
        assert_eq!(expired(&csr(NOW - 3600, None, None), NOW), None, "pending an hour");
        assert_eq!(
            expired(&csr(NOW - 25 * 3600, None, None), NOW).as_deref(),
            Some("Cleaning CSR as it is more than 24h0m0s old and unhandled.")
        );
        assert_eq!(expired(&csr(NOW - 7200, Some(("Denied", NOW - 600)), None), NOW), None);
        assert_eq!(
            expired(&csr(NOW - 7200, Some(("Denied", NOW - 3601)), None), NOW).as_deref(),
            Some("Cleaning CSR as it is more than 1h0m0s old and denied.")
        );
        assert_eq!(
            expired(&csr(NOW - 7200, Some(("Failed", NOW - 3601)), None), NOW).as_deref(),
            Some("Cleaning CSR as it is more than 1h0m0s old and failed.")
        );
        // Approved but not issued yet: the signer still has work to do.
        assert_eq!(expired(&csr(NOW - 7200, Some(("Approved", NOW - 3601)), None), NOW), None);
    }

    #[test]
    fn issued_requests_go_an_hour_after_approval_or_when_their_certificate_expired() {
        let ca = kaji_pki::Ca::generate("kubernetes", kaji_pki::ca::CA_VALIDITY).expect("ca");
        let pem = ca.issue(&kaji_pki::CertSpec::client("system:node:n1", &["system:nodes"])).expect("issue").cert_pem;
        let now = jiff::Timestamp::now().as_second();
        assert_eq!(expired(&csr(now - 600, Some(("Approved", now - 600)), Some(pem.clone())), now), None);
        assert_eq!(
            expired(&csr(now - 7200, Some(("Approved", now - 3601)), Some(pem.clone())), now).as_deref(),
            Some("Cleaning CSR as it is more than 1h0m0s old and approved.")
        );
        let later = now + 2 * 365 * 24 * 3600;
        assert_eq!(
            expired(&csr(now, Some(("Approved", later)), Some(pem)), later).as_deref(),
            Some("Cleaning CSR as the associated certificate is expired.")
        );
    }
}
