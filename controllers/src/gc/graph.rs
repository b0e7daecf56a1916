//! The owner graph: every collectable object by uid with its owner references, and for each owner
//! uid the objects that name it. Each change returns the other objects that must be looked at again.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::api::DynamicObject;
use std::collections::{BTreeSet, HashMap, HashSet};

/// The finalizer that makes the collector delete an object's dependents before the object.
pub const FOREGROUND: &str = "foregroundDeletion";
/// The finalizer that makes the collector detach an object's dependents before the object goes.
pub const ORPHAN: &str = "orphan";

/// Where an object lives: its resource (an index into the collector's resource list) and name.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Key {
    pub resource: usize,
    pub namespace: Option<String>,
    pub name: String,
}

/// An object as the collector sees it.
#[derive(Clone, Debug, PartialEq)]
pub struct Node {
    pub key: Key,
    pub uid: String,
    pub owners: Vec<OwnerReference>,
    pub deleting: bool,
    pub finalizers: Vec<String>,
}

impl Node {
    /// `None` for an object without a name or uid (never stored by the apiserver).
    pub fn from_object(resource: usize, obj: &DynamicObject) -> Option<Self> {
        let m = &obj.metadata;
        Some(Self {
            key: Key { resource, namespace: m.namespace.clone(), name: m.name.clone()? },
            uid: m.uid.clone()?,
            owners: m.owner_references.clone().unwrap_or_default(),
            deleting: m.deletion_timestamp.is_some(),
            finalizers: m.finalizers.clone().unwrap_or_default(),
        })
    }

    pub fn has_finalizer(&self, f: &str) -> bool {
        self.finalizers.iter().any(|x| x == f)
    }

    /// Being deleted in the foreground: waiting for its dependents to go first.
    pub fn deleting_dependents(&self) -> bool {
        self.deleting && self.has_finalizer(FOREGROUND)
    }

    /// Being deleted with its dependents orphaned.
    pub fn orphaning(&self) -> bool {
        self.deleting && self.has_finalizer(ORPHAN)
    }

    /// Whether this object's reference to `owner_uid` blocks the owner's foreground deletion.
    pub fn blocks(&self, owner_uid: &str) -> bool {
        self.owners.iter().any(|r| r.uid == owner_uid && r.block_owner_deletion == Some(true))
    }
}

#[derive(Default, Debug)]
pub struct Graph {
    nodes: HashMap<String, Node>,
    /// Owner uid → uids of the objects that reference it (the owner need not be known).
    dependents: HashMap<String, BTreeSet<String>>,
}

impl Graph {
    pub fn node(&self, uid: &str) -> Option<&Node> {
        self.nodes.get(uid)
    }

    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    pub fn is_empty(&self) -> bool {
        self.nodes.is_empty()
    }

    /// The known objects that reference `owner_uid`.
    pub fn dependents(&self, owner_uid: &str) -> Vec<&Node> {
        self.dependents.get(owner_uid).into_iter().flatten().filter_map(|uid| self.nodes.get(uid)).collect()
    }

    /// Records an added or changed object. Returns the other objects to look at again: owners
    /// whose references from it changed (they may be waiting on it), and all its dependents when
    /// it starts deleting them in the foreground.
    pub fn upsert(&mut self, node: Node) -> Vec<Key> {
        let old = self.nodes.remove(&node.uid);
        let mut again = BTreeSet::new();
        let old_owners = old.as_ref().map(|o| o.owners.as_slice()).unwrap_or_default();
        for r in old_owners.iter().filter(|r| !node.owners.contains(r)) {
            again.insert(r.uid.clone());
            if !node.owners.iter().any(|n| n.uid == r.uid) {
                self.unlink(&r.uid, &node.uid);
            }
        }
        for r in &node.owners {
            self.dependents.entry(r.uid.clone()).or_default().insert(node.uid.clone());
        }
        if node.deleting_dependents() && !old.as_ref().is_some_and(Node::deleting_dependents) {
            again.extend(self.dependents.get(&node.uid).into_iter().flatten().cloned());
        }
        self.nodes.insert(node.uid.clone(), node);
        self.keys(again)
    }

    /// Forgets a deleted object. Returns its dependents (their owner is gone) and its owners (one
    /// may have been waiting for it).
    pub fn remove(&mut self, uid: &str) -> Vec<Key> {
        let Some(node) = self.nodes.remove(uid) else { return Vec::new() };
        let mut again: BTreeSet<String> = self.dependents.get(uid).into_iter().flatten().cloned().collect();
        for r in &node.owners {
            self.unlink(&r.uid, uid);
            again.insert(r.uid.clone());
        }
        self.keys(again)
    }

    /// After a relist of `resource`: forgets its objects that were not listed.
    pub fn retain_listed(&mut self, resource: usize, listed: &HashSet<String>) -> Vec<Key> {
        let gone: Vec<String> = self
            .nodes
            .values()
            .filter(|n| n.key.resource == resource && !listed.contains(&n.uid))
            .map(|n| n.uid.clone())
            .collect();
        let mut again = BTreeSet::new();
        for uid in gone {
            again.extend(self.remove(&uid));
        }
        again.into_iter().filter(|k| self.nodes.values().any(|n| &n.key == k)).collect()
    }

    fn unlink(&mut self, owner_uid: &str, dependent_uid: &str) {
        if let Some(set) = self.dependents.get_mut(owner_uid) {
            set.remove(dependent_uid);
            if set.is_empty() {
                self.dependents.remove(owner_uid);
            }
        }
    }

    fn keys(&self, uids: BTreeSet<String>) -> Vec<Key> {
        uids.iter().filter_map(|u| self.nodes.get(u)).map(|n| n.key.clone()).collect()
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    pub fn owner_ref(uid: &str, block: bool) -> OwnerReference {
        OwnerReference {
            api_version: "apps/v1".into(),
            kind: "ReplicaSet".into(),
            name: format!("rs-{uid}"),
            uid: uid.into(),
            controller: Some(true),
            block_owner_deletion: Some(block),
        }
    }

    pub fn node(uid: &str, owners: Vec<OwnerReference>) -> Node {
        Node {
            key: Key { resource: 0, namespace: Some("default".into()), name: format!("n-{uid}") },
            uid: uid.into(),
            owners,
            deleting: false,
            finalizers: Vec::new(),
        }
    }

    fn names(keys: &[Key]) -> Vec<&str> {
        keys.iter().map(|k| k.name.as_str()).collect()
    }

    #[test]
    fn tracks_dependents_even_before_their_owner_is_seen() {
        let mut g = Graph::default();
        assert!(g.upsert(node("pod", vec![owner_ref("rs", true)])).is_empty());
        assert_eq!(g.dependents("rs").len(), 1, "known by owner uid alone");
        g.upsert(node("rs", vec![]));
        assert_eq!(g.dependents("rs")[0].uid, "pod");
    }

    #[test]
    fn deleting_an_owner_revisits_its_dependents_and_a_dependent_its_owners() {
        let mut g = Graph::default();
        g.upsert(node("rs", vec![]));
        g.upsert(node("p1", vec![owner_ref("rs", true)]));
        g.upsert(node("p2", vec![owner_ref("rs", true)]));
        assert_eq!(names(&g.remove("rs")), ["n-p1", "n-p2"]);
        g.upsert(node("rs2", vec![]));
        g.upsert(node("p3", vec![owner_ref("rs2", true)]));
        assert_eq!(names(&g.remove("p3")), ["n-rs2"]);
        assert!(g.dependents("rs2").is_empty());
    }

    #[test]
    fn foreground_deletion_revisits_dependents_once() {
        let mut g = Graph::default();
        g.upsert(node("rs", vec![]));
        g.upsert(node("p1", vec![owner_ref("rs", true)]));
        let mut rs = node("rs", vec![]);
        rs.deleting = true;
        rs.finalizers = vec![FOREGROUND.into()];
        assert_eq!(names(&g.upsert(rs.clone())), ["n-p1"]);
        assert!(g.upsert(rs).is_empty(), "no news the second time");
    }

    #[test]
    fn a_dropped_or_unblocked_reference_revisits_the_owner() {
        let mut g = Graph::default();
        g.upsert(node("rs", vec![]));
        g.upsert(node("p1", vec![owner_ref("rs", true)]));
        assert_eq!(names(&g.upsert(node("p1", vec![owner_ref("rs", false)]))), ["n-rs"]);
        assert_eq!(g.dependents("rs").len(), 1, "still a dependent");
        assert_eq!(names(&g.upsert(node("p1", vec![]))), ["n-rs"]);
        assert!(g.dependents("rs").is_empty());
    }

    #[test]
    fn a_relist_forgets_what_was_deleted_meanwhile() {
        let mut g = Graph::default();
        g.upsert(node("rs", vec![]));
        let mut p = node("p1", vec![owner_ref("rs", true)]);
        p.key.resource = 1;
        g.upsert(p);
        let listed = HashSet::new();
        assert_eq!(names(&g.retain_listed(0, &listed)), ["n-p1"], "the dependent of the vanished owner");
        assert!(g.node("rs").is_none() && g.node("p1").is_some());
    }
}
