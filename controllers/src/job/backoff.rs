//! The delay before a Job creates pods again after failures: 10 s doubling per failure since the
//! last success, at most 6 minutes, counted from the last failure's finish time (Kubernetes'
//! backoffRecord, kept in memory as the Job controller does).

use k8s_openapi::api::core::v1::Pod;
use std::time::Duration;

/// The back-off base and cap (Kubernetes: 10 s and 6 min; tests shorten them).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Settings {
    pub base: Duration,
    pub max: Duration,
}

impl Default for Settings {
    fn default() -> Self {
        Self { base: Duration::from_secs(10), max: Duration::from_secs(360) }
    }
}

/// Failures since the last success and when the latest of them finished.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Record {
    pub failures_after_last_success: u32,
    pub last_failure: Option<jiff::Timestamp>,
}

impl Record {
    /// The record after newly finished pods: any success resets it; failures add up.
    pub fn update(self, new_failed: &[&Pod], new_succeeded: usize, now: jiff::Timestamp) -> Record {
        if new_succeeded > 0 {
            return Record::default();
        }
        if new_failed.is_empty() {
            return self;
        }
        let latest = new_failed.iter().map(|p| finish_time(p).unwrap_or(now)).max();
        let n = u32::try_from(new_failed.len()).unwrap_or(u32::MAX);
        Record {
            failures_after_last_success: self.failures_after_last_success.saturating_add(n),
            last_failure: latest.max(self.last_failure),
        }
    }

    /// How long to wait before creating pods, if at all.
    pub fn remaining(&self, now: jiff::Timestamp, s: Settings) -> Option<Duration> {
        let last = self.last_failure?;
        if self.failures_after_last_success == 0 {
            return None;
        }
        let shift = (self.failures_after_last_success - 1).min(30);
        let delay = s.base.checked_mul(1u32 << shift).unwrap_or(s.max).min(s.max);
        let elapsed = now.duration_since(last);
        let elapsed = Duration::try_from(elapsed).unwrap_or(Duration::ZERO);
        delay.checked_sub(elapsed).filter(|d| !d.is_zero())
    }
}

/// When a pod finished: its Ready=False transition, else its containers' latest finishedAt, else
/// its deletion time (Kubernetes' getFinishedTime).
pub fn finish_time(pod: &Pod) -> Option<jiff::Timestamp> {
    let status = pod.status.as_ref();
    let ready_false = status
        .and_then(|s| s.conditions.as_ref())
        .and_then(|cs| cs.iter().find(|c| c.type_ == "Ready" && c.status == "False"))
        .and_then(|c| c.last_transition_time.as_ref())
        .map(|t| t.0);
    ready_false
        .or_else(|| {
            status
                .and_then(|s| s.container_statuses.as_ref())
                .into_iter()
                .flatten()
                .filter_map(|c| c.state.as_ref()?.terminated.as_ref()?.finished_at.as_ref().map(|t| t.0))
                .max()
        })
        .or_else(|| pod.metadata.deletion_timestamp.as_ref().map(|t| t.0))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ts(s: &str) -> jiff::Timestamp {
        s.parse().expect("timestamp")
    }

    fn failed_at(t: &str) -> Pod {
        serde_json::from_value(serde_json::json!({"status": {"phase": "Failed", "containerStatuses": [{
            "name": "c", "image": "i", "imageID": "", "ready": false, "restartCount": 0,
            "state": {"terminated": {"exitCode": 1, "finishedAt": t}}}]}}))
        .expect("pod")
    }

    #[test]
    fn delays_double_from_ten_seconds_and_reset_on_success() {
        let s = Settings::default();
        let now = ts("2025-01-01T00:00:05Z");
        let p1 = failed_at("2025-01-01T00:00:00Z");
        let r = Record::default().update(&[&p1], 0, now);
        assert_eq!(r.remaining(now, s), Some(Duration::from_secs(5)));
        let p2 = failed_at("2025-01-01T00:00:04Z");
        let r = r.update(&[&p2], 0, now);
        assert_eq!(r.remaining(now, s), Some(Duration::from_secs(19)));
        assert_eq!(r.remaining(ts("2025-01-01T00:01:00Z"), s), None);
        assert_eq!(r.update(&[], 1, now), Record::default());
        let many = Record { failures_after_last_success: 40, last_failure: Some(now) };
        assert_eq!(many.remaining(now, s), Some(Duration::from_secs(360)));
    }
}
