//! The eviction rate limiter: a token bucket (`--node-eviction-rate` nodes per second, burst 1, as
//! Kubernetes' zone tainter), consulted before a node gets its first NoExecute taint.

use std::time::{Duration, Instant};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Take {
    Granted,
    /// Denied; a token is due after this long.
    Wait(Duration),
    /// Denied for good: the rate is zero.
    Never,
}

#[derive(Debug)]
pub struct TokenBucket {
    per_second: f64,
    burst: f64,
    tokens: f64,
    last: Instant,
}

impl TokenBucket {
    /// A full bucket.
    pub fn new(per_second: f64, burst: u32, now: Instant) -> Self {
        let burst = f64::from(burst.max(1));
        Self { per_second, burst, tokens: burst, last: now }
    }

    pub fn try_take(&mut self, now: Instant) -> Take {
        if self.per_second <= 0.0 || !self.per_second.is_finite() {
            return Take::Never;
        }
        let elapsed = now.saturating_duration_since(self.last).as_secs_f64();
        self.tokens = (self.tokens + elapsed * self.per_second).min(self.burst);
        self.last = now;
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            return Take::Granted;
        }
        let wait = (1.0 - self.tokens) / self.per_second;
        Take::Wait(Duration::try_from_secs_f64(wait).unwrap_or(Duration::MAX))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grants_one_node_then_one_every_ten_seconds_at_the_default_rate() {
        let t0 = Instant::now();
        let mut b = TokenBucket::new(0.1, 1, t0);
        assert_eq!(b.try_take(t0), Take::Granted);
        assert_eq!(b.try_take(t0), Take::Wait(Duration::from_secs(10)));
        match b.try_take(t0 + Duration::from_secs(4)) {
            Take::Wait(d) => assert!((d.as_secs_f64() - 6.0).abs() < 1e-6, "{d:?}"),
            other => panic!("expected a wait, got {other:?}"),
        }
        assert_eq!(b.try_take(t0 + Duration::from_secs(10)), Take::Granted);
    }

    #[test]
    fn an_idle_bucket_holds_at_most_its_burst() {
        let t0 = Instant::now();
        let mut b = TokenBucket::new(1.0, 1, t0);
        assert_eq!(b.try_take(t0 + Duration::from_secs(100)), Take::Granted);
        assert!(matches!(b.try_take(t0 + Duration::from_secs(100)), Take::Wait(_)));
    }

    #[test]
    fn a_zero_rate_never_grants() {
        let t0 = Instant::now();
        assert_eq!(TokenBucket::new(0.0, 1, t0).try_take(t0), Take::Never);
    }
}
