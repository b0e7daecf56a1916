//! The resource table: every kind kaji serves, with its group/version/plural/scope/subresources.

/// A subresource the API serves beside the main object.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Subresource {
    /// `.../status`: writes change only `.status`.
    Status,
    /// `.../scale`: autoscaling/v1 Scale view of `.spec.replicas`.
    Scale,
    /// `pods/{name}/binding`: sets `spec.nodeName` once.
    Binding,
    /// `namespaces/{name}/finalize`: writes `spec.finalizers`.
    Finalize,
    /// `serviceaccounts/{name}/token`: creates a TokenRequest (a signed token, nothing stored).
    Token,
    /// `certificatesigningrequests/{name}/approval`: writes only the Approved/Denied conditions.
    Approval,
    /// `pods/{name}/eviction`: a policy/v1 Eviction — delete the pod if its disruption budget allows.
    Eviction,
}

impl Subresource {
    pub fn name(self) -> &'static str {
        match self {
            Subresource::Status => "status",
            Subresource::Scale => "scale",
            Subresource::Binding => "binding",
            Subresource::Finalize => "finalize",
            Subresource::Token => "token",
            Subresource::Approval => "approval",
            Subresource::Eviction => "eviction",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "status" => Some(Subresource::Status),
            "scale" => Some(Subresource::Scale),
            "binding" => Some(Subresource::Binding),
            "finalize" => Some(Subresource::Finalize),
            "token" => Some(Subresource::Token),
            "approval" => Some(Subresource::Approval),
            "eviction" => Some(Subresource::Eviction),
            _ => None,
        }
    }
}

/// Static description of one served resource.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ResourceInfo {
    pub group: &'static str,
    pub version: &'static str,
    pub kind: &'static str,
    pub plural: &'static str,
    pub singular: &'static str,
    pub namespaced: bool,
    pub short_names: &'static [&'static str],
    pub categories: &'static [&'static str],
    pub subresources: &'static [Subresource],
    /// PUT on a missing object creates it (Kubernetes' AllowCreateOnUpdate).
    pub create_on_update: bool,
    /// The kind's strategy (`crate::kinds`), for the kinds served through one.
    pub strategy: Option<crate::kinds::StrategyRef>,
}

impl ResourceInfo {
    /// `v1` or `apps/v1`.
    pub fn api_version(&self) -> String {
        if self.group.is_empty() {
            self.version.to_string()
        } else {
            format!("{}/{}", self.group, self.version)
        }
    }

    pub fn list_kind(&self) -> String {
        format!("{}List", self.kind)
    }

    /// Store key prefix for this resource: `/registry/<plural>/` (group-qualified outside core and apps).
    pub fn key_prefix(&self) -> String {
        match self.group {
            "" | "apps" => format!("/registry/{}/", self.plural),
            g => format!("/registry/{}.{}/", self.plural, g),
        }
    }

    /// Store key of one object.
    pub fn key(&self, namespace: Option<&str>, name: &str) -> String {
        match namespace {
            Some(ns) if self.namespaced => format!("{}{}/{}", self.key_prefix(), ns, name),
            _ => format!("{}{}", self.key_prefix(), name),
        }
    }

    /// Store key prefix of one namespace's objects, or of all of them.
    pub fn namespace_prefix(&self, namespace: Option<&str>) -> String {
        match namespace {
            Some(ns) if self.namespaced => format!("{}{}/", self.key_prefix(), ns),
            _ => self.key_prefix(),
        }
    }

    pub fn has(&self, sub: Subresource) -> bool {
        self.subresources.contains(&sub)
    }

    /// Whether the API sets `metadata.generation` and bumps it on spec changes (as Kubernetes
    /// does for workload controllers' objects and for a PodTemplate's template, not for plain
    /// data or leases).
    pub fn tracks_generation(&self) -> bool {
        if let Some(s) = self.strategy {
            return s.0.tracks_generation();
        }
        matches!(
            self.kind,
            "Deployment"
                | "ReplicaSet"
                | "ReplicationController"
                | "DaemonSet"
                | "StatefulSet"
                | "Job"
                | "CronJob"
                | "PodTemplate"
        )
    }

    /// Whether create drops the status the client sent (the strategy's PrepareForCreate): the
    /// status of these kinds is written by controllers, agents or the registry itself.
    pub fn resets_status_on_create(&self) -> bool {
        if let Some(s) = self.strategy {
            return s.0.resets_status_on_create();
        }
        matches!(
            self.kind,
            "Pod"
                | "Service"
                | "Deployment"
                | "ReplicaSet"
                | "ReplicationController"
                | "Namespace"
                | "DaemonSet"
                | "StatefulSet"
                | "Job"
                | "CronJob"
                | "PersistentVolumeClaim"
                | "ResourceQuota"
        )
    }

    /// Whether a DELETE that names no propagation orphans the object's dependents (the strategy's
    /// DefaultGarbageCollectionPolicy): core/v1 ReplicationControllers do, for compatibility with
    /// clients older than the garbage collector; every other kind deletes them in the background.
    pub fn orphans_dependents_by_default(&self) -> bool {
        self.group.is_empty() && self.kind == "ReplicationController"
    }

    /// Whether the kind is only ever created and answered, never stored (the access and token
    /// reviews): it serves `create` alone.
    pub fn is_virtual(&self) -> bool {
        matches!(self.group, "authorization.k8s.io" | "authentication.k8s.io")
    }

    /// The verbs discovery lists for the kind.
    pub fn verbs(&self) -> &'static [&'static str] {
        if self.is_virtual() {
            &["create"]
        } else {
            &["create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"]
        }
    }

    /// Whether DELETE answers with the deleted object (Kubernetes' ReturnDeletedObject) rather
    /// than a Success Status.
    pub fn returns_deleted_object(&self) -> bool {
        if let Some(s) = self.strategy {
            return s.0.returns_deleted_object();
        }
        matches!(
            self.kind,
            "Pod"
                | "PodTemplate"
                | "ResourceQuota"
                | "Service"
                | "Namespace"
                | "PersistentVolume"
                | "PersistentVolumeClaim"
        )
    }
}

const ALL: &[&str] = &["all"];
const NONE: &[&str] = &[];

macro_rules! res {
    ($group:expr, $kind:expr, $plural:expr, $singular:expr, $ns:expr, $short:expr, $cat:expr, $subs:expr, $cou:expr) => {
        ResourceInfo {
            group: $group,
            version: "v1",
            kind: $kind,
            plural: $plural,
            singular: $singular,
            namespaced: $ns,
            short_names: $short,
            categories: $cat,
            subresources: $subs,
            create_on_update: $cou,
            strategy: None,
        }
    };
}

use crate::kinds;
use Subresource::*;

/// Everything kaji serves, in discovery order.
pub static RESOURCES: &[ResourceInfo] = &[
    res!("", "Namespace", "namespaces", "namespace", false, &["ns"], NONE, &[Status, Finalize], false),
    res!("", "Pod", "pods", "pod", true, &["po"], ALL, &[Status, Binding, Eviction], false),
    res!("", "Node", "nodes", "node", false, &["no"], NONE, &[Status], false),
    res!("", "Service", "services", "service", true, &["svc"], ALL, &[Status], true),
    res!("", "Endpoints", "endpoints", "endpoints", true, &["ep"], NONE, &[], true),
    res!("", "Event", "events", "event", true, &["ev"], NONE, &[], true),
    res!("", "ConfigMap", "configmaps", "configmap", true, &["cm"], NONE, &[], false),
    res!("", "Secret", "secrets", "secret", true, NONE, NONE, &[], false),
    res!("", "ServiceAccount", "serviceaccounts", "serviceaccount", true, &["sa"], NONE, &[Token], true),
    res!("", "PersistentVolume", "persistentvolumes", "persistentvolume", false, &["pv"], NONE, &[Status], false),
    res!(
        "",
        "PersistentVolumeClaim",
        "persistentvolumeclaims",
        "persistentvolumeclaim",
        true,
        &["pvc"],
        NONE,
        &[Status],
        false
    ),
    res!("", "PodTemplate", "podtemplates", "podtemplate", true, NONE, NONE, &[], false),
    res!("", "ResourceQuota", "resourcequotas", "resourcequota", true, &["quota"], NONE, &[Status], false),
    res!(
        "",
        "ReplicationController",
        "replicationcontrollers",
        "replicationcontroller",
        true,
        &["rc"],
        ALL,
        &[Status, Scale],
        false
    ),
    res!("apps", "Deployment", "deployments", "deployment", true, &["deploy"], ALL, &[Status, Scale], false),
    res!("apps", "ReplicaSet", "replicasets", "replicaset", true, &["rs"], ALL, &[Status, Scale], false),
    res!("apps", "DaemonSet", "daemonsets", "daemonset", true, &["ds"], ALL, &[Status], false),
    res!("apps", "StatefulSet", "statefulsets", "statefulset", true, &["sts"], ALL, &[Status, Scale], false),
    res!("apps", "ControllerRevision", "controllerrevisions", "controllerrevision", true, NONE, NONE, &[], false),
    res!("batch", "Job", "jobs", "job", true, NONE, ALL, &[Status], false),
    res!("batch", "CronJob", "cronjobs", "cronjob", true, &["cj"], ALL, &[Status], false),
    res!("discovery.k8s.io", "EndpointSlice", "endpointslices", "endpointslice", true, NONE, NONE, &[], true),
    res!("coordination.k8s.io", "Lease", "leases", "lease", true, NONE, NONE, &[], true),
    res!(RBAC, "ClusterRole", "clusterroles", "clusterrole", false, NONE, NONE, &[], true),
    res!(RBAC, "ClusterRoleBinding", "clusterrolebindings", "clusterrolebinding", false, NONE, NONE, &[], true),
    res!(RBAC, "Role", "roles", "role", true, NONE, NONE, &[], true),
    res!(RBAC, "RoleBinding", "rolebindings", "rolebinding", true, NONE, NONE, &[], true),
    res!(
        CERTIFICATES,
        "CertificateSigningRequest",
        "certificatesigningrequests",
        "certificatesigningrequest",
        false,
        &["csr"],
        NONE,
        &[Status, Approval],
        false
    ),
    res!("storage.k8s.io", "StorageClass", "storageclasses", "storageclass", false, &["sc"], NONE, &[], false),
    res!(
        AUTHZ,
        "SelfSubjectAccessReview",
        "selfsubjectaccessreviews",
        "selfsubjectaccessreview",
        false,
        NONE,
        NONE,
        &[],
        false
    ),
    res!(
        AUTHZ,
        "SelfSubjectRulesReview",
        "selfsubjectrulesreviews",
        "selfsubjectrulesreview",
        false,
        NONE,
        NONE,
        &[],
        false
    ),
    res!(AUTHZ, "SubjectAccessReview", "subjectaccessreviews", "subjectaccessreview", false, NONE, NONE, &[], false),
    res!(
        AUTHZ,
        "LocalSubjectAccessReview",
        "localsubjectaccessreviews",
        "localsubjectaccessreview",
        true,
        NONE,
        NONE,
        &[],
        false
    ),
    res!(AUTHN, "SelfSubjectReview", "selfsubjectreviews", "selfsubjectreview", false, NONE, NONE, &[], false),
    res!(AUTHN, "TokenReview", "tokenreviews", "tokenreview", false, NONE, NONE, &[], false),
    kinds::limit_range::INFO,
    kinds::ingress_class::INFO,
    kinds::ingress::INFO,
    kinds::network_policy::INFO,
    kinds::ip_address::INFO,
    kinds::service_cidr::INFO,
    kinds::runtime_class::INFO,
    kinds::pod_disruption_budget::INFO,
    kinds::priority_class::INFO,
    kinds::flow_schema::INFO,
    kinds::priority_level::INFO,
    kinds::csi_driver::INFO,
    kinds::csi_node::INFO,
    kinds::csi_storage_capacity::INFO,
    kinds::volume_attachment::INFO,
    kinds::volume_attributes_class::INFO,
    kinds::device_class::INFO,
    kinds::resource_claim::INFO,
    kinds::resource_claim_template::INFO,
    kinds::resource_slice::INFO,
    kinds::validating_webhook_configuration::INFO,
    kinds::mutating_webhook_configuration::INFO,
    kinds::validating_admission_policy::INFO,
    kinds::validating_admission_policy_binding::INFO,
];

const RBAC: &str = "rbac.authorization.k8s.io";
const CERTIFICATES: &str = "certificates.k8s.io";
const AUTHZ: &str = "authorization.k8s.io";
const AUTHN: &str = "authentication.k8s.io";

/// The API groups in discovery order (core first as "").
pub fn groups() -> Vec<&'static str> {
    let mut out: Vec<&'static str> = Vec::new();
    for r in RESOURCES {
        if !out.contains(&r.group) {
            out.push(r.group);
        }
    }
    out
}

/// Find a resource by group, version and plural name.
pub fn lookup(group: &str, version: &str, plural: &str) -> Option<&'static ResourceInfo> {
    RESOURCES.iter().find(|r| r.group == group && r.version == version && r.plural == plural)
}

/// Find a resource by kind.
pub fn by_kind(kind: &str) -> Option<&'static ResourceInfo> {
    RESOURCES.iter().find(|r| r.kind == kind)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_follow_the_registry_layout() {
        let pods = lookup("", "v1", "pods").expect("pods are served");
        assert_eq!(pods.key(Some("default"), "web"), "/registry/pods/default/web");
        let nodes = lookup("", "v1", "nodes").expect("nodes are served");
        assert_eq!(nodes.key(None, "n1"), "/registry/nodes/n1");
        let leases = by_kind("Lease").expect("leases are served");
        assert_eq!(
            leases.namespace_prefix(Some("kube-node-lease")),
            "/registry/leases.coordination.k8s.io/kube-node-lease/"
        );
    }

    #[test]
    fn no_key_prefix_is_a_prefix_of_another() {
        for a in RESOURCES {
            for b in RESOURCES {
                if a.kind != b.kind {
                    assert!(!a.key_prefix().starts_with(&b.key_prefix()), "{} vs {}", a.kind, b.kind);
                }
            }
        }
    }

    #[test]
    fn groups_start_with_core() {
        assert_eq!(groups()[0], "");
        assert!(groups().contains(&"apps"));
    }
}
