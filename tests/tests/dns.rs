//! Cluster DNS on a real 2-node `kaji lab`: kaji-dns deployed by `kaji lab up` behind kube-dns
//! (10.96.0.10), asked from busybox pods the way users debug DNS (`nslookup`, `wget`), with the
//! lab's dnsmasq as the nodes' upstream resolver (nothing leaves the lab's namespaces). Needs
//! root; fails when a requirement is missing.

use kaji_e2e::{host_network_snapshot, json, wait_for, Lab, Value};
use std::time::Duration;

const NODES: u8 = 2;
const IMAGE: &str = "kaji.local/busybox:lab";
/// The namespace of the client, of ClusterIP Service `web` and of the late Service.
const NS: &str = "dns-e2e";
/// The namespace of headless Service `web` and its pods `web-0`, `web-1` (as a StatefulSet
/// makes them: hostname + subdomain).
const STS: &str = "dns-sts";
const WAIT: Duration = Duration::from_secs(120);

#[test]
fn cluster_dns_on_a_lab() {
    kaji_e2e::require_lab_requirements();
    let host_before = host_network_snapshot();
    let mut lab = Lab::up(NODES);
    up_deploys_dns_like_kubeadm_deploys_coredns(&lab);
    setup(&lab);
    pods_get_the_cluster_resolver(&lab);
    service_names_resolve_short_and_full(&lab);
    a_service_answers_by_its_name(&lab);
    srv_records_name_the_port(&lab);
    addresses_resolve_back_to_service_names(&lab);
    unknown_cluster_names_are_nxdomain(&lab);
    headless_pods_resolve_by_hostname_and_subdomain(&lab);
    names_outside_the_cluster_go_to_the_nodes_resolver(&lab);
    a_new_service_resolves_shortly_after_it_is_created(&lab);
    metrics_count_the_queries(&lab);

    let down = lab.down();
    let report = String::from_utf8_lossy(&down.stderr);
    assert!(down.status.success(), "kaji lab down failed:\n{report}");
    assert!(report.contains("checking that nothing of the lab is left ... done"), "{report}");
    assert_eq!(host_network_snapshot(), host_before, "the host's network namespace changed");
}

fn up_deploys_dns_like_kubeadm_deploys_coredns(lab: &Lab) {
    for want in [
        "starting dnsmasq in",
        "pushing it to the registry as 172.30.0.1:5000/kaji/dns:lab ... done",
        "deploying cluster DNS (kube-system: deployment kaji-dns x2, service kube-dns 10.96.0.10, domain cluster.local) ... done",
        "waiting for cluster DNS (2 kaji-dns pods ready) ... done",
    ] {
        assert!(lab.progress.contains(want), "progress lacks {want:?}:\n{}", lab.progress);
    }
    let svc = lab.get_json(&["service", "-n", "kube-system", "kube-dns"]);
    assert_eq!(svc["spec"]["clusterIP"], "10.96.0.10");
    let ports: Vec<(String, i64, String)> = svc["spec"]["ports"]
        .as_array()
        .expect("ports")
        .iter()
        .map(|p| (s(&p["name"]), p["port"].as_i64().unwrap_or(0), s(&p["protocol"])))
        .collect();
    assert_eq!(
        ports,
        [
            ("dns".into(), 53, "UDP".into()),
            ("dns-tcp".into(), 53, "TCP".into()),
            ("metrics".into(), 9153, "TCP".into())
        ]
    );
    let pods = lab.get_json(&["pods", "-n", "kube-system", "-l", "k8s-app=kube-dns"]);
    let nodes: std::collections::BTreeSet<String> =
        items(&pods).iter().map(|p| s(&p["spec"]["nodeName"])).filter(|n| !n.is_empty()).collect();
    assert_eq!(nodes.len(), 2, "the two replicas are spread over the nodes: {nodes:?}");
}

fn s(v: &Value) -> String {
    v.as_str().unwrap_or_default().to_string()
}

fn items(list: &Value) -> Vec<Value> {
    list["items"].as_array().cloned().unwrap_or_default()
}

fn pod(ns: &str, name: &str, labels: Value, extra: Value, script: &str) -> Value {
    let mut spec = json!({
        "terminationGracePeriodSeconds": 1,
        "containers": [{"name": "main", "image": IMAGE, "command": ["sh", "-c", script],
                        "ports": [{"name": "http", "containerPort": 8080}]}],
    });
    if let (Some(spec), Some(extra)) = (spec.as_object_mut(), extra.as_object()) {
        spec.extend(extra.clone());
    }
    json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": ns, "labels": labels}, "spec": spec})
}

const WEB: &str =
    r#"mkdir -p /srv && echo "hello from $(hostname)" > /srv/index.html && exec httpd -f -p 8080 -h /srv"#;

fn setup(lab: &Lab) {
    lab.kubectl(&["create", "namespace", NS]);
    lab.kubectl(&["create", "namespace", STS]);
    lab.apply(&json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "web", "namespace": NS},
        "spec": {"selector": {"app": "web"}, "ports": [{"name": "http", "port": 80, "targetPort": "http"}]}}));
    lab.apply(&pod(NS, "web", json!({"app": "web"}), json!({}), WEB));
    lab.apply(&pod(NS, "client", json!({"app": "client"}), json!({}), "exec sleep 100000"));
    lab.apply(&json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "web", "namespace": STS},
        "spec": {"clusterIP": "None", "selector": {"app": "web"}, "ports": [{"name": "http", "port": 8080}]}}));
    for name in ["web-0", "web-1"] {
        let extra = json!({"hostname": name, "subdomain": "web"});
        lab.apply(&pod(STS, name, json!({"app": "web"}), extra, WEB));
    }
    for (ns, name) in [(NS, "web"), (NS, "client"), (STS, "web-0"), (STS, "web-1")] {
        let out = lab.kubectl_output(
            &["wait", "-n", ns, "--for=condition=Ready", &format!("pod/{name}"), "--timeout=120s"],
            None,
        );
        assert!(out.status.success(), "pod {ns}/{name} not ready: {}", String::from_utf8_lossy(&out.stderr));
    }
}

/// `kubectl exec -n <ns> <pod> -- sh -c <cmd>`: (success, stdout + stderr), without kubectl's own
/// client-go log lines: its WebSocket reader logs "Unknown stream id 1, discarding message" when the
/// server's stream-open frame (Kubernetes sends one too) beats its stream setup — not the command's.
fn exec(lab: &Lab, ns: &str, pod: &str, cmd: &str) -> (bool, String) {
    let out = lab.kubectl_output(&["exec", "-n", ns, pod, "--", "sh", "-c", cmd], None);
    let stderr: String = String::from_utf8_lossy(&out.stderr)
        .lines()
        .filter(|l| !l.contains("Unknown stream id"))
        .map(|l| format!("{l}\n"))
        .collect();
    (out.status.success(), format!("{}{stderr}", String::from_utf8_lossy(&out.stdout)))
}

/// The addresses busybox nslookup printed for the name asked (after the `Name:` line).
fn answered(out: &str) -> Vec<String> {
    let mut seen_name = false;
    let mut addrs = Vec::new();
    for l in out.lines() {
        if l.starts_with("Name:") {
            seen_name = true;
        } else if seen_name {
            if let Some(a) = l.strip_prefix("Address:") {
                addrs.push(a.trim().to_string());
            }
        }
    }
    addrs.sort();
    addrs.dedup();
    addrs
}

/// nslookup from the client until it prints `want` (DNS follows the API a moment behind).
fn lookup(lab: &Lab, ns: &str, pod: &str, query: &str, want: &[String]) {
    let mut want = want.to_vec();
    want.sort();
    wait_for(&format!("nslookup {query} in {ns}/{pod} answers {want:?}"), WAIT, || {
        let (_, out) = exec(lab, ns, pod, &format!("nslookup {query}"));
        if answered(&out) == want {
            Ok(())
        } else {
            Err(out)
        }
    });
}

fn cluster_ip(lab: &Lab, ns: &str, name: &str) -> String {
    s(&lab.get_json(&["service", "-n", ns, name])["spec"]["clusterIP"])
}

fn pod_ip(lab: &Lab, ns: &str, name: &str) -> String {
    s(&lab.get_json(&["pod", "-n", ns, name])["status"]["podIP"])
}

fn pods_get_the_cluster_resolver(lab: &Lab) {
    let (ok, conf) = exec(lab, NS, "client", "cat /etc/resolv.conf");
    assert!(ok, "{conf}");
    assert_eq!(
        conf,
        "search dns-e2e.svc.cluster.local svc.cluster.local cluster.local kaji.lab\nnameserver 10.96.0.10\noptions ndots:5\n",
        "kubelet's form: the cluster's search path, then the node's"
    );
    let dns_pod = items(&lab.get_json(&["pods", "-n", "kube-system", "-l", "k8s-app=kube-dns"]))[0].clone();
    let (ok, conf) = exec(lab, "kube-system", &s(&dns_pod["metadata"]["name"]), "cat /etc/resolv.conf");
    // The kaji-dns image has no shell: a failed exec is fine, but if it ran it shows the node's.
    if ok {
        assert_eq!(conf, "search kaji.lab\nnameserver 172.30.0.1\n", "dnsPolicy Default: the node's resolver");
    }
}

/// busybox's nslookup walks the search path only for names without a dot; names with dots are
/// checked with wget, which resolves through libc (search path and ndots:5, as applications do).
fn service_names_resolve_short_and_full(lab: &Lab) {
    let ip = cluster_ip(lab, NS, "web");
    lookup(lab, NS, "client", "web", std::slice::from_ref(&ip));
    lookup(lab, NS, "client", "web.dns-e2e.svc.cluster.local", std::slice::from_ref(&ip));
    lookup(lab, NS, "client", "kubernetes.default.svc.cluster.local", &["10.96.0.1".to_string()]);
    lookup(lab, NS, "client", "kube-dns.kube-system.svc.cluster.local", &["10.96.0.10".to_string()]);
}

/// busybox's `wget -T` segfaults (machine-facts.md): `timeout 5 wget` bounds each try instead.
fn a_service_answers_by_its_name(lab: &Lab) {
    wait_for("wget http://web.dns-e2e.svc.cluster.local", WAIT, || {
        let (ok, out) = exec(lab, NS, "client", "timeout 5 wget -q -O- http://web.dns-e2e.svc.cluster.local/");
        if ok && out.contains("hello from web") {
            Ok(())
        } else {
            Err(out)
        }
    });
    for url in ["http://web/", "http://web.dns-e2e/", "http://web.dns-e2e.svc/"] {
        let (ok, out) = exec(lab, NS, "client", &format!("timeout 5 wget -q -O- {url}"));
        assert!(ok && out.contains("hello from web"), "{url} through the search path: {out}");
    }
}

fn srv_records_name_the_port(lab: &Lab) {
    let (_, out) = exec(lab, NS, "client", "nslookup -type=SRV _http._tcp.web.dns-e2e.svc.cluster.local");
    // busybox: `_http._tcp.web...  service = 0 100 80 web.dns-e2e.svc.cluster.local`
    assert!(out.contains("0 100 80 web.dns-e2e.svc.cluster.local"), "{out}");
    let (_, out) = exec(lab, STS, "web-0", "nslookup -type=SRV _http._tcp.web.dns-sts.svc.cluster.local");
    for host in ["web-0.web.dns-sts.svc.cluster.local", "web-1.web.dns-sts.svc.cluster.local"] {
        assert!(out.contains(&format!("8080 {host}")), "headless SRV names each endpoint ({host}): {out}");
    }
}

fn addresses_resolve_back_to_service_names(lab: &Lab) {
    let ip = cluster_ip(lab, NS, "web");
    let (_, out) = exec(lab, NS, "client", &format!("nslookup {ip}"));
    assert!(out.contains("name = web.dns-e2e.svc.cluster.local"), "PTR of {ip}: {out}");
}

fn unknown_cluster_names_are_nxdomain(lab: &Lab) {
    for name in ["nope.dns-e2e.svc.cluster.local", "web.nowhere.svc.cluster.local"] {
        let (ok, out) = exec(lab, NS, "client", &format!("nslookup {name}"));
        assert!(!ok && out.contains("NXDOMAIN"), "{name}: {out}");
    }
}

fn headless_pods_resolve_by_hostname_and_subdomain(lab: &Lab) {
    let (ip0, ip1) = (pod_ip(lab, STS, "web-0"), pod_ip(lab, STS, "web-1"));
    let slices = lab.get_json(&["endpointslices", "-n", STS, "-l", "kubernetes.io/service-name=web"]);
    let hostnames: Vec<String> = items(&slices)
        .iter()
        .flat_map(|sl| sl["endpoints"].as_array().cloned().unwrap_or_default())
        .map(|e| s(&e["hostname"]))
        .collect();
    assert!(hostnames.contains(&"web-0".to_string()), "the slice carries the pods' hostnames: {hostnames:?}");
    lookup(lab, NS, "client", "web-0.web.dns-sts.svc.cluster.local", std::slice::from_ref(&ip0));
    lookup(lab, NS, "client", "web-1.web.dns-sts.svc.cluster.local", std::slice::from_ref(&ip1));
    lookup(lab, NS, "client", "web.dns-sts.svc.cluster.local", &[ip0, ip1]);
    // What a StatefulSet's members do: reach each other as <hostname>.<service>.
    for (from, to) in [("web-0", "web-1"), ("web-1", "web-0")] {
        let (ok, out) = exec(lab, STS, from, &format!("timeout 5 wget -q -O- http://{to}.web:8080/"));
        assert!(ok && out.contains(&format!("hello from {to}")), "{from} → {to}.web: {out}");
    }
    let (ok, out) = exec(lab, NS, "client", "timeout 5 wget -q -O- http://web-0.web.dns-sts:8080/");
    assert!(ok && out.contains("hello from web-0"), "{out}");
}

fn names_outside_the_cluster_go_to_the_nodes_resolver(lab: &Lab) {
    lookup(lab, NS, "client", "registry.kaji.lab", &["172.30.0.1".to_string()]);
    // Pod traffic leaving the cluster network is masqueraded: dnsmasq sees the node of the
    // kaji-dns replica that forwarded (the client only knows 10.96.0.10).
    let dns_nodes: Vec<String> = items(&lab.get_json(&["pods", "-n", "kube-system", "-l", "k8s-app=kube-dns"]))
        .iter()
        .map(|p| s(&p["status"]["hostIP"]))
        .collect();
    let log = std::fs::read_to_string(lab.dir.join("dns-upstream.log")).unwrap_or_default();
    assert!(
        log.lines()
            .any(|l| l.contains("query[A] registry.kaji.lab from") && dns_nodes.iter().any(|ip| l.ends_with(ip))),
        "dnsmasq was asked from a kaji-dns replica's node ({dns_nodes:?}):\n{log}"
    );
    let (ok, out) = exec(lab, NS, "client", "nslookup nothing-here.kaji.lab");
    assert!(!ok && out.contains("NXDOMAIN"), "the upstream's NXDOMAIN is passed on: {out}");
    let (ok, out) = exec(lab, NS, "client", "nslookup example.com");
    assert!(!ok, "the lab's resolver knows no other names and forwards nowhere: {out}");
    let log = std::fs::read_to_string(lab.dir.join("dns-upstream.log")).unwrap_or_default();
    assert!(log.contains("query[A] example.com from"), "it was asked (and refused):\n{log}");
}

fn a_new_service_resolves_shortly_after_it_is_created(lab: &Lab) {
    lab.apply(&json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "late", "namespace": NS},
        "spec": {"selector": {"app": "web"}, "ports": [{"port": 81, "targetPort": 8080}]}}));
    let ip = cluster_ip(lab, NS, "late");
    lookup(lab, NS, "client", "late", std::slice::from_ref(&ip));
    lab.kubectl(&["delete", "service", "-n", NS, "late"]);
    wait_for("a deleted Service is NXDOMAIN", WAIT, || {
        let (ok, out) = exec(lab, NS, "client", "nslookup late.dns-e2e.svc.cluster.local");
        if !ok && out.contains("NXDOMAIN") {
            Ok(())
        } else {
            Err(out)
        }
    });
}

fn metrics_count_the_queries(lab: &Lab) {
    let pods = items(&lab.get_json(&["pods", "-n", "kube-system", "-l", "k8s-app=kube-dns"]));
    let total: f64 = pods
        .iter()
        .map(|p| {
            let ip = s(&p["status"]["podIP"]);
            let (ok, out) = exec(lab, NS, "client", &format!("timeout 5 wget -q -O- http://{ip}:9153/metrics"));
            assert!(ok, "{out}");
            out.lines()
                .filter(|l| l.starts_with("coredns_dns_requests_total"))
                .filter_map(|l| l.rsplit(' ').next().and_then(|v| v.parse::<f64>().ok()))
                .sum::<f64>()
        })
        .sum();
    assert!(total >= 10.0, "the replicas counted the test's queries: {total}");
    let forwarded: f64 = pods
        .iter()
        .map(|p| {
            let ip = s(&p["status"]["podIP"]);
            let (_, out) = exec(lab, NS, "client", &format!("timeout 5 wget -q -O- http://{ip}:9153/metrics"));
            out.lines()
                .filter(|l| l.starts_with("coredns_forward_requests_total"))
                .filter_map(|l| l.rsplit(' ').next().and_then(|v| v.parse::<f64>().ok()))
                .sum::<f64>()
        })
        .sum();
    assert!(forwarded >= 1.0, "the names outside the cluster were forwarded: {forwarded}");
}
