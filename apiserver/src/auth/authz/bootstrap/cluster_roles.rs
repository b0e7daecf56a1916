//! Kubernetes' default ClusterRoles and ClusterRoleBindings (`bootstrappolicy/policy.go`, as its
//! `testdata/cluster-roles.yaml` prints them), less the ones for components kaji does not have
//! (heapster, kube-aggregator, node-problem-detector, the persistent-volume provisioner).

use super::dsl::*;
use crate::auth::names;
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, PolicyRule};

const AGG_ADMIN: &str = "rbac.authorization.k8s.io/aggregate-to-admin";
const AGG_EDIT: &str = "rbac.authorization.k8s.io/aggregate-to-edit";
const AGG_VIEW: &str = "rbac.authorization.k8s.io/aggregate-to-view";

/// `NodeRules()`: what `system:node` grants, and what the Node authorizer allows a node outside
/// the resources it subdivides.
pub fn node_rules() -> Vec<PolicyRule> {
    vec![
        rule(&["create"]).groups(&["authentication.k8s.io"]).resources(&["tokenreviews"]),
        rule(&["create"])
            .groups(&["authorization.k8s.io"])
            .resources(&["localsubjectaccessreviews", "subjectaccessreviews"]),
        rule(READ).groups(&[""]).resources(&["services"]),
        rule(&["create", "get", "list", "watch"]).groups(&[""]).resources(&["nodes"]),
        rule(&["patch", "update"]).groups(&[""]).resources(&["nodes/status"]),
        rule(&["patch", "update"]).groups(&[""]).resources(&["nodes"]),
        rule(&["create", "patch", "update"]).groups(&[""]).resources(&["events"]),
        rule(READ).groups(&[""]).resources(&["pods"]),
        rule(&["create", "delete"]).groups(&[""]).resources(&["pods"]),
        rule(&["patch", "update"]).groups(&[""]).resources(&["pods/status"]),
        rule(&["create"]).groups(&[""]).resources(&["pods/eviction"]),
        rule(READ).groups(&[""]).resources(&["configmaps", "secrets"]),
        rule(&["get"]).groups(&[""]).resources(&["persistentvolumeclaims", "persistentvolumes"]),
        rule(&["get"]).groups(&[""]).resources(&["endpoints"]),
        rule(&["create", "get", "list", "watch"])
            .groups(&["certificates.k8s.io"])
            .resources(&["certificatesigningrequests"]),
        rule(&["create", "delete", "get", "patch", "update"]).groups(&["coordination.k8s.io"]).resources(&["leases"]),
        rule(&["get"]).groups(&["storage.k8s.io"]).resources(&["volumeattachments"]),
        rule(&["create"]).groups(&[""]).resources(&["serviceaccounts/token"]),
        rule(&["get", "patch", "update"]).groups(&[""]).resources(&["persistentvolumeclaims/status"]),
        rule(READ).groups(&["storage.k8s.io"]).resources(&["csidrivers"]),
        rule(&["create", "delete", "get", "patch", "update"]).groups(&["storage.k8s.io"]).resources(&["csinodes"]),
        rule(READ).groups(&["node.k8s.io"]).resources(&["runtimeclasses"]),
    ]
}

fn aggregate_to_edit() -> Vec<PolicyRule> {
    vec![
        rule(READ).groups(&[""]).resources(&[
            "pods/attach",
            "pods/exec",
            "pods/portforward",
            "pods/proxy",
            "secrets",
            "services/proxy",
        ]),
        rule(&["impersonate"]).groups(&[""]).resources(&["serviceaccounts"]),
        rule(WRITE).groups(&[""]).resources(&["pods", "pods/attach", "pods/exec", "pods/portforward", "pods/proxy"]),
        rule(&["create"]).groups(&[""]).resources(&["pods/eviction"]),
        rule(WRITE).groups(&[""]).resources(&[
            "configmaps",
            "events",
            "persistentvolumeclaims",
            "replicationcontrollers",
            "replicationcontrollers/scale",
            "secrets",
            "serviceaccounts",
            "services",
            "services/proxy",
        ]),
        rule(&["create"]).groups(&[""]).resources(&["serviceaccounts/token"]),
        rule(WRITE).groups(&["apps"]).resources(&[
            "daemonsets",
            "deployments",
            "deployments/rollback",
            "deployments/scale",
            "replicasets",
            "replicasets/scale",
            "statefulsets",
            "statefulsets/scale",
        ]),
        rule(WRITE).groups(&["autoscaling"]).resources(&["horizontalpodautoscalers"]),
        rule(WRITE).groups(&["batch"]).resources(&["cronjobs", "jobs"]),
        rule(WRITE).groups(&["extensions"]).resources(&[
            "daemonsets",
            "deployments",
            "deployments/rollback",
            "deployments/scale",
            "ingresses",
            "networkpolicies",
            "replicasets",
            "replicasets/scale",
            "replicationcontrollers/scale",
        ]),
        rule(WRITE).groups(&["policy"]).resources(&["poddisruptionbudgets"]),
        rule(WRITE).groups(&["networking.k8s.io"]).resources(&["ingresses", "networkpolicies"]),
        rule(READ_WRITE).groups(&["coordination.k8s.io"]).resources(&["leases"]),
    ]
}

fn aggregate_to_view() -> Vec<PolicyRule> {
    vec![
        rule(READ).groups(&[""]).resources(&[
            "configmaps",
            "endpoints",
            "persistentvolumeclaims",
            "persistentvolumeclaims/status",
            "pods",
            "replicationcontrollers",
            "replicationcontrollers/scale",
            "serviceaccounts",
            "services",
            "services/status",
        ]),
        rule(READ).groups(&[""]).resources(&[
            "bindings",
            "events",
            "limitranges",
            "namespaces/status",
            "pods/log",
            "pods/status",
            "replicationcontrollers/status",
            "resourcequotas",
            "resourcequotas/status",
        ]),
        rule(READ).groups(&[""]).resources(&["namespaces"]),
        rule(READ).groups(&["discovery.k8s.io"]).resources(&["endpointslices"]),
        rule(READ).groups(&["apps"]).resources(&[
            "controllerrevisions",
            "daemonsets",
            "daemonsets/status",
            "deployments",
            "deployments/scale",
            "deployments/status",
            "replicasets",
            "replicasets/scale",
            "replicasets/status",
            "statefulsets",
            "statefulsets/scale",
            "statefulsets/status",
        ]),
        rule(READ).groups(&["autoscaling"]).resources(&["horizontalpodautoscalers", "horizontalpodautoscalers/status"]),
        rule(READ).groups(&["batch"]).resources(&["cronjobs", "cronjobs/status", "jobs", "jobs/status"]),
        rule(READ).groups(&["extensions"]).resources(&[
            "daemonsets",
            "daemonsets/status",
            "deployments",
            "deployments/scale",
            "deployments/status",
            "ingresses",
            "ingresses/status",
            "networkpolicies",
            "replicasets",
            "replicasets/scale",
            "replicasets/status",
            "replicationcontrollers/scale",
        ]),
        rule(READ).groups(&["policy"]).resources(&["poddisruptionbudgets", "poddisruptionbudgets/status"]),
        rule(READ).groups(&["networking.k8s.io"]).resources(&["ingresses", "ingresses/status", "networkpolicies"]),
    ]
}

fn approver(signer: &str) -> Vec<PolicyRule> {
    vec![rule(&["approve"]).groups(&["certificates.k8s.io"]).resources(&["signers"]).names(&[signer])]
}

pub fn cluster_roles() -> Vec<ClusterRole> {
    let leader = |name: &str| {
        vec![
            rule(&["create"]).groups(&["coordination.k8s.io"]).resources(&["leases"]),
            rule(&["get", "update"]).groups(&["coordination.k8s.io"]).resources(&["leases"]).names(&[name]),
        ]
    };
    let mut scheduler = vec![events_rule()];
    scheduler.extend(leader("kube-scheduler"));
    scheduler.extend([
        rule(READ).groups(&[""]).resources(&["nodes"]),
        rule(&["delete", "get", "list", "watch"]).groups(&[""]).resources(&["pods"]),
        rule(&["create"]).groups(&[""]).resources(&["bindings", "pods/binding"]),
        rule(&["patch", "update"]).groups(&[""]).resources(&["pods/status"]),
        rule(READ).groups(&[""]).resources(&["replicationcontrollers", "services"]),
        rule(READ).groups(&["apps", "extensions"]).resources(&["replicasets"]),
        rule(READ).groups(&["apps"]).resources(&["statefulsets"]),
        rule(READ).groups(&["policy"]).resources(&["poddisruptionbudgets"]),
        rule(READ).groups(&[""]).resources(&["persistentvolumeclaims", "persistentvolumes"]),
        rule(&["create"]).groups(&["authentication.k8s.io"]).resources(&["tokenreviews"]),
        rule(&["create"]).groups(&["authorization.k8s.io"]).resources(&["subjectaccessreviews"]),
        rule(READ).groups(&["storage.k8s.io"]).resources(&["csinodes"]),
        rule(READ).groups(&[""]).resources(&["namespaces"]),
        rule(READ).groups(&["storage.k8s.io"]).resources(&["csidrivers"]),
        rule(READ).groups(&["storage.k8s.io"]).resources(&["csistoragecapacities"]),
    ]);
    let mut controller_manager = vec![events_rule()];
    controller_manager.extend(leader("kube-controller-manager"));
    controller_manager.extend([
        rule(&["create"]).groups(&[""]).resources(&["secrets", "serviceaccounts"]),
        rule(&["delete"]).groups(&[""]).resources(&["secrets"]),
        rule(&["get"]).groups(&[""]).resources(&["configmaps", "namespaces", "secrets", "serviceaccounts"]),
        rule(&["update"]).groups(&[""]).resources(&["secrets", "serviceaccounts"]),
        rule(&["create"]).groups(&["authentication.k8s.io"]).resources(&["tokenreviews"]),
        rule(&["create"]).groups(&["authorization.k8s.io"]).resources(&["subjectaccessreviews"]),
        rule(&["list", "watch"]).groups(&["*"]).resources(&["*"]),
        rule(&["create"]).groups(&[""]).resources(&["serviceaccounts/token"]),
    ]);
    vec![
        aggregated_cluster_role("admin", &[], AGG_ADMIN),
        cluster_role("cluster-admin", vec![rule(&["*"]).groups(&["*"]).resources(&["*"]), rule(&["*"]).urls(&["*"])]),
        aggregated_cluster_role("edit", &[(AGG_ADMIN, "true")], AGG_EDIT),
        labelled_cluster_role(
            "system:aggregate-to-admin",
            &[(AGG_ADMIN, "true")],
            vec![
                rule(&["create"]).groups(&["authorization.k8s.io"]).resources(&["localsubjectaccessreviews"]),
                rule(READ_WRITE).groups(&[RBAC_GROUP]).resources(&["rolebindings", "roles"]),
            ],
        ),
        labelled_cluster_role("system:aggregate-to-edit", &[(AGG_EDIT, "true")], aggregate_to_edit()),
        labelled_cluster_role("system:aggregate-to-view", &[(AGG_VIEW, "true")], aggregate_to_view()),
        cluster_role(
            "system:auth-delegator",
            vec![
                rule(&["create"]).groups(&["authentication.k8s.io"]).resources(&["tokenreviews"]),
                rule(&["create"]).groups(&["authorization.k8s.io"]).resources(&["subjectaccessreviews"]),
            ],
        ),
        cluster_role(
            "system:basic-user",
            vec![
                rule(&["create"])
                    .groups(&["authorization.k8s.io"])
                    .resources(&["selfsubjectaccessreviews", "selfsubjectrulesreviews"]),
                rule(&["create"]).groups(&["authentication.k8s.io"]).resources(&["selfsubjectreviews"]),
            ],
        ),
        cluster_role(
            "system:certificates.k8s.io:certificatesigningrequests:nodeclient",
            vec![rule(&["create"])
                .groups(&["certificates.k8s.io"])
                .resources(&["certificatesigningrequests/nodeclient"])],
        ),
        cluster_role(
            "system:certificates.k8s.io:certificatesigningrequests:selfnodeclient",
            vec![rule(&["create"])
                .groups(&["certificates.k8s.io"])
                .resources(&["certificatesigningrequests/selfnodeclient"])],
        ),
        cluster_role(
            "system:certificates.k8s.io:kube-apiserver-client-approver",
            approver("kubernetes.io/kube-apiserver-client"),
        ),
        cluster_role(
            "system:certificates.k8s.io:kube-apiserver-client-kubelet-approver",
            approver("kubernetes.io/kube-apiserver-client-kubelet"),
        ),
        cluster_role("system:certificates.k8s.io:kubelet-serving-approver", approver("kubernetes.io/kubelet-serving")),
        cluster_role("system:certificates.k8s.io:legacy-unknown-approver", approver("kubernetes.io/legacy-unknown")),
        cluster_role(
            "system:discovery",
            vec![rule(&["get"]).urls(&[
                "/api",
                "/api/*",
                "/apis",
                "/apis/*",
                "/healthz",
                "/livez",
                "/openapi",
                "/openapi/*",
                "/readyz",
                "/version",
                "/version/",
            ])],
        ),
        cluster_role("system:kube-controller-manager", controller_manager),
        cluster_role(
            "system:kube-dns",
            vec![rule(&["list", "watch"]).groups(&[""]).resources(&["endpoints", "services"])],
        ),
        cluster_role("system:kube-scheduler", scheduler),
        cluster_role(
            "system:kubelet-api-admin",
            vec![
                rule(READ).groups(&[""]).resources(&["nodes"]),
                rule(&["proxy"]).groups(&[""]).resources(&["nodes"]),
                rule(&["*"]).groups(&[""]).resources(&["nodes/log", "nodes/metrics", "nodes/proxy", "nodes/stats"]),
            ],
        ),
        cluster_role(
            "system:monitoring",
            vec![rule(&["get"]).urls(&[
                "/healthz",
                "/healthz/*",
                "/livez",
                "/livez/*",
                "/metrics",
                "/metrics/slis",
                "/readyz",
                "/readyz/*",
            ])],
        ),
        cluster_role("system:node", node_rules()),
        cluster_role(
            "system:node-bootstrapper",
            vec![rule(&["create", "get", "list", "watch"])
                .groups(&["certificates.k8s.io"])
                .resources(&["certificatesigningrequests"])],
        ),
        cluster_role(
            "system:node-proxier",
            vec![
                rule(&["list", "watch"]).groups(&[""]).resources(&["endpoints", "services"]),
                rule(READ).groups(&[""]).resources(&["nodes"]),
                events_rule(),
                rule(&["list", "watch"]).groups(&["discovery.k8s.io"]).resources(&["endpointslices"]),
            ],
        ),
        cluster_role(
            "system:public-info-viewer",
            vec![rule(&["get"]).urls(&["/healthz", "/livez", "/readyz", "/version", "/version/"])],
        ),
        cluster_role(
            "system:service-account-issuer-discovery",
            vec![rule(&["get"]).urls(&["/.well-known/openid-configuration", "/openid/v1/jwks"])],
        ),
        cluster_role(
            "system:volume-scheduler",
            vec![
                rule(&["get", "list", "patch", "update", "watch"]).groups(&[""]).resources(&["persistentvolumes"]),
                rule(READ).groups(&["storage.k8s.io"]).resources(&["storageclasses"]),
                rule(&["get", "list", "patch", "update", "watch"]).groups(&[""]).resources(&["persistentvolumeclaims"]),
            ],
        ),
        aggregated_cluster_role("view", &[(AGG_EDIT, "true")], AGG_VIEW),
    ]
}

/// `ClusterRoleBindings()`: who holds the roles above from the start.
pub fn cluster_role_bindings() -> Vec<ClusterRoleBinding> {
    let authenticated = || group(names::ALL_AUTHENTICATED);
    vec![
        cluster_binding("cluster-admin", vec![group(names::SYSTEM_PRIVILEGED_GROUP)]),
        cluster_binding("system:monitoring", vec![group("system:monitoring")]),
        cluster_binding("system:discovery", vec![authenticated()]),
        cluster_binding("system:basic-user", vec![authenticated()]),
        cluster_binding("system:public-info-viewer", vec![authenticated(), group(names::ALL_UNAUTHENTICATED)]),
        cluster_binding("system:node-proxier", vec![user(names::KUBE_PROXY)]),
        cluster_binding("system:kube-controller-manager", vec![user(names::KUBE_CONTROLLER_MANAGER)]),
        cluster_binding("system:kube-dns", vec![service_account("kube-system", "kube-dns")]),
        cluster_binding("system:kube-scheduler", vec![user(names::KUBE_SCHEDULER)]),
        cluster_binding("system:volume-scheduler", vec![user(names::KUBE_SCHEDULER)]),
        // Bound to nobody: the Node authorizer decides for nodes (Kubernetes keeps it for reference).
        cluster_binding("system:node", vec![]),
        cluster_binding("system:service-account-issuer-discovery", vec![group(names::SERVICE_ACCOUNTS_GROUP)]),
    ]
}
