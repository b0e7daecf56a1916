//! Root-only: the rendered payloads are valid for the machine's iptables-restore (nft or
//! legacy) and a partial sync leaves the kernel exactly where a full one would. Every command
//! runs inside a throwaway network namespace.

mod common;

use common::models::golden_models;
use common::{netns_exists, Netns};
use kaji_proxy::model::{Endpoint, Model, ServicePort};
use kaji_proxy::render;
use kaji_proxy::sync::Syncer;

#[test]
fn every_golden_payload_passes_iptables_restore_test_and_applies() {
    let ns = Netns::new("parse");
    let ipt = ns.iptables();
    for (name, model) in golden_models() {
        let payload = render(&model);
        ipt.restore_test(&payload).unwrap_or_else(|e| panic!("{name}: {e}\n{payload}"));
        let mut syncer = Syncer::new(ipt.clone());
        syncer.sync(&model, true).unwrap_or_else(|e| panic!("{name}: {e}"));
        let tables = ns.tables();
        for chain in payload.lines().filter_map(|l| l.strip_prefix(':')).filter_map(|l| l.split(' ').next()) {
            assert!(
                tables.contains(&format!(":{chain} ")) || tables.contains(&format!(":{chain}\n")),
                "{name}: {chain}"
            );
        }
    }
    let name = ns.name.clone();
    drop(ns);
    assert!(!netns_exists(&name), "namespace {name} left behind");
}

#[test]
fn a_broken_payload_fails_and_leaves_the_previous_rules() {
    let ns = Netns::new("broken");
    let ipt = ns.iptables();
    let (_, model) = golden_models().remove(0);
    Syncer::new(ipt.clone()).sync(&model, true).expect("first sync");
    let before = ns.tables();
    let bad = "*nat\n:KUBE-SERVICES - [0:0]\n-A KUBE-SERVICES -m comment --comment ns/bad -j KUBE-SVC-NOPE\nCOMMIT\n";
    let err = ipt.restore(bad).expect_err("a jump to a missing chain must fail");
    assert!(err.to_string().contains("ns/bad") || err.to_string().contains("failed"), "{err}");
    assert_eq!(ns.tables(), before, "a failed restore changes nothing");
}

fn svc(i: u8, eps: &[u8]) -> ServicePort {
    ServicePort {
        node_port: i.is_multiple_of(2).then_some(30000 + u16::from(i)),
        endpoints: eps
            .iter()
            .map(|e| Endpoint::ready(format!("10.244.{i}.{e}").parse().expect("ip"), 80, false))
            .collect(),
        ..ServicePort::new("ns", &format!("svc{i}"), "http", format!("10.96.0.{i}").parse().expect("ip"), 80)
    }
}

#[test]
fn partial_syncs_end_where_a_full_sync_does() {
    let model = |services| Model { cluster_cidr: "10.244.0.0/16".parse().ok(), masquerade_all: false, services };
    let a = model(vec![svc(1, &[1, 2, 3]), svc(2, &[1]), svc(3, &[1, 2]), svc(4, &[])]);
    // svc1 loses an endpoint, svc2 loses all, svc3 is deleted, svc4 gains one, svc5 is new.
    let b = model(vec![svc(1, &[1, 3]), svc(2, &[]), svc(4, &[7]), svc(5, &[1, 2])]);

    let incremental = Netns::new("partial");
    let mut syncer = Syncer::new(incremental.iptables());
    assert!(syncer.sync(&a, false).expect("first sync").full, "the first sync is full");
    let unchanged = syncer.sync(&a, false).expect("no-op sync");
    assert!(!unchanged.restored, "nothing changed: no restore");
    let partial = syncer.sync(&b, false).expect("partial sync");
    assert!(partial.restored && !partial.full);
    assert!(partial.chains_deleted > 0, "{partial:?}");

    let fresh = Netns::new("full");
    Syncer::new(fresh.iptables()).sync(&b, true).expect("full sync");
    let sorted = |s: String| {
        let mut v: Vec<String> = s.lines().map(String::from).collect();
        v.sort();
        v.join("\n")
    };
    assert_eq!(sorted(incremental.tables()), sorted(fresh.tables()));
    // A restart (unknown state) also removes what is no longer wanted.
    let mut restarted = Syncer::new(incremental.iptables());
    let c = model(vec![svc(5, &[1, 2])]);
    restarted.sync(&c, false).expect("sync after restart");
    let tables = incremental.tables();
    assert!(!tables.contains("ns/svc1"), "{tables}");
    assert_eq!(tables.matches(":KUBE-SVC-").count(), 1, "{tables}");
}
