//! Reading containers' CRI-format logs back as `kubectl logs` shows them: partial records
//! joined, optional timestamps, `tailLines`, `sinceSeconds`/`sinceTime`, `limitBytes`.

use std::path::Path;

/// One log line put back together.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Line {
    pub time: jiff::Timestamp,
    pub stream: String,
    pub text: String,
}

/// Joins P records into their F line; malformed lines are skipped. Returns the lines and how many
/// bytes of `text` were consumed (a trailing partial line is left for the next read).
pub fn parse_lines(text: &str) -> (Vec<Line>, usize) {
    let mut out = Vec::new();
    let mut pending: Option<Line> = None;
    let mut consumed = 0;
    let mut offset = 0;
    for raw in text.split_inclusive('\n') {
        offset += raw.len();
        if !raw.ends_with('\n') {
            break;
        }
        let Some(rec) = kaji_runtime::logs::parse(raw.trim_end_matches('\n')) else {
            consumed = offset;
            continue;
        };
        let Ok(time) = rec.time.parse::<jiff::Timestamp>() else { continue };
        let line = pending.get_or_insert_with(|| Line { time, stream: rec.stream.to_string(), text: String::new() });
        line.text.push_str(rec.line);
        if !rec.partial {
            if let Some(l) = pending.take() {
                out.push(l);
            }
            consumed = offset;
        }
    }
    (out, consumed)
}

/// One CRI log record as written: a terminal's output is replayed record by record, partial
/// ones (a prompt) without the newline the log adds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record {
    pub stream: String,
    pub text: String,
    pub partial: bool,
}

/// The complete records at the start of `text`, and how many bytes they took. Pure.
pub fn parse_records(text: &str) -> (Vec<Record>, usize) {
    let mut out = Vec::new();
    let mut consumed = 0;
    for raw in text.split_inclusive('\n') {
        if !raw.ends_with('\n') {
            break;
        }
        consumed += raw.len();
        if let Some(rec) = kaji_runtime::logs::parse(&raw[..raw.len() - 1]) {
            out.push(Record { stream: rec.stream.to_string(), text: rec.line.to_string(), partial: rec.partial });
        }
    }
    (out, consumed)
}

/// How `kubectl logs` asked for the log.
#[derive(Clone, Debug, Default)]
pub struct Options {
    pub tail_lines: Option<usize>,
    pub since: Option<jiff::Timestamp>,
    pub timestamps: bool,
    pub limit_bytes: Option<usize>,
}

/// Filters and formats lines as the API returns them.
pub fn render(lines: &[Line], o: &Options) -> String {
    let lines: Vec<&Line> = lines.iter().filter(|l| o.since.is_none_or(|s| l.time >= s)).collect();
    let start = o.tail_lines.map(|n| lines.len().saturating_sub(n)).unwrap_or(0);
    let mut out = String::new();
    for l in &lines[start..] {
        out.push_str(&format_line(l, o.timestamps));
    }
    if let Some(limit) = o.limit_bytes {
        if out.len() > limit {
            let mut cut = limit;
            while !out.is_char_boundary(cut) {
                cut -= 1;
            }
            out.truncate(cut);
        }
    }
    out
}

pub fn format_line(l: &Line, timestamps: bool) -> String {
    if timestamps {
        format!("{:.9} {}\n", l.time, l.text)
    } else {
        format!("{}\n", l.text)
    }
}

/// The last `lines` lines of a log, at most `bytes` long (termination message fallback).
pub fn tail_text(path: &Path, lines: usize, bytes: usize) -> Option<String> {
    let text = std::fs::read_to_string(path).ok()?;
    let (parsed, _) = parse_lines(&text);
    let start = parsed.len().saturating_sub(lines);
    let mut out: String = parsed[start..].iter().map(|l| format_line(l, false)).collect();
    if out.len() > bytes {
        let mut cut = out.len() - bytes;
        while !out.is_char_boundary(cut) {
            cut += 1;
        }
        out = out[cut..].to_string();
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    const LOG: &str = "2026-01-01T00:00:01.000000000Z stdout F one\n\
                       2026-01-01T00:00:02.000000000Z stderr P tw\n\
                       2026-01-01T00:00:02.500000000Z stderr F o\n\
                       2026-01-01T00:00:03.000000000Z stdout F three\n\
                       2026-01-01T00:00:04.000000000Z stdout P unfinished";

    #[test]
    fn records_come_back_as_written_and_an_unfinished_one_waits() {
        let (recs, consumed) = parse_records(LOG);
        let got: Vec<(&str, &str, bool)> =
            recs.iter().map(|r| (r.stream.as_str(), r.text.as_str(), r.partial)).collect();
        assert_eq!(
            got,
            [("stdout", "one", false), ("stderr", "tw", true), ("stderr", "o", false), ("stdout", "three", false)]
        );
        assert_eq!(&LOG[consumed..], "2026-01-01T00:00:04.000000000Z stdout P unfinished");
    }

    #[test]
    fn partial_records_join_and_an_unfinished_tail_waits() {
        let (lines, consumed) = parse_lines(LOG);
        let texts: Vec<&str> = lines.iter().map(|l| l.text.as_str()).collect();
        assert_eq!(texts, ["one", "two", "three"]);
        assert_eq!(&LOG[consumed..], "2026-01-01T00:00:04.000000000Z stdout P unfinished");
    }

    #[test]
    fn tail_since_timestamps_and_limits_apply_as_kubectl_expects() {
        let (lines, _) = parse_lines(LOG);
        assert_eq!(render(&lines, &Options { tail_lines: Some(2), ..Options::default() }), "two\nthree\n");
        let since = "2026-01-01T00:00:02.200Z".parse().ok();
        assert_eq!(render(&lines, &Options { since, ..Options::default() }), "three\n");
        let ts = render(&lines, &Options { tail_lines: Some(1), timestamps: true, ..Options::default() });
        assert_eq!(ts, "2026-01-01T00:00:03.000000000Z three\n");
        assert_eq!(render(&lines, &Options { limit_bytes: Some(5), ..Options::default() }), "one\nt");
    }
}
