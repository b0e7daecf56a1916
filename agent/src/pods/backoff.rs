//! Kubernetes' restart back-off (client-go `flowcontrol.Backoff` as kubelet uses it): the first
//! restart is immediate, then 10 s doubling to 5 min, measured from the container's exit; an
//! entry older than 10 min (2 × max) starts over.

use std::time::Duration;

use jiff::Timestamp;

pub const INITIAL: Duration = Duration::from_secs(10);
pub const MAX: Duration = Duration::from_secs(300);

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Entry {
    pub backoff: Duration,
    pub last_update: Timestamp,
}

#[derive(Clone, Debug, Default)]
pub struct Backoff {
    entries: std::collections::HashMap<String, Entry>,
}

fn expired(event: Timestamp, last: Timestamp) -> bool {
    event.duration_since(last).unsigned_abs() > 2 * MAX
}

impl Backoff {
    /// If `key` (whose failure happened at `event`) must still wait, how long from `now`.
    pub fn wait(&self, key: &str, event: Timestamp, now: Timestamp) -> Option<Duration> {
        let e = self.entries.get(key)?;
        if expired(event, e.last_update) {
            return None;
        }
        let since = now.duration_since(event);
        let since = if since.is_negative() { Duration::ZERO } else { since.unsigned_abs() };
        e.backoff.checked_sub(since).filter(|d| !d.is_zero())
    }

    /// Records a retry of `key` for a failure at `event`: the next wait doubles.
    pub fn next(&mut self, key: &str, event: Timestamp) -> Duration {
        let entry = match self.entries.get(key) {
            Some(e) if !expired(event, e.last_update) => {
                Entry { backoff: (e.backoff * 2).min(MAX), last_update: event }
            }
            _ => Entry { backoff: INITIAL, last_update: event },
        };
        self.entries.insert(key.to_string(), entry);
        entry.backoff
    }

    pub fn current(&self, key: &str) -> Option<Duration> {
        self.entries.get(key).map(|e| e.backoff)
    }

    pub fn reset(&mut self, key: &str) {
        self.entries.remove(key);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(secs: i64) -> Timestamp {
        Timestamp::from_second(1_700_000_000 + secs).expect("valid")
    }

    #[test]
    fn first_restart_is_immediate_then_waits_double() {
        let mut b = Backoff::default();
        assert_eq!(b.wait("c", t(0), t(0)), None, "never failed before: restart now");
        assert_eq!(b.next("c", t(0)), INITIAL);
        assert_eq!(b.wait("c", t(1), t(1)), Some(Duration::from_secs(10)), "crashed again 1 s later");
        assert_eq!(b.wait("c", t(1), t(8)), Some(Duration::from_secs(3)));
        assert_eq!(b.wait("c", t(1), t(11)), None);
        assert_eq!(b.next("c", t(1)), Duration::from_secs(20));
        assert_eq!(b.next("c", t(30)), Duration::from_secs(40));
        for _ in 0..10 {
            b.next("c", t(60));
        }
        assert_eq!(b.current("c"), Some(MAX), "capped at five minutes");
    }

    #[test]
    fn ten_quiet_minutes_reset_the_backoff() {
        let mut b = Backoff::default();
        b.next("c", t(0));
        b.next("c", t(10));
        assert_eq!(b.wait("c", t(10 + 601), t(10 + 601)), None);
        assert_eq!(b.next("c", t(10 + 601)), INITIAL);
    }
}
