//! The scheduling queue: active pods by priority then age, a back-off for pods that failed
//! (1 s doubling to 10 s), and unschedulable pods parked until the cluster changes.

use crate::nodeinfo::PodInfo;
use std::cmp::{Ordering, Reverse};
use std::collections::{BinaryHeap, HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::Notify;
use tokio::time::Instant;

pub const INITIAL_BACKOFF: Duration = Duration::from_secs(1);
pub const MAX_BACKOFF: Duration = Duration::from_secs(10);
/// Unschedulable pods are retried at least this often even if nothing seems to change.
pub const MAX_UNSCHEDULABLE_DURATION: Duration = Duration::from_secs(300);

/// Back-off after `attempts` failed attempts: 1 s, 2 s, 4 s, 8 s, 10 s, 10 s...
pub fn backoff_duration(attempts: u32) -> Duration {
    let exp = attempts.saturating_sub(1).min(16);
    INITIAL_BACKOFF.saturating_mul(1 << exp).min(MAX_BACKOFF)
}

#[derive(Clone, Debug)]
pub struct QueuedPod {
    pub info: Arc<PodInfo>,
    pub attempts: u32,
    /// When the pod first entered the queue.
    pub enqueued: Instant,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Place {
    Active,
    Backoff(Instant),
    Unschedulable(Instant),
    InFlight,
}

struct Entry {
    pod: QueuedPod,
    place: Place,
    seq: u64,
    /// Bumped whenever the pod is (re)pushed, so stale heap entries are skipped.
    generation: u64,
    last_failure: Option<Instant>,
    /// The cluster or the pod changed while it was being scheduled: do not park it.
    changed_in_flight: bool,
}

#[derive(PartialEq, Eq)]
struct ActiveKey {
    priority: i32,
    seq: Reverse<u64>,
    generation: u64,
    uid: String,
}

impl Ord for ActiveKey {
    fn cmp(&self, o: &Self) -> Ordering {
        (self.priority, self.seq).cmp(&(o.priority, o.seq))
    }
}

impl PartialOrd for ActiveKey {
    fn partial_cmp(&self, o: &Self) -> Option<Ordering> {
        Some(self.cmp(o))
    }
}

#[derive(Default)]
pub struct Queue {
    entries: HashMap<String, Entry>,
    active: BinaryHeap<ActiveKey>,
    backoff: BinaryHeap<Reverse<(Instant, u64, String)>>,
    next_seq: u64,
}

/// Queue depths: (active, backoff, unschedulable).
pub type Depths = (usize, usize, usize);

impl Queue {
    fn push(&mut self, uid: &str, now: Instant) {
        let Some(e) = self.entries.get_mut(uid) else { return };
        e.generation += 1;
        let until = e.last_failure.map(|t| t + backoff_duration(e.pod.attempts));
        match until {
            Some(until) if until > now => {
                e.place = Place::Backoff(until);
                self.backoff.push(Reverse((until, e.generation, uid.to_string())));
            }
            _ => {
                e.place = Place::Active;
                let key = ActiveKey {
                    priority: e.pod.info.priority,
                    seq: Reverse(e.seq),
                    generation: e.generation,
                    uid: uid.to_string(),
                };
                self.active.push(key);
            }
        }
    }

    /// Adds a pending pod, or updates the one queued. A parked pod whose spec or labels changed
    /// is retried.
    pub fn add(&mut self, info: Arc<PodInfo>, now: Instant) {
        let uid = info.uid.clone();
        if let Some(e) = self.entries.get_mut(&uid) {
            let changed = e.pod.info.pod.spec != info.pod.spec || e.pod.info.labels != info.labels;
            e.pod.info = info;
            match e.place {
                Place::Unschedulable(_) if changed => self.push(&uid, now),
                Place::InFlight if changed => e.changed_in_flight = true,
                _ => {}
            }
            return;
        }
        self.next_seq += 1;
        let entry = Entry {
            pod: QueuedPod { info, attempts: 0, enqueued: now },
            place: Place::Active,
            seq: self.next_seq,
            generation: 0,
            last_failure: None,
            changed_in_flight: false,
        };
        self.entries.insert(uid.clone(), entry);
        self.push(&uid, now);
    }

    /// The next pod to schedule; it stays in flight until `done`, `unschedulable` or `backoff`.
    pub fn pop(&mut self, now: Instant) -> Option<QueuedPod> {
        self.flush(now);
        while let Some(key) = self.active.pop() {
            let Some(e) = self.entries.get_mut(&key.uid) else { continue };
            if e.generation != key.generation || e.place != Place::Active {
                continue;
            }
            e.place = Place::InFlight;
            e.changed_in_flight = false;
            return Some(e.pod.clone());
        }
        None
    }

    /// The pod was bound, or is gone: forget it.
    pub fn done(&mut self, uid: &str) {
        self.entries.remove(uid);
    }

    /// No node fits: park the pod until the cluster changes (or back off, if it already did).
    pub fn unschedulable(&mut self, uid: &str, now: Instant) {
        let Some(e) = self.entries.get_mut(uid) else { return };
        e.pod.attempts += 1;
        e.last_failure = Some(now);
        if e.changed_in_flight {
            self.push(uid, now);
        } else {
            e.place = Place::Unschedulable(now);
        }
    }

    /// An error (for example a failed binding): retry after the back-off.
    pub fn backoff(&mut self, uid: &str, now: Instant) {
        let Some(e) = self.entries.get_mut(uid) else { return };
        e.pod.attempts += 1;
        e.last_failure = Some(now);
        self.push(uid, now);
    }

    /// Something that may let parked pods fit happened (a node was added or changed, a pod went away).
    pub fn move_all(&mut self, now: Instant) {
        let mut parked = Vec::new();
        for (uid, e) in self.entries.iter_mut() {
            match e.place {
                Place::Unschedulable(_) => parked.push(uid.clone()),
                Place::InFlight => e.changed_in_flight = true,
                _ => {}
            }
        }
        for uid in parked {
            self.push(&uid, now);
        }
    }

    /// Moves pods whose back-off is over to active, and retries pods parked for too long.
    pub fn flush(&mut self, now: Instant) {
        while let Some(Reverse((until, _, _))) = self.backoff.peek() {
            if *until > now {
                break;
            }
            let Some(Reverse((_, generation, uid))) = self.backoff.pop() else { break };
            if self
                .entries
                .get(&uid)
                .is_some_and(|e| e.generation == generation && matches!(e.place, Place::Backoff(_)))
            {
                self.push(&uid, now);
            }
        }
        let stale: Vec<String> = self
            .entries
            .iter()
            .filter(|(_, e)| matches!(e.place, Place::Unschedulable(t) if now.duration_since(t) >= MAX_UNSCHEDULABLE_DURATION))
            .map(|(u, _)| u.clone())
            .collect();
        for uid in stale {
            self.push(&uid, now);
        }
    }

    /// When the earliest back-off ends.
    pub fn next_deadline(&self) -> Option<Instant> {
        self.backoff.peek().map(|Reverse((t, _, _))| *t)
    }

    /// Keeps only these pods (after a re-list), and those in flight.
    pub fn retain(&mut self, keep: &HashSet<String>) {
        self.entries.retain(|uid, e| e.place == Place::InFlight || keep.contains(uid));
    }

    pub fn depths(&self) -> Depths {
        self.entries.values().fold((0, 0, 0), |(a, b, u), e| match e.place {
            Place::Active => (a + 1, b, u),
            Place::Backoff(_) => (a, b + 1, u),
            Place::Unschedulable(_) => (a, b, u + 1),
            Place::InFlight => (a, b, u),
        })
    }
}

/// The queue shared by the watchers and the scheduling loop; `pop` waits for work.
#[derive(Default)]
pub struct SchedulingQueue {
    inner: Mutex<Queue>,
    notify: Notify,
}

impl SchedulingQueue {
    /// Runs `f` on the queue and wakes the scheduling loop.
    pub fn with<T>(&self, f: impl FnOnce(&mut Queue) -> T) -> T {
        let out = f(&mut self.inner.lock().expect("queue lock poisoned"));
        self.notify.notify_one();
        out
    }

    pub fn depths(&self) -> Depths {
        self.inner.lock().expect("queue lock poisoned").depths()
    }

    pub async fn pop(&self) -> QueuedPod {
        loop {
            let notified = self.notify.notified();
            let (pod, deadline) = {
                let mut q = self.inner.lock().expect("queue lock poisoned");
                (q.pop(Instant::now()), q.next_deadline())
            };
            if let Some(pod) = pod {
                return pod;
            }
            let wake = deadline.unwrap_or_else(|| Instant::now() + Duration::from_secs(30));
            tokio::select! {
                _ = notified => {}
                _ = tokio::time::sleep_until(wake) => {}
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plugins::test_util::pod_with;
    use serde_json::json;

    fn pod(name: &str, priority: i32) -> Arc<PodInfo> {
        Arc::new(pod_with(name, json!({}), json!({"priority": priority})))
    }

    fn names(q: &mut Queue, now: Instant) -> Vec<String> {
        std::iter::from_fn(|| q.pop(now)).map(|p| p.info.name.clone()).collect()
    }

    #[test]
    fn backoff_doubles_from_one_to_ten_seconds() {
        let got: Vec<u64> = (1..=6).map(|a| backoff_duration(a).as_secs()).collect();
        assert_eq!(got, [1, 2, 4, 8, 10, 10]);
    }

    #[test]
    fn pops_by_priority_then_age() {
        let now = Instant::now();
        let mut q = Queue::default();
        for (n, p) in [("old-low", 0), ("high", 100), ("new-low", 0), ("mid", 10)] {
            q.add(pod(n, p), now);
        }
        assert_eq!(names(&mut q, now), ["high", "mid", "old-low", "new-low"]);
    }

    #[test]
    fn unschedulable_pods_wait_for_a_cluster_change_and_their_backoff() {
        let t0 = Instant::now();
        let mut q = Queue::default();
        q.add(pod("p", 0), t0);
        let p = q.pop(t0).expect("pod");
        q.unschedulable(&p.info.uid, t0);
        assert_eq!(q.depths(), (0, 0, 1));
        assert!(q.pop(t0 + Duration::from_secs(60)).is_none(), "parked until something changes");
        q.move_all(t0 + Duration::from_millis(500));
        assert_eq!(q.depths(), (0, 1, 0), "still backing off");
        assert!(q.pop(t0 + Duration::from_millis(900)).is_none());
        let p = q.pop(t0 + Duration::from_secs(1)).expect("after 1s back-off");
        assert_eq!(p.attempts, 1);
        q.done(&p.info.uid);
        assert_eq!(q.depths(), (0, 0, 0));
    }

    #[test]
    fn a_change_while_in_flight_is_not_lost() {
        let t0 = Instant::now();
        let mut q = Queue::default();
        q.add(pod("p", 0), t0);
        let p = q.pop(t0).expect("pod");
        q.move_all(t0);
        q.unschedulable(&p.info.uid, t0);
        assert_eq!(q.depths(), (0, 1, 0), "retried after back-off instead of parked");
    }

    #[test]
    fn errors_back_off_and_parked_pods_retry_when_their_spec_changes() {
        let t0 = Instant::now();
        let mut q = Queue::default();
        q.add(pod("p", 0), t0);
        let p = q.pop(t0).expect("pod");
        q.backoff(&p.info.uid, t0);
        assert!(q.pop(t0 + Duration::from_millis(999)).is_none());
        let p = q.pop(t0 + Duration::from_secs(1)).expect("retried");
        let t1 = t0 + Duration::from_secs(1);
        q.unschedulable(&p.info.uid, t1);
        q.add(pod("p", 0), t1 + Duration::from_secs(5));
        assert_eq!(q.depths(), (0, 0, 1), "an identical update does not retry");
        q.add(pod("p", 5), t1 + Duration::from_secs(5));
        assert_eq!(q.pop(t1 + Duration::from_secs(5)).map(|p| p.attempts), Some(2));
    }

    #[test]
    fn parked_pods_are_retried_after_five_minutes() {
        let t0 = Instant::now();
        let mut q = Queue::default();
        q.add(pod("p", 0), t0);
        let p = q.pop(t0).expect("pod");
        q.unschedulable(&p.info.uid, t0);
        assert!(q.pop(t0 + Duration::from_secs(299)).is_none());
        assert!(q.pop(t0 + MAX_UNSCHEDULABLE_DURATION).is_some());
    }
}
