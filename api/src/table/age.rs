//! Ages as kubectl prints them: `human_duration` and creation-time cells.

use std::time::Duration;

use jiff::Timestamp;

/// apimachinery's `duration.HumanDuration`: about two significant figures.
pub fn human_duration(d: Duration) -> String {
    let secs = d.as_secs();
    if secs < 60 * 2 {
        return format!("{secs}s");
    }
    let minutes = secs / 60;
    if minutes < 10 {
        return match secs % 60 {
            0 => format!("{minutes}m"),
            s => format!("{minutes}m{s}s"),
        };
    }
    if minutes < 60 * 3 {
        return format!("{minutes}m");
    }
    let hours = secs / 3600;
    let days = hours / 24;
    if hours < 8 {
        match minutes % 60 {
            0 => format!("{hours}h"),
            m => format!("{hours}h{m}m"),
        }
    } else if hours < 48 {
        format!("{hours}h")
    } else if hours < 24 * 8 {
        match hours % 24 {
            0 => format!("{days}d"),
            h => format!("{days}d{h}h"),
        }
    } else if hours < 24 * 365 * 2 {
        format!("{days}d")
    } else if hours < 24 * 365 * 8 {
        match days % 365 {
            0 => format!("{}y", days / 365),
            dy => format!("{}y{dy}d", days / 365),
        }
    } else {
        format!("{}y", days / 365)
    }
}

/// `translateTimestampSince`: `<unknown>` without a timestamp, tolerating 1s of clock skew.
pub(super) fn since(t: Option<Timestamp>, now: Timestamp) -> String {
    let Some(t) = t else {
        return "<unknown>".to_owned();
    };
    let elapsed = now.duration_since(t);
    match elapsed.as_secs() {
        s if s < -1 => "<invalid>".to_owned(),
        s if s < 0 => "0s".to_owned(),
        _ => human_duration(elapsed.unsigned_abs()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::table::test_support::now;

    #[test]
    fn human_duration_matches_apimachinery() {
        let cases = [
            (0, "0s"),
            (59, "59s"),
            (119, "119s"),
            (120, "2m"),
            (310, "5m10s"),
            (599, "9m59s"),
            (600, "10m"),
            (179 * 60 + 59, "179m"),
            (3 * 3600, "3h"),
            (3 * 3600 + 25 * 60, "3h25m"),
            (8 * 3600, "8h"),
            (47 * 3600 + 59 * 60, "47h"),
            (2 * 86400, "2d"),
            (2 * 86400 + 3 * 3600, "2d3h"),
            (8 * 86400 + 5 * 3600, "8d"),
            (729 * 86400, "729d"),
            (730 * 86400, "2y"),
            (3 * 365 * 86400 + 10 * 86400, "3y10d"),
            (5 * 365 * 86400, "5y"),
            (9 * 365 * 86400 + 100 * 86400, "9y"),
        ];
        for (secs, want) in cases {
            assert_eq!(human_duration(Duration::from_secs(secs)), want, "{secs}s");
        }
    }

    #[test]
    fn age_tolerates_one_second_of_skew_and_flags_more() {
        let t = |s: &str| s.parse::<Timestamp>().ok();
        assert_eq!(since(t("2025-01-01T12:00:01Z"), now()), "0s");
        assert_eq!(since(t("2025-01-01T12:00:05Z"), now()), "<invalid>");
        assert_eq!(since(None, now()), "<unknown>");
        assert_eq!(since(t("2025-01-01T11:00:00Z"), now()), "60m");
    }
}
