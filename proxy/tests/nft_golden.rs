//! Golden-text tests of the nftables mode: the exact `nft -f` transaction `render` writes for
//! each kind of service (`tests/golden/nftables/*.txt`; `KAJI_UPDATE_GOLDEN=1 cargo test -p
//! kaji-proxy --test nft_golden` rewrites them), and the partial transactions a sync plans.

mod common;

use common::golden::assert_golden;
use common::models::{ep, golden_models, ip, model, web};
use kaji_proxy::model::{Model, Protocol, ServicePort};
use kaji_proxy::nftables::plan::{self, Applied, Partial};
use kaji_proxy::nftables::render::{elements, hairpin, render, Key, Map};
use kaji_proxy::nftables::text::Text;
use kaji_proxy::nftables::tx::Tx;

fn applied(m: &Model) -> Applied {
    Applied { model: m.clone(), elements: elements(m).0, hairpin: hairpin(m) }
}

fn plan(before: &Applied, after: &Model) -> Partial {
    plan::partial(before, after, &plan::changes(&before.model, after), &elements(after).0, &hairpin(after))
}

fn text(p: &Partial) -> String {
    let mut text = Text::new(Vec::new());
    Tx::new(&mut text).partial(p).expect("write to a Vec");
    String::from_utf8(text.finish().expect("write to a Vec")).expect("UTF-8")
}

#[test]
fn render_matches_golden_files() {
    for (name, m) in golden_models() {
        assert_golden(&format!("nftables/{name}"), &render(&m));
    }
}

#[test]
fn render_is_deterministic() {
    for (_, m) in golden_models() {
        assert_eq!(render(&m), render(&m.clone()));
    }
}

#[test]
fn endpoints_are_chosen_with_one_over_remaining() {
    let sp = ServicePort {
        endpoints: (1..=5).map(|i| ep(&format!("10.244.0.{i}"), 80)).collect(),
        ..ServicePort::new("ns", "five", "", ip("10.96.0.5"), 80)
    };
    let out = render(&model(vec![sp]));
    let mods: Vec<&str> = out
        .lines()
        .filter_map(|l| l.trim().strip_prefix("numgen random mod "))
        .map(|r| r.split(' ').next().unwrap_or(""))
        .collect();
    assert_eq!(mods, ["5", "4", "3", "2"]);
    let last = out.lines().filter(|l| l.trim().starts_with("meta l4proto tcp dnat to ")).count();
    assert_eq!(last, 1, "the last endpoint is unconditional:\n{out}");
    assert!(!out.contains("chain endpoint-"), "no affinity, no endpoint chains:\n{out}");
}

#[test]
fn not_ready_endpoints_are_skipped_and_terminating_ones_used_as_fallback() {
    let mut sp = web();
    sp.endpoints[0].ready = false;
    let out = render(&model(vec![sp.clone()]));
    assert!(!out.contains("10.244.1.2"), "{out}");
    assert!(out.contains("dnat to 10.244.2.2:8080") && out.contains("dnat to 10.244.3.2:8080"), "{out}");
    for e in &mut sp.endpoints {
        e.ready = false;
        e.terminating = true;
        e.serving = false;
    }
    sp.endpoints[2].serving = true;
    let out = render(&model(vec![sp]));
    assert!(out.contains("meta l4proto tcp dnat to 10.244.3.2:8080"), "{out}");
    assert!(!out.contains(": goto reject-chain,"), "{out}");
    assert!(!out.contains("10.244.2.2"), "{out}");
}

#[test]
fn an_unchanged_model_plans_nothing() {
    for (_, m) in golden_models() {
        let p = plan(&applied(&m), &m);
        assert!(p.is_empty() && !p.model_changed, "{p:?}");
    }
}

#[test]
fn replacing_an_endpoint_rewrites_its_service_chain_and_the_hairpin_set() {
    let before = model(vec![web()]);
    let mut changed = web();
    changed.endpoints[0] = ep("10.244.1.9", 8080);
    let p = plan(&applied(&before), &model(vec![changed]));
    assert_eq!(
        text(&p),
        "flush chain ip kaji-proxy service-DK7ABAZC-ns1/web/tcp/http\n\
         table ip kaji-proxy {\n\
         \tchain service-DK7ABAZC-ns1/web/tcp/http {\n\
         \t\tip daddr 10.96.0.10 tcp dport 80 ip saddr != 10.244.0.0/16 jump mark-for-masquerade\n\
         \t\tnumgen random mod 3 == 0 meta l4proto tcp dnat to 10.244.1.9:8080\n\
         \t\tnumgen random mod 2 == 0 meta l4proto tcp dnat to 10.244.2.2:8080\n\
         \t\tmeta l4proto tcp dnat to 10.244.3.2:8080\n\
         \t}\n\
         }\n\
         delete element ip kaji-proxy hairpin {\n\
         \t\t10.244.1.2 . 10.244.1.2,\n\
         \t}\n\
         add set ip kaji-proxy hairpin { type ipv4_addr . ipv4_addr; \
         comment \"endpoints, to masquerade traffic they send themselves\"; elements = {\n\
         \t\t10.244.1.9 . 10.244.1.9,\n\
         \t}; }\n"
    );
    assert!(p.stale_chains.is_empty(), "{p:?}");
}

#[test]
fn with_session_affinity_replacing_an_endpoint_deletes_its_chain_and_set() {
    let affine = || ServicePort { affinity_timeout: Some(10800), ..web() };
    let before = model(vec![affine()]);
    let mut changed = affine();
    changed.endpoints[0] = ep("10.244.1.9", 8080);
    let p = plan(&applied(&before), &model(vec![changed]));
    let out = text(&p);
    let at = |s: &str| out.find(s).unwrap_or_else(|| panic!("{s:?} missing from:\n{out}"));
    let new_set = at("\tset affinity-2JLGCGR2-ns1/web/tcp/http__10.244.1.9/8080 {");
    let new_chain = at("\tchain endpoint-2JLGCGR2-ns1/web/tcp/http__10.244.1.9/8080 {");
    let service = at("\tchain service-DK7ABAZC-ns1/web/tcp/http {");
    let delete = at("delete chain ip kaji-proxy endpoint-R6EW3KCZ-ns1/web/tcp/http__10.244.1.2/8080");
    let delete_set = at("delete set ip kaji-proxy affinity-R6EW3KCZ-ns1/web/tcp/http__10.244.1.2/8080");
    assert!(new_set < new_chain && new_chain < service && service < delete && delete < delete_set, "{out}");
    assert_eq!(p.stale_chains.len(), 1, "{p:?}");
}

#[test]
fn removing_a_service_deletes_its_elements_then_its_chains() {
    let other = ServicePort {
        node_port: Some(30099),
        endpoints: vec![ep("10.244.9.9", 80)],
        ..ServicePort::new("ns1", "other", "", ip("10.96.0.99"), 80)
    };
    let state = applied(&model(vec![web(), other.clone()]));
    let p = plan(&state, &model(vec![web()]));
    let out = text(&p);
    let at = |s: &str| out.find(s).unwrap_or_else(|| panic!("{s:?} missing from:\n{out}"));
    let element = at("delete element ip kaji-proxy service-ips {\n\t\t10.96.0.99 . tcp . 80,\n\t}");
    let nodeport = at("delete element ip kaji-proxy service-nodeports {\n\t\ttcp . 30099,\n\t}");
    let flush = at("flush chain ip kaji-proxy service-");
    let last_flush = out.rfind("flush chain").expect("flushes");
    let delete = at("delete chain ip kaji-proxy ");
    assert!(element < flush && nodeport < flush && last_flush < delete, "{out}");
    assert_eq!(p.stale_chains.len(), 2, "service and external chain: {p:?}");
    assert_eq!(out.matches("delete chain").count(), 2, "{out}");
    assert!(out.contains("delete element ip kaji-proxy hairpin {\n\t\t10.244.9.9 . 10.244.9.9,\n\t}"), "{out}");
    assert!(!out.contains("add map") && !out.contains("table ip"), "nothing to add:\n{out}");
}

#[test]
fn losing_every_endpoint_moves_the_cluster_ip_to_the_reject_map() {
    let before = model(vec![web()]);
    let empty = ServicePort { endpoints: vec![], ..web() };
    let p = plan(&applied(&before), &model(vec![empty]));
    let out = text(&p);
    assert!(out.contains("delete element ip kaji-proxy service-ips {\n\t\t10.96.0.10 . tcp . 80,\n\t}"), "{out}");
    assert!(out.contains("\t\t10.96.0.10 . tcp . 80 comment \"ns1/web:http\" : goto reject-chain,\n"), "{out}");
    assert_eq!(p.stale_chains.len(), 1, "the service chain: {out}");
    assert!(out.contains("delete element ip kaji-proxy hairpin {"), "{out}");
}

#[test]
fn conflicting_external_ips_keep_the_first_service() {
    let a = ServicePort {
        external_ips: vec![ip("192.0.2.1")],
        endpoints: vec![ep("10.244.1.1", 80)],
        ..ServicePort::new("ns", "a", "", ip("10.96.0.1"), 80)
    };
    let b = ServicePort { cluster_ip: ip("10.96.0.2"), name: "b".into(), ..a.clone() };
    let (els, conflicts) = elements(&model(vec![a, b]));
    let verdict = els[&(Map::ServiceIps, Key::Ip(ip("192.0.2.1"), Protocol::Tcp, 80))].to_string();
    assert!(verdict.contains("-ns/a/tcp/"), "{verdict}");
    assert_eq!(conflicts.len(), 1, "{conflicts:?}");
    assert!(conflicts[0].contains("ns/b"), "{conflicts:?}");
}

/// Sorted models (the proxy's) are compared in one pass; any others through an index. Both
/// plan the same changes.
#[test]
fn sorted_and_unsorted_models_plan_the_same_changes() {
    let svc = |name: &str, ip: &str, eps: &[&str]| ServicePort {
        endpoints: eps.iter().map(|e| ep(e, 80)).collect(),
        ..ServicePort::new("ns", name, "", self::ip(ip), 80)
    };
    let before = vec![
        svc("a", "10.96.0.1", &["10.244.1.1"]),
        svc("b", "10.96.0.2", &["10.244.1.2"]),
        svc("d", "10.96.0.4", &[]),
    ];
    let after = vec![
        svc("a", "10.96.0.1", &["10.244.1.1"]),
        svc("c", "10.96.0.3", &["10.244.1.3"]),
        svc("d", "10.96.0.4", &["10.244.1.4"]),
    ];
    let summary = |p: Partial| {
        let mut chains: Vec<String> = p.chains.iter().map(|c| c.name.clone()).collect();
        let (mut flush, mut stale) = (p.flush, p.stale_chains);
        let mut del: Vec<String> = p.delete_elements.iter().map(|(m, k)| format!("{} {k}", m.name())).collect();
        let mut add: Vec<String> = p.add_elements.iter().map(|(m, k, v)| format!("{} {k} {v}", m.name())).collect();
        for v in [&mut chains, &mut flush, &mut stale, &mut del, &mut add] {
            v.sort();
        }
        (chains, flush, stale, del, add, p.delete_hairpin, p.add_hairpin)
    };
    let sorted = summary(plan(&applied(&model(before.clone())), &model(after.clone())));
    let reversed = |mut v: Vec<ServicePort>| {
        v.reverse();
        model(v)
    };
    let unsorted = summary(plan(&applied(&reversed(before)), &reversed(after)));
    assert_eq!(sorted, unsorted);
    assert_eq!(sorted.2.len(), 1, "b's chain goes: {sorted:?}");
    assert_eq!((sorted.3.len(), sorted.4.len()), (2, 2), "b out, c in, d from reject to its chain: {sorted:?}");
}

/// A partial sync carries the map elements of unchanged service ports over; the result is what
/// building them all gives, and it declines whenever an address is claimed twice.
#[test]
fn carried_elements_are_the_elements_built_from_scratch() {
    let svc = |name: &str, ip: &str, eps: &[&str]| ServicePort {
        endpoints: eps.iter().map(|e| ep(e, 80)).collect(),
        node_port: (name == "b").then_some(30080),
        ..ServicePort::new("ns", name, "", self::ip(ip), 80)
    };
    let steps = [
        vec![
            svc("a", "10.96.0.1", &["10.244.1.1"]),
            svc("b", "10.96.0.2", &["10.244.1.2"]),
            svc("c", "10.96.0.3", &[]),
        ],
        // b loses its endpoints (reject map), c gains one, d arrives.
        vec![
            svc("a", "10.96.0.1", &["10.244.1.1"]),
            svc("b", "10.96.0.2", &[]),
            svc("c", "10.96.0.3", &["10.244.1.3"]),
            svc("d", "10.96.0.4", &["10.244.1.4"]),
        ],
        // a leaves, d takes the ClusterIP a had (a key moving between two changed services).
        vec![
            svc("b", "10.96.0.2", &[]),
            svc("c", "10.96.0.3", &["10.244.1.3"]),
            svc("d", "10.96.0.1", &["10.244.1.4"]),
        ],
    ];
    let mut before = applied(&model(steps[0].clone()));
    for step in &steps[1..] {
        let after = model(step.clone());
        let carried =
            plan::carried_elements(&before, &plan::changes(&before.model, &after)).expect("nothing contested");
        assert_eq!(carried, elements(&after).0);
        before = applied(&after);
    }
    // An external IP claimed by a second service: the full build decides, not the carry.
    let x = ServicePort { external_ips: vec![ip("192.0.2.9")], ..svc("x", "10.96.0.9", &["10.244.9.9"]) };
    let y = ServicePort { external_ips: vec![ip("192.0.2.9")], ..svc("y", "10.96.0.10", &["10.244.9.10"]) };
    let (one, two) = (model(vec![x.clone()]), model(vec![x, y]));
    assert_eq!(plan::carried_elements(&applied(&one), &plan::changes(&one, &two)), None);
}
