//! Deployment, Service and Namespace defaults.

use serde_json::{json, Map, Value};

use super::json::{child, child_of, default_str, default_value, get_str, is_unset, with_map};
use super::pod::default_template;

pub(super) fn default_deployment(obj: &mut Value) {
    let Some(spec) = child(obj, "spec") else {
        return;
    };
    default_value(spec, "replicas", json!(1));
    if let Some(strategy) = child_of(spec, "strategy") {
        default_str(strategy, "type", "RollingUpdate");
        if get_str(strategy, "type") == "RollingUpdate" {
            if let Some(ru) = child_of(strategy, "rollingUpdate") {
                default_value(ru, "maxUnavailable", json!("25%"));
                default_value(ru, "maxSurge", json!("25%"));
            }
        }
    }
    default_value(spec, "revisionHistoryLimit", json!(10));
    default_value(spec, "progressDeadlineSeconds", json!(600));
    default_template(spec);
}

pub(super) fn default_service(obj: &mut Value) {
    let Some(spec) = child(obj, "spec") else {
        return;
    };
    default_str(spec, "sessionAffinity", "None");
    if get_str(spec, "sessionAffinity") == "ClientIP" {
        let timeout =
            spec.get("sessionAffinityConfig").and_then(|c| c.get("clientIP")).and_then(|c| c.get("timeoutSeconds"));
        if is_unset(timeout) {
            if let Some(cip) = child_of(spec, "sessionAffinityConfig").and_then(|c| child_of(c, "clientIP")) {
                cip.insert("timeoutSeconds".to_string(), json!(10800));
            }
        }
    }
    default_str(spec, "type", "ClusterIP");
    for port in spec.get_mut("ports").and_then(Value::as_array_mut).into_iter().flatten() {
        with_map(port, |p| {
            default_str(p, "protocol", "TCP");
            let unset = match p.get("targetPort") {
                None | Some(Value::Null) => true,
                Some(Value::Number(n)) => n.as_i64() == Some(0),
                Some(Value::String(s)) => s.is_empty(),
                Some(_) => false,
            };
            if unset {
                if let Some(port) = p.get("port").cloned() {
                    p.insert("targetPort".to_string(), port);
                }
            }
        });
    }
    let ty = get_str(spec, "type").to_string();
    let has_external_ips = spec.get("externalIPs").and_then(Value::as_array).is_some_and(|a| !a.is_empty());
    if ty == "NodePort" || ty == "LoadBalancer" || (ty == "ClusterIP" && has_external_ips) {
        default_str(spec, "externalTrafficPolicy", "Cluster");
    }
    if ty != "ExternalName" {
        default_value(spec, "internalTrafficPolicy", json!("Cluster"));
        default_ip_families(spec);
    }
    if ty == "LoadBalancer" {
        default_value(spec, "allocateLoadBalancerNodePorts", json!(true));
    }
}

/// What the service REST layer settles on a single-stack IPv4 cluster.
fn default_ip_families(spec: &mut Map<String, Value>) {
    let cluster_ip = get_str(spec, "clusterIP");
    let headless = cluster_ip == "None";
    let selectorless = spec.get("selector").and_then(Value::as_object).is_none_or(Map::is_empty);
    if headless && selectorless {
        default_value(spec, "ipFamilyPolicy", json!("RequireDualStack"));
        default_value(spec, "ipFamilies", json!(["IPv4", "IPv6"]));
        return;
    }
    let family = if cluster_ip.contains(':') { "IPv6" } else { "IPv4" };
    default_value(spec, "ipFamilyPolicy", json!("SingleStack"));
    default_value(spec, "ipFamilies", json!([family]));
}

pub(super) fn default_namespace(obj: &mut Value) {
    let Some(m) = obj.as_object_mut() else { return };
    let deleting = m.get("metadata").and_then(|md| md.get("deletionTimestamp")).is_some_and(|d| !d.is_null());
    if let Some(meta) = child_of(m, "metadata") {
        let name = get_str(meta, "name").to_string();
        if !name.is_empty() {
            if let Some(labels) = child_of(meta, "labels") {
                labels.insert("kubernetes.io/metadata.name".to_string(), json!(name));
            }
        }
    }
    // The finalizer goes on while the namespace lives; once deleting, only /finalize changes it.
    if !deleting {
        if let Some(spec) = child_of(m, "spec") {
            default_value(spec, "finalizers", json!(["kubernetes"]));
        }
    }
    if let Some(status) = child_of(m, "status") {
        default_str(status, "phase", "Active");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::defaults::test_support::defaulted;

    #[test]
    fn deployment_defaults_strategy_and_template_but_not_pod_only_fields() {
        let d = defaulted(
            "Deployment",
            json!({"spec": {"template": {"spec": {"containers": [{"name": "a", "image": "x:1"}]}}}}),
        );
        let spec = &d["spec"];
        assert_eq!(spec["replicas"], 1);
        assert_eq!(spec["revisionHistoryLimit"], 10);
        assert_eq!(spec["progressDeadlineSeconds"], 600);
        assert_eq!(
            spec["strategy"],
            json!({"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": "25%", "maxSurge": "25%"}})
        );
        let t = &spec["template"]["spec"];
        assert_eq!(t["restartPolicy"], "Always");
        assert_eq!(t["containers"][0]["imagePullPolicy"], "IfNotPresent");
        assert!(t.get("serviceAccountName").is_none());
        assert!(t.get("tolerations").is_none());
        assert!(t.get("priority").is_none());
        let recreate = defaulted("Deployment", json!({"spec": {"strategy": {"type": "Recreate"}}}));
        assert_eq!(recreate["spec"]["strategy"], json!({"type": "Recreate"}));
    }

    #[test]
    fn service_defaults_type_ports_and_policies() {
        let s = defaulted(
            "Service",
            json!({"spec": {"selector": {"app": "web"}, "ports": [{"port": 80}, {"port": 443, "targetPort": "https"}]}}),
        );
        let spec = &s["spec"];
        assert_eq!(spec["type"], "ClusterIP");
        assert_eq!(spec["sessionAffinity"], "None");
        assert_eq!(spec["ports"][0], json!({"port": 80, "protocol": "TCP", "targetPort": 80}));
        assert_eq!(spec["ports"][1]["targetPort"], "https");
        assert_eq!(spec["internalTrafficPolicy"], "Cluster");
        assert_eq!(spec["ipFamilies"], json!(["IPv4"]));
        assert_eq!(spec["ipFamilyPolicy"], "SingleStack");
        assert!(spec.get("externalTrafficPolicy").is_none());

        let np = defaulted("Service", json!({"spec": {"type": "LoadBalancer", "ports": [{"port": 80}]}}));
        assert_eq!(np["spec"]["externalTrafficPolicy"], "Cluster");
        assert_eq!(np["spec"]["allocateLoadBalancerNodePorts"], true);

        let ext = defaulted("Service", json!({"spec": {"type": "ExternalName", "externalName": "example.com"}}));
        assert!(ext["spec"].get("ipFamilies").is_none());
        assert!(ext["spec"].get("ipFamilyPolicy").is_none());
        assert!(ext["spec"].get("internalTrafficPolicy").is_none());
    }

    #[test]
    fn namespace_gets_finalizer_phase_and_name_label() {
        let ns = defaulted("Namespace", json!({"metadata": {"name": "team-a"}}));
        assert_eq!(ns["spec"]["finalizers"], json!(["kubernetes"]));
        assert_eq!(ns["status"]["phase"], "Active");
        assert_eq!(ns["metadata"]["labels"]["kubernetes.io/metadata.name"], "team-a");
        let deleting = defaulted(
            "Namespace",
            json!({"metadata": {"name": "a", "deletionTimestamp": "2024-01-01T00:00:00Z"},
            "status": {"phase": "Terminating"}}),
        );
        assert!(deleting["spec"].get("finalizers").is_none());
        assert_eq!(deleting["status"]["phase"], "Terminating");
    }
}
