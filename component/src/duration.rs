//! Durations on the command line as Kubernetes components take them (Go's `time.ParseDuration`):
//! `500ms`, `15s`, `2m`, `1h30m`, `1.5s`, and — as kaji always accepted — plain seconds.

use std::time::Duration;

/// Parses a Go duration (`1h30m`, `2m0s`, `500ms`, `1.5s`, units ns us µs ms s m h) or plain
/// seconds (`15`); a clap value parser. Negative durations are refused.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let invalid = || format!("invalid duration {s:?} (e.g. 15s, 500ms, 2m, 1h30m)");
    let s = s.trim();
    if s.is_empty() || s.starts_with('-') {
        return Err(invalid());
    }
    if let Ok(secs) = s.parse::<f64>() {
        return Duration::try_from_secs_f64(secs).map_err(|_| invalid());
    }
    let mut total = 0f64;
    let mut rest = s.strip_prefix('+').unwrap_or(s);
    if rest == "0" {
        return Ok(Duration::ZERO);
    }
    while !rest.is_empty() {
        let split = rest.find(|c: char| !c.is_ascii_digit() && c != '.').ok_or_else(invalid)?;
        let (num, tail) = rest.split_at(split);
        let n: f64 = num.parse().map_err(|_| invalid())?;
        let unit_len = tail.find(|c: char| c.is_ascii_digit() || c == '.').unwrap_or(tail.len());
        let (unit, next) = tail.split_at(unit_len);
        let scale = match unit {
            "ns" => 1e-9,
            "us" | "µs" | "μs" => 1e-6,
            "ms" => 1e-3,
            "s" => 1.0,
            "m" => 60.0,
            "h" => 3600.0,
            _ => return Err(invalid()),
        };
        total += n * scale;
        rest = next;
    }
    Duration::try_from_secs_f64(total).map_err(|_| invalid())
}

#[cfg(test)]
mod tests {
    use super::parse_duration;
    use std::time::Duration;

    #[test]
    fn parses_go_durations_and_plain_seconds() {
        assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_duration("30s"), Ok(Duration::from_secs(30)));
        assert_eq!(parse_duration("2m"), Ok(Duration::from_secs(120)));
        assert_eq!(parse_duration("1h30m"), Ok(Duration::from_secs(5400)));
        assert_eq!(parse_duration("1h0m0s"), Ok(Duration::from_secs(3600)), "what Go prints");
        assert_eq!(parse_duration("1.5s"), Ok(Duration::from_millis(1500)));
        assert_eq!(parse_duration("5"), Ok(Duration::from_secs(5)));
        assert_eq!(parse_duration("0"), Ok(Duration::ZERO));
        for bad in ["1d", "x", "", "-5s", "5 s", "s", "1h30"] {
            assert!(parse_duration(bad).is_err(), "{bad:?}");
        }
    }
}
