//! What a user notices of the lab's TLS + RBAC: strangers get 401, kubectl is the admin, every
//! node joined with the bootstrap token through an approved CSR and speaks as
//! `system:node:<name>`, and one node's certificate cannot change another node.

use kaji_e2e::{Lab, Value};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

/// kubectl with another identity's kubeconfig, through the lab's forwarder (the nodes' kubeconfigs
/// name the apiserver on the lab bridge, which the host does not reach).
fn kubectl_as(lab: &Lab, kubeconfig: &Path, args: &[&str]) -> Output {
    Command::new("kubectl")
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .arg("--server")
        .arg(format!("https://127.0.0.1:{}", lab.port))
        .arg("--cache-dir")
        .arg(lab.dir.join("kube-cache-security"))
        .args(args)
        .env_remove("KUBECONFIG")
        .stdin(Stdio::null())
        .output()
        .expect("kubectl runs")
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

fn node_kubeconfig(lab: &Lab, i: u8) -> PathBuf {
    lab.dir.join("nodes").join(Lab::node_name(i)).join("kubelet.conf")
}

pub fn strangers_get_401_and_kubectl_is_the_admin(lab: &Lab) {
    let anonymous = lab.api().without_identity();
    let (code, body) = anonymous.http("GET", "/api/v1/namespaces/default/pods", "application/json", "");
    assert_eq!(code, 401, "{body}");
    let status: Value = serde_json::from_str(&body).expect("a Status");
    assert_eq!((status["kind"].as_str(), status["reason"].as_str()), (Some("Status"), Some("Unauthorized")), "{body}");
    // system:public-info-viewer: the version is open to anyone.
    let (code, body) = anonymous.http("GET", "/version", "application/json", "");
    assert_eq!(code, 200, "{body}");

    let whoami = lab.kubectl(&["auth", "whoami"]);
    let rows: Vec<Vec<&str>> = whoami.lines().map(|l| l.split_whitespace().collect()).collect();
    assert_eq!(rows.first().map(Vec::as_slice), Some(&["ATTRIBUTE", "VALUE"][..]), "{whoami}");
    assert!(rows.iter().any(|r| r.as_slice() == ["Username", "kubernetes-admin"]), "{whoami}");
    assert!(rows.iter().any(|r| r.as_slice() == ["Groups", "[system:masters", "system:authenticated]"]), "{whoami}");
    let kubeconfig = std::fs::read_to_string(lab.kubeconfig()).expect("kubeconfig");
    // (Not printed: it holds the admin's key.)
    assert!(kubeconfig.contains(&format!("https://127.0.0.1:{}", lab.port)), "the kubeconfig's server");
    assert!(kubeconfig.contains("certificate-authority-data: "), "the server is verified");
    use std::os::unix::fs::PermissionsExt;
    for f in ["kubeconfig", "pki/ca.key", "bootstrap-kubelet.conf", "controller-manager.conf"] {
        let mode = std::fs::metadata(lab.dir.join(f)).expect(f).permissions().mode() & 0o777;
        assert_eq!(mode, 0o600, "{f}");
    }
}

pub fn nodes_joined_with_the_token_through_approved_csrs(lab: &Lab, nodes: u8) {
    let bootstrap = lab.dir.join("bootstrap-kubelet.conf");
    let out = kubectl_as(lab, &bootstrap, &["auth", "whoami", "-o", "jsonpath={.status.userInfo.username}"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let requester = text(&out.stdout);
    assert!(requester.starts_with("system:bootstrap:") && requester.len() == 23, "{requester}");

    let csrs = lab.kubectl(&["get", "csr"]);
    let mut lines = csrs.lines();
    let header: Vec<&str> = lines.next().unwrap_or_default().split_whitespace().collect();
    assert_eq!(header, ["NAME", "AGE", "SIGNERNAME", "REQUESTOR", "REQUESTEDDURATION", "CONDITION"], "{csrs}");
    let joined: Vec<Vec<&str>> = lines
        .map(|l| l.split_whitespace().collect::<Vec<_>>())
        .filter(|r| r.get(2) == Some(&"kubernetes.io/kube-apiserver-client-kubelet"))
        .collect();
    assert_eq!(joined.len(), usize::from(nodes), "one request per node:\n{csrs}");
    for row in &joined {
        assert!(row[0].starts_with("node-csr-"), "{csrs}");
        assert_eq!((row[3], row[5]), (requester.as_str(), "Approved,Issued"), "{csrs}");
    }

    for i in 1..=nodes {
        let name = Lab::node_name(i);
        // The agent's own kubeconfig holds the certificate the CSR flow issued it.
        let out = kubectl_as(lab, &node_kubeconfig(lab, i), &["auth", "whoami", "-o", "json"]);
        assert!(out.status.success(), "{}", text(&out.stderr));
        let who: Value = serde_json::from_slice(&out.stdout).expect("json");
        assert_eq!(
            who.pointer("/status/userInfo/username").and_then(Value::as_str),
            Some(&*format!("system:node:{name}"))
        );
        let groups = who.pointer("/status/userInfo/groups").cloned().unwrap_or_default();
        assert!(groups.as_array().into_iter().flatten().any(|g| g == "system:nodes"), "{who}");
        // Under NodeRestriction only system:node:<name> may create Node <name>: its agent did.
        let node = lab.get_json(&["node", &name, "--show-managed-fields"]);
        let managers: Vec<&str> = node["metadata"]["managedFields"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|m| m["manager"].as_str())
            .collect();
        assert!(managers.contains(&"kaji-agent"), "{name}: {managers:?}");
    }
}

pub fn a_nodes_certificate_cannot_change_another_node(lab: &Lab) {
    let (me, other) = (Lab::node_name(1), Lab::node_name(2));
    let node1 = node_kubeconfig(lab, 1);
    let patch = r#"{"metadata":{"labels":{"e2e-touched":"yes"}}}"#;
    let out = kubectl_as(lab, &node1, &["patch", "node", &other, "--type", "merge", "-p", patch]);
    assert!(!out.status.success(), "node 1 patched node 2");
    let err = text(&out.stderr);
    assert!(
        err.contains("Error from server (Forbidden)") && err.contains(&format!("nodes \"{other}\" is forbidden")),
        "{err}"
    );
    let labels = lab.get_json(&["node", &other]);
    assert!(labels.pointer("/metadata/labels/e2e-touched").is_none(), "{labels}");
    // Its own Node it may.
    let out = kubectl_as(lab, &node1, &["patch", "node", &me, "--type", "merge", "-p", patch]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    lab.kubectl(&["label", "node", &me, "e2e-touched-"]);
}

/// From a pod on every node, with the pod's own ServiceAccount token: kubectl's in-cluster config
/// (`KUBERNETES_SERVICE_HOST`, the `kubernetes` Service's ClusterIP) and
/// `https://kubernetes.default.svc` (cluster DNS) both reach the apiserver, verify it with the
/// projected `ca.crt`, and list what the account's Role allows — through the `kubernetes`
/// EndpointSlice the proxies read. The host's kubectl (a static binary) is mounted read-only.
/// The lab enforces PodSecurity baseline by default, so this test's namespace is labelled
/// privileged (an admin's choice) for the hostPath.
pub fn pods_reach_the_api_with_their_token_from_every_node(lab: &Lab, ns: &str, nodes: u8) {
    lab.kubectl(&["create", "namespace", ns]);
    lab.kubectl(&["label", "namespace", ns, "pod-security.kubernetes.io/enforce=privileged"]);
    let kubectl = std::fs::canonicalize(which_kubectl()).expect("kubectl on PATH");
    let (dir, bin) = (
        kubectl.parent().expect("dir").display().to_string(),
        kubectl.file_name().expect("name").to_string_lossy().into_owned(),
    );
    let slice = lab.get_json(&["endpointslice", "-n", "default", "kubernetes"]);
    assert_eq!(slice["metadata"]["labels"]["kubernetes.io/service-name"], "kubernetes", "{slice}");
    assert_eq!(slice["ports"][0]["name"], "https", "{slice}");
    for obj in [
        serde_json::json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "lister", "namespace": ns}}),
        serde_json::json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role", "metadata": {"name": "pod-lister", "namespace": ns},
            "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["list"]}]}),
        serde_json::json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding", "metadata": {"name": "pod-lister", "namespace": ns},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "pod-lister"},
            "subjects": [{"kind": "ServiceAccount", "name": "lister", "namespace": ns}]}),
    ] {
        lab.apply(&obj);
    }
    let script = format!(
        "k=/kubectl/{bin}; sa=/var/run/secrets/kubernetes.io/serviceaccount; for i in $(seq 1 30); do if $k get pods -o name >/tmp/a 2>/tmp/e && \
         $k --server https://kubernetes.default.svc --token \"$(cat $sa/token)\" --certificate-authority $sa/ca.crt \
         get pods -o name >/tmp/b 2>>/tmp/e; then \
         echo \"host=$KUBERNETES_SERVICE_HOST\"; cat /tmp/a /tmp/b; $k get pods -n default -o name 2>&1; exit 0; fi; sleep 1; done; cat /tmp/e; exit 1"
    );
    let names: Vec<String> = (1..=nodes).map(|i| format!("api-client-{i}")).collect();
    for (i, name) in (1..=nodes).zip(&names) {
        lab.apply(&serde_json::json!({
            "apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": ns},
            "spec": {"nodeName": Lab::node_name(i), "serviceAccountName": "lister", "restartPolicy": "Never",
                     "terminationGracePeriodSeconds": 1,
                     "volumes": [{"name": "kubectl", "hostPath": {"path": dir, "type": "Directory"}}],
                     "containers": [{"name": "c", "image": "kaji.local/busybox:lab", "command": ["sh", "-c", script],
                                     "volumeMounts": [{"name": "kubectl", "mountPath": "/kubectl", "readOnly": true}]}]}
        }));
    }
    for name in &names {
        let pod = kaji_e2e::wait_for(&format!("{name} finished"), std::time::Duration::from_secs(120), || {
            let p = lab.get_json(&["pod", "-n", ns, name]);
            match p["status"]["phase"].as_str() {
                Some("Succeeded" | "Failed") => Ok(p),
                other => Err(format!("{other:?}")),
            }
        });
        let logs = lab.kubectl(&["logs", "-n", ns, name]);
        assert_eq!(pod["status"]["phase"], "Succeeded", "{name} could not list pods with its token: {logs}");
        assert!(logs.contains("host=10.96.0.1"), "{logs}");
        assert_eq!(logs.matches(&format!("pod/{name}\n")).count(), 2, "both addresses list the namespace: {logs}");
        assert!(
            logs.contains("pods is forbidden: User \"system:serviceaccount:")
                && logs.contains("cannot list resource \"pods\" in API group \"\" in the namespace \"default\""),
            "the Role's limit holds: {logs}"
        );
    }
    lab.kubectl(&["delete", "namespace", ns, "--wait=false"]);
}

/// `kaji lab` enforces PodSecurity baseline in namespaces that say nothing (deploy/admission.yaml):
/// a pod mounting the node's `/` is refused with Kubernetes' message, a Deployment of such pods is
/// created with kubectl's `Warning:`, and an ordinary pod passes.
pub fn baseline_pod_security_is_enforced_by_default(lab: &Lab, ns: &str) {
    let pod = |name: &str, host: bool| {
        let volumes =
            if host { serde_json::json!([{"name": "root", "hostPath": {"path": "/"}}]) } else { serde_json::json!([]) };
        serde_json::json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": ns},
            "spec": {"volumes": volumes, "containers": [{"name": "c", "image": "kaji.local/busybox:lab", "command": ["true"]}]}})
    };
    let out = lab.kubectl_output(&["create", "-f", "-"], Some(&pod("host-root", true).to_string()));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "a hostPath pod was admitted under the default baseline: {err}");
    assert!(
        err.contains("pods \"host-root\" is forbidden: violates PodSecurity \"baseline:latest\": hostPath volumes (volume \"root\")"),
        "{err}"
    );
    let gone = lab.kubectl_output(&["get", "pod", "-n", ns, "host-root"], None);
    assert!(!gone.status.success(), "nothing was stored");
    let deploy = serde_json::json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "host-root", "namespace": ns},
        "spec": {"replicas": 0, "selector": {"matchLabels": {"app": "host-root"}},
                 "template": {"metadata": {"labels": {"app": "host-root"}}, "spec": pod("x", true)["spec"].clone()}}});
    let out = lab.kubectl_output(&["create", "-f", "-"], Some(&deploy.to_string()));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(
        err.contains("Warning: would violate PodSecurity \"baseline:latest\": hostPath volumes (volume \"root\")"),
        "{err}"
    );
    lab.kubectl(&["delete", "deployment", "-n", ns, "host-root"]);
    let out = lab.kubectl_output(&["create", "-f", "-"], Some(&pod("plain", false).to_string()));
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    lab.kubectl(&["delete", "pod", "-n", ns, "plain", "--wait=false"]);
}

fn which_kubectl() -> PathBuf {
    std::env::var_os("PATH")
        .into_iter()
        .flat_map(|p| std::env::split_paths(&p).collect::<Vec<_>>())
        .map(|d| d.join("kubectl"))
        .find(|p| p.is_file())
        .expect("kubectl on PATH")
}
