//! One 3-node `kaji lab` per run (a lab takes a while on two cores), every scenario on it in
//! order, then `kaji lab down` and proof that nothing is left. Needs root; fails when a
//! requirement is missing.

#[path = "lab/security.rs"]
mod security;

use kaji_e2e::{host_network_snapshot, json, wait_for, Lab, Value};
use std::collections::{BTreeMap, BTreeSet};
use std::net::Ipv4Addr;
use std::path::Path;
use std::time::Duration;

const NODES: u8 = 3;
const IMAGE: &str = "kaji.local/busybox:lab";
const NS: &str = "e2e";

#[test]
fn three_node_lab() {
    kaji_e2e::require_lab_requirements();
    let host_before = host_network_snapshot();
    let mut lab = Lab::up(NODES);
    up_reports_each_step(&lab);
    nodes_are_ready_with_their_own_address_and_pod_cidr(&lab);
    demo_runs_one_pod_per_node_and_kubectl_reads_it(&lab);
    status_lists_every_component_and_a_second_up_is_refused(&lab);
    security::strangers_get_401_and_kubectl_is_the_admin(&lab);
    security::nodes_joined_with_the_token_through_approved_csrs(&lab, NODES);
    security::a_nodes_certificate_cannot_change_another_node(&lab);

    // `kubectl create namespace` sends a protobuf body.
    lab.kubectl(&["create", "namespace", NS]);
    let servers: Vec<Value> = (1..=NODES).map(|i| server_pod(&lab, i)).collect();
    pods_reach_each_other_across_nodes_by_pod_ip(&lab, &servers, "before");
    a_pod_reaches_another_nodes_ip(&lab);
    the_demo_service_answers_from_every_node(&lab);
    a_pod_reaches_itself_through_its_service(&lab);
    security::baseline_pod_security_is_enforced_by_default(&lab, NS);
    security::pods_reach_the_api_with_their_token_from_every_node(&lab, "e2e-api", NODES);
    a_service_spreads_over_its_backends_and_follows_a_scale_down(&lab);
    the_kaji_cli_reads_and_drives_the_lab(&lab);
    a_users_day(&lab, Client::Kubectl);
    a_users_day(&lab, Client::Kaji);
    pod_ips_are_unique_and_inside_their_nodes_cidr(&lab);
    restarting_an_agent_keeps_connectivity(&lab, &servers);
    deleting_pods_frees_their_addresses(&lab);
    nodes_pull_from_the_labs_registry_and_pushed_images_run(&lab);

    let pids: Vec<String> = std::fs::read_dir(&lab.dir)
        .expect("lab dir")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "pid"))
        .map(|p| std::fs::read_to_string(p).unwrap_or_default().trim().to_string())
        .collect();
    assert!(pids.len() >= 5 + 2 * usize::from(NODES), "pid files: {pids:?}");
    let (dir, port) = (lab.dir.clone(), lab.port);
    let down = lab.down();
    let report = String::from_utf8_lossy(&down.stderr);
    assert!(down.status.success(), "kaji lab down failed:\n{report}");
    assert!(report.contains("checking that nothing of the lab is left ... done"), "{report}");
    nothing_is_left(&dir, port, &pids);
    assert_eq!(host_network_snapshot(), host_before, "the host's network namespace changed");
}

fn up_reports_each_step(lab: &Lab) {
    let p = &lab.progress;
    for want in [
        format!("creating network namespace kaji-lab-{} (bridge br0 172.30.0.1/24) ... done", lab.port),
        format!("creating network namespace kaji-lab-{}-node-3 (eth0 172.30.0.13/24) ... done", lab.port),
        "making the lab's certificates (CA, apiserver, control plane, node serving pairs) ... done".into(),
        "creating the nodes' bootstrap token (kube-system Secret, 24h) and bootstrap kubeconfig ... done".into(),
        format!("starting kaji-apiserver in kaji-lab-{} (172.30.0.1:{}, embedded store) ... done", lab.port, lab.port),
        format!("starting the API forwarder (127.0.0.1:{} to kaji-lab-{}) ... done", lab.port, lab.port),
        "starting kaji-controller-manager in".into(),
        "starting kaji-scheduler in".into(),
        format!(
            "starting node kaji-lab-node-2 (kaji-agent, kaji-proxy in kaji-lab-{}-node-2, 172.30.0.12) ... done",
            lab.port
        ),
        "waiting for 3 node(s) to be Ready (each joins with the token) ... done".into(),
        "starting docker-registry in".into(),
        "pushing it to the registry as 172.30.0.1:5000/kaji/busybox:lab ... done".into(),
        "waiting for the demo pods, one per node ... done".into(),
    ] {
        assert!(p.contains(&want), "progress lacks {want:?}:\n{p}");
    }
}

fn pod_cidrs(lab: &Lab) -> BTreeMap<String, String> {
    let nodes = lab.get_json(&["nodes"]);
    let items = nodes["items"].as_array().cloned().unwrap_or_default();
    items.iter().map(|n| (str_at(n, "/metadata/name"), str_at(n, "/spec/podCIDR"))).collect()
}

fn str_at(v: &Value, pointer: &str) -> String {
    v.pointer(pointer).and_then(Value::as_str).unwrap_or_default().to_string()
}

fn nodes_are_ready_with_their_own_address_and_pod_cidr(lab: &Lab) {
    let nodes = lab.get_json(&["nodes"]);
    let items = nodes["items"].as_array().cloned().unwrap_or_default();
    let names: BTreeSet<String> = items.iter().map(|n| str_at(n, "/metadata/name")).collect();
    let want: BTreeSet<String> = (1..=NODES).map(Lab::node_name).collect();
    assert_eq!(names, want);
    for n in &items {
        let name = str_at(n, "/metadata/name");
        let i: u8 = name.rsplit('-').next().and_then(|s| s.parse().ok()).expect("node number");
        let ready = n["status"]["conditions"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|c| c["type"] == "Ready" && c["status"] == "True");
        assert!(ready, "{name} not Ready: {n}");
        let internal = n["status"]["addresses"].as_array().into_iter().flatten().find(|a| a["type"] == "InternalIP");
        assert_eq!(internal.map(|a| str_at(a, "/address")), Some(Lab::node_ip(i)), "{n}");
        assert!(str_at(n, "/spec/podCIDR").starts_with("10.244."), "{name} has no podCIDR: {n}");
    }
    let cidrs: BTreeSet<String> = pod_cidrs(lab).into_values().collect();
    assert_eq!(cidrs.len(), usize::from(NODES), "pod CIDRs are distinct");
}

fn demo_runs_one_pod_per_node_and_kubectl_reads_it(lab: &Lab) {
    let names = lab.kubectl(&["get", "deployment,service,replicaset", "-n", "demo", "-o", "name"]);
    assert!(names.contains("deployment.apps/hello") && names.contains("service/hello"), "{names}");
    assert!(names.contains("replicaset.apps/hello-"), "{names}");
    let pods = lab.get_json(&["pods", "-n", "demo", "-l", "app=hello"]);
    let items = pods["items"].as_array().cloned().unwrap_or_default();
    let nodes: BTreeSet<String> = items.iter().map(|p| str_at(p, "/spec/nodeName")).collect();
    assert_eq!(nodes.len(), usize::from(NODES), "one demo pod per node: {nodes:?}");
    // kubectl logs goes through the apiserver (lab namespace) to each node's agent (its own
    // namespace); the `peers` container prints a line every few seconds.
    for p in &items {
        let name = str_at(p, "/metadata/name");
        wait_for(&format!("kubectl logs of {name}"), Duration::from_secs(30), || {
            let out = lab.kubectl_output(&["logs", "-n", "demo", &name, "-c", "peers"], None);
            let text = String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
            if out.status.success() && !out.stdout.is_empty() {
                Ok(())
            } else {
                Err(text)
            }
        });
    }
    // kubectl exec takes the same path as logs, upgraded to a WebSocket: the command runs in the
    // pod's container on its node, stdin reaches it, and its exit code comes back.
    for p in &items {
        let name = str_at(p, "/metadata/name");
        let out = lab.kubectl(&["exec", "-n", "demo", &name, "-c", "web", "--", "hostname"]);
        assert_eq!(out.trim(), name, "kubectl exec hostname in {name}");
        let out = lab.kubectl_output(
            &["exec", "-i", "-n", "demo", &name, "-c", "web", "--", "sh", "-c", "read x; exit $x"],
            Some("7\n"),
        );
        assert_eq!(
            out.status.code(),
            Some(7),
            "kubectl exec exit code from {name}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

fn status_lists_every_component_and_a_second_up_is_refused(lab: &Lab) {
    let out = lab.kaji(&["status"]);
    let status = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "status: {status}{}", String::from_utf8_lossy(&out.stderr));
    let mut components =
        vec!["apiserver".to_string(), "forward".into(), "controller-manager".into(), "scheduler".into()];
    for i in 1..=NODES {
        components.push(format!("agent-{i}"));
        components.push(format!("proxy-{i}"));
    }
    for c in components {
        let line = status.lines().find(|l| l.split_whitespace().next() == Some(c.as_str()));
        assert!(line.is_some_and(|l| l.contains("running (pid")), "{c} not running:\n{status}");
    }
    assert!(status.contains(&format!("API https://127.0.0.1:{}: ready", lab.port)), "{status}");
    for i in 1..=NODES {
        assert!(status.contains(&format!("node {}", Lab::node_name(i))) && status.contains("Ready"), "{status}");
    }
    let again = lab.kaji(&["up"]);
    assert!(!again.status.success(), "a second lab on the same dir is refused");
    let logs = lab.kaji(&["logs", "agent-1"]);
    assert!(logs.status.success() && !logs.stdout.is_empty(), "kaji lab logs agent-1");
}

/// A pod pinned to node `i` serving "server-<i>" over HTTP on 8080; returns it once Running.
fn server_pod(lab: &Lab, i: u8) -> Value {
    let name = format!("server-{i}");
    lab.apply(&json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": NS, "labels": {"role": "server"}},
        "spec": {"nodeName": Lab::node_name(i), "terminationGracePeriodSeconds": 1,
                 "containers": [{"name": "httpd", "image": IMAGE, "command": ["sh", "-c",
                     format!("echo {name} > /www/index.html && exec httpd -f -p 8080 -h /www")]}]}
    }));
    wait_for(&format!("{name} running with an IP"), Duration::from_secs(90), || {
        let p = lab.get_json(&["pod", "-n", NS, &name]);
        if str_at(&p, "/status/phase") == "Running" && !str_at(&p, "/status/podIP").is_empty() {
            Ok(p)
        } else {
            Err(p["status"].to_string())
        }
    })
}

/// Runs a pod on node `node` that fetches `url` (retrying up to 30 s) and prints the answer;
/// returns (its log, the pod as it ended).
fn fetch_from(lab: &Lab, name: &str, node: u8, url: &str) -> (String, Value) {
    let script = format!(
        "for i in $(seq 1 30); do if out=$(timeout 3 wget -q -O- {url}); then echo \"$out\"; exit 0; fi; sleep 1; done; \
         echo unreachable; exit 1"
    );
    lab.apply(&json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": NS, "labels": {"role": "client"}},
        "spec": {"nodeName": Lab::node_name(node), "restartPolicy": "Never", "terminationGracePeriodSeconds": 1,
                 "containers": [{"name": "wget", "image": IMAGE, "command": ["sh", "-c", script]}]}
    }));
    let pod = wait_for(&format!("{name} finished"), Duration::from_secs(90), || {
        let p = lab.get_json(&["pod", "-n", NS, name]);
        match str_at(&p, "/status/phase").as_str() {
            "Succeeded" | "Failed" => Ok(p),
            other => Err(other.to_string()),
        }
    });
    let logs = lab.kubectl(&["logs", "-n", NS, name]);
    assert_eq!(str_at(&pod, "/status/phase"), "Succeeded", "{name} on node {node} could not fetch {url}: {logs}");
    (logs, pod)
}

fn pods_reach_each_other_across_nodes_by_pod_ip(lab: &Lab, servers: &[Value], when: &str) {
    // Each node fetches from the next node's server: a full ring over the three nodes.
    for i in 1..=NODES {
        let target = i % NODES + 1;
        let server = &servers[usize::from(target - 1)];
        let ip = str_at(server, "/status/podIP");
        let name = format!("client-{when}-{i}-to-{target}");
        let (logs, client) = fetch_from(lab, &name, i, &format!("http://{ip}:8080/"));
        assert_eq!(logs.trim(), format!("server-{target}"), "{name}");
        assert_ne!(str_at(&client, "/spec/nodeName"), str_at(server, "/spec/nodeName"));
    }
}

fn a_pod_reaches_another_nodes_ip(lab: &Lab) {
    // Node 2's agent serves its plain /healthz port on its node IP (inside node 2's namespace).
    let (logs, _) = fetch_from(lab, "client-node-ip", 1, &format!("http://{}:10248/healthz", Lab::node_ip(2)));
    assert_eq!(logs.trim(), "ok");
}

fn the_demo_service_answers_from_every_node(lab: &Lab) {
    // Each demo pod's `peers` container fetches the Service (kaji-proxy's rules in its node's
    // namespace, then the pod network); together they must have heard from every node.
    wait_for("the demo Service answering from every node", Duration::from_secs(60), || {
        let pods = lab.get_json(&["pods", "-n", "demo", "-l", "app=hello"]);
        let mut heard = BTreeSet::new();
        for p in pods["items"].as_array().into_iter().flatten() {
            let logs = lab.kubectl(&["logs", "-n", "demo", &str_at(p, "/metadata/name"), "-c", "peers"]);
            for i in 1..=NODES {
                if logs.contains(&format!(" on {}", Lab::node_name(i))) {
                    heard.insert(i);
                }
            }
        }
        if heard.len() == usize::from(NODES) {
            Ok(())
        } else {
            Err(format!("heard from nodes {heard:?}"))
        }
    });
}

fn a_pod_reaches_itself_through_its_service(lab: &Lab) {
    // The Service's only endpoint is the pod asking: DNAT sends the packet back out of the
    // bridge port it came in on, which needs hairpin mode on the pod's veth.
    lab.apply(&json!({
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": "hairpin", "namespace": NS},
        "spec": {"selector": {"role": "hairpin"}, "ports": [{"port": 80, "targetPort": 8080}]}
    }));
    let svc = lab.get_json(&["service", "-n", NS, "hairpin"]);
    let ip = str_at(&svc, "/spec/clusterIP");
    let script = format!(
        "echo hairpin > /www/index.html && httpd -p 8080 -h /www && \
         for i in $(seq 1 30); do if out=$(timeout 3 wget -q -O- http://{ip}/); then echo \"$out\"; exit 0; fi; sleep 1; done; \
         echo unreachable; exit 1"
    );
    lab.apply(&json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "hairpin", "namespace": NS, "labels": {"role": "hairpin"}},
        "spec": {"nodeName": Lab::node_name(1), "restartPolicy": "Never", "terminationGracePeriodSeconds": 1,
                 "containers": [{"name": "self", "image": IMAGE, "command": ["sh", "-c", script]}]}
    }));
    let pod = wait_for("hairpin finished", Duration::from_secs(90), || {
        let p = lab.get_json(&["pod", "-n", NS, "hairpin"]);
        match str_at(&p, "/status/phase").as_str() {
            "Succeeded" | "Failed" => Ok(p),
            other => Err(other.to_string()),
        }
    });
    let logs = lab.kubectl(&["logs", "-n", NS, "hairpin"]);
    assert_eq!(str_at(&pod, "/status/phase"), "Succeeded", "a pod could not reach itself through its Service: {logs}");
    // Earlier tries may time out ("Terminated") until the proxy has the endpoint.
    assert_eq!(logs.lines().last().map(str::trim), Some("hairpin"), "{logs}");
}

fn the_kaji_cli_reads_and_drives_the_lab(lab: &Lab) {
    // The same cluster through `kaji` instead of kubectl: a table, exec into a pod on a node,
    // logs, scale through the subresource.
    let text = |o: &std::process::Output| {
        assert!(o.status.success(), "kaji failed: {}", String::from_utf8_lossy(&o.stderr));
        String::from_utf8_lossy(&o.stdout).into_owned()
    };
    let table = text(&lab.kaji_cli(&["get", "pods", "-n", "demo", "-o", "wide"]));
    assert!(table.starts_with("NAME") && table.contains("NODE"), "{table}");
    let pod = table.lines().nth(1).and_then(|l| l.split_whitespace().next()).expect("a demo pod").to_string();
    assert_eq!(text(&lab.kaji_cli(&["exec", "-n", "demo", &pod, "-c", "web", "--", "hostname"])).trim(), pod);
    assert!(!text(&lab.kaji_cli(&["logs", "-n", "demo", &pod, "-c", "peers", "--tail", "1"])).is_empty());
    text(&lab.kaji_cli(&["scale", "deployment/backend", "-n", NS, "--replicas", "2"]));
    let spec = lab.get_json(&["deployment", "-n", NS, "backend"]);
    assert_eq!(spec.pointer("/spec/replicas").and_then(Value::as_i64), Some(2));
    let status = lab.kaji_cli(&["rollout", "status", "deployment/backend", "-n", NS, "--timeout", "90s"]);
    assert!(text(&status).contains("successfully rolled out"));
}

#[derive(Clone, Copy, Debug)]
enum Client {
    Kubectl,
    Kaji,
}

impl Client {
    fn command(self, lab: &Lab, args: &[&str]) -> std::process::Command {
        match self {
            Client::Kubectl => lab.kubectl_command(args),
            Client::Kaji => lab.kaji_cli_command(args),
        }
    }

    /// Runs to the end; stdout, or a panic with stderr when it fails.
    fn run(self, lab: &Lab, args: &[&str], stdin: Option<&str>) -> String {
        use std::io::Write as _;
        use std::process::Stdio;
        let mut c = self.command(lab, args);
        c.stdin(if stdin.is_some() { Stdio::piped() } else { Stdio::null() })
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = c.spawn().expect("client runs");
        if let Some(input) = stdin {
            child.stdin.take().expect("stdin").write_all(input.as_bytes()).expect("write stdin");
        }
        let out = child.wait_with_output().expect("client finishes");
        assert!(out.status.success(), "{self:?} {args:?} failed: {}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8_lossy(&out.stdout).into_owned()
    }
}

fn day_manifest(app: &str, image: &str, env: &[(&str, &str)]) -> String {
    let env: Vec<Value> = env.iter().map(|(k, v)| json!({"name": k, "value": v})).collect();
    let deploy = json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": app, "namespace": NS},
        "spec": {"replicas": 2, "selector": {"matchLabels": {"app": app}},
                 "template": {"metadata": {"labels": {"app": app}},
                              "spec": {"terminationGracePeriodSeconds": 1,
                                       "containers": [{"name": "app", "image": image, "env": env, "command": ["sh", "-c",
                                           "while true; do echo \"tick A=$A B=$B\"; sleep 1; done"]}]}}}
    });
    let svc = json!({
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": app, "namespace": NS},
        "spec": {"selector": {"app": app}, "ports": [{"port": 80, "targetPort": 8080}]}
    });
    // YAML documents written in flow style (a leading comment keeps kubectl from reading a JSON stream).
    format!("# {app}\n{deploy}\n---\n{svc}\n")
}

/// Issue 9's user's day, with kubectl and then with kaji: apply, apply a changed manifest
/// (image, env, a removed env var) and follow the rollout, scale, describe with events, logs -f
/// streaming, exec with its exit code, delete -f removing everything down to the pods.
fn a_users_day(lab: &Lab, client: Client) {
    let app = match client {
        Client::Kubectl => "day-kubectl",
        Client::Kaji => "day-kaji",
    };
    let dir = lab.dir.join(app);
    std::fs::create_dir_all(&dir).expect("manifest dir");
    let v1 = dir.join("v1.yaml");
    std::fs::write(&v1, day_manifest(app, IMAGE, &[("A", "1"), ("B", "2")])).expect("write v1");
    let v1s = v1.to_string_lossy().to_string();
    let out = client.run(lab, &["apply", "-f", &v1s], None);
    assert!(out.contains("created"), "{client:?} apply: {out}");
    let deploy = format!("deployment/{app}");
    client.run(lab, &["rollout", "status", &deploy, "-n", NS, "--timeout", "90s"], None);

    // The changed manifest from stdin: another image reference, A changed, B removed.
    let v2 = day_manifest(app, "172.30.0.1:5000/kaji/busybox:lab", &[("A", "2")]);
    let out = client.run(lab, &["apply", "-f", "-"], Some(&v2));
    assert!(out.contains("configured"), "{client:?} apply of the changed manifest: {out}");
    let out = client.run(lab, &["rollout", "status", &deploy, "-n", NS, "--timeout", "120s"], None);
    assert!(out.contains("successfully rolled out"), "{client:?} rollout status: {out}");
    let d = lab.get_json(&["deployment", "-n", NS, app]);
    let c = &d["spec"]["template"]["spec"]["containers"][0];
    assert_eq!(str_at(c, "/image"), "172.30.0.1:5000/kaji/busybox:lab");
    assert_eq!(c["env"], json!([{"name": "A", "value": "2"}]), "{client:?}: B is gone from the template");

    client.run(lab, &["scale", &deploy, "-n", NS, "--replicas", "3"], None);
    client.run(lab, &["rollout", "status", &deploy, "-n", NS, "--timeout", "90s"], None);
    let pods = lab.get_json(&["pods", "-n", NS, "-l", &format!("app={app}")]);
    let running: Vec<&Value> = pods["items"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|p| str_at(p, "/status/phase") == "Running" && p.pointer("/metadata/deletionTimestamp").is_none())
        .collect();
    assert!(running.len() >= 3, "{client:?}: 3 pods after scale: {}", running.len());
    let describe = client.run(lab, &["describe", "deployment", app, "-n", NS], None);
    assert!(describe.contains("ScalingReplicaSet"), "{client:?} describe shows the events: {describe}");

    // logs -f streams: two new lines arrive while the command keeps running.
    let pod = str_at(running[0], "/metadata/name");
    let mut follow = client.command(lab, &["logs", "-f", "-n", NS, &pod]);
    follow.stdout(std::process::Stdio::piped()).stderr(std::process::Stdio::null());
    let mut child = follow.spawn().expect("logs -f runs");
    let stdout = child.stdout.take().expect("stdout");
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        use std::io::BufRead as _;
        for line in std::io::BufReader::new(stdout).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let mut lines = Vec::new();
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while lines.len() < 3 && std::time::Instant::now() < deadline {
        if let Ok(l) = rx.recv_timeout(Duration::from_secs(1)) {
            lines.push(l);
        }
    }
    assert!(child.try_wait().expect("try_wait").is_none(), "{client:?} logs -f is still following");
    let _ = child.kill();
    let _ = child.wait();
    assert!(lines.len() >= 3 && lines.iter().all(|l| l == "tick A=2 B="), "{client:?} logs -f: {lines:?}");

    let out = client.command(lab, &["exec", "-n", NS, &pod, "--", "sh", "-c", "exit 4"]).output().expect("exec runs");
    assert_eq!(out.status.code(), Some(4), "{client:?} exec exit code");

    let v2_path = dir.join("v2.yaml");
    std::fs::write(&v2_path, &v2).expect("write v2");
    client.run(lab, &["delete", "-f", &v2_path.to_string_lossy()], None);
    wait_for(&format!("{app}'s pods gone"), Duration::from_secs(60), || {
        let left = lab.get_json(&["pods", "-n", NS, "-l", &format!("app={app}")]);
        let n = left["items"].as_array().map_or(0, Vec::len);
        if n == 0 {
            Ok(())
        } else {
            Err(format!("{n} pods left"))
        }
    });
    let rs = lab.get_json(&["replicasets", "-n", NS, "-l", &format!("app={app}")]);
    assert_eq!(
        rs["items"].as_array().map_or(0, Vec::len),
        0,
        "{client:?}: ReplicaSets removed by the garbage collector"
    );
}

/// Runs a pod on `node` that fetches `url` `n` times; returns the answers (failed tries print
/// nothing).
fn fetch_many(lab: &Lab, name: &str, node: u8, url: &str, n: u32) -> Vec<String> {
    let script = format!("for i in $(seq 1 {n}); do timeout 3 wget -q -O- {url} 2>/dev/null; done; true");
    lab.apply(&json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": NS, "labels": {"role": "client"}},
        "spec": {"nodeName": Lab::node_name(node), "restartPolicy": "Never", "terminationGracePeriodSeconds": 1,
                 "containers": [{"name": "wget", "image": IMAGE, "command": ["sh", "-c", script]}]}
    }));
    wait_for(&format!("{name} finished"), Duration::from_secs(120), || {
        let p = lab.get_json(&["pod", "-n", NS, name]);
        match str_at(&p, "/status/phase").as_str() {
            "Succeeded" | "Failed" => Ok(()),
            other => Err(other.to_string()),
        }
    });
    let logs = lab.kubectl(&["logs", "-n", NS, name]);
    lab.kubectl(&["delete", "pod", "-n", NS, name, "--wait=false"]);
    logs.lines().map(str::trim).filter(|l| l.starts_with("backend-")).map(str::to_string).collect()
}

fn a_service_spreads_over_its_backends_and_follows_a_scale_down(lab: &Lab) {
    // Issue 8's end-to-end check: 3 replicas spread over the nodes behind one ClusterIP, fetched
    // from a pod 100 times, must all answer; scaled to 1, the one left gets everything.
    lab.apply(&json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "backend", "namespace": NS},
        "spec": {"replicas": 3, "selector": {"matchLabels": {"app": "backend"}},
                 "template": {"metadata": {"labels": {"app": "backend"}},
                              "spec": {"terminationGracePeriodSeconds": 1,
                                       "topologySpreadConstraints": [{"maxSkew": 1, "topologyKey": "kubernetes.io/hostname",
                                           "whenUnsatisfiable": "DoNotSchedule", "labelSelector": {"matchLabels": {"app": "backend"}}}],
                                       "containers": [{"name": "web", "image": IMAGE, "command": ["sh", "-c",
                                           "echo backend-$HOSTNAME > /www/index.html && exec httpd -f -p 8080 -h /www"]}]}}}
    }));
    lab.apply(&json!({
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": "backend", "namespace": NS},
        "spec": {"selector": {"app": "backend"}, "ports": [{"port": 80, "targetPort": 8080}]}
    }));
    let ready = |n: usize| {
        wait_for(&format!("{n} backend endpoint(s)"), Duration::from_secs(90), || {
            let eps = lab.get_json(&["endpoints", "-n", NS, "backend"]);
            let addrs = eps.pointer("/subsets/0/addresses").and_then(Value::as_array).map_or(0, Vec::len);
            let not_ready = eps.pointer("/subsets/0/notReadyAddresses").and_then(Value::as_array).map_or(0, Vec::len);
            if addrs == n && not_ready == 0 {
                Ok(())
            } else {
                Err(format!("{addrs} ready, {not_ready} not"))
            }
        })
    };
    ready(3);
    let ip = str_at(&lab.get_json(&["service", "-n", NS, "backend"]), "/spec/clusterIP");
    let url = format!("http://{ip}/");
    // Rules follow the endpoints within a sync period; give the first fetches room to land.
    let answers = wait_for("all 3 backends answering the ClusterIP", Duration::from_secs(60), || {
        let got = fetch_many(lab, &format!("spread-{}", fastrand_suffix()), 2, &url, 100);
        let distinct: BTreeSet<&String> = got.iter().collect();
        if distinct.len() == 3 && got.len() >= 95 {
            Ok(got.clone())
        } else {
            Err(format!("{} answers from {distinct:?}", got.len()))
        }
    });
    assert!(answers.len() >= 95, "{answers:?}");
    lab.kubectl(&["scale", "deployment", "-n", NS, "backend", "--replicas=1"]);
    ready(1);
    let left = wait_for("the one backend left getting everything", Duration::from_secs(60), || {
        let got = fetch_many(lab, &format!("spread-{}", fastrand_suffix()), 3, &url, 100);
        let distinct: BTreeSet<&String> = got.iter().collect();
        if distinct.len() == 1 && got.len() == 100 {
            Ok(got[0].clone())
        } else {
            Err(format!("{} answers from {distinct:?}", got.len()))
        }
    });
    let survivor = lab.get_json(&["pod", "-n", NS, left.strip_prefix("backend-").unwrap_or(&left)]);
    assert!(
        survivor.pointer("/metadata/deletionTimestamp").is_none() && str_at(&survivor, "/status/phase") == "Running",
        "the answer comes from the pod still running: {survivor}"
    );
}

fn fastrand_suffix() -> String {
    use std::sync::atomic::{AtomicU32, Ordering};
    static N: AtomicU32 = AtomicU32::new(0);
    N.fetch_add(1, Ordering::SeqCst).to_string()
}

fn in_cidr(ip: Ipv4Addr, cidr: &str) -> bool {
    let Some((net, len)) = cidr.split_once('/') else { return false };
    let (Ok(net), Ok(len)) = (net.parse::<Ipv4Addr>(), len.parse::<u32>()) else { return false };
    let mask = if len == 0 { 0 } else { u32::MAX << (32 - len) };
    u32::from(ip) & mask == u32::from(net) & mask
}

fn pod_ips_are_unique_and_inside_their_nodes_cidr(lab: &Lab) {
    let cidrs = pod_cidrs(lab);
    let pods = lab.get_json(&["pods", "-A"]);
    let mut seen = BTreeMap::new();
    for p in pods["items"].as_array().into_iter().flatten() {
        let name = str_at(p, "/metadata/name");
        let ip = str_at(p, "/status/podIP");
        if ip.is_empty() {
            continue;
        }
        let node = str_at(p, "/spec/nodeName");
        let ip: Ipv4Addr = ip.parse().expect("an IPv4 pod IP");
        assert!(in_cidr(ip, &cidrs[&node]), "{name} on {node} has {ip} outside {}", cidrs[&node]);
        if str_at(p, "/status/phase") == "Running" {
            assert!(seen.insert(ip, name.clone()).is_none(), "{ip} handed out twice ({name}, {:?})", seen.get(&ip));
        }
    }
    assert!(seen.len() >= usize::from(2 * NODES), "running pods with IPs: {seen:?}");
}

fn restarting_an_agent_keeps_connectivity(lab: &Lab, servers: &[Value]) {
    let before = lab.get_json(&["pod", "-n", NS, "server-2"]);
    let out = lab.kaji(&["restart", "agent-2"]);
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "restart agent-2: {said}");
    assert!(said.contains("stopping agent-2 (pid") && said.contains("starting agent-2 ... done"), "{said}");
    // The restarted agent re-adopts its pods: server-2 keeps running with the same address.
    wait_for("node 2 Ready after the restart", Duration::from_secs(60), || {
        let status = String::from_utf8_lossy(&lab.kaji(&["status"]).stdout).into_owned();
        let line =
            status.lines().find(|l| l.contains(&format!("node {}", Lab::node_name(2)))).unwrap_or_default().to_string();
        if line.contains(" Ready ") {
            Ok(())
        } else {
            Err(status)
        }
    });
    let after = lab.get_json(&["pod", "-n", NS, "server-2"]);
    assert_eq!(str_at(&after, "/metadata/uid"), str_at(&before, "/metadata/uid"));
    assert_eq!(str_at(&after, "/status/podIP"), str_at(&before, "/status/podIP"), "server-2 kept its address");
    pods_reach_each_other_across_nodes_by_pod_ip(lab, servers, "after");
}

/// The agent's IPAM state: one file per address handed out (`<root-dir>/network/ipam/<ip>`).
fn ipam_leases(lab: &Lab, node: u8) -> BTreeMap<String, Value> {
    let dir = lab.node_dir(node).join("network/ipam");
    let Ok(entries) = std::fs::read_dir(&dir) else { return BTreeMap::new() };
    entries
        .filter_map(|e| e.ok())
        .filter(|e| e.file_name().to_string_lossy().parse::<Ipv4Addr>().is_ok())
        .map(|e| {
            let lease =
                std::fs::read(e.path()).ok().and_then(|b| serde_json::from_slice(&b).ok()).unwrap_or(Value::Null);
            (e.file_name().to_string_lossy().into_owned(), lease)
        })
        .collect()
}

fn deleting_pods_frees_their_addresses(lab: &Lab) {
    let clients = lab.get_json(&["pods", "-n", NS, "-l", "role=client"]);
    let mut held = Vec::new();
    for p in clients["items"].as_array().into_iter().flatten() {
        let node: u8 = str_at(p, "/spec/nodeName").rsplit('-').next().and_then(|s| s.parse().ok()).expect("node");
        let ip = str_at(p, "/status/podIP");
        let leases = ipam_leases(lab, node);
        let lease = leases.get(&ip).unwrap_or_else(|| panic!("no IPAM lease for {ip} on node {node}: {leases:?}"));
        assert_eq!(str_at(lease, "/uid"), str_at(p, "/metadata/uid"), "{ip}'s lease names its pod");
        held.push((node, ip));
    }
    assert!(held.len() >= usize::from(NODES), "client pods with leases: {held:?}");
    lab.kubectl(&["delete", "pods", "-n", NS, "-l", "role=client", "--wait=true", "--timeout=60s"]);
    wait_for("deleted pods' addresses released", Duration::from_secs(60), || {
        let still: Vec<&(u8, String)> = held.iter().filter(|(n, ip)| ipam_leases(lab, *n).contains_key(ip)).collect();
        if still.is_empty() {
            Ok(())
        } else {
            Err(format!("still leased: {still:?}"))
        }
    });
    // What is left leased is exactly the pods still on each node.
    let pods = lab.get_json(&["pods", "-A"]);
    for node in 1..=NODES {
        let want: BTreeSet<String> = pods["items"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|p| str_at(p, "/spec/nodeName") == Lab::node_name(node) && !str_at(p, "/status/podIP").is_empty())
            .map(|p| str_at(p, "/status/podIP"))
            .collect();
        let leased: BTreeSet<String> = ipam_leases(lab, node).into_keys().collect();
        assert_eq!(leased, want, "node {node}'s leases match its pods");
    }
}

/// Runs `image` on node `node` (pulled every time) and returns its output.
fn run_image(lab: &Lab, name: &str, node: u8, image: &str) -> String {
    lab.apply(&json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": NS},
        "spec": {"nodeName": Lab::node_name(node), "restartPolicy": "Never", "terminationGracePeriodSeconds": 1,
                 "containers": [{"name": "c", "image": image, "imagePullPolicy": "Always",
                                 "command": ["sh", "-c", format!("echo {name} ran")]}]}
    }));
    let pod = wait_for(&format!("{name} ({image}) finished"), Duration::from_secs(90), || {
        let p = lab.get_json(&["pod", "-n", NS, name]);
        match str_at(&p, "/status/phase").as_str() {
            "Succeeded" | "Failed" => Ok(p),
            _ => Err(p["status"].to_string()),
        }
    });
    assert_eq!(str_at(&pod, "/status/phase"), "Succeeded", "{name}: {}", pod["status"]);
    lab.kubectl(&["logs", "-n", NS, name])
}

fn nodes_pull_from_the_labs_registry_and_pushed_images_run(lab: &Lab) {
    // The seeded busybox, pulled over the lab bridge by node 3.
    assert_eq!(run_image(lab, "seeded", 3, "172.30.0.1:5000/kaji/busybox:lab").trim(), "seeded ran");
    // `kaji lab image push` of an OCI layout and of a docker archive.
    let work = tempfile::tempdir().expect("tempdir");
    let image = kaji_image::testing::busybox_image().expect("busybox image");
    let layout = work.path().join("layout");
    kaji_image::testing::write_oci_layout(&layout, &[("e2e/layout:1", &image)]).expect("layout");
    let archive = work.path().join("busybox.tar");
    kaji_image::testing::write_docker_archive(&archive, &["example.org/e2e/archive:2"], &image).expect("archive");
    for (path, want) in [(&layout, "172.30.0.1:5000/e2e/layout:1"), (&archive, "172.30.0.1:5000/e2e/archive:2")] {
        let out = lab.kaji(&["image", "push", &path.to_string_lossy()]);
        let said = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success(), "push {}: {said}{}", path.display(), String::from_utf8_lossy(&out.stderr));
        assert!(said.contains(&format!("use it as image: {want}")), "{said}");
    }
    assert_eq!(run_image(lab, "from-layout", 1, "172.30.0.1:5000/e2e/layout:1").trim(), "from-layout ran");
    assert_eq!(run_image(lab, "from-archive", 2, "172.30.0.1:5000/e2e/archive:2").trim(), "from-archive ran");
}

fn nothing_is_left(dir: &Path, port: u16, pids: &[String]) {
    let prefix = format!("kaji-lab-{port}");
    let ours = |name: &str| name == prefix || name.starts_with(&format!("{prefix}-"));
    let netns = std::process::Command::new("ip").args(["netns", "list"]).output().expect("ip netns list");
    let netns = String::from_utf8_lossy(&netns.stdout).into_owned();
    assert!(!netns.lines().any(|l| ours(l.split_whitespace().next().unwrap_or_default())), "namespaces left: {netns}");
    for hierarchy in std::fs::read_dir("/sys/fs/cgroup").expect("cgroup fs").filter_map(|e| e.ok()) {
        for e in std::fs::read_dir(hierarchy.path()).into_iter().flatten().filter_map(|e| e.ok()) {
            assert!(!ours(&e.file_name().to_string_lossy()), "cgroup left: {}", e.path().display());
        }
    }
    let mounts = std::fs::read_to_string("/proc/self/mountinfo").expect("mountinfo");
    assert!(!mounts.contains(&dir.to_string_lossy().to_string()), "mounts left under {}", dir.display());
    for pid in pids {
        assert!(std::fs::read_link(format!("/proc/{pid}/exe")).is_err(), "pid {pid} still running");
    }
    assert!(!dir.exists(), "--purge removed {}", dir.display());
}
