//! What a Service's Endpoints and EndpointSlices should hold, computed from the Service and the
//! pods in its namespace (pure; the controllers compare it with what is stored).

use crate::meta::controller_ref;
use k8s_openapi::api::core::v1::{
    EndpointAddress, EndpointPort, EndpointSubset, Endpoints, ObjectReference, Pod, Service, ServicePort,
};
use k8s_openapi::api::discovery::v1::{self as discovery, EndpointConditions, EndpointSlice};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::ResourceExt;
use std::collections::BTreeMap;

pub const SERVICE_NAME_LABEL: &str = "kubernetes.io/service-name";
pub const MANAGED_BY_LABEL: &str = "endpointslice.kubernetes.io/managed-by";
pub const MANAGED_BY: &str = "endpointslice-controller.k8s.io";

/// The Service's selector, if it has a non-empty one (services without are managed by hand).
pub fn selector(svc: &Service) -> Option<&BTreeMap<String, String>> {
    svc.spec.as_ref()?.selector.as_ref().filter(|s| !s.is_empty())
}

/// Whether the pod's labels carry every key=value of the selector.
pub fn selects(selector: &BTreeMap<String, String>, pod: &Pod) -> bool {
    let labels = pod.metadata.labels.as_ref();
    selector.iter().all(|(k, v)| labels.and_then(|l| l.get(k)) == Some(v))
}

/// One pod as an endpoint: its IP, readiness and where it runs.
struct Member<'a> {
    pod: &'a Pod,
    ip: String,
    ready: bool,
    terminating: bool,
}

/// The selected pods that may be endpoints at all: matching, with an IP, not in a terminal phase.
fn members<'a>(svc: &Service, pods: &'a [Pod]) -> Vec<Member<'a>> {
    let Some(sel) = selector(svc) else { return Vec::new() };
    let ns = svc.namespace();
    let mut out: Vec<Member<'a>> = pods
        .iter()
        .filter(|p| p.metadata.namespace == ns && selects(sel, p))
        .filter_map(|p| {
            let status = p.status.as_ref()?;
            let ip = status.pod_ip.clone().filter(|ip| !ip.is_empty())?;
            if matches!(status.phase.as_deref(), Some("Succeeded") | Some("Failed")) {
                return None;
            }
            let ready = crate::meta::pod_is_ready(p);
            Some(Member { pod: p, ip, ready, terminating: p.metadata.deletion_timestamp.is_some() })
        })
        .collect();
    out.sort_by(|a, b| (&a.ip, a.pod.metadata.name.as_deref()).cmp(&(&b.ip, b.pod.metadata.name.as_deref())));
    out
}

/// The pod's hostname as its endpoint's DNS name: set when the pod names this Service as its
/// subdomain (Kubernetes' endpoint controllers' rule; what StatefulSet pods do with their
/// governing headless Service), so DNS serves `<hostname>.<svc>.<ns>.svc.<zone>`.
fn endpoint_hostname(svc: &Service, pod: &Pod) -> Option<String> {
    let spec = pod.spec.as_ref()?;
    let hostname = spec.hostname.as_deref().filter(|h| !h.is_empty())?;
    let names_this_service = spec.subdomain.as_deref() == svc.metadata.name.as_deref();
    (names_this_service && pod.metadata.namespace == svc.metadata.namespace).then(|| hostname.to_string())
}

fn publish_not_ready(svc: &Service) -> bool {
    svc.spec.as_ref().and_then(|s| s.publish_not_ready_addresses).unwrap_or(false)
}

/// The container port a service port targets on this pod: a number as is (the service port when
/// unset), a name looked up in the pod's containers (`None` when the pod has no such port).
pub fn resolve_port(port: &ServicePort, pod: &Pod) -> Option<i32> {
    match &port.target_port {
        None => Some(port.port),
        Some(IntOrString::Int(n)) => Some(*n),
        Some(IntOrString::String(name)) => match name.parse::<i32>() {
            Ok(n) => Some(n),
            Err(_) => pod
                .spec
                .as_ref()?
                .containers
                .iter()
                .flat_map(|c| c.ports.iter().flatten())
                .find(|cp| cp.name.as_deref() == Some(name.as_str()))
                .map(|cp| cp.container_port),
        },
    }
}

/// One resolved service port: name (`None` when unnamed), container port, protocol, appProtocol.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct ResolvedPort {
    name: Option<String>,
    port: i32,
    protocol: String,
    app_protocol: Option<String>,
}

/// The ports of each service port this pod resolves, in service order.
type PortSet = Vec<ResolvedPort>;

fn pod_ports(svc: &Service, pod: &Pod) -> PortSet {
    let ports = svc.spec.as_ref().and_then(|s| s.ports.as_ref());
    ports
        .into_iter()
        .flatten()
        .filter_map(|sp| {
            Some(ResolvedPort {
                name: sp.name.clone().filter(|n| !n.is_empty()),
                port: resolve_port(sp, pod)?,
                protocol: sp.protocol.clone().unwrap_or_else(|| "TCP".into()),
                app_protocol: sp.app_protocol.clone(),
            })
        })
        .collect()
}

fn has_ports(svc: &Service) -> bool {
    svc.spec.as_ref().and_then(|s| s.ports.as_ref()).is_some_and(|p| !p.is_empty())
}

/// Members grouped by the port set they resolve (named target ports may differ per pod); a pod
/// that resolves none of a service's ports is left out.
fn by_ports<'a>(svc: &Service, pods: &'a [Pod]) -> BTreeMap<PortSet, Vec<Member<'a>>> {
    let mut groups: BTreeMap<PortSet, Vec<Member<'a>>> = BTreeMap::new();
    for m in members(svc, pods) {
        let ports = pod_ports(svc, m.pod);
        if ports.is_empty() && has_ports(svc) {
            continue;
        }
        groups.entry(ports).or_default().push(m);
    }
    groups
}

fn target_ref(pod: &Pod) -> ObjectReference {
    ObjectReference {
        kind: Some("Pod".into()),
        namespace: pod.metadata.namespace.clone(),
        name: pod.metadata.name.clone(),
        uid: pod.metadata.uid.clone(),
        ..ObjectReference::default()
    }
}

fn owned_meta(svc: &Service, name: String, labels: Option<BTreeMap<String, String>>) -> ObjectMeta {
    ObjectMeta {
        name: Some(name),
        namespace: svc.namespace(),
        labels,
        owner_references: Some(vec![controller_ref(svc)]),
        ..ObjectMeta::default()
    }
}

/// The Endpoints named like the Service: one subset per distinct port set, ready pods in
/// `addresses`, the rest in `notReadyAddresses` (all ready with `publishNotReadyAddresses`).
pub fn desired_endpoints(svc: &Service, pods: &[Pod]) -> Endpoints {
    let publish = publish_not_ready(svc);
    let subsets: Vec<EndpointSubset> = by_ports(svc, pods)
        .into_iter()
        .map(|(ports, members)| {
            let (mut ready, mut not_ready) = (Vec::new(), Vec::new());
            for m in members {
                let addr = EndpointAddress {
                    ip: m.ip,
                    hostname: endpoint_hostname(svc, m.pod),
                    node_name: m.pod.spec.as_ref().and_then(|s| s.node_name.clone()),
                    target_ref: Some(target_ref(m.pod)),
                };
                if publish || (m.ready && !m.terminating) {
                    ready.push(addr);
                } else {
                    not_ready.push(addr);
                }
            }
            let ports = ports
                .into_iter()
                .map(|p| EndpointPort {
                    name: p.name,
                    port: p.port,
                    protocol: Some(p.protocol),
                    app_protocol: p.app_protocol,
                })
                .collect::<Vec<_>>();
            EndpointSubset {
                addresses: (!ready.is_empty()).then_some(ready),
                not_ready_addresses: (!not_ready.is_empty()).then_some(not_ready),
                ports: (!ports.is_empty()).then_some(ports),
            }
        })
        .collect();
    Endpoints {
        metadata: owned_meta(svc, svc.name_any(), svc.metadata.labels.clone()),
        subsets: (!subsets.is_empty()).then_some(subsets),
    }
}

/// FNV-1a 32 of `parts`, as 5 lowercase base-36 characters: stable slice name suffixes.
fn short_hash(parts: &[&str]) -> String {
    let mut h: u32 = 0x811c_9dc5;
    for p in parts {
        for b in p.bytes().chain([0]) {
            h ^= u32::from(b);
            h = h.wrapping_mul(0x0100_0193);
        }
    }
    let alphabet = b"0123456789abcdefghijklmnopqrstuvwxyz";
    (0..5)
        .map(|_| {
            let c = alphabet[(h % 36) as usize] as char;
            h /= 36;
            c
        })
        .collect()
}

/// The IPv4 EndpointSlices: one per distinct port set, named `<svc>-<hash of uid and ports>`, and
/// one empty slice when no pod qualifies. Endpoints carry ready (ready and not terminating, or
/// published not-ready), serving (Ready) and terminating.
pub fn desired_slices(svc: &Service, pods: &[Pod]) -> Vec<EndpointSlice> {
    let publish = publish_not_ready(svc);
    let mut groups: Vec<(PortSet, Vec<Member<'_>>)> =
        by_ports(svc, pods).into_iter().filter(|(_, ms)| ms.iter().any(|m| !m.ip.contains(':'))).collect();
    if groups.is_empty() {
        groups.push((Vec::new(), Vec::new()));
    }
    let uid = svc.uid().unwrap_or_default();
    let labels: BTreeMap<String, String> =
        [(SERVICE_NAME_LABEL, svc.name_any()), (MANAGED_BY_LABEL, MANAGED_BY.into())]
            .into_iter()
            .map(|(k, v)| (k.to_string(), v))
            .collect();
    groups
        .into_iter()
        .map(|(ports, members)| {
            // The name hashes (name, port, protocol) only, so names stay what they were before
            // appProtocol was carried (it is the same for every pod of a service anyway).
            let key: Vec<(&Option<String>, i32, &str)> =
                ports.iter().map(|p| (&p.name, p.port, p.protocol.as_str())).collect();
            let port_key = format!("{key:?}");
            let name = format!("{}-{}", svc.name_any(), short_hash(&[&uid, &port_key]));
            let endpoints = members
                .into_iter()
                .filter(|m| !m.ip.contains(':'))
                .map(|m| discovery::Endpoint {
                    addresses: vec![m.ip],
                    hostname: endpoint_hostname(svc, m.pod),
                    conditions: Some(EndpointConditions {
                        ready: Some(publish || (m.ready && !m.terminating)),
                        serving: Some(m.ready),
                        terminating: Some(m.terminating),
                    }),
                    node_name: m.pod.spec.as_ref().and_then(|s| s.node_name.clone()),
                    target_ref: Some(target_ref(m.pod)),
                    ..discovery::Endpoint::default()
                })
                .collect::<Vec<_>>();
            // As Kubernetes' endpointslice controller (and what the apiserver stores): the name is
            // always set, "" for an unnamed service port. Leaving it out made every comparison with
            // the stored slice differ, and the slice was rewritten forever.
            let ports = ports
                .into_iter()
                .map(|p| discovery::EndpointPort {
                    name: Some(p.name.unwrap_or_default()),
                    port: Some(p.port),
                    protocol: Some(p.protocol),
                    app_protocol: p.app_protocol,
                })
                .collect();
            EndpointSlice {
                metadata: owned_meta(svc, name, Some(labels.clone())),
                address_type: "IPv4".into(),
                endpoints: Some(endpoints),
                ports: Some(ports),
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
    use serde_json::json;

    fn svc(extra: serde_json::Value) -> Service {
        let mut v = json!({
            "metadata": {"name": "web", "namespace": "default", "uid": "svc-uid"},
            "spec": {"selector": {"app": "web"}, "ports": [{"name": "http", "port": 80, "targetPort": 8080}]},
        });
        if let (Some(spec), Some(e)) = (v["spec"].as_object_mut(), extra.as_object()) {
            spec.extend(e.clone());
        }
        serde_json::from_value(v).expect("valid service")
    }

    fn pod(name: &str, ip: Option<&str>, ready: bool) -> Pod {
        serde_json::from_value(json!({
            "metadata": {"name": name, "namespace": "default", "uid": format!("{name}-uid"), "labels": {"app": "web"}},
            "spec": {"nodeName": "node-1", "containers": [{"name": "c", "image": "i",
                "ports": [{"name": "web", "containerPort": 9090}]}]},
            "status": {"phase": "Running", "podIP": ip,
                "conditions": [{"type": "Ready", "status": if ready { "True" } else { "False" }}]},
        }))
        .expect("valid pod")
    }

    fn ips(addrs: &Option<Vec<EndpointAddress>>) -> Vec<&str> {
        addrs.iter().flatten().map(|a| a.ip.as_str()).collect()
    }

    #[test]
    fn splits_ready_and_not_ready_addresses() {
        let mut terminating = pod("d", Some("10.0.0.4"), true);
        terminating.metadata.deletion_timestamp = Some(Time(jiff::Timestamp::UNIX_EPOCH));
        let mut other = pod("e", Some("10.0.0.5"), true);
        other.metadata.labels = None;
        let pods = vec![
            pod("a", Some("10.0.0.1"), true),
            pod("b", Some("10.0.0.2"), false),
            pod("c", None, true),
            terminating,
            other,
        ];
        let cases = [
            ("default", svc(json!({})), vec!["10.0.0.1"], vec!["10.0.0.2", "10.0.0.4"]),
            (
                "publishNotReadyAddresses",
                svc(json!({"publishNotReadyAddresses": true})),
                vec!["10.0.0.1", "10.0.0.2", "10.0.0.4"],
                vec![],
            ),
        ];
        for (name, s, ready, not_ready) in cases {
            let ep = desired_endpoints(&s, &pods);
            let subsets = ep.subsets.expect("one subset");
            assert_eq!(subsets.len(), 1, "{name}");
            assert_eq!(ips(&subsets[0].addresses), ready, "{name}");
            assert_eq!(ips(&subsets[0].not_ready_addresses), not_ready, "{name}");
            let a = &subsets[0].addresses.as_ref().expect("addresses")[0];
            assert_eq!(a.node_name.as_deref(), Some("node-1"), "{name}");
            let r = a.target_ref.as_ref().expect("targetRef");
            assert_eq!(
                (r.kind.as_deref(), r.name.as_deref(), r.uid.as_deref()),
                (Some("Pod"), Some("a"), Some("a-uid"))
            );
            assert_eq!(ep.metadata.name.as_deref(), Some("web"));
            assert_eq!(ep.metadata.owner_references.expect("owner")[0].controller, Some(true));
        }
    }

    #[test]
    fn resolves_target_ports_by_number_and_name() {
        let mut unnamed = pod("b", Some("10.0.0.2"), true);
        unnamed.spec.as_mut().expect("spec").containers[0].ports = None;
        let pods = vec![pod("a", Some("10.0.0.1"), true), unnamed];
        let cases = [
            ("number", json!(8080), vec![(8080, vec!["10.0.0.1", "10.0.0.2"])]),
            ("name found on one pod", json!("web"), vec![(9090, vec!["10.0.0.1"])]),
            ("name found on none", json!("nope"), vec![]),
        ];
        for (name, target, want) in cases {
            let s = svc(json!({"ports": [{"name": "http", "port": 80, "targetPort": target, "protocol": "TCP"}]}));
            let ep = desired_endpoints(&s, &pods);
            let got: Vec<(i32, Vec<&str>)> = ep
                .subsets
                .iter()
                .flatten()
                .map(|ss| (ss.ports.as_ref().expect("ports")[0].port, ips(&ss.addresses)))
                .collect();
            assert_eq!(got, want, "{name}");
        }
    }

    #[test]
    fn slices_carry_conditions_labels_and_a_stable_name() {
        let mut terminating = pod("c", Some("10.0.0.3"), true);
        terminating.metadata.deletion_timestamp = Some(Time(jiff::Timestamp::UNIX_EPOCH));
        let pods = vec![pod("a", Some("10.0.0.1"), true), pod("b", Some("10.0.0.2"), false), terminating];
        let slices = desired_slices(&svc(json!({})), &pods);
        assert_eq!(slices.len(), 1);
        let s = &slices[0];
        assert_eq!(s.address_type, "IPv4");
        let labels = s.metadata.labels.as_ref().expect("labels");
        assert_eq!(labels.get(SERVICE_NAME_LABEL).map(String::as_str), Some("web"));
        assert_eq!(labels.get(MANAGED_BY_LABEL).map(String::as_str), Some(MANAGED_BY));
        let name = s.metadata.name.clone().expect("name");
        assert!(name.starts_with("web-") && name.len() == "web-".len() + 5, "{name}");
        assert_eq!(desired_slices(&svc(json!({})), &[]).len(), 1, "an empty slice stays");
        assert_eq!(desired_slices(&svc(json!({})), &pods)[0].metadata.name, Some(name), "deterministic");
        let conds: Vec<(Option<bool>, Option<bool>, Option<bool>)> = s
            .endpoints
            .iter()
            .flatten()
            .map(|e| {
                let c = e.conditions.clone().unwrap_or_default();
                (c.ready, c.serving, c.terminating)
            })
            .collect();
        assert_eq!(
            conds,
            vec![
                (Some(true), Some(true), Some(false)),
                (Some(false), Some(false), Some(false)),
                (Some(false), Some(true), Some(true))
            ]
        );
        assert_eq!(s.ports.as_ref().expect("ports")[0].port, Some(8080));
    }

    #[test]
    fn pods_with_hostname_and_this_subdomain_publish_their_hostname() {
        let with = |name: &str, ip: &str, host: Option<&str>, sub: &str| {
            let mut p = pod(name, Some(ip), true);
            let spec = p.spec.as_mut().expect("spec");
            spec.hostname = host.map(String::from);
            spec.subdomain = Some(sub.into());
            p
        };
        let pods = vec![
            with("web-0", "10.0.0.1", Some("web-0"), "web"),
            with("other", "10.0.0.2", Some("other"), "db"),
            with("nohost", "10.0.0.3", None, "web"),
        ];
        let slices = desired_slices(&svc(json!({"clusterIP": "None"})), &pods);
        let hosts: Vec<Option<&str>> = slices[0].endpoints.iter().flatten().map(|e| e.hostname.as_deref()).collect();
        assert_eq!(hosts, vec![Some("web-0"), None, None]);
        let eps = desired_endpoints(&svc(json!({"clusterIP": "None"})), &pods);
        let hosts: Vec<Option<&str>> = eps
            .subsets
            .iter()
            .flatten()
            .flat_map(|s| s.addresses.iter().flatten())
            .map(|a| a.hostname.as_deref())
            .collect();
        assert_eq!(hosts, vec![Some("web-0"), None, None]);
    }

    /// What the apiserver stores for `obj`: its defaults applied, read back.
    fn as_stored<K: serde::Serialize + serde::de::DeserializeOwned>(kind: &str, obj: &K) -> K {
        let mut v = serde_json::to_value(obj).expect("serializes");
        kaji_api::defaults::apply_defaults(kind, &mut v);
        serde_json::from_value(v).expect("reads back")
    }

    #[test]
    fn what_is_desired_is_what_the_apiserver_stores() {
        // An unnamed port (the lab's demo), a named one, one with an appProtocol, no pods at all:
        // the controllers compare desired with stored, so any difference the apiserver's
        // defaulting makes is a write on every sync (the demo's slice was rewritten 250 times a second).
        let pods = vec![pod("a", Some("10.0.0.1"), true), pod("b", Some("10.0.0.2"), false)];
        let services = [
            svc(json!({"ports": [{"port": 80, "targetPort": 8080}]})),
            svc(json!({})),
            svc(json!({"ports": [{"name": "h2", "port": 81, "protocol": "TCP", "appProtocol": "kubernetes.io/h2c"}]})),
        ];
        for s in &services {
            for pods in [&pods[..], &[]] {
                for slice in desired_slices(s, pods) {
                    assert_eq!(as_stored("EndpointSlice", &slice), slice);
                }
                let ep = desired_endpoints(s, pods);
                assert_eq!(as_stored("Endpoints", &ep), ep);
            }
        }
        let slice = &desired_slices(&services[0], &pods)[0];
        assert_eq!(slice.ports.as_ref().expect("ports")[0].name.as_deref(), Some(""), "as Kubernetes writes it");
        let h2 = &desired_slices(&services[2], &pods)[0].ports.clone().expect("ports")[0];
        assert_eq!(h2.app_protocol.as_deref(), Some("kubernetes.io/h2c"));
    }

    #[test]
    fn pods_naming_the_service_as_subdomain_publish_their_hostname() {
        let with = |hostname: Option<&str>, subdomain: Option<&str>| {
            let mut p = pod("web-0", Some("10.0.0.1"), true);
            let spec = p.spec.as_mut().expect("spec");
            spec.hostname = hostname.map(str::to_string);
            spec.subdomain = subdomain.map(str::to_string);
            p
        };
        let cases = [
            ("hostname and subdomain = the service", with(Some("web-0"), Some("web")), Some("web-0")),
            ("another subdomain", with(Some("web-0"), Some("other")), None),
            ("no subdomain", with(Some("web-0"), None), None),
            ("no hostname", with(None, Some("web")), None),
        ];
        for (name, p, want) in cases {
            let slice = &desired_slices(&svc(json!({})), std::slice::from_ref(&p))[0];
            assert_eq!(slice.endpoints.as_ref().expect("endpoints")[0].hostname.as_deref(), want, "{name}: slice");
            let ep = desired_endpoints(&svc(json!({})), &[p]);
            let addr = &ep.subsets.expect("subset")[0].addresses.clone().expect("addresses")[0];
            assert_eq!(addr.hostname.as_deref(), want, "{name}: endpoints");
        }
    }

    #[test]
    fn services_without_a_selector_get_nothing() {
        let mut s = svc(json!({}));
        s.spec.as_mut().expect("spec").selector = None;
        assert!(selector(&s).is_none());
        assert!(desired_endpoints(&s, &[pod("a", Some("10.0.0.1"), true)]).subsets.is_none());
    }
}
