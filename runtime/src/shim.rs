//! The per-container shim: a single-threaded process, forked by the [fork server](crate::forkserver)
//! (a freshly exec'd helper), that creates the container (clone + init for the native backend,
//! `runc create` for the runc backend), stays its parent (or subreaper), pumps stdout/stderr into
//! a CRI-format log, and records the exit status. It outlives the process that created it.
//!
//! Why not a fork of the caller: the agent is multi-threaded (tokio); a fork of it may inherit
//! locks held by other threads. The fork server started from a clean exec with one thread and
//! stays single-threaded, so its forks, and their clone(), are safe.

use std::fs::File;
use std::io::{Read, Write};
use std::os::fd::{AsFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use nix::fcntl::OFlag;
use nix::poll::{PollFd, PollFlags, PollTimeout};
use nix::sys::wait::{waitpid, WaitPidFlag, WaitStatus};
use nix::unistd::Pid;

use crate::cgroups;
use crate::hooks::chain;
use crate::launch::{self, fifo, log_pipes, stdin_fifo, Failure, Launched, Pty, Streams};
use crate::logs::{LineWriter, Stream};
use crate::state::{self, Dir, Exit, Record};
use crate::{spec, sys};

/// What a shim is asked to run: a fork server's request.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct Args {
    pub root: PathBuf,
    pub id: String,
    pub bundle: PathBuf,
    pub log: Option<PathBuf>,
    /// Drive this OCI runtime binary instead of the native backend.
    pub runc: Option<PathBuf>,
    pub runc_root: Option<PathBuf>,
    /// Give the container a stdin fifo (see [`stdin_fifo`]).
    pub stdin: bool,
}

/// The shim's side of a container's terminal: resize requests arrive on `resize` (the fifo
/// [`Dir::resize`], opened read-write so it never reads end of file), and with `stdin`, the
/// stdin fifo's read end is copied into `master` by a thread of its own.
struct Terminal {
    master: File,
    resize: File,
    stdin: Option<OwnedFd>,
}

impl Terminal {
    /// The terminal the shim received, and a second fd of its master for the log pump to read.
    fn output(pty: Pty) -> Result<(OwnedFd, Terminal), Failure> {
        let resize = pty.resize.ok_or("no resize fifo for the terminal")?;
        let reader = pty.master.try_clone().map_err(|e| format!("failed to dup the terminal: {e}"))?;
        Ok((OwnedFd::from(reader), Terminal { master: pty.master, resize, stdin: pty.stdin }))
    }
}

/// Copies the stdin fifo into the terminal until end of file (every writer, the shim's keeper
/// included, gone: `close_stdin`), then types end-of-file (^D) — a terminal cannot be closed
/// for reading the way a pipe can. Blocking writes stay off the output pump's thread: a process
/// that does not read its terminal must not stop the shim from logging what it prints.
fn copy_stdin(from: OwnedFd, mut to: File) {
    // A write error ends it too; the ^D after one fails the same way, harmlessly.
    let _ = std::io::copy(&mut File::from(from), &mut to);
    let _ = to.write_all(&[4]);
}

/// Applies the complete "<cols> <rows>" lines in `buf` to the terminal; keeps a partial one.
/// Pure but for the ioctl; malformed lines are skipped.
fn apply_resizes(buf: &mut Vec<u8>, master: &File) {
    while let Some(end) = buf.iter().position(|b| *b == b'\n') {
        let line: Vec<u8> = buf.drain(..=end).collect();
        if let Some((cols, rows)) = parse_size(&line) {
            let _ = sys::set_window_size(master.as_fd(), cols, rows);
        }
    }
}

/// "<cols> <rows>" → (cols, rows). Pure.
fn parse_size(line: &[u8]) -> Option<(u16, u16)> {
    let text = std::str::from_utf8(line).ok()?;
    let mut parts = text.split_whitespace();
    let (cols, rows) = (parts.next()?.parse().ok()?, parts.next()?.parse().ok()?);
    parts.next().is_none().then_some((cols, rows))
}

/// The shim, in a single-threaded process of its own (forked by the fork server).
/// Prints one line on stdout — `ok <pid>` or `error: <why>` — then keeps running in a session of
/// its own until the container exits.
pub fn run(args: Args) -> i32 {
    let _ = nix::unistd::setsid();
    let dir = match Dir::new(&args.root, &args.id) {
        Ok(d) => d,
        Err(e) => {
            println!("error: {}", chain(&e));
            return 1;
        }
    };
    let launched = match args.runc.is_some() {
        true => launch_runc(&args, &dir),
        false => {
            let req = launch::Request {
                id: &args.id,
                bundle: &args.bundle,
                streams: Streams::Shim { stdin: args.stdin },
                log_path: args.log.as_deref(),
                preserve_fds: 0,
                no_pivot: false,
                detached: false,
                extra_env: Vec::new(),
            };
            launch::native(&req, &dir)
        }
    };
    let mut out = std::io::stdout();
    let mut launched = match launched {
        Ok(l) => l,
        Err(msg) => {
            let _ = writeln!(out, "error: {msg}");
            let _ = out.flush();
            return 1;
        }
    };
    // Waiters learn of the exit record when this closes (see `Dir::exited`); without it they
    // wait for the shim itself to exit.
    let exited = exited_fifo(&dir);
    let _ = writeln!(out, "ok {}", launched.pid);
    let _ = out.flush();
    if let Ok(null) = File::options().read(true).write(true).open("/dev/null") {
        for fd in 0..3 {
            let _ = nix::unistd::dup2(std::os::fd::AsRawFd::as_raw_fd(&null), fd);
        }
    }
    let mounts = launched.mounts.take();
    let exit = monitor(&args, launched);
    let code = match state::write_json(&dir.exit(), &exit) {
        Ok(()) => 0,
        Err(_) => 1,
    };
    drop(exited);
    // The container's mounts go now, after waiters have their exit (see `hold_mounts`).
    drop(mounts);
    code
}

/// The fifo [`Dir::exited`], held open for writing (read-write: the open never blocks) until
/// the exit record is written. Opened after the init was cloned, so only the shim holds it.
fn exited_fifo(dir: &Dir) -> Option<File> {
    fifo(&dir.exited()).ok()
}

fn launch_runc(args: &Args, dir: &Dir) -> Result<Launched, Failure> {
    let binary = args.runc.as_deref().ok_or("no runc binary")?;
    let spec = spec::load(&args.bundle).map_err(|e| chain(&e))?;
    spec::validate(&spec, &args.bundle).map_err(|e| chain(&e))?;
    // An overlay rootfs is mounted here for runc, which knows nothing of the annotation; from
    // here on a failed create unmounts it again (the guard), a created one at delete (the record).
    // Idmapped rootfs and mounts are made here as for the native backend, and runc gets a
    // bundle that bind-mounts them (runc 1.1 knows no idmapped mounts).
    let idmapped = match crate::idmap::needed(&spec) {
        true => Some(crate::idmap::prepare(&spec, &args.bundle, dir).map_err(|e| chain(&e))?),
        false => None,
    };
    let overlay = match (spec::lowerdirs(&spec), &idmapped) {
        (Some(lower), None) => Some(RuncOverlay::mount(&spec, &args.bundle, dir, &lower)?),
        _ => None,
    };
    let bundle = match (&overlay, &idmapped) {
        (Some(o), _) => o.bundle.clone(),
        (None, Some(p)) => write_bundle(&p.spec, &args.bundle, &dir.path.join("bundle"))?,
        (None, None) => args.bundle.clone(),
    };
    let terminal = spec.process().as_ref().and_then(|p| p.terminal()).unwrap_or(false);
    File::create(dir.created_marker()).map_err(|e| format!("failed to create state: {e}"))?;
    sys::set_child_subreaper().map_err(|e| format!("failed to become subreaper: {e}"))?;
    // With a terminal, runc makes it in the container and sends us its master over a console
    // socket; the process's stdio is the terminal. Otherwise runc passes its own stdio through.
    let console = if terminal { Some(ConsoleSocket::bind()?) } else { None };
    let (out_pipe, err_pipe) = if terminal { (None, None) } else { log_pipes(args.log.is_some())? };
    let (stdin, keeper) = match args.stdin {
        true => stdin_fifo(dir).map(|(r, k)| (Some(r), Some(k)))?,
        false => (None, None),
    };
    let (stdin, tty_stdin) = match (stdin, terminal) {
        (Some(r), false) => (Stdio::from(r), None),
        (r, _) => (Stdio::null(), r),
    };
    let stdio = |p: &Option<(OwnedFd, OwnedFd)>| -> Result<Stdio, Failure> {
        match p {
            Some((_, w)) => w.try_clone().map(Stdio::from).map_err(|e| format!("failed to dup log pipe: {e}")),
            None => Ok(Stdio::null()),
        }
    };
    let log = dir.path.join("runc.log");
    let pid_file = dir.path.join("init.pid");
    let mut cmd = Command::new(binary);
    if let Some(r) = &args.runc_root {
        cmd.arg("--root").arg(r);
    }
    cmd.arg("--log").arg(&log).args(["--log-format", "json", "create", "--bundle"]).arg(&bundle);
    if let Some(c) = &console {
        cmd.arg("--console-socket").arg(&c.path);
    }
    cmd.arg("--pid-file").arg(&pid_file).arg(&args.id);
    cmd.stdin(stdin).stdout(stdio(&out_pipe)?).stderr(stdio(&err_pipe)?);
    let status = cmd.status().map_err(|e| format!("failed to run {}: {e}", binary.display()));
    drop(cmd);
    let status = status?;
    let stdout = out_pipe.map(|(r, _w)| r);
    let stderr = err_pipe.map(|(r, _w)| r);
    if !status.success() {
        return Err(runc_error(&log).unwrap_or_else(|| format!("{} create failed: {status}", binary.display())));
    }
    let pid: i32 = std::fs::read_to_string(&pid_file)
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .ok_or_else(|| format!("{} create wrote no pid file", binary.display()))?;
    let terminal = match console {
        Some(c) => Some(Pty { master: c.receive()?, resize: Some(fifo(&dir.resize())?), stdin: tty_stdin }),
        None => None,
    };
    let cgroups_path = spec.linux().as_ref().and_then(|l| l.cgroups_path().clone());
    // runc runs the spec's hooks itself.
    let created = jiff::Timestamp::now().to_string();
    let base = launch::record(&args.id, &args.bundle, Pid::from_raw(pid), created, cgroups_path.clone(), "runc", &spec);
    let rootfs_mount = overlay.map(RuncOverlay::keep).or_else(|| idmapped.and_then(crate::idmap::Prepared::keep));
    let record = Record { log_path: args.log.clone(), rootfs_mount, ..base };
    state::write_json(&dir.record(), &record).map_err(|e| chain(&e))?;
    Ok(Launched { pid: Pid::from_raw(pid), stdout, stderr, cgroups_path, stdin: keeper, terminal, mounts: None })
}

/// Writes `spec` as the config of the bundle `own` (relative bind sources made relative to the
/// caller's `bundle`, a relative root too) and returns `own`.
fn write_bundle(spec: &oci_spec::runtime::Spec, bundle: &Path, own: &Path) -> Result<PathBuf, Failure> {
    std::fs::create_dir_all(own).map_err(|e| format!("failed to create {}: {e}", own.display()))?;
    let mut copy = spec.clone();
    if let Some(mut root) = copy.root().clone().filter(|r| r.path().is_relative()) {
        root.set_path(bundle.join(root.path()));
        copy.set_root(Some(root));
    }
    if let Some(mounts) = copy.mounts_mut() {
        for m in mounts.iter_mut() {
            let bind =
                m.typ().as_deref() == Some("bind") || m.options().iter().flatten().any(|o| o == "bind" || o == "rbind");
            if let Some(src) = m.source().clone().filter(|s| bind && s.is_relative()) {
                m.set_source(Some(bundle.join(src)));
            }
        }
    }
    let text = serde_json::to_vec(&copy).map_err(|e| format!("failed to write the runc bundle: {e}"))?;
    std::fs::write(own.join("config.json"), text).map_err(|e| format!("failed to write the runc bundle: {e}"))?;
    Ok(own.to_path_buf())
}

/// The runc backend's overlay rootfs: mounted at the state dir's `rootfs` in the host's mount
/// namespace, with a copy of the spec in the state dir's `bundle` whose root is that mount (and
/// whose relative bind sources stay relative to the caller's bundle). Unmounted on drop unless
/// kept.
struct RuncOverlay {
    merged: PathBuf,
    bundle: PathBuf,
    keep: bool,
}

impl RuncOverlay {
    fn mount(spec: &oci_spec::runtime::Spec, bundle: &Path, dir: &Dir, lower: &[PathBuf]) -> Result<Self, Failure> {
        let (merged, own_bundle) = (dir.rootfs(), dir.path.join("bundle"));
        for d in [&merged, &dir.upper(), &dir.work(), &own_bundle] {
            std::fs::create_dir_all(d).map_err(|e| format!("failed to create {}: {e}", d.display()))?;
        }
        crate::rootfs::mount_overlay(lower, &dir.upper(), &dir.work(), &merged).map_err(|e| chain(&e))?;
        let this = RuncOverlay { merged, bundle: own_bundle, keep: false };
        let mut copy = spec.clone();
        let mut root = copy.root().clone().unwrap_or_default();
        root.set_path(this.merged.clone());
        copy.set_root(Some(root));
        write_bundle(&copy, bundle, &this.bundle)?;
        Ok(this)
    }

    fn keep(mut self) -> PathBuf {
        self.keep = true;
        self.merged.clone()
    }
}

impl Drop for RuncOverlay {
    fn drop(&mut self) {
        if !self.keep {
            let _ = nix::mount::umount2(&self.merged, nix::mount::MntFlags::MNT_DETACH);
        }
    }
}

/// The socket runc's `--console-socket` sends a container terminal's master to. Bound under
/// the temp dir by shim pid (a state dir's path may exceed a socket path's 108 bytes); the
/// file goes with it.
struct ConsoleSocket {
    path: PathBuf,
    listener: std::os::unix::net::UnixListener,
}

impl ConsoleSocket {
    fn bind() -> Result<Self, Failure> {
        let path = std::env::temp_dir().join(format!("kaji-console-{}.sock", std::process::id()));
        let _ = std::fs::remove_file(&path);
        let listener = std::os::unix::net::UnixListener::bind(&path)
            .map_err(|e| format!("failed to bind console socket {}: {e}", path.display()))?;
        Ok(ConsoleSocket { path, listener })
    }

    /// The master runc sent while `create` ran (its connection waits in the backlog).
    fn receive(&self) -> Result<File, Failure> {
        let _ = self.listener.set_nonblocking(true);
        let (conn, _) = self.listener.accept().map_err(|e| format!("runc sent no terminal: {e}"))?;
        let _ = conn.set_nonblocking(false);
        match sys::recv_with_fd(conn.as_fd(), &mut [0u8; 4096]) {
            Ok((_, Some(fd))) => Ok(File::from(fd)),
            Ok((_, None)) => Err("runc sent no terminal".into()),
            Err(e) => Err(format!("failed to receive the terminal from runc: {e}")),
        }
    }
}

impl Drop for ConsoleSocket {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// The last error message in a runc JSON log.
pub fn runc_error(log: &Path) -> Option<String> {
    let text = std::fs::read_to_string(log).ok()?;
    text.lines()
        .rev()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .find(|v| v["level"] == "error")
        .and_then(|v| v["msg"].as_str().map(str::to_string))
}

struct Pump {
    fd: OwnedFd,
    writer: LineWriter,
    open: bool,
}

impl Pump {
    /// Reads once; returns false at end of stream (or a read error).
    fn read(&mut self, log: &mut Option<File>) -> bool {
        let mut buf = [0u8; 65536];
        match nix::unistd::read(std::os::fd::AsRawFd::as_raw_fd(&self.fd), &mut buf) {
            Ok(0) | Err(_) => {
                self.open = false;
                if let (Some(rec), Some(f)) = (self.writer.finish(), log.as_mut()) {
                    let _ = self.writer.write_records(f, &[rec]);
                }
                false
            }
            Ok(n) => {
                let recs = self.writer.push(&buf[..n]);
                if let Some(f) = log.as_mut() {
                    let _ = self.writer.write_records(f, &recs);
                }
                true
            }
        }
    }
}

fn monitor(args: &Args, l: Launched) -> Exit {
    let mut log = args.log.as_ref().and_then(|p| File::options().create(true).append(true).open(p).ok());
    let (stdout, mut terminal) = match l.terminal.map(Terminal::output) {
        Some(Ok((reader, t))) => (Some(reader), Some(t)),
        // Without its terminal the shim still records the exit.
        Some(Err(_)) => (None, None),
        None => (l.stdout, None),
    };
    let writer = |s| if terminal.is_some() { LineWriter::interactive(s) } else { LineWriter::new(s) };
    let mut pumps: Vec<Pump> = [(stdout, Stream::Stdout), (l.stderr, Stream::Stderr)]
        .into_iter()
        .filter_map(|(fd, s)| fd.map(|fd| Pump { fd, writer: writer(s), open: true }))
        .collect();
    let pidfd = sys::pidfd_open(l.pid).ok();
    let mut stdin = l.stdin;
    if let Some(t) = terminal.as_mut() {
        if let (Some(from), Ok(to)) = (t.stdin.take(), t.master.try_clone()) {
            let _ = std::thread::Builder::new().name("stdin".into()).spawn(move || copy_stdin(from, to));
        }
    }
    let mut resizes = Vec::new();
    loop {
        let mut fds: Vec<PollFd<'_>> = Vec::new();
        if let Some(p) = &pidfd {
            fds.push(PollFd::new(p.as_fd(), PollFlags::POLLIN));
        }
        let first_pump = fds.len();
        for p in pumps.iter().filter(|p| p.open) {
            fds.push(PollFd::new(p.fd.as_fd(), PollFlags::POLLIN));
        }
        let resize_at = terminal.as_ref().map(|t| {
            fds.push(PollFd::new(t.resize.as_fd(), PollFlags::POLLIN));
            fds.len() - 1
        });
        let close_at = stdin.as_ref().map(|k| {
            fds.push(PollFd::new(k.close.as_fd(), PollFlags::POLLIN));
            fds.len() - 1
        });
        if fds.is_empty() || nix::poll::poll(&mut fds, PollTimeout::NONE).is_err() {
            break;
        }
        let ready: Vec<bool> = fds.iter().map(|f| f.revents().is_some_and(|r| !r.is_empty())).collect();
        drop(fds);
        let exited = pidfd.is_some() && ready[0];
        if close_at.is_some_and(|i| ready[i]) {
            // stdinOnce: the process reads end of file once the writers still attached leave.
            stdin = None;
        }
        if let (Some(i), Some(t)) = (resize_at, terminal.as_mut()) {
            if ready[i] {
                let mut buf = [0u8; 512];
                if let Ok(n) = t.resize.read(&mut buf) {
                    resizes.extend_from_slice(&buf[..n]);
                    apply_resizes(&mut resizes, &t.master);
                }
            }
        }
        for (i, p) in (first_pump..).zip(pumps.iter_mut().filter(|p| p.open)) {
            if ready[i] {
                p.read(&mut log);
            }
        }
        if exited {
            break;
        }
    }
    let status = waitpid(l.pid, None);
    // Reap anything else reparented to us (runc mode) without blocking.
    while let Ok(WaitStatus::Exited(..) | WaitStatus::Signaled(..)) =
        waitpid(Pid::from_raw(-1), Some(WaitPidFlag::WNOHANG))
    {}
    for p in pumps.iter_mut().filter(|p| p.open) {
        let _ =
            nix::fcntl::fcntl(std::os::fd::AsRawFd::as_raw_fd(&p.fd), nix::fcntl::FcntlArg::F_SETFL(OFlag::O_NONBLOCK));
        while p.read(&mut log) {}
    }
    let (code, signal) = match status {
        Ok(WaitStatus::Exited(_, c)) => (c, None),
        Ok(WaitStatus::Signaled(_, s, _)) => (128 + s as i32, Some(s as i32)),
        _ => (255, None),
    };
    let oom_killed = l.cgroups_path.as_deref().is_some_and(|p| cgroups::oom_kills(p) > 0);
    Exit { code, signal, oom_killed }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resize_lines_parse_and_bad_ones_are_skipped() {
        assert_eq!(parse_size(b"91 27\n"), Some((91, 27)));
        assert_eq!(parse_size(b"91\n"), None);
        assert_eq!(parse_size(b"91 27 3\n"), None);
        assert_eq!(parse_size(b"-1 27\n"), None);
        assert_eq!(parse_size(b"wide tall\n"), None);
    }
}
