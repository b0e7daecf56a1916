//! What the collector does with one object, given how each of its owner references resolved —
//! Kubernetes' attemptToDeleteItem and processDeletingDependentsItem as pure functions.

use super::graph::{Node, FOREGROUND, ORPHAN};
use kube::api::PropagationPolicy;

/// How one owner reference resolved.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Owner {
    /// The owner exists with the referenced uid and is not deleting its dependents.
    Solid,
    /// Nothing with that name and uid exists.
    Dangling,
    /// The owner exists and is deleting its dependents in the foreground.
    Waiting,
}

#[derive(Clone, Debug, PartialEq)]
pub enum Verdict {
    /// An owner keeps it and no reference needs dropping.
    Keep,
    /// Some owner keeps it: drop the references (by owner uid) to gone and foreground-deleting
    /// owners, or the latter would wait for it forever.
    DropRefs(Vec<String>),
    /// No owner keeps it. `unblock` first clears blockOwnerDeletion on its own references (one of
    /// its dependents is itself deleting in the foreground: a possible cycle).
    Delete { policy: PropagationPolicy, unblock: bool },
}

/// The verdict on a live object with owner references. `owners` holds each reference's owner uid
/// and how it resolved; `dependents` are the objects that reference `item`.
pub fn verdict(item: &Node, owners: &[(String, Owner)], dependents: &[&Node]) -> Verdict {
    let uids = |want: &[Owner]| -> Vec<String> {
        owners.iter().filter(|(_, o)| want.contains(o)).map(|(uid, _)| uid.clone()).collect()
    };
    let solid = owners.iter().any(|(_, o)| *o == Owner::Solid);
    let waiting = owners.iter().any(|(_, o)| *o == Owner::Waiting);
    if solid {
        let drop = uids(&[Owner::Dangling, Owner::Waiting]);
        return if drop.is_empty() { Verdict::Keep } else { Verdict::DropRefs(drop) };
    }
    if waiting && !dependents.is_empty() {
        // Deleted in the foreground too, so the owner waits for the whole subtree.
        let unblock = dependents.iter().any(|d| d.deleting_dependents());
        return Verdict::Delete { policy: PropagationPolicy::Foreground, unblock };
    }
    let policy = if item.has_finalizer(ORPHAN) {
        PropagationPolicy::Orphan
    } else if item.has_finalizer(FOREGROUND) {
        PropagationPolicy::Foreground
    } else {
        PropagationPolicy::Background
    };
    Verdict::Delete { policy, unblock: false }
}

/// What an owner deleting in the foreground still waits for: the dependents whose reference to it
/// has blockOwnerDeletion set. When none remain, its `foregroundDeletion` finalizer comes off.
pub fn blocking<'a>(owner: &Node, dependents: &[&'a Node]) -> Vec<&'a Node> {
    dependents.iter().copied().filter(|d| d.blocks(&owner.uid)).collect()
}

#[cfg(test)]
mod tests {
    use super::super::graph::tests::{node, owner_ref};
    use super::*;

    fn owners(list: &[(&str, Owner)]) -> Vec<(String, Owner)> {
        list.iter().map(|(u, o)| (u.to_string(), *o)).collect()
    }

    #[test]
    fn verdicts_follow_attempt_to_delete_item() {
        use Owner::*;
        let pod = node("pod", vec![owner_ref("a", true), owner_ref("b", true)]);
        let child = node("child", vec![owner_ref("pod", true)]);
        let background = Verdict::Delete { policy: PropagationPolicy::Background, unblock: false };
        type Case<'a> = (&'a str, Vec<(String, Owner)>, Vec<&'a Node>, Verdict);
        let cases: Vec<Case<'_>> = vec![
            ("all owners live", owners(&[("a", Solid), ("b", Solid)]), vec![], Verdict::Keep),
            ("one owner gone", owners(&[("a", Solid), ("b", Dangling)]), vec![], Verdict::DropRefs(vec!["b".into()])),
            (
                "a live owner and a foreground one",
                owners(&[("a", Waiting), ("b", Solid)]),
                vec![],
                Verdict::DropRefs(vec!["a".into()]),
            ),
            ("all owners gone", owners(&[("a", Dangling), ("b", Dangling)]), vec![], background.clone()),
            (
                "owner deleting in the foreground, no dependents",
                owners(&[("a", Waiting), ("b", Dangling)]),
                vec![],
                background,
            ),
            (
                "owner deleting in the foreground, with dependents",
                owners(&[("a", Waiting)]),
                vec![&child],
                Verdict::Delete { policy: PropagationPolicy::Foreground, unblock: false },
            ),
        ];
        for (name, owners, deps, want) in cases {
            assert_eq!(verdict(&pod, &owners, &deps), want, "{name}");
        }
    }

    #[test]
    fn a_dependent_deleting_in_the_foreground_is_unblocked_first() {
        let rs = node("rs", vec![owner_ref("d", true)]);
        let mut pod = node("pod", vec![owner_ref("rs", true)]);
        pod.deleting = true;
        pod.finalizers = vec![FOREGROUND.into()];
        let got = verdict(&rs, &owners(&[("d", Owner::Waiting)]), &[&pod]);
        assert_eq!(got, Verdict::Delete { policy: PropagationPolicy::Foreground, unblock: true });
    }

    #[test]
    fn an_orphaned_object_keeps_its_own_gc_finalizer_policy() {
        let mut cm = node("cm", vec![owner_ref("a", false)]);
        cm.finalizers = vec![ORPHAN.into()];
        let got = verdict(&cm, &owners(&[("a", Owner::Dangling)]), &[]);
        assert_eq!(got, Verdict::Delete { policy: PropagationPolicy::Orphan, unblock: false });
    }

    #[test]
    fn only_blocking_references_hold_a_foreground_deletion() {
        let rs = node("rs", vec![]);
        let blocking_pod = node("p1", vec![owner_ref("rs", true)]);
        let free_pod = node("p2", vec![owner_ref("rs", false)]);
        let held: Vec<&str> = blocking(&rs, &[&blocking_pod, &free_pod]).iter().map(|n| n.uid.as_str()).collect();
        assert_eq!(held, ["p1"]);
    }
}
