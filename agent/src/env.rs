//! A container's environment as Kubernetes builds it: the image's env, then `envFrom`, then
//! `env` (value, configMapKeyRef, secretKeyRef, fieldRef, resourceFieldRef), with `$(VAR)`
//! references expanded; and the command line from the image's Entrypoint/Cmd vs command/args.

use std::collections::{BTreeMap, HashMap};

use k8s_openapi::api::core::v1::{ConfigMap, Container, PersistentVolume, PersistentVolumeClaim, Pod, Secret, Service};
use kube::api::Api;

/// ConfigMaps and Secrets the pod refers to, fetched once per container start (None = missing).
#[derive(Default, Debug, Clone)]
pub struct Refs {
    /// Services whose `*_SERVICE_HOST`/`*_PORT` variables the container gets (service links).
    pub services: Vec<Service>,
    pub config_maps: HashMap<String, Option<BTreeMap<String, String>>>,
    pub secrets: HashMap<String, Option<BTreeMap<String, Vec<u8>>>>,
    /// PersistentVolumeClaims of the pod's volumes, by claim name.
    pub claims: HashMap<String, ClaimState>,
    /// The tokens of projected `serviceAccountToken` sources, by [`token_key`] (or why not).
    pub tokens: HashMap<String, Result<String, String>>,
}

/// Where [`Refs::tokens`] keeps the token of the `index`th source of projected volume `volume`.
pub fn token_key(volume: &str, index: usize) -> String {
    format!("{volume}/{index}")
}

/// Where a claim of a pod's volume stands, as the agent needs it to mount it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ClaimState {
    Missing,
    /// Not bound to a volume yet (a WaitForFirstConsumer claim waits for its provisioner).
    Unbound,
    /// Bound to this PersistentVolume, at this path on the node (its hostPath or local path;
    /// `None` for a volume source the agent cannot mount).
    Bound {
        volume: String,
        path: Option<String>,
    },
}

impl Refs {
    /// Fetches every ConfigMap/Secret named in the container's env/envFrom and the pod's volumes.
    pub async fn fetch(client: &kube::Client, pod: &Pod, container: Option<&Container>) -> Result<Refs, kube::Error> {
        let ns = pod.metadata.namespace.clone().unwrap_or_else(|| "default".into());
        let (mut cms, mut secrets) = (Vec::new(), Vec::new());
        if let Some(c) = container {
            for e in c.env.iter().flatten() {
                if let Some(vf) = &e.value_from {
                    if let Some(r) = &vf.config_map_key_ref {
                        cms.push(r.name.clone());
                    }
                    if let Some(r) = &vf.secret_key_ref {
                        secrets.push(r.name.clone());
                    }
                }
            }
            for f in c.env_from.iter().flatten() {
                if let Some(r) = &f.config_map_ref {
                    cms.push(r.name.clone());
                }
                if let Some(r) = &f.secret_ref {
                    secrets.push(r.name.clone());
                }
            }
        }
        for v in pod.spec.iter().flat_map(|s| s.volumes.iter().flatten()) {
            if let Some(c) = &v.config_map {
                cms.push(c.name.clone());
            }
            if let Some(s) = &v.secret {
                secrets.extend(s.secret_name.clone());
            }
            for src in v.projected.iter().flat_map(|p| p.sources.iter().flatten()) {
                if let Some(c) = &src.config_map {
                    cms.push(c.name.clone());
                }
                if let Some(s) = &src.secret {
                    secrets.push(s.name.clone());
                }
            }
        }
        let mut refs = Refs::default();
        let claim_api: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), &ns);
        for v in pod.spec.iter().flat_map(|s| s.volumes.iter().flatten()) {
            let Some(c) = &v.persistent_volume_claim else { continue };
            let state = match claim_api.get_opt(&c.claim_name).await? {
                None => ClaimState::Missing,
                Some(pvc) => {
                    let bound = pvc.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Bound");
                    match pvc.spec.and_then(|s| s.volume_name).filter(|v| !v.is_empty() && bound) {
                        None => ClaimState::Unbound,
                        Some(volume) => {
                            let pv = Api::<PersistentVolume>::all(client.clone()).get_opt(&volume).await?;
                            let spec = pv.and_then(|pv| pv.spec);
                            let path = spec.as_ref().and_then(|s| {
                                s.host_path
                                    .as_ref()
                                    .map(|h| h.path.clone())
                                    .or_else(|| s.local.as_ref().map(|l| l.path.clone()))
                            });
                            ClaimState::Bound { volume, path }
                        }
                    }
                }
            };
            refs.claims.insert(c.claim_name.clone(), state);
        }
        if container.is_some() {
            let links = pod.spec.as_ref().and_then(|s| s.enable_service_links).unwrap_or(true);
            if links {
                refs.services = Api::<Service>::namespaced(client.clone(), &ns).list(&Default::default()).await?.items;
            }
            if ns != "default" || !links {
                let master = Api::<Service>::namespaced(client.clone(), "default").get_opt("kubernetes").await?;
                refs.services.extend(master);
            }
        }
        let cm_api: Api<ConfigMap> = Api::namespaced(client.clone(), &ns);
        for name in cms {
            if refs.config_maps.contains_key(&name) {
                continue;
            }
            let data = cm_api.get_opt(&name).await?.map(|cm| {
                let mut d = cm.data.unwrap_or_default();
                for (k, v) in cm.binary_data.unwrap_or_default() {
                    d.entry(k).or_insert_with(|| String::from_utf8_lossy(&v.0).into_owned());
                }
                d
            });
            refs.config_maps.insert(name, data);
        }
        let s_api: Api<Secret> = Api::namespaced(client.clone(), &ns);
        for name in secrets {
            if refs.secrets.contains_key(&name) {
                continue;
            }
            let data = s_api.get_opt(&name).await?.map(|s| {
                let mut d: BTreeMap<String, Vec<u8>> =
                    s.data.unwrap_or_default().into_iter().map(|(k, v)| (k, v.0)).collect();
                for (k, v) in s.string_data.unwrap_or_default() {
                    d.insert(k, v.into_bytes());
                }
                d
            });
            refs.secrets.insert(name, data);
        }
        Ok(refs)
    }

    /// A Secret's keys as raw bytes (volumes keep binary content as is).
    pub fn secret(&self, name: &str) -> Option<&BTreeMap<String, Vec<u8>>> {
        self.secrets.get(name).and_then(|s| s.as_ref())
    }

    pub fn config_map(&self, name: &str) -> Option<&BTreeMap<String, String>> {
        self.config_maps.get(name).and_then(|s| s.as_ref())
    }
}

/// Values `fieldRef`/`resourceFieldRef` can read that are not in the pod object itself.
#[derive(Default, Debug, Clone)]
pub struct Node {
    pub host_ip: String,
    pub pod_ip: String,
    pub allocatable_cpu_millis: u64,
    pub allocatable_memory_bytes: u64,
}

/// The value of a `fieldRef` path, as the downward API defines it.
pub fn field_value(pod: &Pod, path: &str, node: &Node) -> Result<String, String> {
    let meta = &pod.metadata;
    let spec = pod.spec.as_ref();
    let sub = |prefix: &str| -> Option<String> {
        path.strip_prefix(prefix)?.strip_prefix("['")?.strip_suffix("']").map(str::to_string)
    };
    if let Some(k) = sub("metadata.labels") {
        return Ok(meta.labels.as_ref().and_then(|l| l.get(&k).cloned()).unwrap_or_default());
    }
    if let Some(k) = sub("metadata.annotations") {
        return Ok(meta.annotations.as_ref().and_then(|l| l.get(&k).cloned()).unwrap_or_default());
    }
    let kv = |m: &Option<BTreeMap<String, String>>| {
        m.iter().flatten().map(|(k, v)| format!("{k}={v:?}")).collect::<Vec<_>>().join("\n")
    };
    Ok(match path {
        "metadata.name" => meta.name.clone().unwrap_or_default(),
        "metadata.namespace" => meta.namespace.clone().unwrap_or_default(),
        "metadata.uid" => meta.uid.clone().unwrap_or_default(),
        "metadata.labels" => kv(&meta.labels),
        "metadata.annotations" => kv(&meta.annotations),
        "spec.nodeName" => spec.and_then(|s| s.node_name.clone()).unwrap_or_default(),
        "spec.serviceAccountName" => spec.and_then(|s| s.service_account_name.clone()).unwrap_or_default(),
        "status.hostIP" | "status.hostIPs" => node.host_ip.clone(),
        "status.podIP" | "status.podIPs" => node.pod_ip.clone(),
        other => return Err(format!("unsupported fieldRef path {other:?}")),
    })
}

/// The value of a `resourceFieldRef` (limits.cpu, requests.memory...), divided by `divisor`.
pub fn resource_value(
    container: &Container,
    resource: &str,
    divisor: Option<&str>,
    node: &Node,
) -> Result<String, String> {
    let res = container.resources.as_ref();
    let (kind, name) = resource.split_once('.').ok_or_else(|| format!("unsupported resource {resource:?}"))?;
    let map = match kind {
        "limits" => res.and_then(|r| r.limits.as_ref()),
        "requests" => res.and_then(|r| r.requests.as_ref()),
        _ => return Err(format!("unsupported resource {resource:?}")),
    };
    let q = map.and_then(|m| m.get(name)).map(|q| q.0.clone());
    match name {
        "cpu" => {
            let millis = match q {
                Some(q) => crate::node::parse_cpu_millis(&q).ok_or_else(|| format!("invalid cpu quantity {q:?}"))?,
                None if kind == "limits" => node.allocatable_cpu_millis,
                None => 0,
            };
            let div = divisor.map(crate::node::parse_cpu_millis).unwrap_or(Some(1000)).filter(|d| *d > 0);
            let div = div.ok_or_else(|| format!("invalid divisor {divisor:?}"))?;
            Ok(millis.div_ceil(div).to_string())
        }
        "memory" | "ephemeral-storage" => {
            let bytes = match q {
                Some(q) => crate::node::parse_bytes(&q).ok_or_else(|| format!("invalid quantity {q:?}"))?,
                None if kind == "limits" && name == "memory" => node.allocatable_memory_bytes,
                None => 0,
            };
            let div = divisor.map(crate::node::parse_bytes).unwrap_or(Some(1)).filter(|d| *d > 0);
            let div = div.ok_or_else(|| format!("invalid divisor {divisor:?}"))?;
            Ok(bytes.div_ceil(div).to_string())
        }
        _ => Err(format!("unsupported resource {resource:?}")),
    }
}

/// kubelet's service links: for every Service with a cluster IP, Docker-link style variables
/// (`NAME_SERVICE_HOST`, `NAME_SERVICE_PORT[_PORTNAME]`, `NAME_PORT`, `NAME_PORT_<port>_<PROTO>[_PROTO|_PORT|_ADDR]`).
pub fn service_env(services: &[Service]) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut sorted: Vec<&Service> = services.iter().collect();
    sorted.sort_by_key(|s| s.metadata.name.clone());
    for svc in sorted {
        let Some(spec) = &svc.spec else { continue };
        let ip = spec.cluster_ip.clone().unwrap_or_default();
        if ip.is_empty() || ip == "None" {
            continue;
        }
        let ports = spec.ports.clone().unwrap_or_default();
        let Some(first) = ports.first() else { continue };
        let name = svc.metadata.name.clone().unwrap_or_default().to_ascii_uppercase().replace('-', "_");
        out.push((format!("{name}_SERVICE_HOST"), ip.clone()));
        out.push((format!("{name}_SERVICE_PORT"), first.port.to_string()));
        for p in &ports {
            if let Some(pn) = p.name.as_deref().filter(|n| !n.is_empty()) {
                out.push((
                    format!("{name}_SERVICE_PORT_{}", pn.to_ascii_uppercase().replace('-', "_")),
                    p.port.to_string(),
                ));
            }
        }
        let proto = |p: &k8s_openapi::api::core::v1::ServicePort| p.protocol.clone().unwrap_or_else(|| "TCP".into());
        out.push((format!("{name}_PORT"), format!("{}://{ip}:{}", proto(first).to_ascii_lowercase(), first.port)));
        for p in &ports {
            let pr = proto(p);
            let prefix = format!("{name}_PORT_{}_{}", p.port, pr.to_ascii_uppercase());
            out.push((prefix.clone(), format!("{}://{ip}:{}", pr.to_ascii_lowercase(), p.port)));
            out.push((format!("{prefix}_PROTO"), pr.to_ascii_lowercase()));
            out.push((format!("{prefix}_PORT"), p.port.to_string()));
            out.push((format!("{prefix}_ADDR"), ip.clone()));
        }
    }
    out
}

/// Expands `$(NAME)` from `vars`; `$$` is a literal `$`; unknown references stay as written.
pub fn expand(input: &str, vars: &HashMap<String, String>) -> String {
    let mut out = String::with_capacity(input.len());
    let mut rest = input;
    while let Some(i) = rest.find('$') {
        out.push_str(&rest[..i]);
        let after = &rest[i + 1..];
        if let Some(r) = after.strip_prefix('$') {
            out.push('$');
            rest = r;
        } else if let Some(r) = after.strip_prefix('(') {
            match r.find(')') {
                Some(end) => {
                    let name = &r[..end];
                    match vars.get(name) {
                        Some(v) => out.push_str(v),
                        None => {
                            out.push_str("$(");
                            out.push_str(name);
                            out.push(')');
                        }
                    }
                    rest = &r[end + 1..];
                }
                None => {
                    out.push_str("$(");
                    rest = r;
                }
            }
        } else {
            out.push('$');
            rest = after;
        }
    }
    out.push_str(rest);
    out
}

/// The container's environment as `KEY=value` (image env first, later entries win), or the
/// reason it cannot be built (a `CreateContainerConfigError` message).
pub fn build(
    pod: &Pod,
    container: &Container,
    image_env: &[String],
    refs: &Refs,
    node: &Node,
) -> Result<Vec<String>, String> {
    let ns = pod.metadata.namespace.as_deref().unwrap_or("default");
    let mut order: Vec<String> = Vec::new();
    let mut vars: HashMap<String, String> = HashMap::new();
    let set = |order: &mut Vec<String>, vars: &mut HashMap<String, String>, k: String, v: String| {
        if !vars.contains_key(&k) {
            order.push(k.clone());
        }
        vars.insert(k, v);
    };
    for kv in image_env {
        let (k, v) = kv.split_once('=').unwrap_or((kv.as_str(), ""));
        set(&mut order, &mut vars, k.to_string(), v.to_string());
    }
    for (k, v) in service_env(&refs.services) {
        set(&mut order, &mut vars, k, v);
    }
    for from in container.env_from.iter().flatten() {
        let prefix = from.prefix.clone().unwrap_or_default();
        let (data, kind, name, optional) = if let Some(r) = &from.config_map_ref {
            (refs.config_map(&r.name).cloned(), "configmap", r.name.clone(), r.optional.unwrap_or(false))
        } else if let Some(r) = &from.secret_ref {
            (refs.secret(&r.name).map(lossy), "secret", r.name.clone(), r.optional.unwrap_or(false))
        } else {
            continue;
        };
        match data {
            Some(d) => {
                for (k, v) in d {
                    set(&mut order, &mut vars, format!("{prefix}{k}"), v);
                }
            }
            None if optional => {}
            None => return Err(format!("{kind} \"{name}\" not found")),
        }
    }
    for e in container.env.iter().flatten() {
        let value = if let Some(vf) = &e.value_from {
            if let Some(r) = &vf.config_map_key_ref {
                match refs.config_map(&r.name) {
                    Some(d) => match d.get(&r.key) {
                        Some(v) => v.clone(),
                        None if r.optional.unwrap_or(false) => continue,
                        None => return Err(format!("couldn't find key {} in ConfigMap {ns}/{}", r.key, r.name)),
                    },
                    None if r.optional.unwrap_or(false) => continue,
                    None => return Err(format!("configmap \"{}\" not found", r.name)),
                }
            } else if let Some(r) = &vf.secret_key_ref {
                match refs.secret(&r.name) {
                    Some(d) => match d.get(&r.key) {
                        Some(v) => String::from_utf8_lossy(v).into_owned(),
                        None if r.optional.unwrap_or(false) => continue,
                        None => return Err(format!("couldn't find key {} in Secret {ns}/{}", r.key, r.name)),
                    },
                    None if r.optional.unwrap_or(false) => continue,
                    None => return Err(format!("secret \"{}\" not found", r.name)),
                }
            } else if let Some(f) = &vf.field_ref {
                field_value(pod, &f.field_path, node)?
            } else if let Some(r) = &vf.resource_field_ref {
                let c = match &r.container_name {
                    Some(name) if !name.is_empty() => all_containers(pod)
                        .find(|c| &c.name == name)
                        .ok_or_else(|| format!("resourceFieldRef names unknown container {name:?}"))?,
                    _ => container,
                };
                resource_value(c, &r.resource, r.divisor.as_ref().map(|d| d.0.as_str()), node)?
            } else {
                String::new()
            }
        } else {
            expand(e.value.as_deref().unwrap_or(""), &vars)
        };
        set(&mut order, &mut vars, e.name.clone(), value);
    }
    Ok(order.into_iter().map(|k| format!("{k}={}", vars[&k])).collect())
}

fn lossy(d: &BTreeMap<String, Vec<u8>>) -> BTreeMap<String, String> {
    d.iter().map(|(k, v)| (k.clone(), String::from_utf8_lossy(v).into_owned())).collect()
}

fn all_containers(pod: &Pod) -> impl Iterator<Item = &Container> {
    pod.spec.iter().flat_map(|s| s.init_containers.iter().flatten().chain(s.containers.iter()))
}

/// Kubernetes' rule for the process: command replaces the image Entrypoint (and drops its Cmd),
/// args replace Cmd; `$(VAR)` references expand from the container's env.
pub fn command_line(container: &Container, entrypoint: &[String], cmd: &[String], env: &[String]) -> Vec<String> {
    let vars: HashMap<String, String> = env
        .iter()
        .map(|kv| {
            let (k, v) = kv.split_once('=').unwrap_or((kv.as_str(), ""));
            (k.to_string(), v.to_string())
        })
        .collect();
    let command = container.command.clone().unwrap_or_default();
    let args = container.args.clone().unwrap_or_default();
    let line: Vec<String> = match (command.is_empty(), args.is_empty()) {
        (true, true) => entrypoint.iter().chain(cmd).cloned().collect(),
        (true, false) => entrypoint.iter().cloned().chain(args.iter().map(|a| expand(a, &vars))).collect(),
        (false, _) => command.iter().chain(args.iter()).map(|a| expand(a, &vars)).collect(),
    };
    line
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod(v: serde_json::Value) -> Pod {
        serde_json::from_value(v).expect("valid pod")
    }

    #[test]
    fn expansion_follows_kubernetes_rules() {
        let vars = HashMap::from([("A".to_string(), "x".to_string()), ("B".to_string(), "y".to_string())]);
        assert_eq!(expand("$(A)-$(B)", &vars), "x-y");
        assert_eq!(expand("$$(A)", &vars), "$(A)");
        assert_eq!(expand("$(NOPE) $(A", &vars), "$(NOPE) $(A");
        assert_eq!(expand("cost: $5", &vars), "cost: $5");
    }

    #[test]
    fn command_and_args_combine_with_the_image_as_kubernetes_defines() {
        let ep = vec!["/entry".to_string()];
        let cmd = vec!["default".to_string()];
        let c = |v: serde_json::Value| -> Container { serde_json::from_value(v).expect("valid") };
        assert_eq!(command_line(&c(json!({"name": "a"})), &ep, &cmd, &[]), ["/entry", "default"]);
        assert_eq!(command_line(&c(json!({"name": "a", "args": ["x"]})), &ep, &cmd, &[]), ["/entry", "x"]);
        assert_eq!(command_line(&c(json!({"name": "a", "command": ["/bin/sh"]})), &ep, &cmd, &[]), ["/bin/sh"]);
        let env = vec!["MSG=hi".to_string()];
        let got =
            command_line(&c(json!({"name": "a", "command": ["echo", "$(MSG)"], "args": ["$$(MSG)"]})), &ep, &cmd, &env);
        assert_eq!(got, ["echo", "hi", "$(MSG)"]);
    }

    #[test]
    fn env_layers_image_env_from_and_env_with_references() {
        let p = pod(json!({
            "metadata": {"name": "web", "namespace": "ns1", "uid": "u1", "labels": {"app": "a"}},
            "spec": {"nodeName": "n1", "containers": [{
                "name": "c",
                "envFrom": [{"configMapRef": {"name": "cm"}, "prefix": "CM_"}],
                "env": [
                    {"name": "PATH", "value": "/custom"},
                    {"name": "GREETING", "value": "hello $(NAME)"},
                    {"name": "NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
                    {"name": "AGAIN", "value": "$(NAME)@$(NODE)"},
                    {"name": "NODE", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
                    {"name": "APP", "valueFrom": {"fieldRef": {"fieldPath": "metadata.labels['app']"}}},
                    {"name": "PASS", "valueFrom": {"secretKeyRef": {"name": "s", "key": "pw"}}},
                    {"name": "MEM", "valueFrom": {"resourceFieldRef": {"resource": "limits.memory", "divisor": "1Mi"}}}
                ],
                "resources": {"limits": {"memory": "64Mi"}}
            }]}
        }));
        let mut refs = Refs::default();
        refs.config_maps.insert("cm".into(), Some(BTreeMap::from([("k".into(), "v".into())])));
        refs.secrets.insert("s".into(), Some(BTreeMap::from([("pw".into(), b"sekret".to_vec())])));
        let c = &p.spec.as_ref().expect("spec").containers[0];
        let env = build(&p, c, &["PATH=/bin".into(), "HOME=/root".into()], &refs, &Node::default()).expect("builds");
        assert_eq!(
            env,
            [
                "PATH=/custom",
                "HOME=/root",
                "CM_k=v",
                "GREETING=hello $(NAME)",
                "NAME=web",
                "AGAIN=web@$(NODE)",
                "NODE=n1",
                "APP=a",
                "PASS=sekret",
                "MEM=64"
            ]
        );
    }

    #[test]
    fn services_become_link_variables_as_kubelet_writes_them() {
        let svc: Service = serde_json::from_value(json!({
            "metadata": {"name": "my-db"},
            "spec": {"clusterIP": "10.96.0.7", "ports": [{"name": "sql", "port": 5432, "protocol": "TCP"}]}
        }))
        .expect("valid");
        let headless: Service = serde_json::from_value(json!({
            "metadata": {"name": "h"}, "spec": {"clusterIP": "None", "ports": [{"port": 1}]}
        }))
        .expect("valid");
        let env: HashMap<String, String> = service_env(&[svc, headless]).into_iter().collect();
        assert_eq!(env["MY_DB_SERVICE_HOST"], "10.96.0.7");
        assert_eq!(env["MY_DB_SERVICE_PORT"], "5432");
        assert_eq!(env["MY_DB_SERVICE_PORT_SQL"], "5432");
        assert_eq!(env["MY_DB_PORT"], "tcp://10.96.0.7:5432");
        assert_eq!(env["MY_DB_PORT_5432_TCP_ADDR"], "10.96.0.7");
        assert!(!env.keys().any(|k| k.starts_with("H_")), "headless services get no variables");
    }

    #[test]
    fn missing_references_give_the_messages_kubelet_gives() {
        let p = pod(json!({
            "metadata": {"name": "web", "namespace": "ns1"},
            "spec": {"containers": [{"name": "c", "env": [
                {"name": "A", "valueFrom": {"configMapKeyRef": {"name": "cm", "key": "missing"}}}
            ]}]}
        }));
        let c = &p.spec.as_ref().expect("spec").containers[0];
        let mut refs = Refs::default();
        refs.config_maps.insert("cm".into(), None);
        assert_eq!(build(&p, c, &[], &refs, &Node::default()), Err("configmap \"cm\" not found".to_string()));
        refs.config_maps.insert("cm".into(), Some(BTreeMap::new()));
        assert_eq!(
            build(&p, c, &[], &refs, &Node::default()),
            Err("couldn't find key missing in ConfigMap ns1/cm".to_string())
        );
    }
}
