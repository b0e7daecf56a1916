//! Fault tests on `kaji lab up --ha` (3 etcd members, 3 apiservers, 2 schedulers and 2
//! controller managers): kill -9 parts of the control plane and check what a user would notice.
//! Failover *times* are benchmarks (docs/benchmarks.md); these tests assert that it happens.

use kaji_e2e::api::Api;
use kaji_e2e::ha::{etcd_leader, holder, http, leader_instance};
use kaji_e2e::{wait_for, Lab, Value};
use std::collections::BTreeSet;
use std::io::{BufRead, BufReader, Write};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const WRITERS: usize = 16;

/// Follow a watch on ConfigMaps from `rv`; every object name of an ADDED event, in order.
fn watch_added(api: &Api, rv: &str, seen: Arc<Mutex<Vec<String>>>) {
    let mut s = api.connect().expect("watch connects");
    // The watch is quiet while etcd elects: do not give up on it.
    let _ = s.sock.set_read_timeout(None);
    let req = format!(
        "GET /api/v1/namespaces/default/configmaps?watch=1&resourceVersion={rv}&timeoutSeconds=600 HTTP/1.1\r\nHost: x\r\n\r\n"
    );
    s.write_all(req.as_bytes()).expect("watch request");
    for line in BufReader::new(s).lines() {
        let Ok(line) = line else { return };
        let Ok(ev) = serde_json::from_str::<Value>(line.trim()) else { continue };
        if ev.get("type").and_then(Value::as_str) == Some("ADDED") {
            if let Some(n) = ev.pointer("/object/metadata/name").and_then(Value::as_str) {
                seen.lock().expect("lock").push(n.to_string());
            }
        }
    }
}

#[test]
fn killing_the_etcd_leader_loses_no_acknowledged_write_and_no_watch_event() {
    let lab = Lab::up_with(1, &["--ha", "--no-demo"]);
    let api = lab.api();
    let (code, list) = http(&api, "GET", "/api/v1/namespaces/default/configmaps", "");
    assert_eq!(code, 200, "{list}");
    let rv = serde_json::from_str::<Value>(&list).expect("json")["metadata"]["resourceVersion"]
        .as_str()
        .expect("rv")
        .to_string();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let s2 = seen.clone();
    let watch_api = api.clone();
    std::thread::spawn(move || watch_added(&watch_api, &rv, s2));

    let stop = Arc::new(AtomicBool::new(false));
    let acked = Arc::new(Mutex::new(BTreeSet::new()));
    let writers: Vec<_> = (0..WRITERS)
        .map(|w| {
            let (stop, acked, api) = (stop.clone(), acked.clone(), api.clone());
            std::thread::spawn(move || {
                let mut i = 0;
                while !stop.load(Ordering::SeqCst) {
                    let name = format!("c-{w}-{i}");
                    let body = format!("{{\"metadata\":{{\"name\":\"{name}\"}},\"data\":{{\"w\":\"{w}\"}}}}");
                    if http(&api, "POST", "/api/v1/namespaces/default/configmaps", &body).0 == 201 {
                        acked.lock().expect("lock").insert(name);
                    }
                    i += 1;
                }
            })
        })
        .collect();
    std::thread::sleep(Duration::from_secs(3));
    let leader = wait_for("an etcd leader", Duration::from_secs(30), || etcd_leader(&lab));
    lab.kill9(&format!("etcd-{leader}"));
    let killed_at = Instant::now();
    // Writes go on through the election and after it.
    let after = acked.lock().expect("lock").len();
    wait_for("writes acknowledged after the leader died", Duration::from_secs(60), || {
        let n = acked.lock().expect("lock").len();
        if n > after + 50 {
            Ok(())
        } else {
            Err(format!("{n} acked"))
        }
    });
    stop.store(true, Ordering::SeqCst);
    for w in writers {
        w.join().expect("writer");
    }
    eprintln!("etcd leader etcd-{leader} killed; writes resumed within {:?}", killed_at.elapsed());
    let acked = acked.lock().expect("lock").clone();
    let cms = lab.get_json(&["configmaps", "-n", "default"]);
    let stored: BTreeSet<String> = cms["items"]
        .as_array()
        .expect("items")
        .iter()
        .filter_map(|c| c.pointer("/metadata/name").and_then(Value::as_str).map(str::to_string))
        .filter(|n| n.starts_with("c-"))
        .collect();
    let lost: Vec<&String> = acked.difference(&stored).collect();
    assert!(lost.is_empty(), "acknowledged writes lost: {lost:?}");
    // The watch, served by an apiserver whose etcd watch moved to another member, saw every
    // stored object exactly once.
    wait_for("the watch to see every stored ConfigMap", Duration::from_secs(60), || {
        let seen = seen.lock().expect("lock");
        let set: BTreeSet<&String> = seen.iter().collect();
        if set.len() != seen.len() {
            panic!("a watch event came twice");
        }
        let missing = stored.iter().filter(|n| !set.contains(n)).count();
        if missing == 0 {
            Ok(())
        } else {
            Err(format!("{missing} not seen"))
        }
    });
}

#[test]
fn losing_an_apiserver_or_a_leader_is_carried_through() {
    let lab = Lab::up_with(1, &["--ha", "--no-demo"]);
    // The kubernetes Service lists all three apiservers.
    wait_for("three apiserver endpoints", Duration::from_secs(30), || {
        let ep = lab.get_json(&["endpoints", "kubernetes", "-n", "default"]);
        let n = ep["subsets"].as_array().map(|s| s.len()).unwrap_or(0);
        if n == 3 {
            Ok(())
        } else {
            Err(ep.to_string())
        }
    });
    // kill -9 the apiserver kubectl's forwarder prefers: kubectl carries on through the others.
    lab.kill9("apiserver-1");
    lab.kubectl(&["create", "configmap", "after-apiserver-loss", "--from-literal=k=v"]);
    let node = Lab::node_name(1);
    let renew = |lab: &Lab| {
        lab.get_json(&["lease", "-n", "kube-node-lease", &node])["spec"]["renewTime"].as_str().unwrap_or("").to_string()
    };
    let before = renew(&lab);
    wait_for("the agent renewing its lease through another apiserver", Duration::from_secs(60), || {
        let now = renew(&lab);
        if now != before {
            Ok(())
        } else {
            Err(now)
        }
    });
    wait_for("the dead apiserver leaving the endpoints", Duration::from_secs(60), || {
        let ep = lab.get_json(&["endpoints", "kubernetes", "-n", "default"]);
        let n = ep["subsets"].as_array().map(|s| s.len()).unwrap_or(0);
        if n == 2 {
            Ok(())
        } else {
            Err(ep.to_string())
        }
    });

    // Leadership of the scheduler and the controller manager moves when the leader dies, and the
    // old leader coming back does not take it back.
    for (prefix, lease) in [("scheduler", "kube-scheduler"), ("controller-manager", "kube-controller-manager")] {
        let (leader, old_holder) =
            wait_for(&format!("a {prefix} leader"), Duration::from_secs(60), || leader_instance(&lab, prefix, lease));
        lab.kill9(&leader);
        let new_holder = wait_for(&format!("{lease} moving to the other instance"), Duration::from_secs(90), || {
            let h = holder(&lab, lease);
            if !h.is_empty() && h != old_holder {
                Ok(h)
            } else {
                Err(h)
            }
        });
        let out = lab.kaji(&["restart", &leader]);
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        std::thread::sleep(Duration::from_secs(20));
        assert_eq!(holder(&lab, lease), new_holder, "the restarted {leader} must not take the lease back");
    }
}
