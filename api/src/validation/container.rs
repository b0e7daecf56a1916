//! Container validation: ports, env, volume mounts, resources, probes and lifecycle handlers.

use std::collections::{BTreeMap, HashSet};

use serde_json::{Map, Value};

use super::causes::Cause;
use super::json::{arr, has, int, obj, st};
use super::names::{
    config_map_key_errors, dns1123_label_errors, dns1123_subdomain_errors, env_var_name_errors, port_name_errors,
    port_num_errors, qualified_name_errors, IS_NEGATIVE_MSG, QUANTITY_MSG,
};
use super::pod::PROTOCOLS;
use super::quantity::{quantity_of, quantity_text};

pub(super) fn validate_container_common(
    c: &Value,
    p: &str,
    volumes: &HashSet<String>,
    is_pod: bool,
    out: &mut Vec<Cause>,
) {
    let name = st(c, "name");
    if name.is_empty() {
        out.push(Cause::required(format!("{p}.name"), ""));
    } else {
        out.extend(dns1123_label_errors(name).iter().map(|m| Cause::invalid(format!("{p}.name"), name, m)));
    }
    let image = st(c, "image");
    if image.is_empty() {
        out.push(Cause::required(format!("{p}.image"), ""));
    } else if is_pod && image.trim() != image {
        out.push(Cause::invalid(format!("{p}.image"), image, "must not have leading or trailing whitespace"));
    }
    let tmp = st(c, "terminationMessagePolicy");
    if !tmp.is_empty() && tmp != "File" && tmp != "FallbackToLogsOnError" {
        out.push(Cause::not_supported(
            format!("{p}.terminationMessagePolicy"),
            tmp,
            &["File", "FallbackToLogsOnError"],
        ));
    }
    validate_container_ports(arr(c, "ports"), &format!("{p}.ports"), out);
    validate_env(arr(c, "env"), &format!("{p}.env"), out);
    validate_env_from(arr(c, "envFrom"), &format!("{p}.envFrom"), out);
    validate_volume_mounts(arr(c, "volumeMounts"), volumes, &format!("{p}.volumeMounts"), out);
    let pull = st(c, "imagePullPolicy");
    if !pull.is_empty() && !["Always", "IfNotPresent", "Never"].contains(&pull) {
        out.push(Cause::not_supported(format!("{p}.imagePullPolicy"), pull, &["Always", "IfNotPresent", "Never"]));
    }
    if let Some(res) = c.get("resources").filter(|r| !r.is_null()) {
        validate_resources(res, &format!("{p}.resources"), out);
    }
}

fn validate_container_ports(ports: &[Value], path: &str, out: &mut Vec<Cause>) {
    let mut names = HashSet::new();
    for (i, port) in ports.iter().enumerate() {
        let p = format!("{path}[{i}]");
        let name = st(port, "name");
        if !name.is_empty() {
            let errs = port_name_errors(name);
            if !errs.is_empty() {
                out.extend(errs.iter().map(|m| Cause::invalid(format!("{p}.name"), name, m)));
            } else if !names.insert(name) {
                out.push(Cause::duplicate(format!("{p}.name"), name));
            }
        }
        match int(port, "containerPort").unwrap_or(0) {
            0 => out.push(Cause::required(format!("{p}.containerPort"), "")),
            cp => out.extend(port_num_errors(cp).iter().map(|m| Cause::invalid(format!("{p}.containerPort"), cp, m))),
        }
        let hp = int(port, "hostPort").unwrap_or(0);
        if hp != 0 {
            out.extend(port_num_errors(hp).iter().map(|m| Cause::invalid(format!("{p}.hostPort"), hp, m)));
        }
        let proto = st(port, "protocol");
        if !proto.is_empty() && !PROTOCOLS.contains(&proto) {
            out.push(Cause::not_supported(format!("{p}.protocol"), proto, &PROTOCOLS));
        }
    }
}

pub(super) fn check_host_port_conflicts(containers: &[Value], path: &str, out: &mut Vec<Cause>) {
    let mut seen = HashSet::new();
    for (ci, c) in containers.iter().enumerate() {
        for (pi, port) in arr(c, "ports").iter().enumerate() {
            let hp = int(port, "hostPort").unwrap_or(0);
            if hp == 0 {
                continue;
            }
            let proto = match st(port, "protocol") {
                "" => "TCP",
                p => p,
            };
            let key = format!("{proto}/{}/{hp}", st(port, "hostIP"));
            if !seen.insert(key.clone()) {
                out.push(Cause::duplicate(format!("{path}[{ci}].ports[{pi}].hostPort"), key));
            }
        }
    }
}

const ENV_FIELD_PATHS: [&str; 9] = [
    "metadata.name",
    "metadata.namespace",
    "metadata.uid",
    "spec.nodeName",
    "spec.serviceAccountName",
    "status.hostIP",
    "status.hostIPs",
    "status.podIP",
    "status.podIPs",
];

fn validate_env(env: &[Value], path: &str, out: &mut Vec<Cause>) {
    for (i, ev) in env.iter().enumerate() {
        let p = format!("{path}[{i}]");
        let name = st(ev, "name");
        if name.is_empty() {
            out.push(Cause::required(format!("{p}.name"), ""));
        } else {
            out.extend(env_var_name_errors(name).iter().map(|m| Cause::invalid(format!("{p}.name"), name, m)));
        }
        let Some(from) = ev.get("valueFrom").filter(|v| !v.is_null()) else {
            continue;
        };
        let vp = format!("{p}.valueFrom");
        let sources = ["fieldRef", "resourceFieldRef", "configMapKeyRef", "secretKeyRef"];
        let n = sources.iter().filter(|s| has(from, s)).count();
        if n == 0 {
            out.push(Cause::invalid(
                vp.as_str(),
                "",
                "must specify one of: `fieldRef`, `resourceFieldRef`, `configMapKeyRef` or `secretKeyRef`",
            ));
        } else if !st(ev, "value").is_empty() {
            out.push(Cause::invalid(vp.as_str(), "", "may not be specified when `value` is not empty"));
        } else if n > 1 {
            out.push(Cause::invalid(vp.as_str(), "", "may not have more than one field specified at a time"));
        }
        if let Some(fr) = from.get("fieldRef").filter(|v| !v.is_null()) {
            let fp = st(fr, "fieldPath");
            if st(fr, "apiVersion").is_empty() {
                out.push(Cause::required(format!("{vp}.fieldRef.apiVersion"), ""));
            } else if fp.is_empty() {
                out.push(Cause::required(format!("{vp}.fieldRef.fieldPath"), ""));
            } else if !(ENV_FIELD_PATHS.contains(&fp)
                || fp.starts_with("metadata.labels['")
                || fp.starts_with("metadata.annotations['"))
            {
                out.push(Cause::not_supported(format!("{vp}.fieldRef.fieldPath"), fp, &ENV_FIELD_PATHS));
            }
        }
        for key in ["configMapKeyRef", "secretKeyRef"] {
            if let Some(sel) = from.get(key).filter(|v| !v.is_null()) {
                let sp = format!("{vp}.{key}");
                let sel_name = st(sel, "name");
                out.extend(
                    dns1123_subdomain_errors(sel_name)
                        .iter()
                        .map(|m| Cause::invalid(format!("{sp}.name"), sel_name, m)),
                );
                let k = st(sel, "key");
                if k.is_empty() {
                    out.push(Cause::required(format!("{sp}.key"), ""));
                } else {
                    out.extend(config_map_key_errors(k).iter().map(|m| Cause::invalid(format!("{sp}.key"), k, m)));
                }
            }
        }
    }
}

fn validate_env_from(env_from: &[Value], path: &str, out: &mut Vec<Cause>) {
    for (i, ef) in env_from.iter().enumerate() {
        let p = format!("{path}[{i}]");
        let prefix = st(ef, "prefix");
        if !prefix.is_empty() {
            out.extend(env_var_name_errors(prefix).iter().map(|m| Cause::invalid(format!("{p}.prefix"), prefix, m)));
        }
        let n = ["configMapRef", "secretRef"].iter().filter(|k| has(ef, k)).count();
        if n == 0 {
            out.push(Cause::invalid(path, "", "must specify one of: `configMapRef` or `secretRef`"));
        } else if n > 1 {
            out.push(Cause::invalid(path, "", "may not have more than one field specified at a time"));
        }
        for key in ["configMapRef", "secretRef"] {
            if let Some(r) = ef.get(key).filter(|v| !v.is_null()) {
                if st(r, "name").is_empty() {
                    out.push(Cause::required(format!("{p}.{key}.name"), ""));
                }
            }
        }
    }
}

fn validate_volume_mounts(mounts: &[Value], volumes: &HashSet<String>, path: &str, out: &mut Vec<Cause>) {
    let mut mount_points = HashSet::new();
    for (i, m) in mounts.iter().enumerate() {
        let p = format!("{path}[{i}]");
        let name = st(m, "name");
        if name.is_empty() {
            out.push(Cause::required(format!("{p}.name"), ""));
        }
        if !volumes.contains(name) {
            out.push(Cause::not_found(format!("{p}.name"), name));
        }
        let mp = st(m, "mountPath");
        if mp.is_empty() {
            out.push(Cause::required(format!("{p}.mountPath"), ""));
        }
        if !mount_points.insert(mp) {
            out.push(Cause::invalid(format!("{p}.mountPath"), mp, "must be unique"));
        }
        let sub = st(m, "subPathExpr");
        if !sub.is_empty() && !st(m, "subPath").is_empty() {
            out.push(Cause::invalid(format!("{p}.subPathExpr"), sub, "subPathExpr and subPath are mutually exclusive"));
        }
    }
}

/// Native resources (no domain, or a `kubernetes.io/` domain) other than hugepages may be overcommitted.
fn overcommit_allowed(name: &str) -> bool {
    let native = !name.contains('/') || name.contains("kubernetes.io/");
    native && !name.starts_with("hugepages-")
}

fn validate_resource_name(name: &str, p: &str, out: &mut Vec<Cause>) {
    out.extend(qualified_name_errors(name).iter().map(|m| Cause::invalid(p, name, m)));
    if !name.contains('/') && !["cpu", "memory", "ephemeral-storage"].contains(&name) && !name.starts_with("hugepages-")
    {
        out.push(Cause::invalid(p, name, "must be a standard resource for containers"));
    }
}

fn validate_resources(res: &Value, path: &str, out: &mut Vec<Cause>) {
    let lim_path = format!("{path}.limits");
    let req_path = format!("{path}.requests");
    let empty = Map::new();
    let limits = obj(res, "limits").unwrap_or(&empty);
    let requests = obj(res, "requests").unwrap_or(&empty);
    let mut parsed_limits = BTreeMap::new();
    for (name, q) in limits {
        let p = format!("{lim_path}[{name}]");
        validate_resource_name(name, &p, out);
        match quantity_of(q) {
            None => out.push(Cause::invalid(p, quantity_text(q), QUANTITY_MSG)),
            Some(v) if v < 0 => out.push(Cause::invalid(p, quantity_text(q), IS_NEGATIVE_MSG)),
            Some(v) => {
                parsed_limits.insert(name.as_str(), (v, quantity_text(q)));
            }
        }
    }
    for (name, q) in requests {
        let p = format!("{req_path}[{name}]");
        validate_resource_name(name, &p, out);
        let Some(v) = quantity_of(q) else {
            out.push(Cause::invalid(p, quantity_text(q), QUANTITY_MSG));
            continue;
        };
        if v < 0 {
            out.push(Cause::invalid(p, quantity_text(q), IS_NEGATIVE_MSG));
            continue;
        }
        let shown = quantity_text(q);
        match parsed_limits.get(name.as_str()) {
            Some((lim, lim_text)) if v != *lim && !overcommit_allowed(name) => out.push(Cause::invalid(
                req_path.as_str(),
                shown,
                &format!("must be equal to {name} limit of {lim_text}"),
            )),
            Some((lim, lim_text)) if v > *lim => out.push(Cause::invalid(
                req_path.as_str(),
                shown,
                &format!("must be less than or equal to {name} limit of {lim_text}"),
            )),
            Some(_) => {}
            None if !overcommit_allowed(name) && !limits.contains_key(name) => {
                out.push(Cause::required(lim_path.as_str(), "Limit must be set for non overcommitable resources"));
            }
            None => {}
        }
    }
}

pub(super) fn validate_probes(c: &Value, p: &str, out: &mut Vec<Cause>) {
    for probe in ["livenessProbe", "readinessProbe", "startupProbe"] {
        let Some(pr) = c.get(probe).filter(|v| !v.is_null()) else {
            continue;
        };
        let pp = format!("{p}.{probe}");
        validate_handler(pr, &pp, &["exec", "httpGet", "tcpSocket", "grpc"], out);
        for key in ["initialDelaySeconds", "timeoutSeconds", "periodSeconds", "successThreshold", "failureThreshold"] {
            if let Some(n) = int(pr, key) {
                if n < 0 {
                    out.push(Cause::invalid(format!("{pp}.{key}"), n, IS_NEGATIVE_MSG));
                }
            }
        }
        if probe != "readinessProbe" {
            if let Some(n) = int(pr, "successThreshold") {
                if n != 1 {
                    out.push(Cause::invalid(format!("{pp}.successThreshold"), n, "must be 1"));
                }
            }
        }
    }
}

pub(super) fn validate_lifecycle(l: &Value, p: &str, out: &mut Vec<Cause>) {
    for hook in ["postStart", "preStop"] {
        if let Some(h) = l.get(hook).filter(|v| !v.is_null()) {
            validate_handler(h, &format!("{p}.{hook}"), &["exec", "httpGet", "tcpSocket", "sleep"], out);
        }
    }
}

fn validate_handler(h: &Value, p: &str, kinds: &[&str], out: &mut Vec<Cause>) {
    let mut n = 0;
    for kind in kinds {
        let Some(action) = h.get(*kind).filter(|v| !v.is_null()) else {
            continue;
        };
        let ap = format!("{p}.{kind}");
        if n > 0 {
            out.push(Cause::forbidden(ap, "may not specify more than 1 handler type"));
            continue;
        }
        n += 1;
        match *kind {
            "exec" if arr(action, "command").is_empty() => out.push(Cause::required(format!("{ap}.command"), "")),
            "httpGet" => {
                if action.get("path").and_then(Value::as_str) == Some("") {
                    out.push(Cause::required(format!("{ap}.path"), ""));
                }
                validate_port_num_or_name(action.get("port"), &format!("{ap}.port"), out);
                let scheme = st(action, "scheme");
                if !scheme.is_empty() && scheme != "HTTP" && scheme != "HTTPS" {
                    out.push(Cause::not_supported(format!("{ap}.scheme"), scheme, &["HTTP", "HTTPS"]));
                }
            }
            "tcpSocket" | "grpc" => validate_port_num_or_name(action.get("port"), &format!("{ap}.port"), out),
            _ => {}
        }
    }
    if n == 0 {
        out.push(Cause::required(p, "must specify a handler type"));
    }
}

pub(super) fn validate_port_num_or_name(port: Option<&Value>, p: &str, out: &mut Vec<Cause>) {
    match port {
        Some(Value::Number(n)) => {
            let n = n.as_i64().unwrap_or(0);
            out.extend(port_num_errors(n).iter().map(|m| Cause::invalid(p, n, m)));
        }
        Some(Value::String(s)) => out.extend(port_name_errors(s).iter().map(|m| Cause::invalid(p, s, m))),
        _ => out.extend(port_num_errors(0).iter().map(|m| Cause::invalid(p, 0i64, m))),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use crate::validation::test_support::{fields, pod};
    use crate::validation::validate_create;

    #[test]
    fn ports_are_checked_for_range_protocol_and_name() {
        let p = pod(json!({"containers": [{"name": "app", "image": "x", "ports": [
            {"containerPort": 70000, "protocol": "ICMP", "name": "web_1"},
            {"containerPort": 80, "hostPort": 8080, "name": "web"},
            {"containerPort": 81, "name": "web"}
        ]}]}));
        let causes = validate_create("Pod", &p);
        assert_eq!(
            fields(&causes),
            vec![
                "spec.containers[0].ports[0].name",
                "spec.containers[0].ports[0].containerPort",
                "spec.containers[0].ports[0].protocol",
                "spec.containers[0].ports[2].name",
            ]
        );
        assert_eq!(causes[1].message, "Invalid value: 70000: must be between 1 and 65535, inclusive");
        assert_eq!(causes[3].reason, "FieldValueDuplicate");
    }

    #[test]
    fn volume_mounts_must_reference_a_volume() {
        let p = pod(json!({
            "volumes": [{"name": "data", "emptyDir": {}}, {"name": "two", "emptyDir": {}, "configMap": {"name": "c"}}],
            "containers": [{"name": "app", "image": "x", "volumeMounts": [
                {"name": "data", "mountPath": "/data"},
                {"name": "missing", "mountPath": "/m"},
                {"name": "data"}
            ]}]
        }));
        let causes = validate_create("Pod", &p);
        assert_eq!(
            fields(&causes),
            vec![
                "spec.volumes[1].configMap",
                "spec.containers[0].volumeMounts[1].name",
                "spec.containers[0].volumeMounts[2].mountPath",
            ]
        );
        assert_eq!(causes[1].message, "Not found: \"missing\"");
    }

    #[test]
    fn requests_may_not_exceed_limits() {
        let p = pod(json!({"containers": [{"name": "a", "image": "x", "resources": {
            "limits": {"cpu": "500m", "memory": "128Mi"},
            "requests": {"cpu": "1", "memory": "64Mi"}
        }}]}));
        let causes = validate_create("Pod", &p);
        assert_eq!(causes.len(), 1);
        assert_eq!(causes[0].field, "spec.containers[0].resources.requests");
        assert_eq!(causes[0].message, "Invalid value: \"1\": must be less than or equal to cpu limit of 500m");
    }
}
