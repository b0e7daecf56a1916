//! NodeRestriction (Kubernetes' admission plugin of that name): a node's credentials may change
//! only its own Node (never its taints, nor labels outside the kubelet's set: `node_labels`), its
//! own Lease, the status of pods bound to it, delete pods bound to it, create only mirror pods of
//! its own, and ask tokens only for pods bound to it.
//! Everyone else passes untouched.

use super::node_labels;
use crate::auth::authz::message::resource_forbidden;
use crate::auth::authz::node::graph::pod_refs;
use crate::auth::{names, Admission, AdmissionRequest, Operation};
use crate::cache::Cache;
use crate::http::errors::{ApiError, ApiResult};
use serde_json::Value;
use std::sync::Arc;

pub const NAME: &str = "NodeRestriction";
const MIRROR_ANNOTATION: &str = "kubernetes.io/config.mirror";

pub struct NodeRestriction {
    /// Where pods named by TokenRequests are looked up.
    pub cache: Arc<Cache>,
}

fn s<'a>(v: Option<&'a Value>, p: &str) -> &'a str {
    v.and_then(|v| v.pointer(p)).and_then(Value::as_str).unwrap_or("")
}

/// `admission.NewForbidden(a, err)`: the resource and name the request addressed.
fn forbid(req: &AdmissionRequest<'_>, obj: Option<&Value>, why: impl Into<String>) -> ApiError {
    let name = if req.name.is_empty() { s(obj, "/metadata/name") } else { req.name };
    resource_forbidden(req.resource.group, req.resource.plural, name, &why.into())
}

impl NodeRestriction {
    fn pod(&self, node: &str, req: &AdmissionRequest<'_>, obj: Option<&Value>) -> ApiResult<()> {
        match (req.subresource, req.operation) {
            (None, Operation::Create) => {
                let pod = obj;
                if pod
                    .and_then(|p| p.pointer(&format!("/metadata/annotations/{}", MIRROR_ANNOTATION.replace('/', "~1"))))
                    .is_none()
                {
                    return Err(forbid(req, obj, format!(
                        "pod does not have \"{MIRROR_ANNOTATION}\" annotation, node \"{node}\" can only create mirror pods"
                    )));
                }
                if s(pod, "/spec/nodeName") != node {
                    return Err(forbid(
                        req,
                        obj,
                        format!("node \"{node}\" can only create pods with spec.nodeName set to itself"),
                    ));
                }
                if !s(pod, "/spec/serviceAccountName").is_empty() {
                    return Err(forbid(
                        req,
                        obj,
                        format!("node \"{node}\" can not create pods that reference a service account"),
                    ));
                }
                let refs = pod.and_then(pod_refs).map(|(_, r)| r).unwrap_or_default();
                for (kind, what) in [
                    (crate::auth::authz::node::graph::Kind::Secret, "secrets"),
                    (crate::auth::authz::node::graph::Kind::ConfigMap, "configmaps"),
                    (crate::auth::authz::node::graph::Kind::PersistentVolumeClaim, "persistentvolumeclaims"),
                ] {
                    if refs.iter().any(|r| r.kind == kind) {
                        return Err(forbid(
                            req,
                            obj,
                            format!("node \"{node}\" can not create pods that reference {what}"),
                        ));
                    }
                }
                Ok(())
            }
            (None, Operation::Delete) => {
                if s(req.old, "/spec/nodeName") != node {
                    return Err(forbid(
                        req,
                        obj,
                        format!("node \"{node}\" can only delete pods with spec.nodeName set to itself"),
                    ));
                }
                Ok(())
            }
            (None, op) => Err(forbid(
                req,
                obj,
                format!(
                    "unexpected operation \"{}\", node \"{node}\" can only create and delete mirror pods",
                    op.as_str()
                ),
            )),
            (Some("status"), Operation::Update) => {
                if s(req.old, "/spec/nodeName") != node {
                    return Err(forbid(
                        req,
                        obj,
                        format!("node \"{node}\" can only update pod status for pods with spec.nodeName set to itself"),
                    ));
                }
                let labels = |v: Option<&Value>| v.and_then(|v| v.pointer("/metadata/labels")).cloned();
                if labels(obj) != labels(req.old) {
                    return Err(forbid(req, obj, format!("node \"{node}\" cannot update labels through pod status")));
                }
                Ok(())
            }
            (Some("status"), op) => Err(forbid(req, obj, format!("unexpected operation \"{}\"", op.as_str()))),
            (Some(sub), _) => Err(forbid(
                req,
                obj,
                format!("unexpected pod subresource \"{sub}\", only 'status' and 'eviction' are allowed"),
            )),
        }
    }

    fn node(&self, node: &str, req: &AdmissionRequest<'_>, obj: Option<&Value>) -> ApiResult<()> {
        let requested = if req.name.is_empty() { s(obj, "/metadata/name") } else { req.name };
        if requested != node {
            return Err(forbid(req, obj, format!("node \"{node}\" is not allowed to modify node \"{requested}\"")));
        }
        if req.operation == Operation::Create {
            let refused = node_labels::forbidden(&node_labels::modified(obj, None));
            if !refused.is_empty() {
                let why = format!("node \"{node}\" is not allowed to set the following labels: {}", refused.join(", "));
                return Err(forbid(req, obj, why));
            }
        }
        if req.operation == Operation::Update {
            let taints =
                |v: Option<&Value>| v.and_then(|v| v.pointer("/spec/taints")).filter(|t| !t.is_null()).cloned();
            if taints(obj) != taints(req.old) {
                return Err(forbid(req, obj, format!("node \"{node}\" is not allowed to modify taints")));
            }
            // Kubernetes' message names no node here.
            let refused = node_labels::forbidden(&node_labels::modified(obj, req.old));
            if !refused.is_empty() {
                return Err(forbid(req, obj, format!("is not allowed to modify labels: {}", refused.join(", "))));
            }
        }
        Ok(())
    }

    fn lease(&self, node: &str, req: &AdmissionRequest<'_>, obj: Option<&Value>) -> ApiResult<()> {
        if req.namespace != Some("kube-node-lease") {
            return Err(forbid(req, obj, "can only access leases in the \"kube-node-lease\" system namespace"));
        }
        let name = if req.operation == Operation::Create { s(obj, "/metadata/name") } else { req.name };
        if name != node {
            return Err(forbid(req, obj, "can only access node lease with the same name as the requesting node"));
        }
        Ok(())
    }

    /// A node's TokenRequest must be bound to a pod scheduled on it.
    fn token(&self, node: &str, req: &AdmissionRequest<'_>, obj: Option<&Value>) -> ApiResult<()> {
        if req.operation != Operation::Create || req.subresource != Some("token") {
            return Ok(());
        }
        let bound = obj.and_then(|o| o.pointer("/spec/boundObjectRef"));
        let field = |f: &str| s(bound, &format!("/{f}"));
        if bound.is_none() || field("apiVersion") != "v1" || field("kind") != "Pod" || field("name").is_empty() {
            return Err(forbid(req, obj, "node requested token not bound to a pod"));
        }
        if field("uid").is_empty() {
            return Err(forbid(req, obj, "node requested token with a pod binding without a uid"));
        }
        let ns = req.namespace.unwrap_or("");
        let pods = kaji_api::resources::by_kind("Pod").expect("pods are served");
        let Some(pod) = self.cache.resource("Pod").and_then(|rc| rc.get(&pods.key(Some(ns), field("name")))) else {
            return Err(ApiError::not_found("", "pods", field("name")));
        };
        let pod = pod.value();
        if s(Some(&pod), "/metadata/uid") != field("uid") {
            return Err(forbid(req, obj, format!(
                "the UID in the bound object reference ({}) does not match the UID in record. The object might have been deleted and then recreated",
                field("uid")
            )));
        }
        if s(Some(&pod), "/spec/nodeName") != node {
            return Err(forbid(req, obj, "node requested token bound to a pod scheduled on a different node"));
        }
        Ok(())
    }
}

impl Admission for NodeRestriction {
    fn admit(&self, req: &AdmissionRequest<'_>, object: Option<&mut Value>) -> ApiResult<()> {
        let user = req.user;
        if !user.in_group(names::NODES_GROUP) || !user.name.starts_with(names::NODE_USER_PREFIX) {
            return Ok(());
        }
        let obj = object.as_deref();
        let Some(node) = user.node_name() else {
            return Err(forbid(req, obj, format!("could not determine node from user {:?}", user.name)));
        };
        match (req.resource.group, req.resource.kind) {
            ("", "Pod") => self.pod(node, req, obj),
            ("", "Node") => self.node(node, req, obj),
            ("", "ServiceAccount") => self.token(node, req, obj),
            ("coordination.k8s.io", "Lease") => self.lease(node, req, obj),
            _ => Ok(()),
        }
    }
}
