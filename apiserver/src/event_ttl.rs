//! Events expire (`--event-ttl`, kube-apiserver's default 1 h). kube-apiserver writes each Event
//! with an etcd lease of that TTL, renewed by every write, so an Event lives until it has gone
//! unwritten for the TTL. Leases are an etcd feature the embedded store does not have, so here a
//! sweeper does the same over the `Store` trait for both backends: it remembers when it first saw
//! each Event's current revision and deletes the Event (at that revision, so a newer write wins)
//! once that is longer ago than the TTL. Events already stored when it starts count from their
//! own last timestamp, so a restarted apiserver does not keep old Events for another full TTL.
//! Several apiservers may sweep at once: a delete that finds the Event gone or changed is a no-op.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use jiff::Timestamp;
use serde_json::Value;

use crate::storage::{self, KeyValue, Store};

/// Where Events are stored (core/v1 and events.k8s.io/v1 share them).
pub fn prefix() -> String {
    kaji_api::resources::by_kind("Event").map_or_else(|| "/registry/events/".to_string(), |r| r.key_prefix())
}

/// The Event's own idea of when it was last written: the latest of its creation, `lastTimestamp`,
/// `eventTime` and `series.lastObservedTime`.
pub fn last_written(event: &Value) -> Option<Timestamp> {
    ["/metadata/creationTimestamp", "/lastTimestamp", "/eventTime", "/series/lastObservedTime"]
        .iter()
        .filter_map(|p| event.pointer(p).and_then(Value::as_str))
        .filter_map(|s| s.parse::<Timestamp>().ok())
        .max()
}

/// What the sweeper knows between ticks: per key, the revision it saw and since when.
#[derive(Debug, Default)]
pub struct Sweeper {
    seen: HashMap<String, (u64, Timestamp)>,
    primed: bool,
}

impl Sweeper {
    /// Given every stored Event at `now`, the (key, revision) pairs whose TTL has run out.
    pub fn expired(&mut self, events: &[KeyValue], now: Timestamp, ttl: Duration) -> Vec<(String, u64)> {
        let ttl = jiff::SignedDuration::try_from(ttl).unwrap_or(jiff::SignedDuration::MAX);
        let mut seen = HashMap::with_capacity(events.len());
        let mut out = Vec::new();
        for kv in events {
            let since = match self.seen.get(&kv.key) {
                Some(&(rev, since)) if rev == kv.mod_revision => since,
                // Written since the last tick (or new): its TTL starts now, as a lease renewal does.
                Some(_) => now,
                None if self.primed => now,
                // Stored before this apiserver started: from the Event's own last write.
                None => serde_json::from_slice::<Value>(&kv.value)
                    .ok()
                    .and_then(|v| last_written(&v))
                    .map_or(now, |t| t.min(now)),
            };
            if now.duration_since(since) >= ttl {
                out.push((kv.key.clone(), kv.mod_revision));
            } else {
                seen.insert(kv.key.clone(), (kv.mod_revision, since));
            }
        }
        self.seen = seen;
        self.primed = true;
        out
    }
}

/// Sweeps Events older than `ttl` every `every` until shutdown. A zero TTL turns it off.
pub fn spawn(store: Arc<dyn Store>, ttl: Duration, every: Duration, mut shutdown: tokio::sync::watch::Receiver<bool>) {
    if ttl.is_zero() {
        return;
    }
    tokio::spawn(async move {
        let mut sweeper = Sweeper::default();
        let mut tick = tokio::time::interval(every);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = tick.tick() => {}
                _ = shutdown.changed() => return,
            }
            let s = store.clone();
            let listed = tokio::task::spawn_blocking(move || s.list(&prefix())).await;
            let events = match listed {
                Ok(Ok((events, _))) => events,
                Ok(Err(e)) => {
                    tracing::warn!(error = %e, "listing Events for expiry failed");
                    continue;
                }
                Err(_) => continue,
            };
            let expired = sweeper.expired(&events, Timestamp::now(), ttl);
            if expired.is_empty() {
                continue;
            }
            let s = store.clone();
            let deleted = tokio::task::spawn_blocking(move || {
                let mut n = 0usize;
                for (key, rev) in expired {
                    match s.delete(&key, Some(rev)) {
                        Ok(_) => n += 1,
                        // Written or deleted meanwhile (by a client or another apiserver).
                        Err(storage::Error::Conflict { .. } | storage::Error::NotFound(_)) => {}
                        Err(e) => tracing::warn!(key = %key, error = %e, "expiring an Event failed"),
                    }
                }
                n
            })
            .await
            .unwrap_or(0);
            tracing::debug!(deleted, "expired Events past --event-ttl");
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn kv(key: &str, rev: u64, v: Value) -> KeyValue {
        KeyValue {
            key: key.into(),
            value: serde_json::to_vec(&v).expect("test setup").into(),
            create_revision: rev,
            mod_revision: rev,
            stale: false,
        }
    }

    fn t(s: &str) -> Timestamp {
        s.parse().expect("test setup")
    }

    #[test]
    fn last_written_is_the_latest_of_the_events_timestamps() {
        let ev = json!({"metadata": {"creationTimestamp": "2026-01-01T00:00:00Z"},
            "lastTimestamp": "2026-01-01T00:30:00Z", "series": {"lastObservedTime": "2026-01-01T00:45:00.123456Z"}});
        assert_eq!(last_written(&ev), Some(t("2026-01-01T00:45:00.123456Z")));
        assert_eq!(last_written(&json!({"metadata": {}})), None);
    }

    #[test]
    fn events_found_at_start_count_from_their_own_last_write() {
        let mut s = Sweeper::default();
        let old = kv("/registry/events/a/old", 5, json!({"metadata": {"creationTimestamp": "2026-01-01T00:00:00Z"}}));
        let recent =
            kv("/registry/events/a/new", 6, json!({"metadata": {"creationTimestamp": "2026-01-01T00:50:00Z"}}));
        let out = s.expired(&[old, recent], t("2026-01-01T01:00:00Z"), Duration::from_secs(3600));
        assert_eq!(out, vec![("/registry/events/a/old".to_string(), 5)]);
    }

    #[test]
    fn a_write_renews_the_ttl_like_an_etcd_lease() {
        let mut s = Sweeper::default();
        let ttl = Duration::from_secs(600);
        let ev =
            |rev| kv("/registry/events/a/e", rev, json!({"metadata": {"creationTimestamp": "2026-01-01T00:00:00Z"}}));
        // Seen first at 00:05 (created at 00:00): nothing yet.
        assert!(s.expired(&[ev(1)], t("2026-01-01T00:05:00Z"), ttl).is_empty());
        // Rewritten (count bumped) before 00:10: the TTL starts again when the sweeper sees it.
        assert!(s.expired(&[ev(2)], t("2026-01-01T00:09:00Z"), ttl).is_empty());
        assert!(s.expired(&[ev(2)], t("2026-01-01T00:18:00Z"), ttl).is_empty());
        assert_eq!(s.expired(&[ev(2)], t("2026-01-01T00:19:00Z"), ttl), vec![("/registry/events/a/e".to_string(), 2)]);
    }

    #[test]
    fn events_created_after_start_count_from_when_they_were_seen_not_their_timestamps() {
        let mut s = Sweeper::default();
        let ttl = Duration::from_secs(3600);
        assert!(s.expired(&[], t("2026-01-01T10:00:00Z"), ttl).is_empty());
        // A recorder posting an Event stamped hours ago keeps it for the full TTL from now.
        let late = kv("/registry/events/a/late", 9, json!({"lastTimestamp": "2026-01-01T02:00:00Z"}));
        assert!(s.expired(std::slice::from_ref(&late), t("2026-01-01T10:01:00Z"), ttl).is_empty());
        assert!(s.expired(std::slice::from_ref(&late), t("2026-01-01T11:00:00Z"), ttl).is_empty());
        assert_eq!(s.expired(&[late], t("2026-01-01T11:01:00Z"), ttl).len(), 1);
    }

    #[test]
    fn a_store_sweep_deletes_only_what_expired() {
        let dir = tempfile::tempdir().expect("test setup");
        let store = storage::redb::RedbStore::open(dir.path()).expect("test setup");
        let old = json!({"metadata": {"name": "old", "namespace": "a", "creationTimestamp": "2020-01-01T00:00:00Z"}});
        let new =
            json!({"metadata": {"name": "new", "namespace": "a", "creationTimestamp": Timestamp::now().to_string()}});
        store
            .create(&format!("{}a/old", prefix()), &serde_json::to_vec(&old).expect("test setup"))
            .expect("test setup");
        store
            .create(&format!("{}a/new", prefix()), &serde_json::to_vec(&new).expect("test setup"))
            .expect("test setup");
        let (events, _) = store.list(&prefix()).expect("test setup");
        let mut s = Sweeper::default();
        for (key, rev) in s.expired(&events, Timestamp::now(), Duration::from_secs(3600)) {
            store.delete(&key, Some(rev)).expect("test setup");
        }
        let (left, _) = store.list(&prefix()).expect("test setup");
        assert_eq!(left.iter().map(|kv| kv.key.as_str()).collect::<Vec<_>>(), vec![format!("{}a/new", prefix())]);
    }
}
