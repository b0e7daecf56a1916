//! Field ownership (`metadata.managedFields`) and server-side apply, as Kubernetes'
//! structured-merge-diff: the pure decisions; the registry reads and writes.

pub mod entries;
pub mod fieldpath;
pub mod schema;
pub mod value;

use entries::{Entry, Operation};
use fieldpath::{display, FieldSet};
use serde_json::Value;

/// Who writes: the manager name, the operation, and where.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Writer {
    pub manager: String,
    pub operation: Operation,
    pub api_version: String,
    /// `""`, `status` or `scale`.
    pub subresource: String,
}

impl Writer {
    fn entry(&self, fields: FieldSet, time: Option<String>) -> Entry {
        Entry {
            manager: self.manager.clone(),
            operation: self.operation,
            api_version: self.api_version.clone(),
            time,
            subresource: self.subresource.clone(),
            fields,
        }
    }
}

/// A field another manager owns that the apply would change.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Conflict {
    /// As Kubernetes names it: `"kubectl-client-side-apply" using apps/v1`.
    pub manager: String,
    /// `.spec.replicas`
    pub field: String,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    #[error("{}", conflict_message(.0))]
    Conflicts(Vec<Conflict>),
    /// The applied configuration cannot be merged (a keyed list item without its key...).
    #[error("{0}")]
    Invalid(String),
}

/// Kubernetes' wording: one conflict on one line, several grouped by manager.
pub fn conflict_message(c: &[Conflict]) -> String {
    if let [one] = c {
        return format!("Apply failed with 1 conflict: conflict with {}: {}", one.manager, one.field);
    }
    let mut lines = Vec::new();
    let mut last: Option<&str> = None;
    for x in c {
        if last != Some(x.manager.as_str()) {
            lines.push(format!("conflicts with {}:", x.manager));
            last = Some(&x.manager);
        }
        lines.push(format!("- {}", x.field));
    }
    format!("Apply failed with {} conflicts: {}", c.len(), lines.join("\n"))
}

/// The outcome of an apply: the merged object (without managedFields) and the new entries.
#[derive(Debug, Clone, PartialEq)]
pub struct Applied {
    pub object: Value,
    pub entries: Vec<Entry>,
}

/// How an apply may treat conflicts, and when it happens.
#[derive(Debug, Clone, Copy)]
pub struct Options<'a> {
    /// Take fields over from other managers instead of failing.
    pub force: bool,
    /// Conflicts that may be overridden without `force` (the fields of a client-side apply's
    /// last-applied configuration, for kubectl).
    pub allowed: Option<&'a FieldSet>,
    /// The time recorded in the applier's entry.
    pub now: &'a str,
}

/// Apply `config` for `who` to `live`, given the current `managers`.
pub fn apply(
    kind: &str,
    live: &Value,
    config: &Value,
    managers: Vec<Entry>,
    who: &Writer,
    opts: &Options<'_>,
) -> Result<Applied, Error> {
    let Options { force, allowed, now } = *opts;
    let config_set = value::to_set(kind, config, true).map_err(Error::Invalid)?;
    let mut merged = value::merge(kind, live, config).map_err(Error::Invalid)?;
    let me = who.entry(FieldSet::new(), None);
    let (mine, mut others): (Vec<Entry>, Vec<Entry>) = managers.into_iter().partition(|e| e.same_manager(&me));
    let previous = mine.into_iter().next();

    // Fields this manager applied before and left out now, that nobody else claims, go.
    let mut keep: FieldSet = others.iter().flat_map(|e| e.fields.iter().cloned()).collect();
    keep.extend(config_set.iter().cloned());
    if let Some(prev) = &previous {
        let gone: FieldSet = prev.fields.difference(&keep).cloned().collect();
        value::prune(kind, &mut merged, &gone, &keep);
    }

    let diff = value::compare(kind, live, &merged);
    let changed: FieldSet = diff
        .modified
        .iter()
        .chain(&diff.added)
        .cloned()
        .chain(diff.removed.intersection(&config_set).cloned())
        .collect();
    let mut conflicts = Vec::new();
    for e in &others {
        for p in e.fields.intersection(&changed) {
            conflicts.push((e.describe(), p.clone()));
        }
    }
    let allowed_all = allowed.is_some_and(|a| conflicts.iter().all(|(_, p)| a.contains(p)));
    if !conflicts.is_empty() && !force && !allowed_all {
        let mut c: Vec<Conflict> = conflicts
            .into_iter()
            .filter(|(_, p)| !allowed.is_some_and(|a| a.contains(p)))
            .map(|(manager, p)| Conflict { manager, field: display(&p) })
            .collect();
        c.sort_by(|a, b| (&a.manager, &a.field).cmp(&(&b.manager, &b.field)));
        return Err(Error::Conflicts(c));
    }
    // Forced (or allowed): the others lose what changed; everyone loses what is gone.
    for e in &mut others {
        e.fields.retain(|p| !changed.contains(p) && !diff.removed.contains(p));
    }
    others.retain(|e| !e.fields.is_empty());
    let time = match &previous {
        Some(p) if merged == *live && p.fields == config_set => p.time.clone(),
        _ => Some(now.to_string()),
    };
    if !config_set.is_empty() {
        others.push(who.entry(config_set, time));
    }
    Ok(Applied { object: merged, entries: others })
}

/// Record a non-apply write from `old` to `new` for `who`: it takes every field it changed
/// (from whoever owned it) and keeps what it owned before, minus fields that are gone.
pub fn update(kind: &str, old: &Value, new: &Value, managers: Vec<Entry>, who: &Writer, now: &str) -> Vec<Entry> {
    let diff = value::compare(kind, old, new);
    let changed: FieldSet = diff.modified.union(&diff.added).cloned().collect();
    let me = who.entry(FieldSet::new(), None);
    let mut mine: Option<Entry> = None;
    let mut out = Vec::with_capacity(managers.len() + 1);
    for mut e in managers {
        e.fields.retain(|p| !changed.contains(p) && !diff.removed.contains(p));
        if e.same_manager(&me) {
            mine = Some(e);
        } else if !e.fields.is_empty() {
            out.push(e);
        }
    }
    if !changed.is_empty() {
        let mut fields = mine.map(|m| m.fields).unwrap_or_default();
        fields.extend(changed);
        out.push(who.entry(fields, Some(now.to_string())));
    } else if let Some(m) = mine.filter(|m| !m.fields.is_empty()) {
        out.push(m);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const NOW: &str = "2026-01-01T00:00:00Z";
    const LATER: &str = "2026-01-01T00:01:00Z";

    fn writer(manager: &str, operation: Operation) -> Writer {
        Writer { manager: manager.into(), operation, api_version: "apps/v1".into(), subresource: String::new() }
    }

    fn config(replicas: i64, image: &str, env: Value) -> Value {
        json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web", "labels": {"app": "web"}},
               "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": "web"}},
                        "template": {"spec": {"containers": [{"name": "web", "image": image, "env": env}]}}}})
    }

    fn at(now: &str) -> Options<'_> {
        Options { force: false, allowed: None, now }
    }

    fn empty() -> Value {
        json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web"}})
    }

    fn fields(entries: &[Entry], manager: &str) -> Vec<String> {
        entries.iter().filter(|e| e.manager == manager).flat_map(|e| e.fields.iter().map(|p| display(p))).collect()
    }

    #[test]
    fn applying_owns_exactly_the_applied_fields() {
        let cfg = config(2, "nginx:1.25", json!([{"name": "A", "value": "1"}]));
        let out = apply("Deployment", &empty(), &cfg, vec![], &writer("kubectl", Operation::Apply), &at(NOW))
            .expect("applies");
        assert_eq!(out.object["spec"]["replicas"], 2);
        let [e] = out.entries.as_slice() else { panic!("one entry: {:?}", out.entries) };
        assert_eq!((e.operation, e.time.as_deref()), (Operation::Apply, Some(NOW)));
        let owned = fields(&out.entries, "kubectl");
        assert!(owned.contains(&".spec.replicas".to_string()) && owned.contains(&".metadata.labels.app".to_string()));
        assert!(!owned.iter().any(|f| f.starts_with(".metadata.name") || f == ".apiVersion"), "{owned:?}");
    }

    #[test]
    fn fields_left_out_of_a_new_apply_are_removed() {
        let who = writer("kubectl", Operation::Apply);
        let v1 = config(2, "nginx:1.25", json!([{"name": "A", "value": "1"}, {"name": "B", "value": "2"}]));
        let first = apply("Deployment", &empty(), &v1, vec![], &who, &at(NOW)).expect("applies");
        let v2 = config(2, "nginx:1.26", json!([{"name": "B", "value": "2"}]));
        let second = apply("Deployment", &first.object, &v2, first.entries, &who, &at(LATER)).expect("applies");
        let c = &second.object["spec"]["template"]["spec"]["containers"][0];
        assert_eq!(c["image"], "nginx:1.26");
        assert_eq!(c["env"], json!([{"name": "B", "value": "2"}]), "A is gone");
        assert!(!fields(&second.entries, "kubectl").iter().any(|f| f.contains(r#"[name="A"]"#)));
        assert_eq!(second.entries[0].time.as_deref(), Some(LATER));
        // The same config again changes nothing, not even the time.
        let third = apply("Deployment", &second.object, &v2, second.entries.clone(), &who, &at("2027-01-01T00:00:00Z"))
            .expect("applies");
        assert_eq!(third, Applied { object: second.object, entries: second.entries });
    }

    #[test]
    fn a_different_value_for_another_managers_field_is_a_conflict_unless_forced() {
        let applier = writer("kubectl", Operation::Apply);
        let cfg = config(2, "nginx:1.25", json!([]));
        let first = apply("Deployment", &empty(), &cfg, vec![], &applier, &at(NOW)).expect("applies");
        let mut scaled = first.object.clone();
        scaled["spec"]["replicas"] = 5.into();
        let scaler = Writer { subresource: "scale".into(), ..writer("kubectl-scale", Operation::Update) };
        let entries = update("Deployment", &first.object, &scaled, first.entries, &scaler, LATER);
        assert_eq!(fields(&entries, "kubectl-scale"), [".spec.replicas"]);
        assert!(!fields(&entries, "kubectl").contains(&".spec.replicas".to_string()), "the update took it");

        let err = apply("Deployment", &scaled, &cfg, entries.clone(), &applier, &at(LATER)).expect_err("conflict");
        assert_eq!(
            err.to_string(),
            "Apply failed with 1 conflict: \
             conflict with \"kubectl-scale\" with subresource \"scale\" using apps/v1: .spec.replicas"
        );
        let forced = apply("Deployment", &scaled, &cfg, entries, &applier, &Options { force: true, ..at(LATER) })
            .expect("forced");
        assert_eq!(forced.object["spec"]["replicas"], 2);
        assert!(
            forced.entries.iter().all(|e| e.manager == "kubectl"),
            "the scaler owned nothing else: {:?}",
            forced.entries
        );
    }

    #[test]
    fn the_same_value_is_shared_and_survives_one_owner_leaving() {
        let cfg = config(2, "nginx:1.25", json!([]));
        let a = writer("a", Operation::Apply);
        let b = writer("b", Operation::Apply);
        let first = apply("Deployment", &empty(), &cfg, vec![], &a, &at(NOW)).expect("applies");
        let only_replicas = json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web"}, "spec": {"replicas": 2}});
        let shared =
            apply("Deployment", &first.object, &only_replicas, first.entries, &b, &at(NOW)).expect("no conflict");
        assert!(fields(&shared.entries, "a").contains(&".spec.replicas".to_string()));
        assert_eq!(fields(&shared.entries, "b"), [".spec.replicas"]);
        let mut without = cfg.clone();
        without["spec"].as_object_mut().expect("spec").remove("replicas");
        let after = apply("Deployment", &shared.object, &without, shared.entries, &a, &at(NOW)).expect("applies");
        assert_eq!(after.object["spec"]["replicas"], 2, "b still owns it");
        let gone = apply(
            "Deployment",
            &after.object,
            &json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web"}}),
            after.entries,
            &b,
            &at(NOW),
        )
        .expect("applies");
        assert!(gone.object["spec"].get("replicas").is_none(), "nobody owns it any more");
    }

    #[test]
    fn conflicts_from_several_managers_are_listed_by_manager() {
        let cfg = config(2, "nginx:1.25", json!([]));
        let first = apply("Deployment", &empty(), &cfg, vec![], &writer("a", Operation::Apply), &at(NOW)).expect("ok");
        let changed = config(3, "nginx:1.26", json!([]));
        let err = apply(
            "Deployment",
            &first.object,
            &changed,
            first.entries.clone(),
            &writer("b", Operation::Apply),
            &at(NOW),
        )
        .expect_err("conflicts");
        let Error::Conflicts(c) = &err else { panic!("{err}") };
        assert_eq!(c.len(), 2);
        assert_eq!(
            err.to_string(),
            "Apply failed with 2 conflicts: conflicts with \"a\":\n- .spec.replicas\n\
             - .spec.template.spec.containers[name=\"web\"].image"
        );
        // Fields of a client-side apply's last-applied configuration may be taken over.
        let allowed = value::to_set("Deployment", &cfg, false).expect("set");
        let ok = apply(
            "Deployment",
            &first.object,
            &changed,
            first.entries,
            &writer("b", Operation::Apply),
            &Options { allowed: Some(&allowed), ..at(NOW) },
        )
        .expect("allowed");
        assert_eq!(ok.object["spec"]["replicas"], 3);
    }

    #[test]
    fn updates_own_what_they_changed_and_nothing_when_they_change_nothing() {
        let old = config(2, "nginx:1.25", json!([]));
        let mut new = old.clone();
        new["spec"]["template"]["spec"]["containers"][0]["image"] = "nginx:1.26".into();
        let who = writer("kubectl-set", Operation::Update);
        let entries = update("Deployment", &old, &new, vec![], &who, NOW);
        assert_eq!(fields(&entries, "kubectl-set"), [r#".spec.template.spec.containers[name="web"].image"#]);
        assert_eq!(update("Deployment", &new, &new, entries.clone(), &who, LATER), entries, "a no-op keeps the time");
        let created = update("Deployment", &json!({}), &old, vec![], &writer("kubectl-create", Operation::Update), NOW);
        assert!(fields(&created, "kubectl-create").contains(&".spec.replicas".to_string()));
        let mut with_status = old.clone();
        with_status["status"] = json!({});
        let created = update("Deployment", &json!({}), &with_status, vec![], &who, NOW);
        assert!(
            !fields(&created, "kubectl-set").iter().any(|f| f.starts_with(".status")),
            "the empty status is nobody's"
        );
    }

    #[test]
    fn a_keyed_list_item_without_its_key_is_invalid() {
        let cfg = json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web"},
                         "spec": {"template": {"spec": {"containers": [{"image": "x"}]}}}});
        let err =
            apply("Deployment", &empty(), &cfg, vec![], &writer("a", Operation::Apply), &at(NOW)).expect_err("bad");
        assert!(matches!(err, Error::Invalid(ref m) if m.contains("omits key field \"name\"")), "{err}");
    }
}
