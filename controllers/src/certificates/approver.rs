//! `csrapproving` (kube-controller-manager's sarapprove). Desired: a pending kubelet client
//! certificate request is approved when its requester may create
//! `certificatesigningrequests/selfnodeclient` (a node renewing its own) or `/nodeclient` (a
//! bootstrapper), as a SubjectAccessReview for the requester answers. Observed: the requests.

use super::{has_condition, is_issued, parse_request, usages, validate_kubelet_client, KUBELET_CLIENT};
use crate::shared::Shared;
use futures::Stream;
use k8s_openapi::api::authorization::v1::{ResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec};
use k8s_openapi::api::certificates::v1::{CertificateSigningRequest, CertificateSigningRequestCondition};
use kaji_pki::csr::Request;
use kube::api::{Api, PostParams};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::reflector::Store;
use kube::runtime::watcher;
use kube::ResourceExt;
use std::sync::Arc;

pub const NAME: &str = "csrapproving";
pub const REASON: &str = "AutoApproved";

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{0}")]
    Parse(String),
    #[error("subject access review for {csr} failed")]
    Review {
        csr: String,
        #[source]
        source: kube::Error,
    },
    #[error("error updating approval for csr {csr}")]
    Approve {
        csr: String,
        #[source]
        source: kube::Error,
    },
}

pub struct Ctx {
    pub shared: Shared,
    pub csrs: Store<CertificateSigningRequest>,
}

/// One way a request can be approved: the subresource its requester must be allowed to create,
/// and the message the approval carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Recognizer {
    pub subresource: &'static str,
    pub message: &'static str,
}

pub const SELF_NODE_CLIENT: Recognizer = Recognizer {
    subresource: "selfnodeclient",
    message: "Auto approving self kubelet client certificate after SubjectAccessReview.",
};
pub const NODE_CLIENT: Recognizer = Recognizer {
    subresource: "nodeclient",
    message: "Auto approving kubelet client certificate after SubjectAccessReview.",
};

/// The recognizers that match, in the order to try them (a node's own renewal first); none for a
/// request that is issued, approved or denied already.
pub fn recognize(csr: &CertificateSigningRequest, req: &Request) -> Vec<Recognizer> {
    if csr.spec.signer_name != KUBELET_CLIENT || validate_kubelet_client(req, &usages(csr)).is_err() {
        return vec![];
    }
    let mut out = Vec::new();
    if csr.spec.username.as_deref() == Some(req.common_name.as_str()) {
        out.push(SELF_NODE_CLIENT);
    }
    out.push(NODE_CLIENT);
    out
}

/// Whether nothing is left to decide.
fn settled(csr: &CertificateSigningRequest) -> bool {
    is_issued(csr) || has_condition(csr, "Approved") || has_condition(csr, "Denied")
}

fn review(csr: &CertificateSigningRequest, subresource: &str) -> SubjectAccessReview {
    let extra = csr.spec.extra.clone();
    SubjectAccessReview {
        spec: SubjectAccessReviewSpec {
            user: csr.spec.username.clone(),
            uid: csr.spec.uid.clone(),
            groups: csr.spec.groups.clone(),
            extra,
            resource_attributes: Some(ResourceAttributes {
                group: Some("certificates.k8s.io".into()),
                resource: Some("certificatesigningrequests".into()),
                verb: Some("create".into()),
                subresource: Some(subresource.into()),
                version: Some("*".into()),
                ..Default::default()
            }),
            ..Default::default()
        },
        ..Default::default()
    }
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
    if settled(csr) {
        return Ok(Action::await_change());
    }
    let req = parse_request(csr).map_err(Error::Parse)?;
    let reviews: Api<SubjectAccessReview> = Api::all(ctx.shared.client.clone());
    let tried = recognize(csr, &req);
    for r in &tried {
        let answer = reviews
            .create(&PostParams::default(), &review(csr, r.subresource))
            .await
            .map_err(|source| Error::Review { csr: name.into(), source })?;
        if !answer.status.is_some_and(|s| s.allowed) {
            continue;
        }
        let mut approved = csr.clone();
        let status = approved.status.get_or_insert_with(Default::default);
        status.conditions.get_or_insert_with(Vec::new).push(CertificateSigningRequestCondition {
            type_: "Approved".into(),
            status: "True".into(),
            reason: Some(REASON.into()),
            message: Some(r.message.into()),
            ..Default::default()
        });
        let api: Api<CertificateSigningRequest> = Api::all(ctx.shared.client.clone());
        match api.replace_subresource("approval", name, &PostParams::default(), &approved).await {
            Ok(_) => tracing::info!(csr = %name, subresource = r.subresource, "approved"),
            // A stale copy: the watch brings the newer one.
            Err(kube::Error::Api(e)) if e.code == 409 => {}
            Err(source) => return Err(Error::Approve { csr: name.into(), source }),
        }
        return Ok(Action::await_change());
    }
    if !tried.is_empty() {
        let subs: Vec<&str> = tried.iter().map(|r| r.subresource).collect();
        tracing::debug!(csr = %name, tried = ?subs, "recognized but the subject access review was not approved");
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

    fn recognized(c: &CertificateSigningRequest) -> Vec<&'static str> {
        let req = parse_request(c).expect("parses");
        recognize(c, &req).iter().map(|r| r.subresource).collect()
    }

    #[test]
    fn a_bootstrapper_request_is_a_node_client_request() {
        assert_eq!(recognized(&kubelet("system:node:n1", "system:bootstrap:abcdef")), vec!["nodeclient"]);
    }

    #[test]
    fn a_node_renewing_its_own_certificate_tries_selfnodeclient_first() {
        assert_eq!(recognized(&kubelet("system:node:n1", "system:node:n1")), vec!["selfnodeclient", "nodeclient"]);
    }

    #[test]
    fn requests_that_are_not_a_kubelets_client_certificate_are_left_alone() {
        let wrong_org = csr(
            "system:node:n1",
            &["system:masters"],
            (&[], &[]),
            super::super::KUBELET_CLIENT,
            &["digital signature", "client auth"],
            "u",
        );
        let with_san = csr(
            "system:node:n1",
            &["system:nodes"],
            (&["n1".into()], &[]),
            super::super::KUBELET_CLIENT,
            &["digital signature", "client auth"],
            "u",
        );
        let wrong_cn = csr(
            "admin",
            &["system:nodes"],
            (&[], &[]),
            super::super::KUBELET_CLIENT,
            &["digital signature", "client auth"],
            "u",
        );
        let server_usage = csr(
            "system:node:n1",
            &["system:nodes"],
            (&[], &[]),
            super::super::KUBELET_CLIENT,
            &["digital signature", "server auth"],
            "u",
        );
        let other_signer = csr(
            "system:node:n1",
            &["system:nodes"],
            (&[], &[]),
            super::super::APISERVER_CLIENT,
            &["digital signature", "client auth"],
            "u",
        );
        for c in [wrong_org, with_san, wrong_cn, server_usage, other_signer] {
            assert_eq!(recognized(&c), Vec::<&str>::new());
        }
    }

    #[test]
    fn the_review_asks_about_the_requester_not_the_controller() {
        let mut c = kubelet("system:node:n1", "system:bootstrap:abcdef");
        c.spec.groups = Some(vec!["system:bootstrappers".into()]);
        let sar = review(&c, "nodeclient");
        assert_eq!(sar.spec.user.as_deref(), Some("system:bootstrap:abcdef"));
        assert_eq!(sar.spec.groups, Some(vec!["system:bootstrappers".into()]));
        let attrs = sar.spec.resource_attributes.expect("resource attributes");
        assert_eq!(
            (attrs.verb.as_deref(), attrs.resource.as_deref(), attrs.subresource.as_deref()),
            (Some("create"), Some("certificatesigningrequests"), Some("nodeclient"))
        );
    }
}
