//! The per-container shim: a single-threaded process, forked by the [fork server](crate::forkserver)
//! (a freshly exec'd helper), that creates the container (clone + init for the native backend,
//! `runc create` for the runc backend), stays its parent (or subreaper), pumps stdout/stderr into
//! a CRI-format log, and records the exit status. It outlives the process that created it.
//!
//! Why not a fork of the caller: the agent is multi-threaded (tokio); a fork of it may inherit
//! locks held by other threads. The fork server started from a clean exec with one thread and
//! stays single-threaded, so its forks, and their clone(), are safe.

use std::fs::File;
use std::io::{BufRead, BufReader, Read, Write};
use std::os::fd::{AsFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use nix::fcntl::OFlag;
use nix::poll::{PollFd, PollFlags, PollTimeout};
use nix::sys::signal::{kill, Signal};
use nix::sys::wait::{waitpid, WaitPidFlag, WaitStatus};
use nix::unistd::Pid;

use crate::cgroups::{self, Cgroup};
use crate::hooks::{self, chain, Point};
use crate::logs::{LineWriter, Stream};
use crate::state::{self, Dir, Exit, Record, State, Status};
use crate::sys::{self, Forked};
use crate::{init, namespaces, rootfs, spec};

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

/// A launched container the shim now monitors.
struct Launched {
    pid: Pid,
    stdout: Option<OwnedFd>,
    stderr: Option<OwnedFd>,
    cgroups_path: Option<PathBuf>,
    stdin: Option<Keeper>,
    /// With `process.terminal`: `stdout` is its master, and this is what else the shim does
    /// with it.
    terminal: Option<Terminal>,
    /// The container's mount namespace, held until the exit is recorded (see [`hold_mounts`]).
    mounts: Option<OwnedFd>,
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
    /// The terminal around `master`, and a second fd of it for the log pump to read.
    fn output(master: File, resize: File, stdin: Option<OwnedFd>) -> Result<(OwnedFd, Terminal), Failure> {
        let reader = master.try_clone().map_err(|e| format!("failed to dup the terminal: {e}"))?;
        Ok((OwnedFd::from(reader), Terminal { master, resize, stdin }))
    }
}

/// Set up before clone for a terminal: the init sends the master over `theirs`, the shim
/// receives it on `ours`.
struct Pty {
    ours: std::os::unix::net::UnixStream,
    theirs: OwnedFd,
    resize: File,
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

/// The shim's hold on the container's stdin: `keeper` is a write end of the fifo, so the process
/// does not read end of file between attach sessions; a byte on `close` drops it.
struct Keeper {
    _keeper: OwnedFd,
    close: File,
}

/// Creates the stdin fifo and its close fifo in the state dir. Returns the read end for the
/// container's fd 0 and the shim's [`Keeper`]. The fifos live in the state dir, so they outlive
/// any agent and go away with `delete`.
fn stdin_fifo(dir: &Dir) -> Result<(OwnedFd, Keeper), Failure> {
    use nix::sys::stat::Mode;
    use std::os::unix::fs::OpenOptionsExt;
    let path = dir.stdin();
    let fail = |what: &str, e: nix::Error| format!("failed to {what} {}: {e}", path.display());
    nix::unistd::mkfifo(&path, Mode::from_bits_truncate(0o600)).map_err(|e| fail("create", e))?;
    let open_err = |e: std::io::Error| format!("failed to open {}: {e}", path.display());
    // Non-blocking so the open does not wait for a writer; the process then reads blocking.
    let read = File::options().read(true).custom_flags(libc::O_NONBLOCK).open(&path).map_err(open_err)?;
    let keeper = File::options().write(true).open(&path).map_err(open_err)?;
    nix::fcntl::fcntl(std::os::fd::AsRawFd::as_raw_fd(&read), nix::fcntl::FcntlArg::F_SETFL(OFlag::empty()))
        .map_err(|e| fail("configure", e))?;
    let (read, keeper) = (OwnedFd::from(read), OwnedFd::from(keeper));
    // Polling it waits for a writer's byte.
    let close = fifo(&dir.stdin_close())?;
    Ok((read, Keeper { _keeper: keeper, close }))
}

type Failure = String;

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
    let launched = if args.runc.is_some() { launch_runc(&args, &dir) } else { launch_native(&args, &dir) };
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

/// A reference to the mount namespace of process `pid`, so that its exit does not tear the
/// namespace down: the last reference to go unmounts the container's tree, and the kernel then
/// waits for an expedited RCU grace period (`namespace_unlock`) before the exiting process
/// becomes a zombie — 0.3–0.5 ms between the container's exit and the shim seeing it, on this
/// 2-core VM. Held by the shim until the exit is recorded, the wait moves after the waiters are
/// told, and overlaps `delete`'s cgroup removal (delete then waits for the shim to end, so no
/// mount of the container outlives it). `None` if it cannot be opened: the exit is then only
/// that much slower.
fn hold_mounts(pid: Pid) -> Option<OwnedFd> {
    File::open(format!("/proc/{pid}/ns/mnt")).ok().map(OwnedFd::from)
}

/// (read end, write end) of a log pipe.
type Pipe = (OwnedFd, OwnedFd);

fn log_pipes(args: &Args) -> Result<(Option<Pipe>, Option<Pipe>), Failure> {
    if args.log.is_none() {
        return Ok((None, None));
    }
    let p = || nix::unistd::pipe2(OFlag::O_CLOEXEC).map_err(|e| format!("failed to create log pipe: {e}"));
    Ok((Some(p()?), Some(p()?)))
}

fn null_fd() -> Result<OwnedFd, Failure> {
    File::options()
        .write(true)
        .open("/dev/null")
        .map(OwnedFd::from)
        .map_err(|e| format!("failed to open /dev/null: {e}"))
}

/// The init's side of the shim's sync pipes (see [`init::Parent`]).
struct ToShim {
    go: File,
    rep: File,
}

impl init::Parent for ToShim {
    fn runtime_hooks(&mut self) -> std::io::Result<()> {
        self.rep.write_all(b"hooks\n")?;
        let mut b = [0u8; 1];
        self.go.read_exact(&mut b)
    }
    fn ready(&mut self) -> std::io::Result<()> {
        self.rep.write_all(b"ready\n")
    }
}

/// Makes a fifo and opens it read-write: opening never blocks, and a read blocks until someone
/// writes.
fn fifo(path: &Path) -> Result<File, Failure> {
    nix::unistd::mkfifo(path, nix::sys::stat::Mode::from_bits_truncate(0o600))
        .map_err(|e| format!("failed to create {}: {e}", path.display()))?;
    File::options().read(true).write(true).open(path).map_err(|e| format!("failed to open {}: {e}", path.display()))
}

fn launch_native(args: &Args, dir: &Dir) -> Result<Launched, Failure> {
    let spec = spec::load(&args.bundle).map_err(|e| chain(&e))?;
    spec::validate(&spec, &args.bundle).map_err(|e| chain(&e))?;
    let linux = spec.linux().as_ref().ok_or("spec has no linux section")?;
    let plan = namespaces::plan(linux.namespaces().as_deref().unwrap_or_default()).map_err(|e| chain(&e))?;
    if !plan.clone_flags.contains(nix::sched::CloneFlags::CLONE_NEWNS) {
        return Err("the native backend needs a new mount namespace (namespace type mount without path)".into());
    }
    let created = jiff::Timestamp::now().to_string();
    let hooks = spec.hooks().as_ref();
    let hook_state = State {
        oci_version: state::OCI_VERSION.into(),
        id: args.id.clone(),
        status: Status::Creating,
        pid: 0,
        bundle: args.bundle.clone(),
        created: created.clone(),
        annotations: spec.annotations().clone().unwrap_or_default(),
        exit: None,
    };
    let start = fifo(&dir.fifo())?;
    let start_status = match hooks::any(hooks, &[Point::StartContainer]) {
        true => Some(fifo(&dir.start_status())?),
        false => None,
    };
    File::create(dir.created_marker()).map_err(|e| format!("failed to create state: {e}"))?;
    let rootfs_dir = spec::rootfs_path(&spec, &args.bundle).map_err(|e| chain(&e))?;
    let lower = spec::lowerdirs(&spec);
    if lower.is_some() {
        for d in [dir.rootfs(), dir.upper(), dir.work()] {
            std::fs::create_dir_all(&d).map_err(|e| format!("failed to create {}: {e}", d.display()))?;
        }
    }
    let terminal = spec.process().as_ref().and_then(|p| p.terminal()).unwrap_or(false);
    // A terminal carries every stream; otherwise pipes, read by the shim into the log.
    let (out_pipe, err_pipe) = if terminal { (None, None) } else { log_pipes(args)? };
    // The init opens the terminal inside the container and sends us its master.
    let pty = match terminal {
        true => {
            let (ours, theirs) = std::os::unix::net::UnixStream::pair()
                .map_err(|e| format!("failed to create the terminal socket: {e}"))?;
            Some(Pty { ours, theirs: OwnedFd::from(theirs), resize: fifo(&dir.resize())? })
        }
        false => None,
    };
    let (stdin, keeper) = match args.stdin {
        true => stdin_fifo(dir).map(|(r, k)| (Some(r), Some(k)))?,
        false => (None, None),
    };
    // With a terminal, the shim copies stdin into it: the process reads the terminal.
    let (stdin, tty_stdin) = if terminal { (None, stdin) } else { (stdin, None) };
    let (go_r, go_w) = nix::unistd::pipe2(OFlag::O_CLOEXEC).map_err(|e| format!("failed to create sync pipe: {e}"))?;
    let (rep_r, rep_w) =
        nix::unistd::pipe2(OFlag::O_CLOEXEC).map_err(|e| format!("failed to create sync pipe: {e}"))?;
    namespaces::join(&plan.join_before_clone).map_err(|e| chain(&e))?;
    let cgroups_path = linux.cgroups_path().clone();
    // v1/hybrid: we make the cgroups and apply their limits while the init builds its rootfs,
    // and tell it on `ready` when it can move itself in (see `init::CgroupEntry`). Made in
    // turn, before the clone, they were ~1 ms of every create.
    let v1 = match cgroups_path {
        Some(_) => cgroups::is_v1().map_err(|e| chain(&e))?,
        None => false,
    };
    let ready = match v1 {
        true => Some(nix::unistd::pipe2(OFlag::O_CLOEXEC).map_err(|e| format!("failed to create sync pipe: {e}"))?),
        false => None,
    };
    // A new cgroup namespace is rooted at the cgroup its creator is in, and the init enters
    // (v1) or is moved into (v2) its cgroups after the clone: it makes the namespace itself,
    // once inside.
    let mut clone_flags = plan.clone_flags;
    let new_cgroup_namespace = cgroups_path.is_some() && clone_flags.contains(nix::sched::CloneFlags::CLONE_NEWCGROUP);
    if new_cgroup_namespace {
        clone_flags.remove(nix::sched::CloneFlags::CLONE_NEWCGROUP);
    }

    let (upper, work, target) = (dir.upper(), dir.work(), dir.rootfs());
    let cloned = sys::clone_process(clone_flags).map_err(|e| format!("failed to clone container init: {e}"))?;
    match cloned {
        Forked::Child => {
            drop((go_w, rep_r));
            let cgroup = match (ready, &cgroups_path) {
                (Some((r, w)), Some(path)) => {
                    drop(w);
                    Some(init::CgroupEntry { ready: File::from(r), path: path.clone() })
                }
                _ => None,
            };
            let mut to_shim = ToShim { go: File::from(go_r), rep: File::from(rep_w) };
            let mut b = [0u8; 1];
            if to_shim.go.read_exact(&mut b).is_err() {
                std::process::exit(1);
            }
            let fd = |p: Option<(OwnedFd, OwnedFd)>| match p {
                Some((_r, w)) => Ok(w),
                None => null_fd(),
            };
            let (streams, terminal) = match pty {
                Some(p) => (null_fd().and_then(|o| Ok((None, o, null_fd()?))), Some(p.theirs)),
                None => (fd(out_pipe).and_then(|o| Ok((stdin, o, fd(err_pipe)?))), None),
            };
            let (stdin, stdout, stderr) = match streams {
                Ok(s) => s,
                Err(m) => {
                    let _ = writeln!(to_shim.rep, "error: {m}");
                    std::process::exit(1);
                }
            };
            let source = match &lower {
                Some(l) => rootfs::Source::Overlay { lower: l, upper: &upper, work: &work, target: &target },
                None => rootfs::Source::Dir(&rootfs_dir),
            };
            let ctx = init::Context {
                spec: &spec,
                cgroup,
                new_cgroup_namespace,
                rootfs: source,
                plan: &plan,
                stdin,
                stdout,
                stderr,
                terminal,
                start,
                hooks,
                hook_state,
                start_status,
            };
            let err = init::run(ctx, &mut to_shim);
            let _ = writeln!(to_shim.rep, "error: {}", chain(&err));
            std::process::exit(1);
        }
        Forked::Parent(pid) => {
            drop((go_r, rep_w, start, start_status, stdin));
            let ready = ready.map(|(r, w)| {
                drop(r);
                File::from(w)
            });
            let remove_cgroup = || {
                if let Some(p) = &cgroups_path {
                    let _ = cgroups::remove(p);
                }
            };
            // The init's end of the terminal socket is the init's alone.
            let pty = pty.map(|Pty { ours, theirs, resize }| {
                drop(theirs);
                (ours, resize)
            });
            let stderr = err_pipe.map(|(r, _w)| r);
            let fail = |msg: String| -> Failure {
                let _ = kill(pid, Signal::SIGKILL);
                let _ = waitpid(pid, None);
                remove_cgroup();
                // A failed create continues the lifecycle at delete, which runs poststop.
                let stopped = State { status: Status::Stopped, ..hook_state.clone() };
                hooks::run_all_warn(hooks, Point::Poststop, &stopped, Some(&args.bundle));
                msg
            };
            // v1: the init starts its setup now and enters its cgroups once we say they are
            // ready; otherwise (cgroup v2) it waits until we have moved it in. Either way before
            // any hook or user code runs.
            let mut go = File::from(go_w);
            let default = Default::default();
            let resources = linux.resources().as_ref().unwrap_or(&default);
            if let (Some(p), Some(mut ready)) = (&cgroups_path, ready) {
                // An init that fails first says why on `rep`, read below: a write to it that
                // fails here is not the error to report.
                let _ = go.write_all(b"g");
                if let Err(e) = cgroups::create_v1(p).and_then(|()| cgroups::apply_v1(p, resources)) {
                    return Err(fail(chain(&e)));
                }
                let _ = ready.write_all(b"ok\n");
            } else {
                if let Some(p) = &cgroups_path {
                    if let Err(e) = Cgroup::new(p).and_then(|cg| cg.add_and_apply(pid, resources)) {
                        return Err(fail(chain(&e)));
                    }
                }
                if go.write_all(b"g").is_err() {
                    return Err(fail("container init exited before setup".into()));
                }
            }
            let mut rep = BufReader::new(File::from(rep_r));
            loop {
                let mut line = String::new();
                let _ = rep.read_line(&mut line);
                match line.trim_end() {
                    "ready" => break,
                    "hooks" => {
                        let creating = State { pid: pid.as_raw(), ..hook_state.clone() };
                        for point in [Point::Prestart, Point::CreateRuntime] {
                            if let Err(e) = hooks::run_all(hooks, point, &creating, Some(&args.bundle)) {
                                return Err(fail(chain(&e)));
                            }
                        }
                        if go.write_all(b"g").is_err() {
                            return Err(fail("container init exited during setup".into()));
                        }
                    }
                    "" => return Err(fail("container init exited during setup".into())),
                    other => return Err(fail(other.strip_prefix("error: ").unwrap_or(other).to_string())),
                }
            }
            // The init sent its terminal's master before reporting ready.
            let (stdout, terminal) = match pty {
                Some((sock, resize)) => {
                    let master = match sys::recv_fd(sock.as_fd()) {
                        Ok(Some(fd)) => File::from(fd),
                        Ok(None) => return Err(fail("the init sent no terminal".into())),
                        Err(e) => return Err(fail(format!("failed to receive the terminal: {e}"))),
                    };
                    match Terminal::output(master, resize, tty_stdin) {
                        Ok((reader, t)) => (Some(reader), Some(t)),
                        Err(e) => return Err(fail(e)),
                    }
                }
                None => (out_pipe.map(|(r, _w)| r), None),
            };
            let record =
                Record { hooks: hooks.cloned(), ..record(args, pid, created, cgroups_path.clone(), "native", &spec) };
            if let Err(e) = state::write_json(&dir.record(), &record) {
                return Err(fail(chain(&e)));
            }
            let mounts = hold_mounts(pid);
            Ok(Launched { pid, stdout, stderr, cgroups_path, stdin: keeper, terminal, mounts })
        }
    }
}

fn record(
    args: &Args,
    pid: Pid,
    created: String,
    cgroups_path: Option<PathBuf>,
    backend: &str,
    spec: &oci_spec::runtime::Spec,
) -> Record {
    Record {
        id: args.id.clone(),
        pid: pid.as_raw(),
        shim_pid: nix::unistd::getpid().as_raw(),
        bundle: args.bundle.clone(),
        created,
        cgroups_path,
        log_path: args.log.clone(),
        backend: backend.to_string(),
        annotations: spec.annotations().clone().unwrap_or_default(),
        hooks: None,
    }
}

fn launch_runc(args: &Args, dir: &Dir) -> Result<Launched, Failure> {
    let binary = args.runc.as_deref().ok_or("no runc binary")?;
    let spec = spec::load(&args.bundle).map_err(|e| chain(&e))?;
    spec::validate(&spec, &args.bundle).map_err(|e| chain(&e))?;
    if spec::lowerdirs(&spec).is_some() {
        return Err(format!("annotation {} is not supported by the runc backend yet", spec::ANNOTATION_LOWERDIRS));
    }
    let terminal = spec.process().as_ref().and_then(|p| p.terminal()).unwrap_or(false);
    File::create(dir.created_marker()).map_err(|e| format!("failed to create state: {e}"))?;
    sys::set_child_subreaper().map_err(|e| format!("failed to become subreaper: {e}"))?;
    // With a terminal, runc makes it in the container and sends us its master over a console
    // socket; the process's stdio is the terminal. Otherwise runc passes its own stdio through.
    let console = if terminal { Some(ConsoleSocket::bind()?) } else { None };
    let (out_pipe, err_pipe) = if terminal { (None, None) } else { log_pipes(args)? };
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
    cmd.arg("--log").arg(&log).args(["--log-format", "json", "create", "--bundle"]).arg(&args.bundle);
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
    let (stdout, terminal) = match console {
        Some(c) => {
            let (reader, t) = Terminal::output(c.receive()?, fifo(&dir.resize())?, tty_stdin)?;
            (Some(reader), Some(t))
        }
        None => (stdout, None),
    };
    let cgroups_path = spec.linux().as_ref().and_then(|l| l.cgroups_path().clone());
    // runc runs the spec's hooks itself.
    let record =
        record(args, Pid::from_raw(pid), jiff::Timestamp::now().to_string(), cgroups_path.clone(), "runc", &spec);
    state::write_json(&dir.record(), &record).map_err(|e| chain(&e))?;
    Ok(Launched { pid: Pid::from_raw(pid), stdout, stderr, cgroups_path, stdin: keeper, terminal, mounts: None })
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
    let writer = |s| if l.terminal.is_some() { LineWriter::interactive(s) } else { LineWriter::new(s) };
    let mut pumps: Vec<Pump> = [(l.stdout, Stream::Stdout), (l.stderr, Stream::Stderr)]
        .into_iter()
        .filter_map(|(fd, s)| fd.map(|fd| Pump { fd, writer: writer(s), open: true }))
        .collect();
    let pidfd = sys::pidfd_open(l.pid).ok();
    let mut stdin = l.stdin;
    let mut terminal = l.terminal;
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
