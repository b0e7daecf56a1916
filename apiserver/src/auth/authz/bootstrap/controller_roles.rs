//! The per-controller roles (`system:controller:<name>`, `bootstrappolicy/controller_policy.go`)
//! of the controllers kaji's controller manager runs, each bound to its ServiceAccount in
//! kube-system.

use super::dsl::*;
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, PolicyRule};

pub const PREFIX: &str = "system:controller:";

/// (controller name = ServiceAccount name, rules).
fn controllers() -> Vec<(&'static str, Vec<PolicyRule>)> {
    let ev = events_rule;
    vec![
        (
            "certificate-controller",
            vec![
                rule(&["delete", "get", "list", "watch"])
                    .groups(&["certificates.k8s.io"])
                    .resources(&["certificatesigningrequests"]),
                rule(&["update"])
                    .groups(&["certificates.k8s.io"])
                    .resources(&["certificatesigningrequests/approval", "certificatesigningrequests/status"]),
                rule(&["approve"])
                    .groups(&["certificates.k8s.io"])
                    .resources(&["signers"])
                    .names(&["kubernetes.io/kube-apiserver-client-kubelet"]),
                rule(&["sign"]).groups(&["certificates.k8s.io"]).resources(&["signers"]).names(&[
                    "kubernetes.io/kube-apiserver-client",
                    "kubernetes.io/kube-apiserver-client-kubelet",
                    "kubernetes.io/kubelet-serving",
                    "kubernetes.io/legacy-unknown",
                ]),
                rule(&["create"]).groups(&["authorization.k8s.io"]).resources(&["subjectaccessreviews"]),
                ev(),
            ],
        ),
        (
            "clusterrole-aggregation-controller",
            vec![rule(&["escalate", "get", "list", "patch", "update", "watch"])
                .groups(&[RBAC_GROUP])
                .resources(&["clusterroles"])],
        ),
        (
            // buildControllerRoles' disruption-controller.
            "disruption-controller",
            vec![
                rule(&["get", "list", "watch"]).groups(&["apps", "extensions"]).resources(&["deployments"]),
                rule(&["get", "list", "watch"]).groups(&["apps", "extensions"]).resources(&["replicasets"]),
                rule(&["get", "list", "watch"]).groups(&[""]).resources(&["replicationcontrollers"]),
                rule(&["get", "list", "watch"]).groups(&["policy"]).resources(&["poddisruptionbudgets"]),
                rule(&["get", "list", "watch"]).groups(&["apps"]).resources(&["statefulsets"]),
                rule(&["update"]).groups(&["policy"]).resources(&["poddisruptionbudgets/status"]),
                rule(&["get"]).groups(&["*"]).resources(&["*/scale"]),
                rule(&["get", "list", "watch"]).groups(&[""]).resources(&["pods"]),
                rule(&["patch", "update"]).groups(&[""]).resources(&["pods/status"]),
                ev(),
            ],
        ),
        (
            "cronjob-controller",
            vec![
                rule(&["get", "list", "update", "watch"]).groups(&["batch"]).resources(&["cronjobs"]),
                rule(&["create", "delete", "get", "list", "patch", "update", "watch"])
                    .groups(&["batch"])
                    .resources(&["jobs"]),
                rule(&["update"]).groups(&["batch"]).resources(&["cronjobs/status"]),
                rule(&["update"]).groups(&["batch"]).resources(&["cronjobs/finalizers"]),
                rule(&["delete", "list", "watch"]).groups(&[""]).resources(&["pods"]),
                ev(),
            ],
        ),
        (
            "daemon-set-controller",
            vec![
                rule(READ).groups(&["apps", "extensions"]).resources(&["daemonsets"]),
                rule(&["update"]).groups(&["apps", "extensions"]).resources(&["daemonsets/status"]),
                rule(&["update"]).groups(&["apps", "extensions"]).resources(&["daemonsets/finalizers"]),
                rule(&["list", "watch"]).groups(&[""]).resources(&["nodes"]),
                rule(&["create", "delete", "list", "patch", "watch"]).groups(&[""]).resources(&["pods"]),
                rule(&["create"]).groups(&[""]).resources(&["pods/binding"]),
                rule(&["create", "delete", "get", "list", "patch", "update", "watch"])
                    .groups(&["apps"])
                    .resources(&["controllerrevisions"]),
                ev(),
            ],
        ),
        (
            "deployment-controller",
            vec![
                rule(&["get", "list", "update", "watch"]).groups(&["apps", "extensions"]).resources(&["deployments"]),
                rule(&["update"]).groups(&["apps", "extensions"]).resources(&["deployments/status"]),
                rule(&["update"]).groups(&["apps", "extensions"]).resources(&["deployments/finalizers"]),
                rule(&["create", "delete", "get", "list", "patch", "update", "watch"])
                    .groups(&["apps", "extensions"])
                    .resources(&["replicasets"]),
                rule(&["get", "list", "update", "watch"]).groups(&[""]).resources(&["pods"]),
                ev(),
            ],
        ),
        (
            "endpoint-controller",
            vec![
                rule(READ).groups(&[""]).resources(&["pods", "services"]),
                rule(&["create", "delete", "get", "list", "update", "watch"]).groups(&[""]).resources(&["endpoints"]),
                rule(&["create"]).groups(&[""]).resources(&["endpoints/restricted"]),
                ev(),
            ],
        ),
        (
            "endpointslice-controller",
            vec![
                rule(READ).groups(&[""]).resources(&["nodes", "pods", "services"]),
                rule(&["update"]).groups(&[""]).resources(&["services/finalizers"]),
                rule(&["create", "delete", "get", "list", "update", "watch"])
                    .groups(&["discovery.k8s.io"])
                    .resources(&["endpointslices"]),
                ev(),
            ],
        ),
        (
            "generic-garbage-collector",
            vec![rule(&["delete", "get", "list", "patch", "update", "watch"]).groups(&["*"]).resources(&["*"]), ev()],
        ),
        (
            "job-controller",
            vec![
                rule(&["get", "list", "patch", "update", "watch"]).groups(&["batch"]).resources(&["jobs"]),
                rule(&["update"]).groups(&["batch"]).resources(&["jobs/status"]),
                rule(&["update"]).groups(&["batch"]).resources(&["jobs/finalizers"]),
                rule(&["create", "delete", "list", "patch", "watch"]).groups(&[""]).resources(&["pods"]),
                ev(),
            ],
        ),
        (
            "namespace-controller",
            vec![
                rule(&["delete", "get", "list", "watch"]).groups(&[""]).resources(&["namespaces"]),
                rule(&["update"]).groups(&[""]).resources(&["namespaces/finalize", "namespaces/status"]),
                rule(&["delete", "deletecollection", "get", "list", "watch"]).groups(&["*"]).resources(&["*"]),
            ],
        ),
        (
            "node-controller",
            vec![
                rule(&["delete", "get", "list", "patch", "update", "watch"]).groups(&[""]).resources(&["nodes"]),
                rule(&["patch", "update"]).groups(&[""]).resources(&["nodes/status"]),
                rule(&["patch", "update"]).groups(&[""]).resources(&["pods/status"]),
                rule(&["delete", "get", "list", "watch"]).groups(&[""]).resources(&["pods"]),
                ev(),
            ],
        ),
        (
            "pod-garbage-collector",
            vec![
                rule(&["delete", "list", "watch"]).groups(&[""]).resources(&["pods"]),
                rule(READ).groups(&[""]).resources(&["nodes"]),
                rule(&["patch"]).groups(&[""]).resources(&["pods/status"]),
            ],
        ),
        (
            "replicaset-controller",
            vec![
                rule(&["get", "list", "update", "watch"]).groups(&["apps", "extensions"]).resources(&["replicasets"]),
                rule(&["update"]).groups(&["apps", "extensions"]).resources(&["replicasets/status"]),
                rule(&["update"]).groups(&["apps", "extensions"]).resources(&["replicasets/finalizers"]),
                rule(&["create", "delete", "list", "patch", "watch"]).groups(&[""]).resources(&["pods"]),
                ev(),
            ],
        ),
        (
            "replication-controller",
            vec![
                // 1.0 controllers needed get and update, so without these old controllers break on new servers.
                rule(&["get", "list", "update", "watch"]).groups(&[""]).resources(&["replicationcontrollers"]),
                rule(&["update"]).groups(&[""]).resources(&["replicationcontrollers/status"]),
                rule(&["update"]).groups(&[""]).resources(&["replicationcontrollers/finalizers"]),
                rule(&["create", "delete", "list", "patch", "watch"]).groups(&[""]).resources(&["pods"]),
                ev(),
            ],
        ),
        (
            "resourcequota-controller",
            vec![
                // Quota can count anything, so it may list and watch everything.
                rule(&["list", "watch"]).groups(&["*"]).resources(&["*"]),
                rule(&["update"]).groups(&[""]).resources(&["resourcequotas/status"]),
                ev(),
            ],
        ),
        ("root-ca-cert-publisher", vec![rule(&["create", "update"]).groups(&[""]).resources(&["configmaps"]), ev()]),
        ("service-account-controller", vec![rule(&["create"]).groups(&[""]).resources(&["serviceaccounts"]), ev()]),
        (
            "statefulset-controller",
            vec![
                rule(&["list", "watch"]).groups(&[""]).resources(&["pods"]),
                rule(READ).groups(&["apps"]).resources(&["statefulsets"]),
                rule(&["update"]).groups(&["apps"]).resources(&["statefulsets/status"]),
                rule(&["update"]).groups(&["apps"]).resources(&["statefulsets/finalizers"]),
                rule(&["create", "delete", "get", "patch", "update"]).groups(&[""]).resources(&["pods"]),
                rule(&["create", "delete", "get", "list", "patch", "update", "watch"])
                    .groups(&["apps"])
                    .resources(&["controllerrevisions"]),
                rule(&["create", "get", "list", "watch"]).groups(&[""]).resources(&["persistentvolumeclaims"]),
                rule(&["delete", "update"]).groups(&[""]).resources(&["persistentvolumeclaims"]),
                rule(&["update"]).groups(&[""]).resources(&["pods/finalizers"]),
                ev(),
            ],
        ),
        (
            "ttl-after-finished-controller",
            vec![rule(&["delete", "get", "list", "watch"]).groups(&["batch"]).resources(&["jobs"]), ev()],
        ),
    ]
}

/// The names of the controllers that have a role (their ServiceAccounts in kube-system).
pub fn names() -> Vec<&'static str> {
    controllers().into_iter().map(|(n, _)| n).collect()
}

pub fn controller_roles() -> Vec<ClusterRole> {
    controllers().into_iter().map(|(n, rules)| cluster_role(&format!("{PREFIX}{n}"), rules)).collect()
}

pub fn controller_role_bindings() -> Vec<ClusterRoleBinding> {
    controllers()
        .into_iter()
        .map(|(n, _)| cluster_binding(&format!("{PREFIX}{n}"), vec![service_account("kube-system", n)]))
        .collect()
}
