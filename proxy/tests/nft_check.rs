//! Root-only: the nftables mode's transactions pass the machine's `nft -c` (nft parses them and
//! the kernel checks them), apply, and partial syncs leave the table where a full sync would.
//! Every nft command runs inside a throwaway network namespace.

mod common;

use common::models::golden_models;
use common::{netns_exists, Netns};
use kaji_proxy::model::{Endpoint, Model, ServicePort};
use kaji_proxy::nftables::{render, Nft, Syncer};
use std::os::unix::fs::PermissionsExt;

#[test]
fn every_golden_transaction_passes_nft_check_and_applies() {
    let ns = Netns::new("nftparse");
    let nft = ns.nft();
    for (name, model) in golden_models() {
        let payload = render(&model);
        nft.check(&payload).unwrap_or_else(|e| panic!("{name}: {e}\n{payload}"));
        let mut syncer = Syncer::new(nft.clone());
        syncer.sync(&model, true).unwrap_or_else(|e| panic!("{name}: {e}"));
        let table = nft.table().expect("list").expect("the table exists");
        for chain in payload.lines().filter_map(|l| l.strip_prefix("\tchain ")).filter_map(|l| l.strip_suffix(" {")) {
            assert!(table.contains(&format!("\tchain {chain} {{")), "{name}: {chain} missing:\n{table}");
        }
        // Again over what is there: the same table.
        let before = ns.nft_objects();
        syncer.sync(&model, true).unwrap_or_else(|e| panic!("{name} resync: {e}"));
        assert_eq!(ns.nft_objects(), before, "{name}: a full resync changes nothing");
    }
    assert!(nft.cleanup().expect("cleanup"), "there was a table");
    assert!(nft.table().expect("list").is_none());
    let name = ns.name.clone();
    drop(ns);
    assert!(!netns_exists(&name), "namespace {name} left behind");
}

#[test]
fn a_failed_transaction_changes_nothing() {
    let ns = Netns::new("nftbroken");
    let nft = ns.nft();
    let (_, model) = golden_models().remove(0);
    Syncer::new(nft.clone()).sync(&model, true).expect("first sync");
    let before = ns.nft_objects();
    let bad = "flush chain ip kaji-proxy services\ntable ip kaji-proxy {\n\tchain services {\n\t\tgoto service-NOPE-ns/bad/tcp/http\n\t}\n}\n";
    let err = nft.apply(bad).expect_err("a jump to a missing chain must fail");
    assert!(err.to_string().contains("service-NOPE-ns/bad"), "nft names the offending line: {err}");
    assert_eq!(ns.nft_objects(), before, "a failed transaction changes nothing");
}

/// The table as nft lists it, without counters or set contents.
fn listed(nft: &Nft) -> String {
    nft.table().expect("list").expect("the table exists")
}

#[test]
fn netlink_batches_write_the_table_nft_writes_from_text() {
    let (by_text, by_netlink) = (Netns::new("nfttext"), Netns::new("nftnl"));
    let (text, netlink) = (by_text.nft_text(), by_netlink.nft());
    assert!(text.netlink().is_none() && netlink.netlink().is_some());
    let (mut t, mut n) = (Syncer::new(text.clone()), Syncer::new(netlink.clone()));
    for (name, model) in golden_models() {
        t.sync(&model, true).unwrap_or_else(|e| panic!("{name} as text: {e}"));
        n.sync(&model, true).unwrap_or_else(|e| panic!("{name} by netlink: {e}"));
        assert_eq!(listed(&netlink), listed(&text), "{name}: the same table either way");
    }
    // Partial syncs too: endpoints come and go, a service with affinity loses one, one leaves.
    let first = model(vec![svc(3, &[1, 2, 3]), svc(2, &[1]), svc(4, &[])]);
    t.sync(&first, true).expect("text");
    n.sync(&first, true).expect("netlink");
    assert_eq!(listed(&netlink), listed(&text));
    for m in [
        model(vec![svc(3, &[1, 2, 3, 4]), svc(2, &[1]), svc(4, &[]), svc(6, &[1, 2])]),
        model(vec![svc(3, &[1, 3]), svc(2, &[1, 2]), svc(4, &[5])]),
        model(vec![svc(3, &[3]), svc(4, &[])]),
    ] {
        let (a, b) = (t.sync(&m, false).expect("text"), n.sync(&m, false).expect("netlink"));
        assert!(!a.full && !b.full && b.restored, "{b:?}");
        assert_eq!((a.chains_written, a.chains_deleted), (b.chains_written, b.chains_deleted));
        assert_eq!(listed(&netlink), listed(&text), "after a partial sync");
        assert_eq!(by_netlink.nft_objects(), fresh(&m), "a partial sync leaves what a full one would");
    }
}

#[test]
fn a_refused_netlink_batch_changes_nothing_and_names_what_was_refused() {
    use kaji_proxy::nftables::netlink::Batch;
    use kaji_proxy::nftables::rule::{Action, Rule};
    use kaji_proxy::nftables::tx::Writer;
    let ns = Netns::new("nftnlbad");
    let nft = ns.nft();
    let (_, model) = golden_models().remove(0);
    Syncer::new(nft.clone()).sync(&model, true).expect("first sync");
    let before = ns.nft_objects();
    let mut batch = Batch::new();
    batch.flush_chain("services");
    batch.chain("services", &[Rule::Always(Action::Goto("service-NOPE-ns/bad/tcp/http".into()))]).expect("in memory");
    let err = nft.netlink().expect("netlink").apply(batch).expect_err("a goto to a missing chain must fail");
    assert_eq!(err.to_string(), "the kernel refused a rule of chain services: ENOENT: No such file or directory");
    assert_eq!(ns.nft_objects(), before, "a refused batch changes nothing");
}

fn svc(i: u8, eps: &[u8]) -> ServicePort {
    ServicePort {
        node_port: i.is_multiple_of(2).then_some(30000 + u16::from(i)),
        affinity_timeout: (i == 3).then_some(300),
        endpoints: eps
            .iter()
            .map(|e| Endpoint::ready(format!("10.244.{i}.{e}").parse().expect("ip"), 80, false))
            .collect(),
        ..ServicePort::new("ns", &format!("svc{i}"), "http", format!("10.96.0.{i}").parse().expect("ip"), 80)
    }
}

fn model(services: Vec<ServicePort>) -> Model {
    Model { cluster_cidr: "10.244.0.0/16".parse().ok(), masquerade_all: false, services }
}

fn fresh(m: &Model) -> Vec<String> {
    let ns = Netns::new("nftfresh");
    Syncer::new(ns.nft()).sync(m, true).expect("full sync");
    ns.nft_objects()
}

#[test]
fn partial_syncs_end_where_a_full_sync_does() {
    let a = model(vec![svc(1, &[1, 2, 3]), svc(2, &[1]), svc(3, &[1, 2]), svc(4, &[])]);
    // svc1 loses an endpoint, svc2 loses all, svc3 (affinity) is deleted, svc4 gains one, svc5 is new.
    let b = model(vec![svc(1, &[1, 3]), svc(2, &[]), svc(4, &[7]), svc(5, &[1, 2])]);

    let ns = Netns::new("nftpartial");
    let mut syncer = Syncer::new(ns.nft());
    assert!(syncer.sync(&a, false).expect("first sync").full, "the first sync is full");
    assert!(!syncer.sync(&a, false).expect("no-op sync").restored, "nothing changed: no nft run");
    let partial = syncer.sync(&b, false).expect("partial sync");
    assert!(partial.restored && !partial.full && partial.chains_deleted > 0, "{partial:?}");
    assert_eq!(ns.nft_objects(), fresh(&b));

    // Only an endpoint changes: its service chain is rewritten, no chain is deleted, and only
    // the hairpin set's elements change (the old address out, the new one in).
    let c = model(vec![svc(1, &[1, 4]), svc(2, &[]), svc(4, &[7]), svc(5, &[1, 2])]);
    let partial = syncer.sync(&c, false).expect("endpoint-only partial sync");
    let counts = (partial.chains_written, partial.chains_deleted, partial.elements_written);
    assert_eq!(counts, (1, 0, 2), "{partial:?}");
    assert_eq!(ns.nft_objects(), fresh(&c));
    let full = syncer.sync(&c, true).expect("full resync");
    assert_eq!(full.chains_deleted, 0, "{full:?}");
    assert_eq!(ns.nft_objects(), fresh(&c));

    // A restart (unknown state) lists the table and removes what is no longer wanted.
    let d = model(vec![svc(5, &[1, 2])]);
    let mut restarted = Syncer::new(ns.nft());
    restarted.sync(&d, false).expect("sync after restart");
    assert_eq!(ns.nft_objects(), fresh(&d));
}

#[test]
fn a_full_resync_keeps_what_affinity_sets_learned() {
    let ns = Netns::new("nftaffinity");
    let m = model(vec![svc(3, &[1, 2])]);
    let mut syncer = Syncer::new(ns.nft());
    syncer.sync(&m, true).expect("first sync");
    let set = "affinity-LSL2UMUU-ns/svc3/tcp/http__10.244.3.1/80";
    ns.sh(&["nft", "add", "element", "ip", "kaji-proxy", set, "{ 192.0.2.1 timeout 300s }"]);
    syncer.sync(&m, true).expect("full resync");
    let listed = ns.sh(&["nft", "list", "set", "ip", "kaji-proxy", set]);
    assert!(listed.contains("192.0.2.1"), "a full resync keeps learned clients:\n{listed}");
}

/// An `nft` that answers like a kernel before 6.2 while `$3` exists: any transaction deleting a
/// chain fails with EBUSY. Otherwise it is the real nft, run in the namespace `$1`.
const BUSY_NFT: &str = r#"#!/bin/sh
ns=$1; flag=$2; shift 3
if [ "$1" = "-f" ]; then
  tx=$(cat)
  case "$tx" in
    *"delete chain"*) if [ -e "$flag" ]; then
        echo "Error: Could not process rule: Device or resource busy" >&2; exit 1
      fi ;;
  esac
  printf '%s\n' "$tx" | exec ip netns exec "$ns" nft "$@"
fi
exec ip netns exec "$ns" nft "$@"
"#;

#[test]
fn a_kernel_refusing_to_delete_stale_chains_leaves_them_empty_and_deletes_them_later() {
    let ns = Netns::new("nftbusy");
    let dir = tempfile::tempdir().expect("temp dir");
    let (script, flag) = (dir.path().join("nft"), dir.path().join("busy"));
    std::fs::write(&script, BUSY_NFT).expect("write the fake nft");
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    let path = |p: &std::path::Path| p.to_string_lossy().into_owned();
    let mut syncer = Syncer::new(Nft::with_prefix(vec![path(&script), ns.name.clone(), path(&flag)]));

    let a = model(vec![svc(3, &[1, 2, 3]), svc(2, &[1])]);
    syncer.sync(&a, false).expect("first sync");
    std::fs::write(&flag, "").expect("set the flag");
    // svc3 (session affinity: a chain per endpoint) loses endpoint 2: its chain cannot be deleted, the rest applies all the same.
    let b = model(vec![svc(3, &[1, 3]), svc(2, &[1])]);
    let out = syncer.sync(&b, false).expect("the sync is retried without the delete");
    assert!(out.restored && !out.full && out.chains_deleted == 0, "{out:?}");
    assert_eq!(syncer.undeleted_chains().len(), 1, "{:?}", syncer.undeleted_chains());
    let want = fresh(&b);
    let extra: Vec<String> = ns.nft_objects().into_iter().filter(|l| !want.contains(l)).collect();
    assert_eq!(extra.len(), 1, "only the old endpoint chain is left, empty: {extra:?}");
    assert!(extra[0].starts_with("chain endpoint-") && extra[0].contains("10.244.3.2/80"), "{extra:?}");

    // Still refused: later syncs keep applying (a full one too).
    let c = model(vec![svc(3, &[1, 3]), svc(2, &[1, 4])]);
    syncer.sync(&c, false).expect("partial sync while the kernel refuses");
    syncer.sync(&c, true).expect("full sync while the kernel refuses");
    assert_eq!(syncer.undeleted_chains().len(), 1);

    // Once the kernel lets go, the next transaction deletes the leftover.
    std::fs::remove_file(&flag).expect("clear the flag");
    let d = model(vec![svc(3, &[1, 3]), svc(2, &[4])]);
    syncer.sync(&d, false).expect("partial sync");
    assert!(syncer.undeleted_chains().is_empty());
    assert_eq!(ns.nft_objects(), fresh(&d));
}
