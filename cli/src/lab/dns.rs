//! The lab's cluster DNS, deployed the way kubeadm deploys CoreDNS: Deployment `kaji-dns`
//! (2 replicas, spread over nodes, dnsPolicy Default so it forwards to the node's resolver)
//! behind Service `kube-dns` at 10.96.0.10 (dns/dns-tcp on 53, metrics on 9153) in kube-system,
//! with its ServiceAccount and ClusterRole `system:kaji-dns`. Its image holds the kaji-dns binary
//! built beside `kaji` and the shared libraries it links (found with ldd), pushed to the lab's
//! registry.

use super::demo::create_or_keep;
use super::oci;
use super::procs;
use super::topology::{CLUSTER_DNS, CLUSTER_DOMAIN, REGISTRY};
use anyhow::{bail, Context, Result};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Service, ServiceAccount};
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding};
use kube::api::Api;
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

pub const NAMESPACE: &str = "kube-system";
pub const NAME: &str = "kaji-dns";
/// The image's name in the lab's registry.
pub const IMAGE: &str = "kaji/dns:lab";
pub const REPLICAS: i32 = 2;
const BINARY: &str = "kaji-dns";

/// The absolute library paths in `ldd` output (`name => /path (addr)` and `/path (addr)` lines);
/// the vDSO has no file and is skipped.
pub fn ldd_paths(output: &str) -> Vec<PathBuf> {
    output
        .lines()
        .filter_map(|l| {
            let l = l.trim();
            let path = match l.split_once("=>") {
                Some((_, rest)) => rest.trim(),
                None => l,
            };
            let path = path.split_whitespace().next()?;
            path.starts_with('/').then(|| PathBuf::from(path))
        })
        .collect()
}

/// The image's root filesystem: `/kaji-dns` and each library at its own path (symlinks
/// followed, so the loader finds the file under the name the binary asks for).
pub fn rootfs(root: &Path) -> Result<()> {
    let binary = procs::sibling_binary(BINARY)?;
    let _ = std::fs::remove_dir_all(root);
    for d in ["etc", "tmp"] {
        std::fs::create_dir_all(root.join(d)).with_context(|| format!("cannot create {}", root.join(d).display()))?;
    }
    std::fs::copy(&binary, root.join(BINARY)).with_context(|| format!("cannot copy {}", binary.display()))?;
    let ldd = std::process::Command::new("ldd").arg(&binary).output().context("ldd (libc-bin) is missing")?;
    if !ldd.status.success() {
        bail!("ldd {}: {}", binary.display(), String::from_utf8_lossy(&ldd.stderr).trim());
    }
    for lib in ldd_paths(&String::from_utf8_lossy(&ldd.stdout)) {
        let rel = lib.strip_prefix("/").unwrap_or(&lib);
        let to = root.join(rel);
        if let Some(parent) = to.parent() {
            std::fs::create_dir_all(parent)?;
        }
        std::fs::copy(&lib, &to).with_context(|| format!("cannot copy {}", lib.display()))?;
    }
    std::fs::write(root.join("etc/passwd"), "root:x:0:0:root:/:/kaji-dns\n")?;
    std::fs::write(root.join("etc/group"), "root:x:0:\n")?;
    Ok(())
}

/// The image of the kaji-dns binary beside `kaji`.
pub fn image(root: &Path) -> Result<oci::Upload> {
    rootfs(root)?;
    let cmd = format!("/{BINARY}");
    let upload = oci::from_rootfs(root, IMAGE, &[cmd.as_str()]);
    let _ = std::fs::remove_dir_all(root);
    upload
}

/// The objects, in the order they are created: ServiceAccount, ClusterRole, ClusterRoleBinding,
/// Service, Deployment. `master` is how the pods reach the apiserver(s).
pub fn objects(master: &str) -> Vec<Value> {
    let labels = json!({"k8s-app": "kube-dns"});
    let service_account = json!({
        "apiVersion": "v1", "kind": "ServiceAccount",
        "metadata": {"name": NAME, "namespace": NAMESPACE},
    });
    let role_name = format!("system:{NAME}");
    let bootstrapping = json!({"kubernetes.io/bootstrapping": "rbac-defaults"});
    // CoreDNS's system:coredns rules: what its kubernetes plugin watches.
    let role = json!({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
        "metadata": {"name": role_name, "labels": bootstrapping},
        "rules": [
            {"apiGroups": [""], "resources": ["endpoints", "services", "pods", "namespaces"], "verbs": ["list", "watch"]},
            {"apiGroups": ["discovery.k8s.io"], "resources": ["endpointslices"], "verbs": ["list", "watch"]},
        ],
    });
    let binding = json!({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
        "metadata": {"name": role_name, "labels": bootstrapping},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role_name},
        "subjects": [{"kind": "ServiceAccount", "name": NAME, "namespace": NAMESPACE}],
    });
    let service = json!({
        "apiVersion": "v1", "kind": "Service",
        "metadata": {
            "name": "kube-dns", "namespace": NAMESPACE,
            "labels": {"k8s-app": "kube-dns", "kubernetes.io/name": "kaji-dns"},
            "annotations": {"prometheus.io/port": "9153", "prometheus.io/scrape": "true"},
        },
        "spec": {
            "selector": labels, "clusterIP": CLUSTER_DNS,
            "ports": [
                {"name": "dns", "port": 53, "protocol": "UDP", "targetPort": 53},
                {"name": "dns-tcp", "port": 53, "protocol": "TCP", "targetPort": 53},
                {"name": "metrics", "port": 9153, "protocol": "TCP", "targetPort": 9153},
            ],
        },
    });
    let probe = |path: &str| json!({"httpGet": {"path": path, "port": 9153}, "periodSeconds": 10, "timeoutSeconds": 5});
    let container = json!({
        "name": NAME,
        "image": format!("{REGISTRY}/{IMAGE}"),
        "imagePullPolicy": "IfNotPresent",
        // The image has a Cmd only: args alone would replace it.
        "command": [format!("/{BINARY}")],
        "args": ["--master", master, "--cluster-domain", CLUSTER_DOMAIN, "--listen", "0.0.0.0:53",
                 "--metrics-address", "0.0.0.0:9153", "--lameduck", "5s"],
        "ports": [
            {"name": "dns", "containerPort": 53, "protocol": "UDP"},
            {"name": "dns-tcp", "containerPort": 53, "protocol": "TCP"},
            {"name": "metrics", "containerPort": 9153, "protocol": "TCP"},
        ],
        "resources": {"limits": {"memory": "170Mi"}, "requests": {"cpu": "100m", "memory": "70Mi"}},
        "livenessProbe": probe("/healthz"),
        "readinessProbe": probe("/readyz"),
    });
    let pod = json!({
        "serviceAccountName": NAME,
        "priorityClassName": "system-cluster-critical",
        // The node's resolver is its upstream, as CoreDNS's `forward . /etc/resolv.conf`.
        "dnsPolicy": "Default",
        "terminationGracePeriodSeconds": 10,
        "topologySpreadConstraints": [{
            "maxSkew": 1, "topologyKey": "kubernetes.io/hostname",
            "whenUnsatisfiable": "ScheduleAnyway", "labelSelector": {"matchLabels": labels},
        }],
        "containers": [container],
    });
    let deployment = json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": NAME, "namespace": NAMESPACE, "labels": labels},
        "spec": {
            "replicas": REPLICAS,
            "selector": {"matchLabels": labels},
            "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 1}},
            "template": {"metadata": {"labels": labels}, "spec": pod},
        },
    });
    vec![service_account, role, binding, service, deployment]
}

/// Creates the objects (those that exist are kept).
pub async fn apply(c: &kube::Client, master: &str) -> Result<()> {
    let objects = objects(master);
    let [sa, role, binding, svc, deploy] = <[Value; 5]>::try_from(objects).map_err(|_| anyhow::anyhow!("objects"))?;
    create_or_keep(Api::<ServiceAccount>::namespaced(c.clone(), NAMESPACE), serde_json::from_value(sa)?).await?;
    create_or_keep(Api::<ClusterRole>::all(c.clone()), serde_json::from_value(role)?).await?;
    create_or_keep(Api::<ClusterRoleBinding>::all(c.clone()), serde_json::from_value(binding)?).await?;
    create_or_keep(Api::<Service>::namespaced(c.clone(), NAMESPACE), serde_json::from_value(svc)?).await?;
    create_or_keep(Api::<Deployment>::namespaced(c.clone(), NAMESPACE), serde_json::from_value(deploy)?).await
}

/// Waits until every replica of the Deployment is ready (its pods answer /readyz: caches synced).
pub async fn wait_ready(c: &kube::Client, timeout: Duration) -> Result<()> {
    let api = Api::<Deployment>::namespaced(c.clone(), NAMESPACE);
    let deadline = Instant::now() + timeout;
    loop {
        let ready = api.get(NAME).await?.status.and_then(|s| s.ready_replicas).unwrap_or(0);
        if ready >= REPLICAS {
            return Ok(());
        }
        if Instant::now() > deadline {
            bail!(
                "after {}s {ready} of {REPLICAS} kaji-dns pods are ready: `kubectl describe pods -n {NAMESPACE} -l k8s-app=kube-dns` says why",
                timeout.as_secs()
            );
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
}

/// What `up` prints for the deploy step.
pub fn describe() -> String {
    format!(
        "deploying cluster DNS ({NAMESPACE}: deployment {NAME} x{REPLICAS}, service kube-dns {CLUSTER_DNS}, domain {CLUSTER_DOMAIN})"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ldd_output_gives_the_library_files() {
        let out = "\tlinux-vdso.so.1 (0x00007ffd)\n\tlibgcc_s.so.1 => /lib/x86_64-linux-gnu/libgcc_s.so.1 (0x7f)\n\tlibc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x7f)\n\t/lib64/ld-linux-x86-64.so.2 (0x7f)\n";
        assert_eq!(
            ldd_paths(out),
            [
                PathBuf::from("/lib/x86_64-linux-gnu/libgcc_s.so.1"),
                PathBuf::from("/lib/x86_64-linux-gnu/libc.so.6"),
                PathBuf::from("/lib64/ld-linux-x86-64.so.2"),
            ]
        );
        assert!(ldd_paths("\tnot a dynamic executable\n").is_empty());
    }

    #[test]
    fn the_objects_are_what_kubeadm_creates_for_coredns_and_valid() {
        let objects = objects("https://172.30.0.1:7001");
        let svc: Service = serde_json::from_value(objects[3].clone()).expect("a valid Service");
        let spec = svc.spec.expect("spec");
        assert_eq!(spec.cluster_ip.as_deref(), Some("10.96.0.10"));
        let ports: Vec<(Option<&str>, i32, Option<&str>)> =
            spec.ports.iter().flatten().map(|p| (p.name.as_deref(), p.port, p.protocol.as_deref())).collect();
        assert_eq!(
            ports,
            [(Some("dns"), 53, Some("UDP")), (Some("dns-tcp"), 53, Some("TCP")), (Some("metrics"), 9153, Some("TCP"))]
        );
        let d: Deployment = serde_json::from_value(objects[4].clone()).expect("a valid Deployment");
        let spec = d.spec;
        assert_eq!(spec.replicas, Some(2));
        let pod = spec.template.spec.expect("pod spec");
        assert_eq!(pod.dns_policy.as_deref(), Some("Default"), "forwards to the node's resolver");
        assert_eq!(pod.service_account_name.as_deref(), Some("kaji-dns"));
        let c = &pod.containers[0];
        assert_eq!(c.image.as_deref(), Some("172.30.0.1:5000/kaji/dns:lab"));
        assert!(c.args.iter().flatten().any(|a| a == "https://172.30.0.1:7001"));
        assert_eq!(
            c.readiness_probe.as_ref().and_then(|p| p.http_get.as_ref()).map(|g| g.path.as_deref()),
            Some(Some("/readyz"))
        );
        let binding: ClusterRoleBinding = serde_json::from_value(objects[2].clone()).expect("a valid binding");
        assert_eq!(binding.role_ref.name, "system:kaji-dns");
        let role: ClusterRole = serde_json::from_value(objects[1].clone()).expect("a valid role");
        let rules = role.rules.expect("rules");
        assert!(rules.iter().any(|r| r.resources.iter().flatten().any(|x| x == "endpointslices")));
        let _: ServiceAccount = serde_json::from_value(objects[0].clone()).expect("a valid ServiceAccount");
    }
}
