//! Golden-text tests of `render`: the exact iptables-restore payload for each kind of service,
//! kept in `tests/golden/*.txt`. `KAJI_UPDATE_GOLDEN=1 cargo test -p kaji-proxy --test golden`
//! rewrites them; review the diff like code.

mod common;

use common::golden::assert_golden;
use common::models::{ep, golden_models, ip, model, web};
use kaji_proxy::model::ServicePort;
use kaji_proxy::render;
use kaji_proxy::render::{build, Table};

#[test]
fn render_matches_golden_files() {
    for (name, m) in golden_models() {
        assert_golden(name, &render(&m));
    }
}

#[test]
fn render_is_deterministic() {
    for (_, m) in golden_models() {
        assert_eq!(render(&m), render(&m.clone()));
    }
}

#[test]
fn statistic_probabilities_are_one_over_remaining() {
    let sp = ServicePort {
        endpoints: (1..=5).map(|i| ep(&format!("10.244.0.{i}"), 80)).collect(),
        ..ServicePort::new("ns", "five", "", ip("10.96.0.5"), 80)
    };
    let out = render(&model(vec![sp]));
    let probs: Vec<&str> = out
        .lines()
        .filter_map(|l| l.split("--probability ").nth(1))
        .map(|r| r.split(' ').next().unwrap_or(""))
        .collect();
    assert_eq!(probs, ["0.2000000000", "0.2500000000", "0.3333333333", "0.5000000000"]);
    let to_sep = out.lines().filter(|l| l.starts_with("-A KUBE-SVC-") && l.contains("-j KUBE-SEP-")).count();
    assert_eq!(to_sep, 5, "the last endpoint is unconditional:\n{out}");
}

#[test]
fn not_ready_endpoints_are_skipped_and_terminating_ones_used_as_fallback() {
    let mut sp = web();
    sp.endpoints[0].ready = false;
    let out = render(&model(vec![sp.clone()]));
    assert!(!out.contains("10.244.1.2:8080"), "{out}");
    assert!(out.contains("10.244.2.2:8080") && out.contains("10.244.3.2:8080"));
    for e in &mut sp.endpoints {
        e.ready = false;
        e.terminating = true;
        e.serving = false;
    }
    sp.endpoints[2].serving = true;
    let out = render(&model(vec![sp]));
    assert!(out.contains("-j DNAT --to-destination 10.244.3.2:8080"), "{out}");
    assert!(!out.contains("REJECT") && !out.contains("10.244.2.2:8080"), "{out}");
}

#[test]
fn partial_payload_rewrites_only_changed_chains_and_deletes_stale_ones() {
    let other = ServicePort {
        endpoints: vec![ep("10.244.9.9", 80)],
        ..ServicePort::new("ns1", "other", "", ip("10.96.0.99"), 80)
    };
    let before = build(&model(vec![web(), other.clone()]));
    let prev = before.fingerprint();
    assert!(before.restore(Some(&prev), &before.stale_since(&prev)).is_none(), "unchanged: no restore");

    let mut changed = web();
    changed.endpoints.remove(0);
    let after = build(&model(vec![changed, other]));
    let stale = after.stale_since(&prev);
    assert_eq!(stale.len(), 1);
    assert_eq!(stale[0].0, Table::Nat);
    let p = after.restore(Some(&prev), &stale).expect("something changed");
    assert_eq!(
        p.text,
        "*nat\n\
         :KUBE-SVC-4LVCYZMTA5CQO6SX - [0:0]\n\
         :KUBE-SEP-TCHSYJU4C2SBUOO7 - [0:0]\n\
         -A KUBE-SVC-4LVCYZMTA5CQO6SX -m comment --comment \"ns1/web:http cluster IP\" -m tcp -p tcp -d 10.96.0.10 --dport 80 ! -s 10.244.0.0/16 -j KUBE-MARK-MASQ\n\
         -A KUBE-SVC-4LVCYZMTA5CQO6SX -m comment --comment \"ns1/web:http -> 10.244.2.2:8080\" -m statistic --mode random --probability 0.5000000000 -j KUBE-SEP-Z6OJ54VKONQ5FNID\n\
         -A KUBE-SVC-4LVCYZMTA5CQO6SX -m comment --comment \"ns1/web:http -> 10.244.3.2:8080\" -j KUBE-SEP-HGTD7NZYGPFFPAEY\n\
         -X KUBE-SEP-TCHSYJU4C2SBUOO7\n\
         COMMIT\n"
    );
    assert_eq!((p.chains_written, p.chains_deleted), (1, 1));
}
