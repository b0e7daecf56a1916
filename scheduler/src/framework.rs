//! The scheduling framework: Filter and Score plugin traits, and one pure scheduling decision
//! (filter a sample of nodes, score the feasible ones, pick the best) as Kubernetes makes it.

use crate::nodeinfo::{NodeInfo, PodInfo};
use std::any::Any;
use std::borrow::Cow;
use std::collections::{BTreeMap, HashMap};
use std::fmt;

/// Scores are normalised to 0..=MAX_NODE_SCORE before weighting.
pub const MAX_NODE_SCORE: i64 = 100;
/// Below this many nodes, every node is filtered (`minFeasibleNodesToFind`).
const MIN_FEASIBLE_NODES_TO_FIND: usize = 100;
/// `minFeasibleNodesPercentageToFind`.
const MIN_FEASIBLE_NODES_PERCENTAGE: usize = 5;

/// The outcome of a filter for one node.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Status {
    Success,
    /// The node does not fit, for these reasons (each counted in the FailedScheduling message).
    Unschedulable(Vec<Cow<'static, str>>),
}

impl Status {
    pub fn unschedulable(reason: impl Into<Cow<'static, str>>) -> Self {
        Self::Unschedulable(vec![reason.into()])
    }
}

/// What all nodes look like at the start of one scheduling cycle.
pub struct Snapshot<'a> {
    pub nodes: &'a [NodeInfo],
    /// Normalised image name → number of nodes that have it.
    pub image_nodes: &'a HashMap<String, usize>,
}

/// Per-cycle data that plugins compute once per pod in `pre_filter`/`pre_score`.
#[derive(Default)]
pub struct CycleState(HashMap<&'static str, Box<dyn Any + Send + Sync>>);

impl CycleState {
    pub fn insert<T: Any + Send + Sync>(&mut self, plugin: &'static str, value: T) {
        self.0.insert(plugin, Box::new(value));
    }

    pub fn get<T: Any>(&self, plugin: &'static str) -> Option<&T> {
        self.0.get(plugin).and_then(|b| b.downcast_ref())
    }
}

pub trait FilterPlugin: Send + Sync {
    fn name(&self) -> &'static str;
    /// Computes whatever `filter` needs from the whole cluster, once per pod.
    fn pre_filter(&self, _pod: &PodInfo, _snapshot: &Snapshot<'_>, _state: &mut CycleState) {}
    fn filter(&self, state: &CycleState, pod: &PodInfo, node: &NodeInfo) -> Status;
}

pub trait ScorePlugin: Send + Sync {
    fn name(&self) -> &'static str;
    fn pre_score(&self, _pod: &PodInfo, _snapshot: &Snapshot<'_>, _state: &mut CycleState) {}
    /// A raw score; `normalize` maps the feasible nodes' scores into 0..=MAX_NODE_SCORE.
    fn score(&self, state: &CycleState, pod: &PodInfo, node: &NodeInfo) -> i64;
    fn normalize(&self, _scores: &mut [i64]) {}
}

/// No node fits: counts of each reason over all nodes, rendered as Kubernetes does.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FitError {
    pub num_all_nodes: usize,
    pub reasons: BTreeMap<String, usize>,
}

impl fmt::Display for FitError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.num_all_nodes == 0 {
            return f.write_str("no nodes available to schedule pods");
        }
        let mut parts: Vec<String> = self.reasons.iter().map(|(r, n)| format!("{n} {r}")).collect();
        parts.sort();
        write!(f, "0/{} nodes are available: {}.", self.num_all_nodes, parts.join(", "))
    }
}

/// How many feasible nodes to look for before scoring (`numFeasibleNodesToFind`): all of them
/// below 100 nodes; otherwise `percentage` of them (adaptive 50% − nodes/125, at least 5%, when
/// 0), but never fewer than 100.
pub fn num_feasible_nodes_to_find(percentage: u32, num_all_nodes: usize) -> usize {
    if num_all_nodes < MIN_FEASIBLE_NODES_TO_FIND || percentage >= 100 {
        return num_all_nodes;
    }
    let mut pct = percentage as usize;
    if pct == 0 {
        pct = 50usize.saturating_sub(num_all_nodes / 125).max(MIN_FEASIBLE_NODES_PERCENTAGE);
    }
    (num_all_nodes * pct / 100).max(MIN_FEASIBLE_NODES_TO_FIND)
}

/// Index of the highest total, ties broken uniformly at random (reservoir sampling, as `selectHost`).
pub fn select_host(totals: &[i64], rng: &mut fastrand::Rng) -> Option<usize> {
    let mut best: Option<(usize, i64)> = None;
    let mut ties = 0u32;
    for (i, &s) in totals.iter().enumerate() {
        match best {
            Some((_, b)) if s < b => {}
            Some((_, b)) if s == b => {
                ties += 1;
                if rng.u32(0..=ties) == 0 {
                    best = Some((i, s));
                }
            }
            _ => {
                best = Some((i, s));
                ties = 0;
            }
        }
    }
    best.map(|(i, _)| i)
}

/// The configured plugins; `schedule` is one pure decision.
pub struct Framework {
    pub filters: Vec<Box<dyn FilterPlugin>>,
    pub scores: Vec<(Box<dyn ScorePlugin>, i64)>,
    pub percentage_of_nodes_to_score: u32,
}

impl Framework {
    fn run_filters(&self, state: &CycleState, pod: &PodInfo, node: &NodeInfo) -> Status {
        for f in &self.filters {
            let s = f.filter(state, pod, node);
            if s != Status::Success {
                return s;
            }
        }
        Status::Success
    }

    /// Picks a node for `pod` (its index in `snapshot.nodes`). Filtering starts at `*next_start`
    /// and stops once enough feasible nodes are found; `*next_start` moves past the nodes looked
    /// at, so successive pods sample different nodes.
    pub fn schedule(
        &self,
        pod: &PodInfo,
        snapshot: &Snapshot<'_>,
        next_start: &mut usize,
        rng: &mut fastrand::Rng,
    ) -> Result<usize, FitError> {
        let n = snapshot.nodes.len();
        let mut state = CycleState::default();
        for f in &self.filters {
            f.pre_filter(pod, snapshot, &mut state);
        }
        let to_find = num_feasible_nodes_to_find(self.percentage_of_nodes_to_score, n);
        let start = if n == 0 { 0 } else { *next_start % n };
        let mut feasible = Vec::with_capacity(to_find.min(n));
        let mut reasons: BTreeMap<String, usize> = BTreeMap::new();
        let mut processed = 0;
        for i in 0..n {
            if feasible.len() >= to_find {
                break;
            }
            processed = i + 1;
            let idx = (start + i) % n;
            match self.run_filters(&state, pod, &snapshot.nodes[idx]) {
                Status::Success => feasible.push(idx),
                Status::Unschedulable(rs) => {
                    for r in rs {
                        *reasons.entry(r.into_owned()).or_default() += 1;
                    }
                }
            }
        }
        if n > 0 {
            *next_start = (start + processed) % n;
        }
        match feasible.len() {
            0 => return Err(FitError { num_all_nodes: n, reasons }),
            1 => return Ok(feasible[0]),
            _ => {}
        }
        for (s, _) in &self.scores {
            s.pre_score(pod, snapshot, &mut state);
        }
        let mut totals = vec![0i64; feasible.len()];
        let mut raw = vec![0i64; feasible.len()];
        for (s, weight) in &self.scores {
            for (r, &idx) in raw.iter_mut().zip(&feasible) {
                *r = s.score(&state, pod, &snapshot.nodes[idx]);
            }
            s.normalize(&mut raw);
            for (t, r) in totals.iter_mut().zip(&raw) {
                *t += r * weight;
            }
        }
        let best = select_host(&totals, rng).expect("at least two feasible nodes");
        Ok(feasible[best])
    }
}

/// Scales scores to 0..=MAX_NODE_SCORE by the largest one (`DefaultNormalizeScore`); `reverse`
/// makes the smallest raw score the best.
pub fn normalize_scores(scores: &mut [i64], reverse: bool) {
    let max = scores.iter().copied().max().unwrap_or(0);
    if max == 0 {
        if reverse {
            scores.iter_mut().for_each(|s| *s = MAX_NODE_SCORE);
        }
        return;
    }
    for s in scores.iter_mut() {
        *s = MAX_NODE_SCORE * *s / max;
        if reverse {
            *s = MAX_NODE_SCORE - *s;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn feasible_nodes_to_find_matches_kubernetes() {
        for (pct, nodes, want) in [
            (0, 50, 50),
            (0, 99, 99),
            (0, 1000, 420),
            (0, 5000, 500),
            (0, 6000, 300),
            (0, 100_000, 5000),
            (10, 500, 100),
            (30, 1000, 300),
            (100, 5000, 5000),
        ] {
            assert_eq!(num_feasible_nodes_to_find(pct, nodes), want, "{pct}% of {nodes}");
        }
    }

    #[test]
    fn fit_error_message_is_sorted_like_kubernetes() {
        let e = FitError {
            num_all_nodes: 3,
            reasons: [("node(s) had untolerated taint {a: b}".to_string(), 2), ("Insufficient memory".to_string(), 1)]
                .into_iter()
                .collect(),
        };
        assert_eq!(
            e.to_string(),
            "0/3 nodes are available: 1 Insufficient memory, 2 node(s) had untolerated taint {a: b}."
        );
        let none = FitError { num_all_nodes: 0, reasons: BTreeMap::new() };
        assert_eq!(none.to_string(), "no nodes available to schedule pods");
    }

    #[test]
    fn select_host_picks_the_best_and_spreads_ties() {
        let mut rng = fastrand::Rng::with_seed(7);
        assert_eq!(select_host(&[1, 5, 3], &mut rng), Some(1));
        assert_eq!(select_host(&[], &mut rng), None);
        let mut seen = [0; 3];
        for _ in 0..300 {
            seen[select_host(&[9, 9, 9], &mut rng).expect("some")] += 1;
        }
        assert!(seen.iter().all(|&n| n > 50), "ties are broken uniformly: {seen:?}");
    }

    #[test]
    fn normalize_scales_to_the_max_and_reverses() {
        let mut s = [0, 5, 10];
        normalize_scores(&mut s, false);
        assert_eq!(s, [0, 50, 100]);
        let mut s = [0, 5, 10];
        normalize_scores(&mut s, true);
        assert_eq!(s, [100, 50, 0]);
        let mut s = [0, 0];
        normalize_scores(&mut s, true);
        assert_eq!(s, [100, 100]);
    }
}
