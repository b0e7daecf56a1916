//! When a CronJob is due, as Kubernetes' CronJob controller computes it: the most recent missed
//! start time since the last one (or creation), bounded by startingDeadlineSeconds, and the next
//! time to look again.

use jiff::tz::TimeZone;
use jiff::{SignedDuration, Timestamp, Zoned};
use kaji_api::cron::Schedule;
use std::time::Duration;

/// More missed start times than this is reported (TooManyMissedTimes) as clock skew or a
/// missing startingDeadlineSeconds.
pub const MISSED_WARNING: usize = 100;

/// The most recent start time in (earliest, now], and how many were missed.
#[derive(Debug, Clone, PartialEq)]
pub struct Due {
    pub time: Option<Timestamp>,
    pub missed: usize,
}

/// mostRecentScheduleTime: walks the schedule from `earliest` (last run, or creation, raised to
/// `now - startingDeadlineSeconds`) up to `now`.
pub fn most_recent(
    schedule: &Schedule,
    tz: &TimeZone,
    last: Option<Timestamp>,
    created: Timestamp,
    starting_deadline: Option<i64>,
    now: Timestamp,
) -> Due {
    let mut earliest = last.unwrap_or(created);
    if let Some(sds) = starting_deadline {
        if let Ok(deadline) = now.checked_sub(SignedDuration::from_secs(sds)) {
            earliest = earliest.max(deadline);
        }
    }
    let start = earliest.to_zoned(tz.clone());
    let Some(t1) = schedule.next_after(&start) else { return Due { time: None, missed: 0 } };
    if t1.timestamp() > now {
        return Due { time: None, missed: 0 };
    }
    let Some(t2) = schedule.next_after(&t1) else { return Due { time: Some(t1.timestamp()), missed: 1 } };
    if t2.timestamp() > now {
        return Due { time: Some(t1.timestamp()), missed: 1 };
    }
    // Many missed: the latest start at or before now, and (as Kubernetes) an estimate of how many
    // from the interval between the first two.
    let gap = t2.timestamp().duration_since(t1.timestamp()).as_secs().max(1);
    let elapsed = now.duration_since(t1.timestamp()).as_secs();
    let missed = usize::try_from(elapsed / gap).unwrap_or(usize::MAX).saturating_add(1);
    let latest = match schedule {
        Schedule::Every(_) => t1.timestamp().checked_add(SignedDuration::from_secs(elapsed / gap * gap)).ok(),
        Schedule::Cron(_) => schedule.latest_at_or_before(&Zoned::new(now, tz.clone())).map(|z| z.timestamp()),
    };
    Due { time: latest.filter(|t| *t >= t1.timestamp()), missed }
}

/// How long until the next start after `now` (plus Kubernetes' 100 ms of slack), if there is one.
pub fn until_next(schedule: &Schedule, tz: &TimeZone, now: Timestamp) -> Option<Duration> {
    let next = schedule.next_after(&Zoned::new(now, tz.clone()))?;
    let d = Duration::try_from(next.timestamp().duration_since(now)).unwrap_or(Duration::ZERO);
    Some(d + Duration::from_millis(100))
}

/// The name of the Job started for `scheduled`: `<cronjob>-<minutes since the epoch>`.
pub fn job_name(cron_job: &str, scheduled: Timestamp) -> String {
    format!("{cron_job}-{}", scheduled.as_second().div_euclid(60))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ts(s: &str) -> Timestamp {
        s.parse().expect("timestamp")
    }

    #[test]
    fn the_most_recent_missed_start_is_due_once() {
        let every_minute = Schedule::parse("*/1 * * * *").expect("schedule");
        let created = ts("2025-01-01T10:00:30Z");
        let now = ts("2025-01-01T10:03:10Z");
        let due = most_recent(&every_minute, &TimeZone::UTC, None, created, None, now);
        assert_eq!(due, Due { time: Some(ts("2025-01-01T10:03:00Z")), missed: 3 });
        let after = most_recent(&every_minute, &TimeZone::UTC, due.time, created, None, now);
        assert_eq!(after.time, None, "nothing new is due after it ran");
        let limited = most_recent(&every_minute, &TimeZone::UTC, None, created, Some(30), now);
        assert_eq!(limited, Due { time: Some(ts("2025-01-01T10:03:00Z")), missed: 1 });
        assert_eq!(until_next(&every_minute, &TimeZone::UTC, now), Some(Duration::from_millis(50_100)));
    }

    #[test]
    fn jobs_are_named_by_minute() {
        assert_eq!(job_name("hello", ts("2025-01-01T10:03:00Z")), "hello-28928763");
    }
}
