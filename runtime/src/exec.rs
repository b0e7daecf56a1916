//! Exec into a running container, the caller's half: the stdio handed out (pipes, or a
//! pseudo-terminal whose master the caller keeps), and the [`Exec`] handle to resize, kill and
//! wait for the command. The native backend starts the `nsenter` helper; the runc backend runs
//! `runc exec --process <file>` in the foreground.

use std::fs::File;
use std::io::{BufRead, BufReader};
use std::os::fd::AsFd;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use nix::fcntl::OFlag;
use nix::sys::signal::Signal;
use nix::unistd::Pid;
use oci_spec::runtime::Process;

use crate::container::{Error, Result};
use crate::{nsenter, shim, sys};

/// Which streams the command gets, and whether it runs on a terminal.
#[derive(Debug, Clone, Default)]
pub struct ExecOptions {
    /// Without it the command's stdin is /dev/null.
    pub stdin: bool,
    /// Without it the command's stdout is /dev/null.
    pub stdout: bool,
    /// Without it the command's stderr is /dev/null. A terminal has no separate stderr.
    pub stderr: bool,
    /// Run on a new pseudo-terminal (its controlling terminal); [`Exec::terminal`] is the master.
    pub tty: bool,
    /// The terminal's initial size.
    pub size: Option<WindowSize>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WindowSize {
    pub cols: u16,
    pub rows: u16,
}

/// A command running in a container. Dropping it does not stop the command; [`Exec::kill`] does.
pub struct Exec {
    child: Child,
    report: Option<BufReader<File>>,
    pid: Pid,
    /// A second handle on the terminal master, for resizes after `terminal` was taken.
    resizer: Option<File>,
    pub stdin: Option<File>,
    pub stdout: Option<File>,
    pub stderr: Option<File>,
    /// The terminal master: read the command's output, write its input.
    pub terminal: Option<File>,
    /// Files that live as long as the exec (its process spec; runc's pid file and log).
    scratch: Vec<PathBuf>,
}

/// What can be done to a running exec from another thread than the one waiting for it.
#[derive(Debug)]
pub struct Control {
    pid: Pid,
    terminal: Option<File>,
}

impl Control {
    /// Sets the terminal's size (the command gets SIGWINCH); a no-op without a terminal.
    pub fn resize(&self, size: WindowSize) -> std::io::Result<()> {
        match &self.terminal {
            Some(t) => sys::set_window_size(t.as_fd(), size.cols, size.rows),
            None => Ok(()),
        }
    }

    /// SIGKILLs the command (its helper then reports 137).
    pub fn kill(&self) {
        let _ = nix::sys::signal::kill(self.pid, Signal::SIGKILL);
    }
}

impl Exec {
    /// The command's pid, as the host sees it.
    pub fn pid(&self) -> Pid {
        self.pid
    }

    pub fn control(&self) -> Control {
        Control { pid: self.pid, terminal: self.resizer.as_ref().and_then(|t| t.try_clone().ok()) }
    }

    pub fn resize(&self, size: WindowSize) -> std::io::Result<()> {
        self.control().resize(size)
    }

    pub fn kill(&self) {
        self.control().kill()
    }

    /// Blocks until the command exits: its exit code, or 128 + the signal that ended it.
    pub fn wait(mut self) -> Result<i32> {
        let mut code = None;
        if let Some(r) = self.report.as_mut() {
            let mut line = String::new();
            while r.read_line(&mut line).is_ok_and(|n| n > 0) {
                code = code.or(nsenter::parse_exit(&line));
                line.clear();
            }
        }
        let status = self.child.wait().map_err(|source| Error::Exec { message: format!("wait: {source}") })?;
        Ok(code.unwrap_or_else(|| status.code().unwrap_or_else(|| 128 + status.signal().unwrap_or(0))))
    }
}

impl Drop for Exec {
    fn drop(&mut self) {
        for f in &self.scratch {
            let _ = std::fs::remove_file(f);
        }
    }
}

/// The command's end and our end of each stream.
struct Stdio3 {
    child: [Stdio; 3],
    stdin: Option<File>,
    stdout: Option<File>,
    stderr: Option<File>,
    terminal: Option<File>,
}

fn io(what: &str) -> impl FnOnce(std::io::Error) -> Error + '_ {
    move |e| Error::Exec { message: format!("failed to {what}: {e}") }
}

fn pipe() -> Result<(File, File)> {
    let (r, w) = nix::unistd::pipe2(OFlag::O_CLOEXEC).map_err(|e| Error::Exec { message: format!("pipe: {e}") })?;
    Ok((File::from(r), File::from(w)))
}

/// Pipes (or /dev/null) for each stream, or one terminal for all three.
fn stdio(opts: &ExecOptions) -> Result<Stdio3> {
    let null = || nsenter::null().map(Stdio::from).map_err(io("open /dev/null"));
    if opts.tty {
        let (master, slave) = sys::open_pty(opts.size.map(|s| (s.cols, s.rows))).map_err(io("open a terminal"))?;
        let dup = || slave.try_clone().map(Stdio::from).map_err(io("dup the terminal"));
        return Ok(Stdio3 {
            child: [dup()?, dup()?, dup()?],
            stdin: None,
            stdout: None,
            stderr: None,
            terminal: Some(master),
        });
    }
    let (stdin, child_in) = if opts.stdin {
        let (r, w) = pipe()?;
        (Some(w), Stdio::from(r))
    } else {
        (None, null()?)
    };
    let out = |wanted: bool| -> Result<(Option<File>, Stdio)> {
        if wanted {
            let (r, w) = pipe()?;
            Ok((Some(r), Stdio::from(w)))
        } else {
            Ok((None, null()?))
        }
    };
    let (stdout, child_out) = out(opts.stdout)?;
    let (stderr, child_err) = out(opts.stderr && !opts.tty)?;
    Ok(Stdio3 { child: [child_in, child_out, child_err], stdin, stdout, stderr, terminal: None })
}

/// Writes the process spec where the helper (or runc) reads it; removed with the [`Exec`].
fn write_process(dir: &Path, process: &Process) -> Result<PathBuf> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let path = dir.join(format!("exec-{:016x}.json", fastrand_u64()));
    let bytes = serde_json::to_vec(process).map_err(|e| Error::Exec { message: format!("encode process: {e}") })?;
    let mut f = File::options().write(true).create_new(true).mode(0o600).open(&path).map_err(io("write process"))?;
    f.write_all(&bytes).map_err(io("write process"))?;
    Ok(path)
}

fn fastrand_u64() -> u64 {
    let t = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_nanos()).unwrap_or(0);
    (t as u64) ^ (u64::from(std::process::id()) << 32) ^ COUNTER.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
}

static COUNTER: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// Native backend: `<helper> nsenter --root <root> --id <id> --process <file> [--tty]`.
pub(crate) fn native(
    helper: &Path,
    root: &Path,
    dir: &Path,
    id: &str,
    process: &Process,
    opts: &ExecOptions,
) -> Result<Exec> {
    let file = write_process(dir, process)?;
    let scratch = vec![file.clone()];
    let s = stdio(opts)?;
    let (report_r, report_w) =
        nix::unistd::pipe2(OFlag::O_CLOEXEC).map_err(|e| Error::Exec { message: format!("pipe: {e}") })?;
    let mut cmd = Command::new(helper);
    cmd.arg("nsenter").arg("--root").arg(root).arg("--id").arg(id).arg("--process").arg(&file);
    if opts.tty {
        cmd.arg("--tty");
    }
    let [i, o, e] = s.child;
    cmd.stdin(i).stdout(o).stderr(e);
    let spawned = sys::spawn(&mut cmd, vec![(report_w, nsenter::REPORT_FD)], false);
    // Our copies of the command's ends must go, or its exit would not close the streams.
    drop(cmd);
    let mut child = spawned.map_err(|source| Error::Shim { helper: helper.to_path_buf(), source })?;
    let mut report = BufReader::new(File::from(report_r));
    let mut line = String::new();
    let _ = report.read_line(&mut line);
    match nsenter::parse_started(&line) {
        Ok(pid) => Ok(Exec {
            child,
            report: Some(report),
            pid: Pid::from_raw(pid),
            resizer: s.terminal.as_ref().map(File::try_clone).transpose().map_err(io("dup the terminal"))?,
            stdin: s.stdin,
            stdout: s.stdout,
            stderr: s.stderr,
            terminal: s.terminal,
            scratch,
        }),
        Err(message) => {
            let _ = child.wait();
            let _ = std::fs::remove_file(&file);
            Err(Error::Exec { message })
        }
    }
}

/// runc backend: `runc exec --process <file> --pid-file <f> <id>` in the foreground: runc exits
/// with the command's status. With a terminal, runc makes one inside the container and bridges
/// it to its own controlling terminal — a pseudo-terminal of ours, whose size it follows
/// (SIGWINCH). A console socket instead would need `--detach`, and then nothing of ours would
/// be the command's parent to learn its exit status.
pub(crate) fn runc(
    binary: &Path,
    runc_root: &Path,
    dir: &Path,
    id: &str,
    process: &Process,
    opts: &ExecOptions,
) -> Result<Exec> {
    let mut process = process.clone();
    process.set_terminal(Some(opts.tty));
    if let (true, Some(size)) = (opts.tty, opts.size) {
        let b = oci_spec::runtime::BoxBuilder::default().width(u32::from(size.cols)).height(u32::from(size.rows));
        process.set_console_size(b.build().ok());
    }
    let file = write_process(dir, &process)?;
    let tag = file.file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_default();
    let (pid_file, log) = (dir.join(format!("{tag}.pid")), dir.join(format!("{tag}.log")));
    let scratch = vec![file.clone(), pid_file.clone(), log.clone()];
    let s = stdio(opts)?;
    let mut cmd = Command::new(binary);
    cmd.arg("--root").arg(runc_root).arg("--log").arg(&log).args(["--log-format", "json", "exec", "--process"]);
    cmd.arg(&file).arg("--pid-file").arg(&pid_file).arg(id);
    let [i, o, e] = s.child;
    cmd.stdin(i).stdout(o).stderr(e);
    let spawned = sys::spawn(&mut cmd, Vec::new(), opts.tty);
    drop(cmd);
    let runc_error = |message: String| Error::Runc { binary: binary.into(), verb: "exec", id: id.into(), message };
    let mut child = spawned.map_err(|e| runc_error(e.to_string()))?;
    // runc writes the pid file once the command runs; exiting without one means it never did.
    let deadline = Instant::now() + Duration::from_secs(30);
    let pid = loop {
        if let Some(pid) = std::fs::read_to_string(&pid_file).ok().and_then(|s| s.trim().parse::<i32>().ok()) {
            break pid;
        }
        let exited = child.try_wait().ok().flatten().is_some();
        if exited || Instant::now() > deadline {
            let why = shim::runc_error(&log).unwrap_or_else(|| "exec did not start".into());
            let _ = child.kill();
            let _ = child.wait();
            for f in &scratch {
                let _ = std::fs::remove_file(f);
            }
            return Err(runc_error(why));
        }
        std::thread::sleep(Duration::from_millis(2));
    };
    Ok(Exec {
        child,
        report: None,
        pid: Pid::from_raw(pid),
        resizer: s.terminal.as_ref().map(File::try_clone).transpose().map_err(io("dup the terminal"))?,
        stdin: s.stdin,
        stdout: s.stdout,
        stderr: s.stderr,
        terminal: s.terminal,
        scratch,
    })
}
