//! Pod spec validation: the spec as a whole, volumes and tolerations.

use std::collections::HashSet;

use serde_json::Value;

use super::causes::Cause;
use super::container::{check_host_port_conflicts, validate_container_common, validate_lifecycle, validate_probes};
use super::json::{arr, has, int, obj, st};
use super::meta::validate_labels;
use super::names::{
    dns1123_label_errors, dns1123_subdomain_errors, inclusive_range_error, label_value_errors, qualified_name_errors,
    FILE_MODE_MSG, IS_NEGATIVE_MSG,
};
use super::obj_or_null;

const VOLUME_SOURCES: [&str; 30] = [
    "emptyDir",
    "hostPath",
    "gitRepo",
    "gcePersistentDisk",
    "awsElasticBlockStore",
    "secret",
    "nfs",
    "iscsi",
    "glusterfs",
    "flocker",
    "persistentVolumeClaim",
    "rbd",
    "cinder",
    "cephfs",
    "quobyte",
    "downwardAPI",
    "fc",
    "flexVolume",
    "configMap",
    "azureFile",
    "vsphereVolume",
    "photonPersistentDisk",
    "portworxVolume",
    "azureDisk",
    "storageos",
    "projected",
    "scaleIO",
    "csi",
    "ephemeral",
    "image",
];

pub(super) const PROTOCOLS: [&str; 3] = ["SCTP", "TCP", "UDP"];

pub(super) fn validate_pod_spec(spec: &Value, path: &str, is_pod: bool, out: &mut Vec<Cause>) {
    if let Some(g) = int(spec, "terminationGracePeriodSeconds") {
        if g < 0 {
            out.push(Cause::invalid(format!("{path}.terminationGracePeriodSeconds"), g, IS_NEGATIVE_MSG));
        }
    }
    let volumes = validate_volumes(arr(spec, "volumes"), &format!("{path}.volumes"), out);

    let containers = arr(spec, "containers");
    let cpath = format!("{path}.containers");
    if containers.is_empty() {
        out.push(Cause::required(cpath.as_str(), ""));
    }
    let mut names: HashSet<&str> = HashSet::new();
    for (i, c) in containers.iter().enumerate() {
        let p = format!("{cpath}[{i}]");
        validate_container_common(c, &p, &volumes, is_pod, out);
        let name = st(c, "name");
        if !names.insert(name) {
            out.push(Cause::duplicate(format!("{p}.name"), name));
        }
        if let Some(l) = c.get("lifecycle").filter(|l| !l.is_null()) {
            validate_lifecycle(l, &format!("{p}.lifecycle"), out);
        }
        validate_probes(c, &p, out);
        if has(c, "restartPolicy") {
            out.push(Cause::forbidden(format!("{p}.restartPolicy"), "may not be set for non-init containers"));
        }
    }
    check_host_port_conflicts(containers, &cpath, out);

    let ipath = format!("{path}.initContainers");
    for (i, c) in arr(spec, "initContainers").iter().enumerate() {
        let p = format!("{ipath}[{i}]");
        validate_container_common(c, &p, &volumes, is_pod, out);
        let mut restart_always = false;
        if has(c, "restartPolicy") {
            let rp = st(c, "restartPolicy");
            if rp == "Always" {
                restart_always = true;
            } else {
                out.push(Cause::not_supported(format!("{p}.restartPolicy"), rp, &["Always"]));
            }
        }
        let name = st(c, "name");
        if names.contains(name) {
            out.push(Cause::duplicate(format!("{p}.name"), name));
        } else if !name.is_empty() {
            names.insert(name);
        }
        check_host_port_conflicts(std::slice::from_ref(c), &ipath, out);
        if restart_always {
            if let Some(l) = c.get("lifecycle").filter(|l| !l.is_null()) {
                validate_lifecycle(l, &format!("{p}.lifecycle"), out);
            }
            validate_probes(c, &p, out);
        } else {
            for field in ["lifecycle", "livenessProbe", "readinessProbe", "startupProbe"] {
                if has(c, field) {
                    out.push(Cause::forbidden(
                        format!("{p}.{field}"),
                        "may not be set for init containers without restartPolicy=Always",
                    ));
                }
            }
        }
    }
    if !is_pod && !arr(spec, "ephemeralContainers").is_empty() {
        out.push(Cause::forbidden(
            format!("{path}.ephemeralContainers"),
            "ephemeral containers not allowed in pod template",
        ));
    }

    if spec.get("hostNetwork").and_then(Value::as_bool) == Some(true) {
        for (i, c) in containers.iter().enumerate() {
            for (j, port) in arr(c, "ports").iter().enumerate() {
                let hp = int(port, "hostPort").unwrap_or(0);
                let cp = int(port, "containerPort").unwrap_or(0);
                if (is_pod || hp != 0) && hp != cp {
                    out.push(Cause::invalid(
                        format!("{cpath}[{i}].ports[{j}].hostPort"),
                        hp,
                        "must match `containerPort` when `hostNetwork` is true",
                    ));
                }
            }
        }
    }

    validate_host_users(spec, path, out);

    let rp = st(spec, "restartPolicy");
    if !rp.is_empty() && !["Always", "OnFailure", "Never"].contains(&rp) {
        out.push(Cause::not_supported(format!("{path}.restartPolicy"), rp, &["Always", "OnFailure", "Never"]));
    }
    let dns = st(spec, "dnsPolicy");
    let dns_values = ["ClusterFirstWithHostNet", "ClusterFirst", "Default", "None"];
    if !dns.is_empty() && !dns_values.contains(&dns) {
        out.push(Cause::not_supported(format!("{path}.dnsPolicy"), dns, &dns_values));
    }
    if dns == "None" {
        match spec.get("dnsConfig").filter(|d| !d.is_null()) {
            None => out.push(Cause::required(
                format!("{path}.dnsConfig"),
                "must provide `dnsConfig` when `dnsPolicy` is None",
            )),
            Some(cfg) if arr(cfg, "nameservers").is_empty() => out.push(Cause::required(
                format!("{path}.dnsConfig.nameservers"),
                "must provide at least one DNS nameserver when `dnsPolicy` is None",
            )),
            Some(_) => {}
        }
    }
    validate_labels(obj(spec, "nodeSelector"), &format!("{path}.nodeSelector"), out);
    for (key, errs_of) in [
        ("serviceAccountName", dns1123_subdomain_errors as fn(&str) -> Vec<String>),
        ("nodeName", dns1123_subdomain_errors),
        ("priorityClassName", dns1123_subdomain_errors),
        ("hostname", dns1123_label_errors),
        ("subdomain", dns1123_label_errors),
    ] {
        let v = st(spec, key);
        if !v.is_empty() {
            out.extend(errs_of(v).iter().map(|m| Cause::invalid(format!("{path}.{key}"), v, m)));
        }
    }
    if let Some(ads) = int(spec, "activeDeadlineSeconds") {
        if !(1..=i64::from(i32::MAX)).contains(&ads) {
            out.push(Cause::invalid(
                format!("{path}.activeDeadlineSeconds"),
                ads,
                &inclusive_range_error(1, i64::from(i32::MAX)),
            ));
        }
    }
    validate_tolerations(arr(spec, "tolerations"), &format!("{path}.tolerations"), out);
}

fn validate_volumes(volumes: &[Value], path: &str, out: &mut Vec<Cause>) -> HashSet<String> {
    let mut valid = HashSet::new();
    let mut seen = HashSet::new();
    for (i, vol) in volumes.iter().enumerate() {
        let p = format!("{path}[{i}]");
        let mut el = Vec::new();
        let mut count = 0;
        for src in VOLUME_SOURCES {
            if !has(vol, src) {
                continue;
            }
            if count > 0 {
                el.push(Cause::forbidden(format!("{p}.{src}"), "may not specify more than 1 volume type"));
                continue;
            }
            count += 1;
            validate_volume_source(src, obj_or_null(vol, src), &format!("{p}.{src}"), &mut el);
        }
        if count == 0 {
            el.push(Cause::required(p.as_str(), "must specify a volume type"));
        }
        let name = st(vol, "name");
        if name.is_empty() {
            el.push(Cause::required(format!("{p}.name"), ""));
        } else {
            el.extend(dns1123_label_errors(name).iter().map(|m| Cause::invalid(format!("{p}.name"), name, m)));
        }
        if seen.contains(name) {
            el.push(Cause::duplicate(format!("{p}.name"), name));
        }
        seen.insert(name.to_string());
        if el.is_empty() {
            valid.insert(name.to_string());
        } else {
            out.extend(el);
        }
    }
    valid
}

fn validate_volume_source(src: &str, v: &Value, p: &str, out: &mut Vec<Cause>) {
    let required = |key: &str, out: &mut Vec<Cause>| {
        if st(v, key).is_empty() {
            out.push(Cause::required(format!("{p}.{key}"), ""));
        }
    };
    match src {
        "secret" => required("secretName", out),
        "configMap" => required("name", out),
        "persistentVolumeClaim" => required("claimName", out),
        "hostPath" => required("path", out),
        "nfs" => {
            required("server", out);
            required("path", out);
        }
        _ => {}
    }
    if let Some(mode) = int(v, "defaultMode") {
        if !(0..=0o777).contains(&mode) {
            out.push(Cause::invalid(format!("{p}.defaultMode"), mode, FILE_MODE_MSG));
        }
    }
    if matches!(src, "secret" | "configMap") {
        for (i, item) in arr(v, "items").iter().enumerate() {
            let ip = format!("{p}.items[{i}]");
            for key in ["key", "path"] {
                if st(item, key).is_empty() {
                    out.push(Cause::required(format!("{ip}.{key}"), ""));
                }
            }
            if let Some(mode) = int(item, "mode") {
                if !(0..=0o777).contains(&mode) {
                    out.push(Cause::invalid(format!("{ip}.mode"), mode, FILE_MODE_MSG));
                }
            }
        }
    }
}

pub(crate) fn validate_tolerations(tolerations: &[Value], path: &str, out: &mut Vec<Cause>) {
    for (i, t) in tolerations.iter().enumerate() {
        let p = format!("{path}[{i}]");
        let key = st(t, "key");
        let op = st(t, "operator");
        let effect = st(t, "effect");
        let value = st(t, "value");
        if !key.is_empty() {
            out.extend(qualified_name_errors(key).iter().map(|m| Cause::invalid(format!("{p}.key"), key, m)));
        }
        if key.is_empty() && op != "Exists" {
            out.push(Cause::invalid(
                format!("{p}.operator"),
                op,
                "operator must be Exists when `key` is empty, which means \"match all values and all keys\"",
            ));
        }
        if has(t, "tolerationSeconds") && effect != "NoExecute" {
            out.push(Cause::invalid(
                format!("{p}.effect"),
                effect,
                "effect must be 'NoExecute' when `tolerationSeconds` is set",
            ));
        }
        match op {
            "Equal" | "" => {
                let errs = label_value_errors(value);
                if !errs.is_empty() {
                    out.push(Cause::invalid(format!("{p}.operator"), value, &errs.join(";")));
                }
            }
            "Exists" => {
                if !value.is_empty() {
                    out.push(Cause::invalid(
                        format!("{p}.operator"),
                        value,
                        "value must be empty when `operator` is 'Exists'",
                    ));
                }
            }
            _ => out.push(Cause::not_supported(format!("{p}.operator"), op, &["Equal", "Exists"])),
        }
        if !effect.is_empty() && !["NoSchedule", "PreferNoSchedule", "NoExecute"].contains(&effect) {
            out.push(Cause::not_supported(
                format!("{p}.effect"),
                effect,
                &["NoSchedule", "PreferNoSchedule", "NoExecute"],
            ));
        }
    }
}

/// Kubernetes' `validateHostUsers`: a pod in its own user namespace (`hostUsers: false`) may not
/// share the host's network, PID or IPC namespace (its field names as Kubernetes spells them).
fn validate_host_users(spec: &Value, path: &str, out: &mut Vec<Cause>) {
    if spec.get("hostUsers").and_then(Value::as_bool) != Some(false) {
        return;
    }
    const DETAIL: &str = "when `pod.Spec.HostUsers` is false";
    for (field, name) in [("hostNetwork", "hostNetwork"), ("hostPID", "HostPID"), ("hostIPC", "HostIPC")] {
        if spec.get(field).and_then(Value::as_bool) == Some(true) {
            out.push(Cause::forbidden(format!("{path}.{name}"), DETAIL));
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::validation::test_support::{fields, pod};
    use crate::validation::validate_create;

    #[test]
    fn a_pod_needs_at_least_one_container() {
        let causes = validate_create("Pod", &pod(json!({})));
        assert_eq!(fields(&causes), vec!["spec.containers"]);
    }

    #[test]
    fn container_names_must_be_unique_across_init_containers() {
        let p = pod(json!({
            "containers": [{"name": "app", "image": "x"}],
            "initContainers": [{"name": "app", "image": "y"}]
        }));
        let causes = validate_create("Pod", &p);
        assert_eq!(causes, vec![Cause::duplicate("spec.initContainers[0].name", "app")]);
        assert_eq!(causes[0].message, "Duplicate value: \"app\"");
    }

    #[test]
    fn restart_policy_lists_supported_values_in_kubernetes_order() {
        let p = pod(json!({"restartPolicy": "Sometimes", "containers": [{"name": "app", "image": "x"}]}));
        let causes = validate_create("Pod", &p);
        assert_eq!(
            causes[0].message,
            "Unsupported value: \"Sometimes\": supported values: \"Always\", \"OnFailure\", \"Never\""
        );
    }

    #[test]
    fn a_volume_without_a_source_is_rejected() {
        let p = pod(json!({"volumes": [{"name": "v"}], "containers": [{"name": "a", "image": "x"}]}));
        let causes = validate_create("Pod", &p);
        assert_eq!(causes, vec![Cause::required("spec.volumes[0]", "must specify a volume type")]);
    }

    #[test]
    fn tolerations_check_operator_and_effect() {
        let p = pod(json!({"containers": [{"name": "a", "image": "x"}], "tolerations": [
            {"operator": "Equal", "value": "x"},
            {"key": "k", "operator": "Maybe"},
            {"key": "k", "operator": "Exists", "effect": "NoSchedule", "tolerationSeconds": 5}
        ]}));
        let causes = validate_create("Pod", &p);
        assert_eq!(
            fields(&causes),
            vec!["spec.tolerations[0].operator", "spec.tolerations[1].operator", "spec.tolerations[2].effect"]
        );
    }
    #[test]
    fn host_users_false_forbids_every_host_namespace() {
        let p = pod(json!({
            "hostUsers": false, "hostNetwork": true, "hostPID": true, "hostIPC": true,
            "containers": [{"name": "app", "image": "x"}]
        }));
        let causes = validate_create("Pod", &p);
        assert_eq!(fields(&causes), vec!["spec.hostNetwork", "spec.HostPID", "spec.HostIPC"]);
        assert_eq!(causes[0].message, "Forbidden: when `pod.Spec.HostUsers` is false");
    }

    #[test]
    fn host_users_true_or_unset_may_share_host_namespaces() {
        for host_users in [json!(true), json!(null)] {
            let p = pod(json!({
                "hostUsers": host_users, "hostNetwork": true, "hostPID": true,
                "containers": [{"name": "app", "image": "x"}]
            }));
            assert_eq!(validate_create("Pod", &p), vec![]);
        }
    }
}
