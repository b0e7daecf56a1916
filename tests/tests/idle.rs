//! An idle cluster is idle: a 3-node `kaji lab` with its demo at rest for 60 s writes only what
//! leases and heartbeats need at Kubernetes' defaults — each node's Lease every 10 s, node status
//! on change or every 5 minutes, a leader's Lease every 2 s — counted by the apiserver itself
//! (`apiserver_request_total`). On failure it prints every request of the window. Needs root.

use kaji_e2e::{parse_metric, wait_for, Lab, Value};
use std::collections::BTreeMap;
use std::time::Duration;

const NODES: u8 = 3;
const WINDOW: Duration = Duration::from_secs(60);
/// Kubernetes' defaults: kubelet's node lease renewal, nodeStatusReportFrequency, and the
/// leader-election retry period of the scheduler and the controller manager.
const NODE_LEASE_EVERY: Duration = Duration::from_secs(10);
const NODE_STATUS_EVERY: Duration = Duration::from_secs(300);
const LEADER_LEASE_EVERY: Duration = Duration::from_secs(2);

const WRITE_VERBS: [&str; 6] = ["POST", "PUT", "PATCH", "APPLY", "DELETE", "DELETECOLLECTION"];

/// (verb, resource, subresource) → requests, summed over response codes.
type Counts = BTreeMap<(String, String, String), u64>;

/// The key and count of one `apiserver_request_total{...} N` line.
fn parse_line(line: &str) -> Option<((String, String, String), u64)> {
    let (name, mut labels, n) = parse_metric(line)?;
    let mut label = |name: &str| labels.remove(name).unwrap_or_default();
    (name == "apiserver_request_total").then(|| ((label("verb"), label("resource"), label("subresource")), n as u64))
}

fn requests(lab: &Lab) -> Counts {
    let mut out = Counts::new();
    for (key, n) in lab.metrics().lines().filter_map(parse_line) {
        *out.entry(key).or_default() += n;
    }
    out
}

fn delta(before: &Counts, after: &Counts) -> Counts {
    after
        .iter()
        .map(|(k, n)| (k.clone(), n.saturating_sub(before.get(k).copied().unwrap_or(0))))
        .filter(|(_, n)| *n > 0)
        .collect()
}

/// The most ticks of a period `every` any window of length `window` can hold.
fn per(window: Duration, every: Duration) -> u64 {
    window.as_secs() / every.as_secs() + 1
}

/// Components that elect a leader (a `--leader-elect` in the lab's recorded command lines).
fn leaders(lab: &Lab) -> u64 {
    let text = std::fs::read_to_string(lab.dir.join("lab.json")).unwrap_or_default();
    let lab_json: Value = serde_json::from_str(&text).unwrap_or_default();
    let mut n = 0;
    let mut stack = vec![&lab_json];
    while let Some(v) = stack.pop() {
        match v {
            Value::Array(items) => {
                let args: Vec<&str> = items.iter().filter_map(Value::as_str).collect();
                if let Some(i) = args.iter().position(|a| *a == "--leader-elect" || a.starts_with("--leader-elect=")) {
                    let on = match args[i].split_once('=') {
                        Some((_, v)) => v == "true",
                        None => args.get(i + 1).is_none_or(|v| *v != "false"),
                    };
                    n += u64::from(on);
                }
                stack.extend(items);
            }
            Value::Object(m) => stack.extend(m.values()),
            _ => {}
        }
    }
    n
}

fn table(c: &Counts) -> String {
    c.iter()
        .map(|((verb, res, sub), n)| {
            let what = if sub.is_empty() { res.clone() } else { format!("{res}/{sub}") };
            format!("  {n:>6}  {verb:<16} {what}\n")
        })
        .collect()
}

fn resource_versions(lab: &Lab, what: &str) -> String {
    lab.kubectl(&[
        "get",
        what,
        "-n",
        "demo",
        "-o",
        "jsonpath={range .items[*]}{.metadata.name}={.metadata.resourceVersion} {end}",
    ])
}

#[test]
fn an_idle_lab_writes_only_leases_and_heartbeats() {
    let lab = Lab::up(NODES);
    wait_for("the demo at rest (3 available replicas, 3 ready endpoints)", Duration::from_secs(120), || {
        let d = lab.get_json(&["deployment", "hello", "-n", "demo"]);
        let slices = lab.get_json(&["endpointslices", "-n", "demo", "-l", "kubernetes.io/service-name=hello"]);
        let ready = slices["items"]
            .as_array()
            .into_iter()
            .flatten()
            .flat_map(|s| s["endpoints"].as_array().cloned().unwrap_or_default())
            .filter(|e| e["conditions"]["ready"] == true)
            .count();
        let available = d["status"]["availableReplicas"].as_u64().unwrap_or(0);
        if available == u64::from(NODES) && ready == usize::from(NODES) {
            Ok(())
        } else {
            Err(format!("{available} available, {ready} ready endpoints"))
        }
    });
    // What starting up writes (events, the last status updates) ends within a few seconds.
    std::thread::sleep(Duration::from_secs(10));

    let demo_before =
        (resource_versions(&lab, "endpointslices"), resource_versions(&lab, "endpoints,deployments,replicasets,pods"));
    let before = requests(&lab);
    std::thread::sleep(WINDOW);
    let after = requests(&lab);
    let demo_after =
        (resource_versions(&lab, "endpointslices"), resource_versions(&lab, "endpoints,deployments,replicasets,pods"));

    let all = delta(&before, &after);
    let writes: Counts =
        all.iter().filter(|((v, _, _), _)| WRITE_VERBS.contains(&v.as_str())).map(|(k, n)| (k.clone(), *n)).collect();
    let n = u64::from(NODES);
    let leaders = leaders(&lab);
    let budget: BTreeMap<(&str, &str, &str), u64> = [
        (("PUT", "leases", ""), n * per(WINDOW, NODE_LEASE_EVERY) + leaders * per(WINDOW, LEADER_LEASE_EVERY)),
        // A node posts status when a condition changes (none does at rest) or every 5 minutes.
        (("PATCH", "nodes", "status"), n * per(WINDOW, NODE_STATUS_EVERY)),
    ]
    .into_iter()
    .collect();
    let over: Vec<String> = writes
        .iter()
        .filter_map(|((verb, res, sub), got)| {
            let allowed = budget.get(&(verb.as_str(), res.as_str(), sub.as_str())).copied().unwrap_or(0);
            (*got > allowed)
                .then(|| format!("{verb} {res}{}{sub}: {got} > {allowed}", if sub.is_empty() { "" } else { "/" }))
        })
        .collect();
    let report = format!(
        "over budget in {}s at rest ({} node(s), {leaders} leader-elected component(s)): {over:?}\n\
         writes in the window:\n{}every request in the window:\n{}",
        WINDOW.as_secs(),
        NODES,
        table(&writes),
        table(&all)
    );
    assert!(over.is_empty(), "{report}");
    assert_eq!(demo_after, demo_before, "the demo's objects were rewritten at rest\n{report}");
    // The node leases are renewed: an idle cluster is idle, not dead.
    let leases = writes.get(&("PUT".into(), "leases".into(), String::new())).copied().unwrap_or(0);
    assert!(leases >= n * (WINDOW.as_secs() / NODE_LEASE_EVERY.as_secs() - 1), "node leases not renewed\n{report}");
    eprintln!("{report}");
}

#[test]
fn metric_lines_parse() {
    let line = r#"apiserver_request_total{verb="PATCH",resource="nodes",subresource="status",code="200"} 6"#;
    assert_eq!(parse_line(line), Some((("PATCH".into(), "nodes".into(), "status".into()), 6)));
    assert_eq!(parse_line("apiserver_request_duration_seconds_sum{} 1"), None);
    assert_eq!(per(Duration::from_secs(60), Duration::from_secs(10)), 7);
    assert_eq!(per(Duration::from_secs(60), Duration::from_secs(300)), 1);
}
