//! What a sync must change: the state the last successful transaction left against a new model.
//! Pure; `sync` writes the plan out as one transaction, in which stale chains and sets are
//! deleted after the rules and map elements that referred to them.

use crate::model::{Model, Protocol, ServicePort};
use crate::nftables::render::{
    object_names, service_elements, service_objects, Chain, Elements, Hairpin, Key, Map, ServiceObjects, Verdict,
};
use crate::nftables::tx::FIXED_CHAINS;
use std::collections::{BTreeSet, HashMap, HashSet};
use std::net::Ipv4Addr;

/// What the kernel holds after the last successful transaction.
#[derive(Clone, Debug, Default)]
pub struct Applied {
    pub model: Model,
    pub elements: Elements,
    pub hairpin: Hairpin,
}

/// A partial sync's changes.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Partial {
    /// Existing chains whose rules change: emptied, then rewritten with `chains`.
    pub flush: Vec<String>,
    /// New affinity sets.
    pub sets: Vec<String>,
    /// New and changed chains, each after the chains it jumps to.
    pub chains: Vec<Chain>,
    pub delete_elements: Vec<(Map, Key)>,
    pub add_elements: Vec<(Map, Key, Verdict)>,
    /// Endpoint addresses leaving and joining the hairpin set.
    pub delete_hairpin: Vec<Ipv4Addr>,
    pub add_hairpin: Vec<Ipv4Addr>,
    /// Chains no service port has any more: emptied, then deleted.
    pub stale_chains: Vec<String>,
    /// Affinity sets no endpoint has any more.
    pub stale_sets: Vec<String>,
    /// Some service port differs from the applied one (even if its rules do not).
    pub model_changed: bool,
}

impl Partial {
    /// Nothing for `nft` to do.
    pub fn is_empty(&self) -> bool {
        self.flush.is_empty()
            && self.sets.is_empty()
            && self.chains.is_empty()
            && self.delete_elements.is_empty()
            && self.add_elements.is_empty()
            && self.delete_hairpin.is_empty()
            && self.add_hairpin.is_empty()
            && self.stale_chains.is_empty()
            && self.stale_sets.is_empty()
    }
}

type PortKey<'a> = (&'a str, &'a str, &'a str, Protocol);

fn key(sp: &ServicePort) -> PortKey<'_> {
    (&sp.namespace, &sp.name, &sp.port_name, sp.protocol)
}

fn index(model: &Model) -> HashMap<PortKey<'_>, &ServicePort> {
    model.services.iter().map(|sp| (key(sp), sp)).collect()
}

/// Whether `model`'s service ports are in strictly increasing key order (as the proxy builds
/// its models), so two of them can be compared in one pass without an index.
fn sorted(model: &Model) -> bool {
    model.services.windows(2).all(|w| key(&w[0]) < key(&w[1]))
}

/// Walks `old` and `new`, both in increasing `key` order, side by side: `f` gets each item only
/// one of them has (the other `None`) and each pair with equal keys, in key order.
fn merge<T, K: Ord>(
    old: impl Iterator<Item = T>,
    new: impl Iterator<Item = T>,
    key: impl Fn(&T) -> K,
    mut f: impl FnMut(Option<T>, Option<T>),
) {
    let (mut old, mut new) = (old.peekable(), new.peekable());
    loop {
        let order = match (old.peek(), new.peek()) {
            (None, None) => return,
            (Some(o), Some(n)) => key(o).cmp(&key(n)),
            (Some(_), None) => std::cmp::Ordering::Less,
            (None, Some(_)) => std::cmp::Ordering::Greater,
        };
        match order {
            std::cmp::Ordering::Less => f(old.next(), None),
            std::cmp::Ordering::Greater => f(None, new.next()),
            std::cmp::Ordering::Equal => f(old.next(), new.next()),
        }
    }
}

/// A service port that differs between two models: before, after (`None`: only one side has it).
pub type Change<'a> = (Option<&'a ServicePort>, Option<&'a ServicePort>);

/// The service ports that differ from `old` to `new`. At 10,000 services this runs on every
/// sync, so sorted models (the proxy's) are walked side by side (in key order) rather than
/// indexed and looked up (model order, then what left).
pub fn changes<'a>(old: &'a Model, new: &'a Model) -> Vec<Change<'a>> {
    let mut out = Vec::new();
    if sorted(old) && sorted(new) {
        merge(
            old.services.iter(),
            new.services.iter(),
            |sp| key(sp),
            |o, n| {
                if o != n {
                    out.push((o, n));
                }
            },
        );
    } else {
        let index = index(old);
        let mut seen = HashSet::with_capacity(new.services.len());
        for sp in &new.services {
            seen.insert(key(sp));
            match index.get(&key(sp)) {
                Some(o) if *o == sp => {}
                o => out.push((o.copied(), Some(sp))),
            }
        }
        out.extend(old.services.iter().filter(|o| !seen.contains(&key(o))).map(|o| (Some(o), None)));
    }
    out
}

/// The partial sync from `applied` to `model` (whose service ports differ by `changes`, its
/// elements are `elements`, hairpin set `hairpin`). Both models must have the same masquerade
/// settings (otherwise every chain changes: sync fully).
pub fn partial(
    applied: &Applied,
    model: &Model,
    changes: &[Change<'_>],
    elements: &Elements,
    hairpin: &Hairpin,
) -> Partial {
    let mut p = Partial { model_changed: !changes.is_empty(), ..Partial::default() };
    for (before, after) in changes {
        let before = before.map(|o| service_objects(&applied.model, o)).unwrap_or_default();
        let after = after.map(|sp| service_objects(model, sp)).unwrap_or_default();
        diff_service(&mut p, before, after);
    }

    // Both maps are ordered by key: one merge finds what left, changed and arrived.
    merge(
        applied.elements.iter(),
        elements.iter(),
        |(mk, _)| **mk,
        |o, n| match (o, n) {
            (Some((_, ov)), Some((_, nv))) if ov == nv => {}
            (o, n) => {
                if let Some((mk, _)) = o {
                    p.delete_elements.push(*mk);
                }
                if let Some((mk, v)) = n {
                    p.add_elements.push((mk.0, mk.1, v.clone()));
                }
            }
        },
    );
    p.delete_hairpin = applied.hairpin.difference(hairpin).copied().collect();
    p.add_hairpin = hairpin.difference(&applied.hairpin).copied().collect();
    p
}

/// The map elements of the model `changes` lead to from `applied`, carried over from `applied`'s:
/// those of the service ports that changed taken out and put back as they are now, the rest kept —
/// what `render::elements` builds, without naming every service port again (a SHA-256 each: 12 ms
/// of a partial sync at 10,000). `None` (build them all) when a key is claimed twice: which service
/// keeps a contested key depends on model order, which only the full build knows.
pub fn carried_elements(applied: &Applied, changes: &[Change<'_>]) -> Option<Elements> {
    let mut out = applied.elements.clone();
    let mut clean = true;
    for o in changes.iter().filter_map(|(o, _)| *o) {
        // Each key it had must still be its own (same verdict: the names are the service's).
        service_elements(o, |map, key, v| clean &= out.remove(&(map, key)).is_some_and(|had| had == v));
    }
    for n in changes.iter().filter_map(|(_, n)| *n) {
        service_elements(n, |map, key, v| clean &= out.insert((map, key), v).is_none());
    }
    clean.then_some(out)
}

/// One service port's chains and sets, before and after.
fn diff_service(p: &mut Partial, before: ServiceObjects, after: ServiceObjects) {
    for set in &after.sets {
        if !before.sets.contains(set) {
            p.sets.push(set.clone());
        }
    }
    for set in before.sets {
        if !after.sets.contains(&set) {
            p.stale_sets.push(set);
        }
    }
    for b in &before.chains {
        if !after.chains.iter().any(|c| c.name == b.name) {
            p.stale_chains.push(b.name.clone());
        }
    }
    for c in after.chains {
        match before.chains.iter().find(|b| b.name == c.name) {
            Some(b) if b.rules == c.rules => {}
            Some(_) => {
                p.flush.push(c.name.clone());
                p.chains.push(c);
            }
            None => p.chains.push(c),
        }
    }
}

/// Chains and sets a full sync deletes, the applied state known: those of service ports that
/// are gone or changed and not wanted any more.
pub fn stale_since(applied: &Applied, model: &Model) -> (Vec<String>, Vec<String>) {
    let new = index(model);
    let mut chains = BTreeSet::new();
    let mut sets = BTreeSet::new();
    for o in &applied.model.services {
        let (now_chains, now_sets) = match new.get(&key(o)) {
            Some(n) if *n == o => continue,
            Some(n) => object_names(n),
            None => (Vec::new(), Vec::new()),
        };
        let (old_chains, old_sets) = object_names(o);
        chains.extend(old_chains.into_iter().filter(|c| !now_chains.contains(c)));
        sets.extend(old_sets.into_iter().filter(|s| !now_sets.contains(s)));
    }
    (chains.into_iter().collect(), sets.into_iter().collect())
}

/// Chains and sets a full sync deletes when only the kernel knows what is there: everything
/// listed that `model` does not want.
pub fn stale_listed(listed_chains: Vec<String>, listed_sets: Vec<String>, model: &Model) -> (Vec<String>, Vec<String>) {
    let mut chains: HashSet<String> = listed_chains.into_iter().collect();
    let mut sets: HashSet<String> = listed_sets.into_iter().collect();
    for name in FIXED_CHAINS {
        chains.remove(name);
    }
    for map in Map::ALL {
        sets.remove(map.name());
    }
    for sp in &model.services {
        let (c, s) = object_names(sp);
        for name in c {
            chains.remove(&name);
        }
        for name in s {
            sets.remove(&name);
        }
    }
    let mut chains: Vec<String> = chains.into_iter().collect();
    let mut sets: Vec<String> = sets.into_iter().collect();
    chains.sort();
    sets.sort();
    (chains, sets)
}
