//! The CLI's log in runc's formats (logrus): `text` is `time="…" level=… msg="…"`, `json` is one
//! `{"level":…,"msg":…,"time":…}` object per line — what engines read back from `--log` to
//! report why a runtime command failed (conmon, containerd's shim: the last `error` line).

use std::fmt::Write as _;
use std::io::Write as _;

use tracing::field::{Field, Visit};
use tracing::{Event, Level, Subscriber};
use tracing_subscriber::fmt::format::Writer;
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormatFields};
use tracing_subscriber::registry::LookupSpan;

use super::Global;

/// Where the log went.
pub struct Log {
    /// To a file (`--log`): an error is then printed to stderr too.
    pub to_file: bool,
}

/// Installs the subscriber `--debug`, `--log` and `--log-format` ask for. `RUST_LOG` overrides
/// the level.
pub fn init(g: &Global) -> anyhow::Result<Log> {
    let default = if g.debug { "debug" } else { "info,libcgroups=error" };
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default));
    let format = Logrus { json: g.log_format == "json" };
    let builder = tracing_subscriber::fmt().with_env_filter(filter).event_format(format);
    match &g.log {
        Some(path) => {
            let file = std::fs::File::options()
                .create(true)
                .append(true)
                .open(path)
                .map_err(|e| anyhow::anyhow!("cannot open log file {}: {e}", path.display()))?;
            builder.with_writer(std::sync::Mutex::new(file)).init();
        }
        None => builder.with_writer(std::io::stderr).init(),
    }
    Ok(Log { to_file: g.log.is_some() })
}

/// logrus' level names.
fn level(l: &Level) -> &'static str {
    match *l {
        Level::ERROR => "error",
        Level::WARN => "warning",
        Level::INFO => "info",
        Level::DEBUG => "debug",
        Level::TRACE => "trace",
    }
}

/// The message and the other fields of an event.
#[derive(Default)]
struct Fields {
    msg: String,
    extra: Vec<(String, String)>,
}

impl Visit for Fields {
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        let text = format!("{value:?}");
        self.set(field, text);
    }
    fn record_str(&mut self, field: &Field, value: &str) {
        self.set(field, value.to_string());
    }
}

impl Fields {
    fn set(&mut self, field: &Field, value: String) {
        match field.name() {
            "message" => self.msg = value,
            name => self.extra.push((name.to_string(), value)),
        }
    }
}

/// Pure: one log line in logrus' text or JSON format.
pub fn line(json: bool, level: &str, msg: &str, extra: &[(String, String)], time: &str) -> String {
    if json {
        let mut obj = serde_json::Map::new();
        for (k, v) in extra {
            obj.insert(k.clone(), serde_json::Value::String(v.clone()));
        }
        obj.insert("level".into(), level.into());
        obj.insert("msg".into(), msg.into());
        obj.insert("time".into(), time.into());
        return serde_json::Value::Object(obj).to_string();
    }
    let quote = |s: &str| serde_json::Value::String(s.to_string()).to_string();
    let mut out = format!("time={} level={level} msg={}", quote(time), quote(msg));
    for (k, v) in extra {
        let _ = write!(out, " {k}={}", quote(v));
    }
    out
}

struct Logrus {
    json: bool,
}

impl<S, N> FormatEvent<S, N> for Logrus
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
{
    fn format_event(&self, _: &FmtContext<'_, S, N>, mut w: Writer<'_>, event: &Event<'_>) -> std::fmt::Result {
        let mut fields = Fields::default();
        event.record(&mut fields);
        let time = format!("{:.9}", jiff::Timestamp::now());
        let text = line(self.json, level(event.metadata().level()), &fields.msg, &fields.extra, &time);
        writeln!(w, "{text}")
    }
}

/// Writes `text` to stdout, ignoring a closed pipe (`kaji-runtime list | head`).
pub fn print(text: &str) {
    let mut out = std::io::stdout().lock();
    let _ = out.write_all(text.as_bytes());
    let _ = out.flush();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_are_logrus_text_or_json() {
        let t = "2026-01-02T03:04:05.000000006Z";
        assert_eq!(
            line(false, "error", "container \"x\" does not exist", &[], t),
            r#"time="2026-01-02T03:04:05.000000006Z" level=error msg="container \"x\" does not exist""#
        );
        let j: serde_json::Value =
            serde_json::from_str(&line(true, "warning", "hook failed", &[("hook".into(), "poststop".into())], t))
                .expect("json");
        assert_eq!(j["level"], "warning");
        assert_eq!(j["msg"], "hook failed");
        assert_eq!(j["time"], t);
        assert_eq!(j["hook"], "poststop");
    }
}
