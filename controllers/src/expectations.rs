//! Expectations: what a controller has just created or deleted and not yet seen in its cache, so
//! a slow watch never makes it act twice (Kubernetes' UIDTrackingControllerExpectations, by uid).

use std::collections::{HashMap, HashSet};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Kubernetes' ExpectationsTimeout: after this, act on the cache as it is.
pub const TIMEOUT: Duration = Duration::from_secs(300);

#[derive(Debug, Default)]
struct Pending {
    creates: HashSet<String>,
    deletes: HashSet<String>,
    since: Option<Instant>,
}

/// Pending creates and deletes per controller key.
#[derive(Debug, Default)]
pub struct Expectations {
    by_key: Mutex<HashMap<String, Pending>>,
}

/// Whether the cache shows a uid as present and not being deleted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Seen {
    Live,
    Deleting,
    Absent,
}

impl Expectations {
    pub fn expect_create(&self, key: &str, uid: String) {
        self.with(key, |p| {
            p.creates.insert(uid);
        })
    }

    pub fn expect_delete(&self, key: &str, uid: String) {
        self.with(key, |p| {
            p.deletes.insert(uid);
        })
    }

    /// A delete that failed will not show up in the cache: stop waiting for it.
    pub fn lower_delete(&self, key: &str, uid: &str) {
        if let Ok(mut map) = self.by_key.lock() {
            if let Some(p) = map.get_mut(key) {
                p.deletes.remove(uid);
            }
        }
    }

    /// Drops what the cache now shows and answers whether nothing is pending any more. Creates are
    /// fulfilled once seen, deletes once the object is gone or has a deletionTimestamp.
    pub fn satisfied(&self, key: &str, seen: impl Fn(&str) -> Seen) -> bool {
        self.satisfied_at(key, seen, Instant::now())
    }

    pub fn satisfied_at(&self, key: &str, seen: impl Fn(&str) -> Seen, now: Instant) -> bool {
        let Ok(mut map) = self.by_key.lock() else { return true };
        let Some(p) = map.get_mut(key) else { return true };
        p.creates.retain(|uid| seen(uid) == Seen::Absent);
        p.deletes.retain(|uid| seen(uid) == Seen::Live);
        let expired = p.since.is_some_and(|t| now.duration_since(t) >= TIMEOUT);
        if p.creates.is_empty() && p.deletes.is_empty() || expired {
            map.remove(key);
            return true;
        }
        false
    }

    /// Forgets a controller (its object was deleted).
    pub fn forget(&self, key: &str) {
        if let Ok(mut map) = self.by_key.lock() {
            map.remove(key);
        }
    }

    fn with(&self, key: &str, f: impl FnOnce(&mut Pending)) {
        if let Ok(mut map) = self.by_key.lock() {
            let p = map.entry(key.to_string()).or_default();
            p.since.get_or_insert_with(Instant::now);
            f(p);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn creates_are_pending_until_seen() {
        let e = Expectations::default();
        e.expect_create("ns/rs", "a".into());
        e.expect_create("ns/rs", "b".into());
        assert!(!e.satisfied("ns/rs", |uid| if uid == "a" { Seen::Live } else { Seen::Absent }));
        assert!(e.satisfied("ns/rs", |_| Seen::Live));
        assert!(e.satisfied("other", |_| Seen::Absent));
    }

    #[test]
    fn deletes_are_pending_until_gone_or_terminating() {
        let e = Expectations::default();
        e.expect_delete("ns/rs", "a".into());
        assert!(!e.satisfied("ns/rs", |_| Seen::Live));
        assert!(e.satisfied("ns/rs", |_| Seen::Deleting));
    }

    #[test]
    fn expectations_expire() {
        let e = Expectations::default();
        e.expect_create("ns/rs", "a".into());
        let later = Instant::now() + TIMEOUT + Duration::from_secs(1);
        assert!(e.satisfied_at("ns/rs", |_| Seen::Absent, later));
    }
}
