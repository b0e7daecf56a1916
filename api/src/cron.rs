//! CronJob schedules as Kubernetes reads them (robfig/cron's standard parser): five fields
//! (minute hour day-of-month month day-of-week) or a descriptor (`@yearly` … `@hourly`,
//! `@every <duration>`), with robfig's error messages; the next run is computed by `croner` in a
//! time zone from the IANA database (`jiff`'s, the system's when present, else the bundled one).

use std::time::Duration;

use croner::parser::{CronParser, Seconds, Year};
use jiff::tz::TimeZone;
use jiff::Zoned;

/// A parsed schedule.
#[derive(Debug, Clone)]
pub enum Schedule {
    /// Five cron fields (descriptors are expanded to them).
    Cron(Box<croner::Cron>),
    /// `@every <duration>`: runs at a fixed interval, whole seconds.
    Every(Duration),
}

/// One field's name and bounds, and its names (index = value + offset).
struct Field {
    min: u32,
    max: u32,
    names: &'static [&'static str],
    name_offset: u32,
}

const MONTHS: &[&str] = &["JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC"];
const DAYS: &[&str] = &["SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT"];

const FIELDS: [Field; 5] = [
    Field { min: 0, max: 59, names: &[], name_offset: 0 },
    Field { min: 0, max: 23, names: &[], name_offset: 0 },
    Field { min: 1, max: 31, names: &[], name_offset: 0 },
    Field { min: 1, max: 12, names: MONTHS, name_offset: 1 },
    Field { min: 0, max: 6, names: DAYS, name_offset: 0 },
];

impl Schedule {
    /// Parses like `cron.ParseStandard`; the error is robfig's message.
    pub fn parse(spec: &str) -> Result<Schedule, String> {
        let spec = spec.trim();
        if spec.is_empty() {
            return Err("empty spec string".to_string());
        }
        if let Some(rest) = spec.strip_prefix("@every ") {
            let d = parse_go_duration(rest.trim())
                .ok_or_else(|| format!("failed to parse duration {spec}: time: invalid duration {:?}", rest.trim()))?;
            // robfig: at least a second, whole seconds.
            let secs = d.as_secs().max(1);
            return Ok(Schedule::Every(Duration::from_secs(secs)));
        }
        let fields: Vec<&str> = if spec.starts_with('@') {
            let expanded = match spec {
                "@yearly" | "@annually" => "0 0 1 1 *",
                "@monthly" => "0 0 1 * *",
                "@weekly" => "0 0 * * 0",
                "@daily" | "@midnight" => "0 0 * * *",
                "@hourly" => "0 * * * *",
                other => return Err(format!("unrecognized descriptor: {other}")),
            };
            expanded.split_whitespace().collect()
        } else {
            spec.split_whitespace().collect()
        };
        if fields.len() != 5 {
            return Err(format!("expected exactly 5 fields, found {}: [{}]", fields.len(), fields.join(" ")));
        }
        let mut normalized = Vec::with_capacity(5);
        for (field, text) in FIELDS.iter().zip(&fields) {
            normalized.push(check_field(text, field)?);
        }
        let parser =
            CronParser::builder().seconds(Seconds::Disallowed).year(Year::Disallowed).sloppy_ranges(true).build();
        let cron = parser.parse(&normalized.join(" ")).map_err(|e| e.to_string())?;
        Ok(Schedule::Cron(Box::new(cron)))
    }

    /// The first run strictly after `t`, in `t`'s time zone (`None` if the schedule never fires,
    /// e.g. February 30th).
    pub fn next_after(&self, t: &Zoned) -> Option<Zoned> {
        match self {
            Schedule::Every(d) => {
                let whole = t.timestamp().as_second();
                let secs = i64::try_from(d.as_secs()).ok()?;
                let next = jiff::Timestamp::from_second(whole.checked_add(secs)?).ok()?;
                Some(next.to_zoned(t.time_zone().clone()))
            }
            Schedule::Cron(c) => {
                // Cron runs on whole minutes: start from the current minute so `t` itself is excluded.
                c.find_next_occurrence(t, false).ok()
            }
        }
    }
}

impl Schedule {
    /// The latest start at or before `t` (cron schedules only; `@every` has no fixed grid).
    pub fn latest_at_or_before(&self, t: &Zoned) -> Option<Zoned> {
        match self {
            Schedule::Every(_) => None,
            Schedule::Cron(c) => c.find_previous_occurrence(t, true).ok(),
        }
    }
}

/// Checks one field as robfig's `getField` does (numbers, names, `*`, `?`, ranges, steps) and
/// returns it with names replaced by numbers.
fn check_field(text: &str, f: &Field) -> Result<String, String> {
    let mut parts = Vec::new();
    for expr in text.split(',') {
        let (range, step) = match expr.split_once('/') {
            Some((r, s)) => (r, Some(s)),
            None => (expr, None),
        };
        let (lo, hi, range_text) = if range == "*" || range == "?" {
            (f.min, f.max, "*".to_string())
        } else {
            let (a, b) = match range.split_once('-') {
                Some((a, b)) => (a, Some(b)),
                None => (range, None),
            };
            let lo = value(a, f)?;
            let hi = match b {
                Some(b) => value(b, f)?,
                None => lo,
            };
            let shown = match b {
                Some(_) => format!("{lo}-{hi}"),
                None => lo.to_string(),
            };
            (lo, hi, shown)
        };
        if lo < f.min {
            return Err(format!("beginning of range ({lo}) below minimum ({}): {expr}", f.min));
        }
        if hi > f.max {
            return Err(format!("end of range ({hi}) above maximum ({}): {expr}", f.max));
        }
        if lo > hi {
            return Err(format!("beginning of range ({lo}) beyond end of range ({hi}): {expr}"));
        }
        match step {
            None => parts.push(range_text),
            Some(s) => {
                let n = int(s)?;
                if n == 0 {
                    return Err(format!("step of range should be a positive number: {expr}"));
                }
                // `N/step` runs from N to the field's maximum, as robfig reads it.
                let base =
                    if range_text == "*" || range.contains('-') { range_text } else { format!("{lo}-{}", f.max) };
                parts.push(format!("{base}/{n}"));
            }
        }
    }
    Ok(parts.join(","))
}

fn value(s: &str, f: &Field) -> Result<u32, String> {
    let upper = s.to_ascii_uppercase();
    if let Some(i) = f.names.iter().position(|n| *n == upper) {
        return Ok(u32::try_from(i).unwrap_or(0) + f.name_offset);
    }
    int(s)
}

fn int(s: &str) -> Result<u32, String> {
    s.parse::<u32>().map_err(|_| {
        let why = if s.parse::<i64>().is_ok() { "value out of range" } else { "invalid syntax" };
        format!("failed to parse int from {s}: strconv.Atoi: parsing {s:?}: {why}")
    })
}

/// Go's `time.ParseDuration` for the units a schedule uses (`1h30m`, `90s`, `1.5h`, `500ms`).
fn parse_go_duration(s: &str) -> Option<Duration> {
    if s.is_empty() {
        return None;
    }
    let mut total = 0f64;
    let mut rest = s;
    while !rest.is_empty() {
        let num_end = rest.find(|c: char| !c.is_ascii_digit() && c != '.')?;
        let n: f64 = rest[..num_end].parse().ok()?;
        let after = &rest[num_end..];
        let unit_end = after.find(|c: char| c.is_ascii_digit() || c == '.').unwrap_or(after.len());
        let scale = match &after[..unit_end] {
            "ns" => 1e-9,
            "us" | "µs" => 1e-6,
            "ms" => 1e-3,
            "s" => 1.0,
            "m" => 60.0,
            "h" => 3600.0,
            _ => return None,
        };
        total += n * scale;
        rest = &after[unit_end..];
    }
    Duration::try_from_secs_f64(total).ok()
}

/// A CronJob's `timeZone`: an IANA name from the database (`Local` is refused, as Kubernetes does).
pub fn time_zone(name: &str) -> Result<TimeZone, String> {
    if name.eq_ignore_ascii_case("local") {
        return Err("timeZone must be an explicit time zone as defined in https://www.iana.org/time-zones".into());
    }
    jiff::tz::db().get(name).map_err(|_| format!("unknown time zone {name}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(s: &str) -> Zoned {
        s.parse().expect("zoned time")
    }

    fn next(spec: &str, from: &str) -> String {
        Schedule::parse(spec).expect("parses").next_after(&at(from)).expect("fires").to_string()
    }

    #[test]
    fn standard_fields_and_descriptors_fire_when_cron_would() {
        assert_eq!(next("*/1 * * * *", "2025-03-01T10:00:30+00:00[UTC]"), "2025-03-01T10:01:00+00:00[UTC]");
        assert_eq!(next("*/1 * * * *", "2025-03-01T10:01:00+00:00[UTC]"), "2025-03-01T10:02:00+00:00[UTC]");
        assert_eq!(next("@hourly", "2025-03-01T10:00:00+00:00[UTC]"), "2025-03-01T11:00:00+00:00[UTC]");
        assert_eq!(next("@midnight", "2025-03-01T10:00:00+00:00[UTC]"), "2025-03-02T00:00:00+00:00[UTC]");
        assert_eq!(next("0 9 * * MON-FRI", "2025-03-01T10:00:00+00:00[UTC]"), "2025-03-03T09:00:00+00:00[UTC]");
        // Day of month OR day of week when both are restricted (Vixie cron, robfig).
        assert_eq!(next("0 0 15 * 1", "2025-03-01T10:00:00+00:00[UTC]"), "2025-03-03T00:00:00+00:00[UTC]");
        assert_eq!(next("30 5/6 * * *", "2025-03-01T10:00:00+00:00[UTC]"), "2025-03-01T11:30:00+00:00[UTC]");
        assert_eq!(next("@every 90s", "2025-03-01T10:00:00.5+00:00[UTC]"), "2025-03-01T10:01:30+00:00[UTC]");
        let hourly = Schedule::parse("@hourly").expect("parses");
        let latest = hourly.latest_at_or_before(&at("2025-03-01T10:20:00+00:00[UTC]")).expect("fired");
        assert_eq!(latest.to_string(), "2025-03-01T10:00:00+00:00[UTC]");
    }

    #[test]
    fn time_zones_move_the_wall_clock() {
        let tz = time_zone("Asia/Tokyo").expect("known zone");
        let from = at("2025-02-28T23:00:00+00:00[UTC]").with_time_zone(tz);
        let got = Schedule::parse("0 9 * * *").expect("parses").next_after(&from).expect("fires");
        assert_eq!(got.timestamp().to_string(), "2025-03-01T00:00:00Z");
        assert_eq!(got.to_string(), "2025-03-01T09:00:00+09:00[Asia/Tokyo]");
        assert!(time_zone("Mars/Olympus").is_err());
        assert!(time_zone("Local").is_err());
    }

    #[test]
    fn bad_schedules_get_robfigs_messages() {
        let err = |s: &str| Schedule::parse(s).expect_err("rejected");
        assert_eq!(err("* * *"), "expected exactly 5 fields, found 3: [* * *]");
        assert_eq!(err("@fortnightly"), "unrecognized descriptor: @fortnightly");
        assert_eq!(err("70 * * * *"), "end of range (70) above maximum (59): 70");
        assert_eq!(err("* * * * 7"), "end of range (7) above maximum (6): 7");
        assert_eq!(err("5-1 * * * *"), "beginning of range (5) beyond end of range (1): 5-1");
        assert_eq!(err("*/0 * * * *"), "step of range should be a positive number: */0");
        assert_eq!(err("x * * * *"), "failed to parse int from x: strconv.Atoi: parsing \"x\": invalid syntax");
        assert_eq!(err("0 0 L * *"), "failed to parse int from L: strconv.Atoi: parsing \"L\": invalid syntax");
        assert_eq!(err(""), "empty spec string");
        assert!(Schedule::parse("0 0 1 jan,JUL sun").is_ok());
        assert!(Schedule::parse("@every 1h30m").is_ok());
        assert!(Schedule::parse("@every soon").is_err());
    }
}
