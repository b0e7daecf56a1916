//! Applies rendered rules: one `iptables-restore --noflush` per sync, only the chains that
//! changed since the last successful one (a full rewrite on demand), nothing if nothing did.

use crate::iptables::{self, Iptables};
use crate::model::Model;
use crate::render::{build, Fingerprint, Rules, Table};
use std::collections::HashSet;

/// What one sync did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Outcome {
    pub full: bool,
    /// False when nothing changed and no restore ran.
    pub restored: bool,
    pub chains_written: usize,
    pub chains_deleted: usize,
    /// Map elements added or deleted (nftables mode).
    pub elements_written: usize,
    pub payload_bytes: usize,
    pub nat_rules: usize,
    pub filter_rules: usize,
}

const NON_EMPTY: &str = "a payload without a previous fingerprint is never empty";

pub struct Syncer {
    ipt: Iptables,
    /// What the kernel holds, as of the last successful restore; `None` = unknown.
    applied: Option<Fingerprint>,
}

impl Syncer {
    pub fn new(ipt: Iptables) -> Self {
        Self { ipt, applied: None }
    }

    pub fn iptables(&self) -> &Iptables {
        &self.ipt
    }

    /// True until a sync succeeds, and again after one fails: the next sync rewrites everything.
    pub fn needs_full(&self) -> bool {
        self.applied.is_none()
    }

    pub fn sync(&mut self, model: &Model, full: bool) -> iptables::Result<Outcome> {
        self.apply(&build(model), full)
    }

    /// Applies `rules`. A partial sync rewrites the chains that differ from the last applied
    /// ones and deletes those that went away; a full sync rewrites all of them and (re)inserts
    /// the jumps from the built-in chains. On failure the kernel keeps its previous rules
    /// (iptables-restore commits a table atomically) and the next sync is a full one.
    pub fn apply(&mut self, rules: &Rules, full: bool) -> iptables::Result<Outcome> {
        let full = full || self.applied.is_none();
        let mut outcome = Outcome {
            full,
            nat_rules: rules.rule_count(Table::Nat),
            filter_rules: rules.rule_count(Table::Filter),
            ..Outcome::default()
        };
        let payload = match &self.applied {
            Some(prev) if !full => match rules.restore(Some(prev), &rules.stale_since(prev)) {
                Some(p) => p,
                None => return Ok(outcome),
            },
            Some(prev) => rules.restore(None, &rules.stale_since(prev)).expect(NON_EMPTY),
            None => {
                // Unknown state (start-up, or after a failure): ask the kernel what is ours.
                let wanted: HashSet<(Table, &str)> = Table::ALL
                    .iter()
                    .flat_map(|t| rules.table(*t).iter().map(move |c| (*t, c.name.as_str())))
                    .collect();
                let stale: Vec<(Table, String)> =
                    self.ipt.own_chains()?.into_iter().filter(|(t, n)| !wanted.contains(&(*t, n.as_str()))).collect();
                rules.restore(None, &stale).expect(NON_EMPTY)
            }
        };
        self.applied = None;
        self.ipt.restore(&payload.text)?;
        if full {
            self.ipt.ensure_jumps()?;
        }
        self.applied = Some(rules.fingerprint());
        outcome.restored = true;
        outcome.chains_written = payload.chains_written;
        outcome.chains_deleted = payload.chains_deleted;
        outcome.payload_bytes = payload.text.len();
        Ok(outcome)
    }
}
