//! `kaji events`: the namespace's (or every namespace's) Events, oldest first, as
//! `kubectl events` prints them; `--for TYPE/NAME` narrows to one object. The event helpers
//! (`last_seen`, `sorted`) also serve `describe`.

use crate::cluster::{query, Cluster};
use crate::output::emit;
use crate::table::Layout;
use anyhow::{bail, Result};
use jiff::Timestamp;
use serde_json::Value;

#[derive(clap::Args, Debug)]
pub struct Args {
    /// Events of every namespace (adds a NAMESPACE column).
    #[arg(short = 'A', long)]
    pub all_namespaces: bool,
    /// Only the events about this object, e.g. pod/web or deploy/web.
    #[arg(long = "for", value_name = "TYPE/NAME")]
    pub for_object: Option<String>,
    /// Only these types (Normal, Warning), comma-separated.
    #[arg(long, value_delimiter = ',')]
    pub types: Vec<String>,
}

pub async fn run(cl: &Cluster, args: Args) -> Result<()> {
    let ns = (!args.all_namespaces).then_some(cl.namespace.as_str());
    let mut fields = Vec::new();
    if let Some(target) = &args.for_object {
        let Some((kind, name)) = target.split_once('/') else {
            bail!("--for must be TYPE/NAME, e.g. pod/web");
        };
        let r = cl.resolve(kind).await?;
        fields.push(format!("involvedObject.kind={}", r.kind));
        fields.push(format!("involvedObject.name={name}"));
    }
    let events = cl.resolve("events").await?;
    let mut uri = events.path(ns);
    if !fields.is_empty() {
        uri = format!("{uri}?{}", query(&[("fieldSelector", &fields.join(","))]));
    }
    let list = cl.get_json(&uri, "application/json").await?;
    let mut items: Vec<Value> = list["items"].as_array().cloned().unwrap_or_default();
    if !args.types.is_empty() {
        items.retain(|e| args.types.iter().any(|t| e["type"].as_str().is_some_and(|et| et.eq_ignore_ascii_case(t))));
    }
    if items.is_empty() {
        match ns {
            Some(ns) => eprintln!("No events found in {ns} namespace."),
            None => eprintln!("No events found."),
        }
        return Ok(());
    }
    emit(&render(&sorted(items), args.all_namespaces, Timestamp::now()))
}

/// `kubectl events`' table: LAST SEEN, TYPE, REASON, OBJECT, MESSAGE (NAMESPACE first with -A).
pub fn render(events: &[Value], all_namespaces: bool, now: Timestamp) -> String {
    let mut header: Vec<String> = ["LAST SEEN", "TYPE", "REASON", "OBJECT", "MESSAGE"].map(String::from).to_vec();
    if all_namespaces {
        header.insert(0, "NAMESPACE".into());
    }
    let mut rows = vec![header];
    for e in events {
        let obj = &e["involvedObject"];
        let mut row = vec![
            last_seen(e, now),
            text(&e["type"]),
            text(&e["reason"]),
            format!("{}/{}", text(&obj["kind"]), text(&obj["name"])),
            text(&e["message"]).trim().to_string(),
        ];
        if all_namespaces {
            row.insert(0, text(&e["metadata"]["namespace"]));
        }
        rows.push(row);
    }
    Layout::default().render(&rows)
}

fn text(v: &Value) -> String {
    v.as_str().unwrap_or("").to_string()
}

/// When the event last happened: lastTimestamp, else eventTime, firstTimestamp, creation.
fn last_time(e: &Value) -> Option<Timestamp> {
    ["/lastTimestamp", "/eventTime", "/series/lastObservedTime", "/firstTimestamp", "/metadata/creationTimestamp"]
        .iter()
        .find_map(|p| e.pointer(p).and_then(Value::as_str).and_then(|s| s.parse().ok()))
}

/// Oldest first, as kubectl sorts them.
pub fn sorted(mut events: Vec<Value>) -> Vec<Value> {
    events.sort_by_key(last_time);
    events
}

/// `12s`, or `5s (x3 over 2m)` for a repeated event.
pub fn last_seen(e: &Value, now: Timestamp) -> String {
    let age = |t: Option<Timestamp>| match t {
        Some(t) => kaji_api::table::human_duration(now.duration_since(t).unsigned_abs()),
        None => "<unknown>".into(),
    };
    let count = e["count"].as_i64().or_else(|| e["series"]["count"].as_i64()).unwrap_or(1);
    let last = age(last_time(e));
    if count > 1 {
        let first = e["firstTimestamp"].as_str().and_then(|s| s.parse().ok()).or_else(|| last_time(e));
        format!("{last} (x{count} over {})", age(first))
    } else {
        last
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn now() -> Timestamp {
        "2025-01-01T12:00:00Z".parse().expect("timestamp")
    }

    fn event(ns: &str, reason: &str, last: &str, count: i64) -> Value {
        json!({"metadata": {"namespace": ns}, "type": "Normal", "reason": reason, "message": format!("{reason} happened\n"),
               "involvedObject": {"kind": "Pod", "name": "web"}, "count": count,
               "firstTimestamp": "2025-01-01T11:50:00Z", "lastTimestamp": last})
    }

    #[test]
    fn repeated_events_say_how_often_and_over_how_long() {
        assert_eq!(last_seen(&event("d", "Pulled", "2025-01-01T11:59:50Z", 1), now()), "10s");
        assert_eq!(last_seen(&event("d", "BackOff", "2025-01-01T11:59:50Z", 4), now()), "10s (x4 over 10m)");
    }

    #[test]
    fn the_table_is_oldest_first_with_kind_slash_name() {
        let evs = sorted(vec![
            event("prod", "Started", "2025-01-01T11:59:00Z", 1),
            event("dev", "Scheduled", "2025-01-01T11:58:00Z", 1),
        ]);
        assert_eq!(
            render(&evs, true, now()),
            "NAMESPACE   LAST SEEN   TYPE     REASON      OBJECT    MESSAGE\n\
             dev         2m          Normal   Scheduled   Pod/web   Scheduled happened\n\
             prod        60s         Normal   Started     Pod/web   Started happened\n"
        );
    }
}
