//! Applies the nftables rules: a full sync rewrites the table's content in one transaction
//! (rules and maps; affinity sets keep what they learned), a partial sync only the service
//! ports that changed, and nothing runs when nothing did.
//!
//! Stale chains are emptied and deleted in the same transaction. Kernels before 6.2 may still
//! count a reference from a map element that transaction removes and refuse the delete (EBUSY,
//! kubernetes#122604): the transaction is then run again with the stale chains only emptied,
//! and their deletion is retried by later transactions.

use crate::model::Model;
use crate::nftables::netlink::Batch;
use crate::nftables::nft::{self, Nft};
use crate::nftables::plan::{self, Applied, Partial};
use crate::nftables::render::{self, object_names, Elements, Hairpin};
use crate::nftables::text::Text;
use crate::nftables::tx::{Counts, Tx};
use crate::sync::Outcome;
use std::collections::HashSet;

pub struct Syncer {
    nft: Nft,
    /// What the kernel holds, as of the last successful transaction; `None` = unknown.
    applied: Option<Applied>,
    /// Element conflicts already reported.
    warned: HashSet<String>,
    /// Empty, unreferenced chains the kernel would not delete yet.
    undeleted: Vec<String>,
}

impl Syncer {
    pub fn new(nft: Nft) -> Self {
        Self { nft, applied: None, warned: HashSet::new(), undeleted: Vec::new() }
    }

    pub fn nft(&self) -> &Nft {
        &self.nft
    }

    /// True until a sync succeeds, and again after one fails: the next sync is a full one.
    pub fn needs_full(&self) -> bool {
        self.applied.is_none()
    }

    /// Stale chains left empty because the kernel refused to delete them (EBUSY).
    pub fn undeleted_chains(&self) -> &[String] {
        &self.undeleted
    }

    pub fn sync(&mut self, model: &Model, full: bool) -> nft::Result<Outcome> {
        self.sync_owned(model.clone(), full)
    }

    /// `sync`, keeping `model` as the applied state rather than a copy of it.
    pub fn sync_owned(&mut self, model: Model, full: bool) -> nft::Result<Outcome> {
        let full = full
            || match &self.applied {
                None => true,
                Some(a) => a.model.cluster_cidr != model.cluster_cidr || a.model.masquerade_all != model.masquerade_all,
            };
        if full {
            let elements = build_elements(&model, &mut self.warned);
            let hairpin = render::hairpin(&model);
            return self.full(model, elements, hairpin);
        }
        let applied = self.applied.as_ref().expect("a partial sync only follows a successful one");
        let changes = plan::changes(&applied.model, &model);
        // Unchanged service ports' elements are carried over, unless addresses were contested
        // last time (then who keeps one depends on the whole model).
        let carried = if self.warned.is_empty() { plan::carried_elements(applied, &changes) } else { None };
        let elements = carried.unwrap_or_else(|| build_elements(&model, &mut self.warned));
        let hairpin = render::hairpin(&model);
        let p = plan::partial(applied, &model, &changes, &elements, &hairpin);
        drop(changes);
        self.partial(model, elements, hairpin, p)
    }

    fn full(&mut self, model: Model, elements: Elements, hairpin: Hairpin) -> nft::Result<Outcome> {
        let (mut stale_chains, stale_sets) = match self.applied.take() {
            Some(applied) => plan::stale_since(&applied, &model),
            None => {
                // Unknown state (start-up, or after a failure): ask the kernel what is there.
                let listed = self.nft.objects()?;
                plan::stale_listed(listed.chains, listed.sets, &model)
            }
        };
        let undeleted = self.undeleted_unwanted(&model);
        stale_chains.extend(undeleted.into_iter().filter(|c| !stale_chains.contains(c)).collect::<Vec<_>>());
        let (counts, bytes) =
            self.run(&stale_chains, |tx| tx.full(&model, &elements, &hairpin, &stale_chains, &stale_sets))?;
        self.applied = Some(Applied { model, elements, hairpin });
        Ok(outcome(true, counts, bytes))
    }

    fn partial(&mut self, model: Model, elements: Elements, hairpin: Hairpin, mut p: Partial) -> nft::Result<Outcome> {
        if p.is_empty() {
            if p.model_changed {
                if let Some(applied) = self.applied.as_mut() {
                    applied.model = model;
                }
            }
            return Ok(Outcome { full: false, restored: false, ..Outcome::default() });
        }
        self.applied = None;
        // Chains left over from an EBUSY: reused if wanted again, otherwise deleted now.
        self.undeleted.retain(|name| !p.chains.iter().any(|c| &c.name == name));
        for name in &self.undeleted {
            if !p.stale_chains.contains(name) {
                p.stale_chains.push(name.clone());
            }
        }
        let stale = p.stale_chains.clone();
        let (counts, bytes) = self.run(&stale, |tx| tx.partial(&p))?;
        self.applied = Some(Applied { model, elements, hairpin });
        Ok(outcome(false, counts, bytes))
    }

    /// Runs one transaction written by `write`; if the kernel refuses to delete the `stale`
    /// chains (EBUSY), runs it again with them only emptied and remembers them.
    fn run(
        &mut self,
        stale: &[String],
        write: impl Fn(&mut Tx<'_>) -> std::io::Result<()>,
    ) -> nft::Result<(Counts, usize)> {
        let attempt = |keep: bool| -> nft::Result<(Counts, usize)> {
            match self.nft.netlink() {
                Some(netlink) => {
                    let mut batch = Batch::new();
                    let mut tx = Tx::new(&mut batch);
                    tx.keep_stale_chains = keep;
                    write(&mut tx).map_err(nft::Error::Write)?;
                    let counts = tx.counts;
                    Ok((counts, netlink.apply(batch)?))
                }
                None => {
                    let mut counts = Counts::default();
                    let bytes = self.nft.run_with(&[], |w| {
                        let mut text = Text::new(w);
                        let mut tx = Tx::new(&mut text);
                        tx.keep_stale_chains = keep;
                        write(&mut tx)?;
                        counts = tx.counts;
                        text.finish().map(|_| ())
                    })?;
                    Ok((counts, bytes))
                }
            }
        };
        match attempt(false) {
            Err(e) if e.is_busy() && !stale.is_empty() => {
                tracing::warn!(error = %e, chains = stale.len(), "stale chains still in use; emptied, deleted later");
                let done = attempt(true)?;
                self.undeleted = stale.to_vec();
                Ok(done)
            }
            Ok(done) => {
                self.undeleted.clear();
                Ok(done)
            }
            Err(e) => Err(e),
        }
    }

    /// The undeleted chains `model` does not want back.
    fn undeleted_unwanted(&mut self, model: &Model) -> Vec<String> {
        if self.undeleted.is_empty() {
            return Vec::new();
        }
        let wanted: HashSet<String> = model.services.iter().flat_map(|sp| object_names(sp).0).collect();
        self.undeleted.retain(|c| !wanted.contains(c));
        self.undeleted.clone()
    }
}

/// Every map element of `model`, built; conflicts warned about once each (`warned` keeps them).
fn build_elements(model: &Model, warned: &mut HashSet<String>) -> Elements {
    let (elements, conflicts) = render::elements(model);
    for c in conflicts.iter().filter(|c| !warned.contains(*c)) {
        tracing::warn!(problem = %c, "skipping a conflicting service address");
    }
    *warned = conflicts.into_iter().collect();
    elements
}

fn outcome(full: bool, counts: Counts, bytes: usize) -> Outcome {
    Outcome {
        full,
        restored: true,
        chains_written: counts.chains_written,
        chains_deleted: counts.chains_deleted,
        elements_written: counts.elements_written,
        payload_bytes: bytes,
        ..Outcome::default()
    }
}
