//! Where events go: kube-apiserver's buffered log backend. Requests hand events to a bounded
//! channel and never wait; one writer thread serializes them as JSON lines to the file (or
//! stdout), rotating it by size as lumberjack does (`audit-<UTC time>.log` beside it). A full
//! buffer drops the event and counts it.

use super::event::{Bodies, Event};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::mpsc::{sync_channel, Receiver, SyncSender, TrySendError};
use std::time::{Duration, SystemTime};

/// `--audit-log-batch-buffer-size`'s default.
pub const BUFFER: usize = 10_000;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("failed to open audit log {path}")]
    Open {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("failed to start the audit log writer")]
    Spawn(#[source] std::io::Error),
}

/// `--audit-log-path`, `--audit-log-maxsize` (MB; 0 is lumberjack's 100), `--audit-log-maxbackup`
/// and `--audit-log-maxage` (days; 0 keeps them all).
#[derive(Debug, Clone, Default)]
pub struct LogConfig {
    pub path: PathBuf,
    pub max_size_mb: u64,
    pub max_backups: usize,
    pub max_age_days: u64,
}

/// Kubernetes' `plugin` label of `apiserver_audit_error_total`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, prometheus_client::encoding::EncodeLabelSet)]
pub struct PluginLabel {
    pub plugin: String,
}

/// `apiserver_audit_event_total` and `apiserver_audit_error_total{plugin}`.
#[derive(Clone, Default)]
pub struct Counters {
    pub events: Counter,
    pub errors: Family<PluginLabel, Counter>,
}

impl Counters {
    fn error(&self, plugin: &str) {
        self.errors.get_or_create(&PluginLabel { plugin: plugin.into() }).inc();
    }
}

/// The request side: a bounded queue to the writer.
pub struct Backend {
    tx: SyncSender<Message>,
    counters: Counters,
}

/// What the writer thread is handed.
enum Message {
    /// An event, with the bodies a ResponseComplete is finished from.
    Event(Box<Event>, Option<Bodies>),
    /// Everything before this is written: say so.
    Flush(std::sync::mpsc::Sender<()>),
}

impl Backend {
    /// Opens the log and starts the writer thread (it ends when the backend is dropped).
    pub fn start(config: &LogConfig, counters: Counters) -> Result<Self, Error> {
        Self::with_buffer(config, counters, BUFFER)
    }

    fn with_buffer(config: &LogConfig, counters: Counters, buffer: usize) -> Result<Self, Error> {
        let mut sink = if config.path.as_os_str() == "-" {
            Sink::Stdout
        } else {
            let max_bytes = if config.max_size_mb == 0 { 100 } else { config.max_size_mb } * 1024 * 1024;
            Sink::File(RotatingFile::open(&config.path, max_bytes, config.max_backups, config.max_age_days)?)
        };
        let (tx, rx) = sync_channel(buffer);
        let errors = counters.clone();
        std::thread::Builder::new()
            .name("audit-log".into())
            .spawn(move || write_all(rx, &mut sink, &errors))
            .map_err(Error::Spawn)?;
        Ok(Self { tx, counters })
    }

    /// Queues `event`; never blocks. A full buffer loses it (counted, as Kubernetes does).
    pub fn process(&self, event: Event) {
        self.send(event, None);
    }

    /// Queues a ResponseComplete event with the bodies the writer completes it from.
    pub fn process_completed(&self, event: Event, bodies: Bodies) {
        self.send(event, Some(bodies));
    }

    fn send(&self, event: Event, bodies: Option<Bodies>) {
        self.counters.events.inc();
        match self.tx.try_send(Message::Event(Box::new(event), bodies)) {
            Ok(()) => {}
            Err(TrySendError::Full(dropped)) => {
                self.counters.error("buffered");
                if let Message::Event(e, _) = dropped {
                    tracing::warn!(audit_id = %e.audit_id, "audit buffer full, event dropped");
                }
            }
            Err(TrySendError::Disconnected(_)) => self.counters.error("log"),
        }
    }
}

impl Backend {
    /// Waits, at most `timeout`, until every event queued before this call is written (the
    /// apiserver's last step before it exits). Blocks: call it off the runtime.
    pub fn flush(&self, timeout: Duration) -> bool {
        let deadline = std::time::Instant::now() + timeout;
        let (done, written) = std::sync::mpsc::channel();
        let mut message = Message::Flush(done);
        loop {
            match self.tx.try_send(message) {
                Ok(()) => break,
                Err(TrySendError::Full(m)) if std::time::Instant::now() < deadline => {
                    message = m;
                    std::thread::sleep(Duration::from_millis(5));
                }
                Err(_) => return false,
            }
        }
        written.recv_timeout(deadline.saturating_duration_since(std::time::Instant::now())).is_ok()
    }
}

enum Sink {
    Stdout,
    File(RotatingFile),
}

/// The writer thread's loop. A failed write loses that event, is counted and never stops the
/// next; the first of a run of failures is logged, and the recovery.
fn write_all(rx: Receiver<Message>, sink: &mut Sink, counters: &Counters) {
    let mut failing = false;
    while let Ok(message) = rx.recv() {
        let (mut event, bodies) = match message {
            Message::Event(event, bodies) => (event, bodies),
            Message::Flush(done) => {
                if let Sink::Stdout = sink {
                    let _ = std::io::stdout().flush();
                }
                let _ = done.send(());
                continue;
            }
        };
        if let Some(bodies) = bodies {
            event.complete(bodies);
        }
        let mut line = match serde_json::to_vec(&*event) {
            Ok(l) => l,
            Err(_) => {
                counters.error("log");
                continue;
            }
        };
        line.push(b'\n');
        let written = match sink {
            Sink::Stdout => std::io::stdout().lock().write_all(&line),
            Sink::File(f) => f.write(&line),
        };
        match written {
            Err(error) => {
                counters.error("log");
                if !failing {
                    tracing::error!(%error, "failed to write audit events (counted in apiserver_audit_error_total)");
                    failing = true;
                }
            }
            Ok(()) if failing => {
                tracing::info!("audit events are written again");
                failing = false;
            }
            Ok(()) => {}
        }
    }
}

/// An append-only file that, before a write would take it past `max_bytes`, is renamed to
/// `<stem>-<UTC 2006-01-02T15-04-05.000><.ext>` and started again (lumberjack's naming), keeping
/// at most `max_backups` (0: all) backups of at most `max_age_days` (0: any age).
pub struct RotatingFile {
    path: PathBuf,
    file: File,
    size: u64,
    max_bytes: u64,
    max_backups: usize,
    max_age_days: u64,
    /// The millisecond the last backup is named after.
    last_backup: Option<i64>,
}

impl RotatingFile {
    /// Opens (or creates, with its directory, as lumberjack does) the log at `path`.
    pub fn open(path: &Path, max_bytes: u64, max_backups: usize, max_age_days: u64) -> Result<Self, Error> {
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir).map_err(|source| Error::Open { path: path.display().to_string(), source })?;
        }
        let file = open_append(path)?;
        let size = file.metadata().map(|m| m.len()).unwrap_or(0);
        Ok(Self { path: path.to_path_buf(), file, size, max_bytes, max_backups, max_age_days, last_backup: None })
    }

    pub fn write(&mut self, line: &[u8]) -> std::io::Result<()> {
        if self.size > 0 && self.size + line.len() as u64 > self.max_bytes {
            self.rotate()?;
        }
        self.file.write_all(line)?;
        self.size += line.len() as u64;
        Ok(())
    }

    fn rotate(&mut self) -> std::io::Result<()> {
        // Names sort as the rotations happened: two in one millisecond would name the same backup
        // (lumberjack would replace the earlier), so a later one takes the next free millisecond
        // after the last.
        let now = jiff::Timestamp::now().as_millisecond();
        let mut millis = self.last_backup.map_or(now, |last| now.max(last + 1));
        let mut backup = self.backup_name(millis);
        for _ in 0..1000 {
            if !backup.exists() {
                break;
            }
            millis += 1;
            backup = self.backup_name(millis);
        }
        self.last_backup = Some(millis);
        std::fs::rename(&self.path, &backup)?;
        self.file = open_append(&self.path).map_err(|e| match e {
            Error::Open { source, .. } | Error::Spawn(source) => source,
        })?;
        self.size = 0;
        self.prune();
        Ok(())
    }

    fn parts(&self) -> (String, String) {
        let stem = self.path.file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_default();
        let ext = self.path.extension().map(|e| format!(".{}", e.to_string_lossy())).unwrap_or_default();
        (stem, ext)
    }

    fn backup_name(&self, millis: i64) -> PathBuf {
        let (stem, ext) = self.parts();
        let at = jiff::Timestamp::from_millisecond(millis).unwrap_or(jiff::Timestamp::UNIX_EPOCH);
        let stamp = at.strftime("%Y-%m-%dT%H-%M-%S.%3f");
        self.path.with_file_name(format!("{stem}-{stamp}{ext}"))
    }

    /// Removes the backups beyond `max_backups` (oldest first) and those older than `max_age_days`.
    fn prune(&self) {
        if self.max_backups == 0 && self.max_age_days == 0 {
            return;
        }
        let (stem, ext) = self.parts();
        let dir = self.path.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(Path::new("."));
        let Ok(entries) = std::fs::read_dir(dir) else { return };
        let prefix = format!("{stem}-");
        // The stamp sorts as the time it names.
        let mut backups: Vec<(String, PathBuf)> = entries
            .flatten()
            .filter_map(|e| {
                let name = e.file_name().to_string_lossy().into_owned();
                let stamp = name.strip_prefix(&prefix)?.strip_suffix(&ext)?.to_string();
                (stamp.len() == "2006-01-02T15-04-05.000".len()).then(|| (stamp, e.path()))
            })
            .collect();
        backups.sort();
        let cutoff = SystemTime::now().checked_sub(Duration::from_secs(self.max_age_days * 86_400));
        let excess = if self.max_backups == 0 { 0 } else { backups.len().saturating_sub(self.max_backups) };
        for (i, (_, path)) in backups.iter().enumerate() {
            let too_old = self.max_age_days > 0
                && std::fs::metadata(path).and_then(|m| m.modified()).is_ok_and(|t| cutoff.is_some_and(|c| t < c));
            if i < excess || too_old {
                let _ = std::fs::remove_file(path);
            }
        }
    }
}

fn open_append(path: &Path) -> Result<File, Error> {
    use std::os::unix::fs::OpenOptionsExt;
    OpenOptions::new()
        .create(true)
        .append(true)
        .mode(0o600)
        .open(path)
        .map_err(|source| Error::Open { path: path.display().to_string(), source })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn backups(dir: &Path) -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(dir)
            .expect("dir")
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| n != "audit.log")
            .collect();
        names.sort();
        names
    }

    #[test]
    fn a_file_past_its_size_is_renamed_as_lumberjack_names_backups() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("audit.log");
        let mut f = RotatingFile::open(&path, 100, 0, 0).expect("open");
        f.write(&[b'a'; 60]).expect("write");
        f.write(&[b'b'; 60]).expect("write");
        assert_eq!(std::fs::read(&path).expect("read"), vec![b'b'; 60], "the new file holds the line that did not fit");
        let names = backups(dir.path());
        assert_eq!(names.len(), 1, "{names:?}");
        // audit-2026-12-07T05-39-13.123.log
        let stamp = names[0].strip_prefix("audit-").and_then(|n| n.strip_suffix(".log")).expect("lumberjack name");
        assert_eq!((stamp.len(), &stamp[10..11], &stamp[13..14], &stamp[19..20]), (23, "T", "-", "."));
        assert_eq!(std::fs::read(dir.path().join(&names[0])).expect("read"), vec![b'a'; 60]);
    }

    #[test]
    fn the_logs_directory_is_made_when_missing() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("var/log/kubernetes/audit.log");
        let mut f = RotatingFile::open(&path, 100, 0, 0).expect("open");
        f.write(b"{}\n").expect("write");
        assert_eq!(std::fs::read(&path).expect("read"), b"{}\n");
    }

    #[test]
    fn only_max_backups_backups_are_kept() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("audit.log");
        let mut f = RotatingFile::open(&path, 10, 2, 0).expect("open");
        for i in 0..5u8 {
            f.write(&[b'0' + i; 10]).expect("write");
        }
        let names = backups(dir.path());
        assert_eq!(names.len(), 2, "{names:?}");
        // The newest two, though all five rotations fell in a few milliseconds.
        let kept: Vec<Vec<u8>> = names.iter().map(|n| std::fs::read(dir.path().join(n)).expect("read")).collect();
        assert_eq!(kept, [vec![b'2'; 10], vec![b'3'; 10]]);
        assert_eq!(std::fs::read(&path).expect("read"), vec![b'4'; 10]);
    }

    #[test]
    fn flush_returns_once_everything_queued_is_written() {
        let dir = tempfile::tempdir().expect("tempdir");
        let config = LogConfig { path: dir.path().join("audit.log"), ..Default::default() };
        let backend = Backend::start(&config, Counters::default()).expect("backend");
        let event = super::super::event::tests_support::event();
        for _ in 0..100 {
            backend.process(event.clone());
        }
        assert!(backend.flush(Duration::from_secs(10)), "not flushed in time");
        let text = std::fs::read_to_string(&config.path).expect("log");
        assert_eq!(text.lines().count(), 100);
    }

    #[test]
    fn a_failing_log_counts_its_errors_and_the_writer_goes_on() {
        // Every write to /dev/full fails with ENOSPC.
        let config = LogConfig { path: "/dev/full".into(), ..Default::default() };
        let counters = Counters::default();
        let backend = Backend::start(&config, counters.clone()).expect("backend");
        let event = super::super::event::tests_support::event();
        for _ in 0..3 {
            backend.process(event.clone());
        }
        let failed = || counters.errors.get_or_create(&PluginLabel { plugin: "log".into() }).get();
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while failed() < 3 {
            assert!(std::time::Instant::now() < deadline, "{} of 3 failures counted", failed());
            std::thread::yield_now();
        }
        assert_eq!(counters.events.get(), 3);
    }

    #[test]
    fn a_full_buffer_drops_and_counts_instead_of_waiting() {
        let dir = tempfile::tempdir().expect("tempdir");
        let config = LogConfig { path: dir.path().join("audit.log"), ..Default::default() };
        let counters = Counters::default();
        // A buffer of 0 is a rendezvous: with the writer busy or not yet waiting, sends fail at once.
        let backend = Backend::with_buffer(&config, counters.clone(), 0).expect("backend");
        let event = super::super::event::tests_support::event();
        let started = std::time::Instant::now();
        for _ in 0..1000 {
            backend.process(event.clone());
        }
        assert!(started.elapsed() < Duration::from_secs(1), "processing waited");
        assert_eq!(counters.events.get(), 1000);
        let dropped = counters.errors.get_or_create(&PluginLabel { plugin: "buffered".into() }).get();
        assert!(dropped > 0, "nothing was dropped");
    }
}
