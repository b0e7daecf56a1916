//! The runtime API the agent uses — create, start, state, kill, wait, delete — with two backends
//! behind one trait: [`Native`] (our own init) and [`Runc`] (any OCI runtime binary). Both keep
//! their state on disk and use the same shim, so any process can re-attach to their containers.

use std::os::fd::AsFd;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use nix::fcntl::OFlag;
use nix::poll::{PollFd, PollFlags, PollTimeout};
use nix::sys::signal::Signal;
use nix::unistd::Pid;

use oci_spec::runtime::Process;

use crate::cgroups::{self, Cgroup, Usage};
use crate::exec::{self, Exec, ExecOptions};
use crate::hooks::{self, Point};
use crate::state::{self, Dir, Exit, Record, State, Status};
use crate::{forkserver, spec, sys};

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(transparent)]
    Spec(#[from] spec::Error),
    #[error(transparent)]
    State(#[from] state::Error),
    #[error(transparent)]
    Cgroups(#[from] cgroups::Error),
    #[error("failed to create container {id}: {message}")]
    Create { id: String, message: String },
    #[error("failed to start shim {helper}")]
    Shim {
        helper: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("container {id} is {status:?}, not {wanted}")]
    WrongState { id: String, status: Status, wanted: &'static str },
    #[error("failed to signal container {id}")]
    Signal {
        id: String,
        #[source]
        source: nix::Error,
    },
    #[error("container {0} has no cgroup (its spec has no cgroupsPath)")]
    NoCgroup(String),
    #[error("failed to start container {id}")]
    Start {
        id: String,
        #[source]
        source: std::io::Error,
    },
    #[error("container {id}: {message}")]
    Hook { id: String, message: String },
    #[error("timed out waiting for container {0}")]
    Timeout(String),
    #[error("the shim of container {0} died without recording an exit status")]
    ShimGone(String),
    #[error("exec failed: {message}")]
    Exec { message: String },
    #[error("container {0} has no stdin (it was created without one)")]
    NoStdin(String),
    #[error("container {0} has no terminal (its process.terminal is false)")]
    NoTerminal(String),
    #[error("failed to resize the terminal of container {id}")]
    Resize {
        id: String,
        #[source]
        source: std::io::Error,
    },
    #[error("the stdin of container {0} is closed (its process exited)")]
    StdinClosed(String),
    #[error("failed to open the stdin of container {id}")]
    Stdin {
        id: String,
        #[source]
        source: std::io::Error,
    },
    #[error("{binary} {verb} {id} failed: {message}")]
    Runc { binary: PathBuf, verb: &'static str, id: String, message: String },
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// How the container's stdout/stderr are kept.
#[derive(Debug, Clone, Default)]
pub struct CreateOptions {
    /// CRI-format log file; `None` discards the output.
    pub log_path: Option<PathBuf>,
    /// Give the process a stdin that writers attach to with [`ContainerRuntime::open_stdin`]
    /// (Kubernetes' `stdin: true`). Otherwise its stdin is /dev/null. It stays open — the shim
    /// holds a write end — until [`ContainerRuntime::close_stdin`]; deciding when to close
    /// (`stdinOnce`: after the first attach session) is the caller's policy.
    pub stdin: bool,
}

/// The operations every backend offers. State lives under the backend's root directory, so a
/// fresh instance (e.g. after an agent restart) sees and controls existing containers.
pub trait ContainerRuntime {
    fn name(&self) -> &'static str;
    /// Sets the container up (namespaces, rootfs, cgroup) and leaves it waiting for `start`.
    fn create(&self, id: &str, bundle: &Path, opts: &CreateOptions) -> Result<State>;
    fn start(&self, id: &str) -> Result<()>;
    fn state(&self, id: &str) -> Result<State>;
    fn kill(&self, id: &str, signal: Signal) -> Result<()>;
    /// Blocks until the container's process exits; `None` waits forever.
    fn wait(&self, id: &str, timeout: Option<Duration>) -> Result<Exit>;
    /// Removes a stopped (or, with `force`, any) container: processes, cgroup, state.
    fn delete(&self, id: &str, force: bool) -> Result<()>;
    fn list(&self) -> Result<Vec<String>>;
    fn usage(&self, id: &str) -> Result<Usage>;
    /// Runs `process` inside the running container: its namespaces, its cgroup, and the
    /// hardening `process` asks for (capabilities, no_new_privs, the spec's seccomp, rlimits,
    /// user, env, cwd). Returns once the command runs, or why it could not start.
    fn exec(&self, id: &str, process: &Process, opts: &ExecOptions) -> Result<Exec>;
    /// A write end of the container's stdin (blocking writes). Fails with [`Error::NoStdin`]
    /// when it was created without `stdin`, [`Error::StdinClosed`] when nothing reads it.
    fn open_stdin(&self, id: &str) -> Result<std::fs::File>;
    /// Closes the container's stdin for good: the process reads end of file once the writers
    /// from [`ContainerRuntime::open_stdin`] are gone. Idempotent.
    fn close_stdin(&self, id: &str) -> Result<()>;
    /// Sets the size of the container's terminal (`process.terminal`); its process gets
    /// SIGWINCH. [`Error::NoTerminal`] for a container without one.
    fn resize(&self, id: &str, cols: u16, rows: u16) -> Result<()>;
    /// Freezes every process of a running container: its status becomes [`Status::Paused`].
    fn pause(&self, id: &str) -> Result<()>;
    /// Thaws a paused container.
    fn resume(&self, id: &str) -> Result<()>;
}

/// What both backends share: the state root and the helper binary that runs the shim.
#[derive(Debug, Clone)]
struct Common {
    root: PathBuf,
    helper: PathBuf,
    /// Forks the shims (see [`forkserver`]).
    forks: Arc<forkserver::Client>,
}

impl Common {
    fn new(root: PathBuf, helper: PathBuf) -> Self {
        Common { forks: Arc::new(forkserver::Client::new(&helper, &root)), root, helper }
    }

    fn dir(&self, id: &str) -> Result<Dir> {
        Ok(Dir::new(&self.root, id)?)
    }

    fn record(&self, id: &str) -> Result<(Dir, Record)> {
        let dir = self.dir(id)?;
        let record = state::read_json::<Record>(&dir.record())?.ok_or_else(|| state::Error::NotFound(id.into()))?;
        Ok((dir, record))
    }

    fn create(&self, id: &str, bundle: &Path, opts: &CreateOptions, runc: Option<(&Path, &Path)>) -> Result<State> {
        let bundle = std::path::absolute(bundle).map_err(|source| state::Error::Io {
            op: "resolve",
            path: bundle.to_path_buf(),
            source,
        })?;
        // The shim loads and validates the spec and reports what is wrong with it as the
        // create's error; loading it here too cost every create ~0.1 ms.
        let dir = self.dir(id)?;
        dir.create()?;
        let args = crate::shim::Args {
            root: self.root.clone(),
            id: id.into(),
            bundle,
            log: opts.log_path.clone(),
            runc: runc.map(|(binary, _)| binary.to_path_buf()),
            runc_root: runc.map(|(_, root)| root.to_path_buf()),
            stdin: opts.stdin,
        };
        let line = match self.forks.launch(&args) {
            Ok(l) => l,
            Err(source) => {
                let _ = dir.remove();
                return Err(Error::Shim { helper: self.helper.clone(), source });
            }
        };
        match line.trim_end().strip_prefix("ok ") {
            Some(_) => self.state(id),
            None => {
                let _ = dir.remove();
                let message = line.trim_end().strip_prefix("error: ").unwrap_or("shim exited without reporting");
                Err(Error::Create { id: id.into(), message: message.to_string() })
            }
        }
    }

    fn state(&self, id: &str) -> Result<State> {
        let (dir, record) = self.record(id)?;
        let mut exit = state::read_json::<Exit>(&dir.exit())?;
        let alive = match record.detached {
            // Nobody reaps it for us: a zombie is stopped, and a recycled pid is someone else.
            true => state::process_alive(record.pid, record.start_time),
            false => nix::sys::signal::kill(Pid::from_raw(record.pid), None).is_ok(),
        };
        if exit.is_none() && !alive && !record.detached {
            // The init is gone but its shim, still running, has not recorded the exit yet (it
            // drains the logs first): wait for the record rather than report an exit without its
            // code, which a caller would take for a kill.
            if let Waited::Exit(e) = await_exit(&dir, record.shim_pid, Some(EXIT_RECORD_WAIT))? {
                exit = Some(e);
            }
        }
        let mut status = state::status(exit.as_ref(), alive, dir.created_marker().exists());
        if status == Status::Running && record.cgroups_path.as_deref().is_some_and(cgroups::frozen) {
            status = Status::Paused;
        }
        Ok(State {
            oci_version: state::OCI_VERSION.into(),
            id: record.id,
            status,
            pid: if status == Status::Stopped { 0 } else { record.pid },
            bundle: record.bundle,
            created: record.created,
            annotations: record.annotations,
            exit,
        })
    }

    /// Waits for the shim's exit record (see [`await_exit`]); for a detached container, which
    /// has none, for its init to exit (its code is its reaper's to know).
    fn wait(&self, id: &str, timeout: Option<Duration>) -> Result<Exit> {
        let (dir, record) = self.record(id)?;
        if record.detached {
            return match await_process(record.pid, record.start_time, timeout) {
                true => Ok(Exit { code: 0, signal: None, oom_killed: false }),
                false => Err(Error::Timeout(id.into())),
            };
        }
        match await_exit(&dir, record.shim_pid, timeout)? {
            Waited::Exit(exit) => Ok(exit),
            Waited::TimedOut => Err(Error::Timeout(id.into())),
            Waited::ShimGone => Err(Error::ShimGone(id.into())),
        }
    }

    /// The container must be running (started, not exited) to exec into it.
    fn exec_target(&self, id: &str) -> Result<Dir> {
        let st = self.state(id)?;
        if st.status != Status::Running {
            return Err(Error::WrongState { id: id.into(), status: st.status, wanted: "running" });
        }
        self.dir(id)
    }

    fn running(&self, id: &str) -> Result<State> {
        let st = self.state(id)?;
        if st.status == Status::Stopped {
            return Err(Error::WrongState { id: id.into(), status: st.status, wanted: "created or running" });
        }
        Ok(st)
    }

    /// Freezes (`pause`) or thaws (`resume`) every process of the container.
    fn freeze(&self, id: &str, frozen: bool) -> Result<()> {
        let st = self.state(id)?;
        let wanted = if frozen { Status::Running } else { Status::Paused };
        if st.status != wanted {
            let wanted = if frozen { "running" } else { "paused" };
            return Err(Error::WrongState { id: id.into(), status: st.status, wanted });
        }
        let (_, record) = self.record(id)?;
        let path = record.cgroups_path.ok_or_else(|| Error::NoCgroup(id.into()))?;
        Ok(cgroups::freeze(&path, frozen)?)
    }

    /// Stops the container if needed and waits for its shim to record the exit.
    fn stop_for_delete(&self, id: &str, force: bool, kill: impl Fn() -> Result<()>) -> Result<Record> {
        let st = self.state(id)?;
        let (_, record) = self.record(id)?;
        if st.status == Status::Running && !force {
            return Err(Error::WrongState { id: id.into(), status: st.status, wanted: "stopped (use force)" });
        }
        if st.status != Status::Stopped {
            kill()?;
            // A frozen process dies of SIGKILL only once thawed (cgroup v1's freezer).
            if st.status == Status::Paused {
                if let Some(p) = &record.cgroups_path {
                    cgroups::freeze(p, false)?;
                }
            }
            match self.wait(id, Some(Duration::from_secs(10))) {
                Ok(_) | Err(Error::ShimGone(_)) => {}
                Err(e) => return Err(e),
            }
        }
        Ok(record)
    }

    fn finish_delete(&self, id: &str, record: &Record) -> Result<()> {
        if let Some(p) = &record.cgroups_path {
            cgroups::remove(p)?;
        }
        if let Some(rootfs) = &record.shared_mounts {
            crate::rootfs::unmount_below(rootfs);
        }
        crate::idmap::take_down(&crate::idmap::idmap_dir(&self.dir(id)?), record.rootfs_mount.as_deref());
        // The shim may still be writing exit.json, and lets go of the container's mounts after
        // it (see `shim::hold_mounts`): wait for it to end, so nothing of the container is left
        // when delete returns.
        let dir = self.dir(id)?;
        // A detached container has no shim (its shim_pid is the long gone creator's).
        let shim = (!record.detached).then(|| sys::pidfd_open(Pid::from_raw(record.shim_pid)).ok()).flatten();
        if let Some(pidfd) = shim {
            let mut fds = [PollFd::new(pidfd.as_fd(), PollFlags::POLLIN)];
            let _ = nix::poll::poll(&mut fds, PollTimeout::from(5000u16));
        }
        dir.remove()?;
        Ok(())
    }

    /// Opens one of an existing container's fifos for writing, without blocking: ENXIO when
    /// nothing reads it (its shim is gone), NotFound when the container was made without it.
    fn open_fifo(&self, id: &str, fifo: fn(&Dir) -> PathBuf) -> Result<(Dir, std::io::Result<std::fs::File>)> {
        use std::os::unix::fs::OpenOptionsExt;
        let (dir, _) = self.record(id)?;
        let f = std::fs::File::options().write(true).custom_flags(libc::O_NONBLOCK).open(fifo(&dir));
        Ok((dir, f))
    }

    fn open_stdin(&self, id: &str) -> Result<std::fs::File> {
        let (_, opened) = self.open_fifo(id, Dir::stdin)?;
        let f = match opened {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Err(Error::NoStdin(id.into())),
            Err(e) if e.raw_os_error() == Some(libc::ENXIO) => return Err(Error::StdinClosed(id.into())),
            Err(source) => return Err(Error::Stdin { id: id.into(), source }),
        };
        nix::fcntl::fcntl(std::os::fd::AsRawFd::as_raw_fd(&f), nix::fcntl::FcntlArg::F_SETFL(OFlag::empty()))
            .map_err(|e| Error::Stdin { id: id.into(), source: e.into() })?;
        Ok(f)
    }

    fn resize(&self, id: &str, cols: u16, rows: u16) -> Result<()> {
        use std::io::Write;
        let err = |source| Error::Resize { id: id.into(), source };
        // A shim that is gone (nothing reading) is an error, not a wait.
        match self.open_fifo(id, Dir::resize)?.1 {
            Ok(mut f) => f.write_all(format!("{cols} {rows}\n").as_bytes()).map_err(err),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Err(Error::NoTerminal(id.into())),
            Err(e) => Err(err(e)),
        }
    }

    fn close_stdin(&self, id: &str) -> Result<()> {
        use std::io::Write;
        let (dir, opened) = self.open_fifo(id, Dir::stdin_close)?;
        match opened {
            Ok(mut f) => f.write_all(b"c").map_err(|source| Error::Stdin { id: id.into(), source }),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => match dir.stdin().exists() {
                true => Ok(()),
                false => Err(Error::NoStdin(id.into())),
            },
            // The shim is gone: nothing holds the stdin open any more.
            Err(e) if e.raw_os_error() == Some(libc::ENXIO) => Ok(()),
            Err(source) => Err(Error::Stdin { id: id.into(), source }),
        }
    }

    fn list(&self) -> Result<Vec<String>> {
        let mut ids = Vec::new();
        let entries = match std::fs::read_dir(&self.root) {
            Ok(e) => e,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(ids),
            Err(source) => return Err(state::Error::Io { op: "list", path: self.root.clone(), source }.into()),
        };
        for e in entries.flatten() {
            if e.path().join("state.json").exists() {
                ids.push(e.file_name().to_string_lossy().into_owned());
            }
        }
        ids.sort();
        Ok(ids)
    }

    fn usage(&self, id: &str) -> Result<Usage> {
        let (_, record) = self.record(id)?;
        match &record.cgroups_path {
            Some(p) => Ok(Cgroup::new(p)?.usage()?),
            None => Ok(Usage::default()),
        }
    }
}

/// The native backend: the shim clones the container init itself.
#[derive(Debug, Clone)]
pub struct Native {
    common: Common,
}

impl Native {
    /// `root` holds container state; `helper` is the `kaji-runtime` binary (run as `shim`).
    pub fn new(root: impl Into<PathBuf>, helper: impl Into<PathBuf>) -> Self {
        Native { common: Common::new(root.into(), helper.into()) }
    }
}

impl ContainerRuntime for Native {
    fn name(&self) -> &'static str {
        "native"
    }
    fn create(&self, id: &str, bundle: &Path, opts: &CreateOptions) -> Result<State> {
        self.common.create(id, bundle, opts, None)
    }
    fn start(&self, id: &str) -> Result<()> {
        let st = self.common.state(id)?;
        if st.status != Status::Created {
            return Err(Error::WrongState { id: id.into(), status: st.status, wanted: "created" });
        }
        let (dir, record) = self.common.record(id)?;
        let err = |source| Error::Start { id: id.into(), source };
        use std::io::{Read, Write};
        use std::os::unix::fs::OpenOptionsExt;
        // Opened before the init can run its startContainer hooks, so their verdict is not lost.
        let verdict = match std::fs::File::options().read(true).custom_flags(libc::O_NONBLOCK).open(dir.start_status())
        {
            Ok(f) => Some(f),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
            Err(e) => return Err(err(e)),
        };
        let mut fifo =
            std::fs::File::options().write(true).custom_flags(libc::O_NONBLOCK).open(dir.fifo()).map_err(err)?;
        let _ = std::fs::remove_file(dir.created_marker());
        fifo.write_all(b"s").map_err(err)?;
        let _ = std::fs::remove_file(dir.fifo());
        if let Some(mut f) = verdict {
            // End of file once the init exec'd (the fifo is close-on-exec) or died.
            nix::fcntl::fcntl(std::os::fd::AsRawFd::as_raw_fd(&f), nix::fcntl::FcntlArg::F_SETFL(OFlag::empty()))
                .map_err(|e| err(e.into()))?;
            let mut text = String::new();
            let _ = f.read_to_string(&mut text);
            let _ = std::fs::remove_file(dir.start_status());
            if let Some(message) = text.lines().find_map(|l| l.strip_prefix("error: ")) {
                return Err(Error::Hook { id: id.into(), message: message.to_string() });
            }
        }
        let running = record.hook_state(Status::Running, record.pid);
        hooks::run_all_warn(record.hooks.as_ref(), Point::Poststart, &running, Some(&record.bundle));
        Ok(())
    }
    fn state(&self, id: &str) -> Result<State> {
        self.common.state(id)
    }
    fn kill(&self, id: &str, signal: Signal) -> Result<()> {
        let st = self.common.running(id)?;
        nix::sys::signal::kill(Pid::from_raw(st.pid), signal).map_err(|source| Error::Signal { id: id.into(), source })
    }
    fn wait(&self, id: &str, timeout: Option<Duration>) -> Result<Exit> {
        self.common.wait(id, timeout)
    }
    fn delete(&self, id: &str, force: bool) -> Result<()> {
        let record = self.common.stop_for_delete(id, force, || match self.kill(id, Signal::SIGKILL) {
            Err(Error::WrongState { .. }) => Ok(()),
            other => other,
        })?;
        self.common.finish_delete(id, &record)?;
        let stopped = record.hook_state(Status::Stopped, 0);
        hooks::run_all_warn(record.hooks.as_ref(), Point::Poststop, &stopped, Some(&record.bundle));
        Ok(())
    }
    fn list(&self) -> Result<Vec<String>> {
        self.common.list()
    }
    fn usage(&self, id: &str) -> Result<Usage> {
        self.common.usage(id)
    }
    fn exec(&self, id: &str, process: &Process, opts: &ExecOptions) -> Result<Exec> {
        let dir = self.common.exec_target(id)?;
        exec::native(&self.common.helper, &self.common.root, &dir.path, id, process, opts)
    }
    fn open_stdin(&self, id: &str) -> Result<std::fs::File> {
        self.common.open_stdin(id)
    }
    fn close_stdin(&self, id: &str) -> Result<()> {
        self.common.close_stdin(id)
    }
    fn resize(&self, id: &str, cols: u16, rows: u16) -> Result<()> {
        self.common.resize(id, cols, rows)
    }
    fn pause(&self, id: &str) -> Result<()> {
        self.common.freeze(id, true)
    }
    fn resume(&self, id: &str) -> Result<()> {
        self.common.freeze(id, false)
    }
}

/// The reference backend: any OCI runtime binary with runc's command line, driven with the same
/// spec and monitored by the same shim (as a child subreaper).
#[derive(Debug, Clone)]
pub struct Runc {
    common: Common,
    binary: PathBuf,
    runc_root: PathBuf,
}

impl Runc {
    pub fn new(root: impl Into<PathBuf>, helper: impl Into<PathBuf>, binary: impl Into<PathBuf>) -> Self {
        let root = root.into();
        let runc_root = root.join(".runc");
        Runc { common: Common::new(root, helper.into()), binary: binary.into(), runc_root }
    }

    /// `runc --root <root> <verb> <flags...> <id> <after...>` (runc wants `kill <id> <signal>`).
    fn run(&self, verb: &'static str, id: &str, flags: &[&str], after: &[&str]) -> Result<()> {
        let out = Command::new(&self.binary)
            .arg("--root")
            .arg(&self.runc_root)
            .arg(verb)
            .args(flags)
            .arg(id)
            .args(after)
            .stdin(Stdio::null())
            .output()
            .map_err(|e| Error::Runc { binary: self.binary.clone(), verb, id: id.into(), message: e.to_string() })?;
        if out.status.success() {
            return Ok(());
        }
        Err(Error::Runc {
            binary: self.binary.clone(),
            verb,
            id: id.into(),
            message: String::from_utf8_lossy(&out.stderr).trim().to_string(),
        })
    }
}

impl ContainerRuntime for Runc {
    fn name(&self) -> &'static str {
        "runc"
    }
    fn create(&self, id: &str, bundle: &Path, opts: &CreateOptions) -> Result<State> {
        self.common.create(id, bundle, opts, Some((&self.binary, &self.runc_root)))
    }
    fn start(&self, id: &str) -> Result<()> {
        let st = self.common.state(id)?;
        if st.status != Status::Created {
            return Err(Error::WrongState { id: id.into(), status: st.status, wanted: "created" });
        }
        self.run("start", id, &[], &[])?;
        let _ = std::fs::remove_file(self.common.dir(id)?.created_marker());
        Ok(())
    }
    fn state(&self, id: &str) -> Result<State> {
        self.common.state(id)
    }
    fn kill(&self, id: &str, signal: Signal) -> Result<()> {
        self.common.running(id)?;
        self.run("kill", id, &[], &[signal.as_str()])
    }
    fn wait(&self, id: &str, timeout: Option<Duration>) -> Result<Exit> {
        self.common.wait(id, timeout)
    }
    fn delete(&self, id: &str, force: bool) -> Result<()> {
        let record = self.common.stop_for_delete(id, force, || self.run("kill", id, &[], &["SIGKILL"]))?;
        self.run("delete", id, &["--force"], &[])?;
        self.common.finish_delete(id, &record)
    }
    fn list(&self) -> Result<Vec<String>> {
        self.common.list()
    }
    fn usage(&self, id: &str) -> Result<Usage> {
        self.common.usage(id)
    }
    fn exec(&self, id: &str, process: &Process, opts: &ExecOptions) -> Result<Exec> {
        let dir = self.common.exec_target(id)?;
        exec::runc(&self.binary, &self.runc_root, &dir.path, id, process, opts)
    }
    fn open_stdin(&self, id: &str) -> Result<std::fs::File> {
        self.common.open_stdin(id)
    }
    fn close_stdin(&self, id: &str) -> Result<()> {
        self.common.close_stdin(id)
    }
    fn resize(&self, id: &str, cols: u16, rows: u16) -> Result<()> {
        self.common.resize(id, cols, rows)
    }
    fn pause(&self, id: &str) -> Result<()> {
        self.run("pause", id, &[], &[])
    }
    fn resume(&self, id: &str) -> Result<()> {
        self.run("resume", id, &[], &[])
    }
}

/// How long `state` waits for a running shim to record the exit of an init that is gone.
const EXIT_RECORD_WAIT: Duration = Duration::from_secs(1);

/// Whether the shim is still running (a zombie is not: it has nothing left to record).
enum Waited {
    Exit(Exit),
    TimedOut,
    /// The shim ended without writing a record.
    ShimGone,
}

/// The container's exit record, waiting up to `timeout` (`None`: forever) for its shim to write
/// it: woken when the shim closes its [`Dir::exited`] fifo, right after writing the record, or
/// when the shim ends (pidfd), whichever comes first.
fn await_exit(dir: &Dir, shim_pid: i32, timeout: Option<Duration>) -> Result<Waited> {
    use std::os::unix::fs::OpenOptionsExt;
    // Opened before looking for the record: if the shim closes it after this, we see the
    // hang-up; if it closed it before, the record is there.
    let exited = std::fs::File::options().read(true).custom_flags(libc::O_NONBLOCK).open(dir.exited()).ok();
    if let Some(exit) = state::read_json::<Exit>(&dir.exit())? {
        return Ok(Waited::Exit(exit));
    }
    if let Ok(pidfd) = sys::pidfd_open(Pid::from_raw(shim_pid)) {
        let deadline = timeout.map(|t| std::time::Instant::now() + t);
        let mut fds = vec![PollFd::new(pidfd.as_fd(), PollFlags::POLLIN)];
        if let Some(f) = &exited {
            fds.push(PollFd::new(f.as_fd(), PollFlags::POLLIN));
        }
        loop {
            let left = match deadline {
                None => PollTimeout::NONE,
                Some(d) => PollTimeout::try_from(d.saturating_duration_since(std::time::Instant::now()))
                    .unwrap_or(PollTimeout::MAX),
            };
            match nix::poll::poll(&mut fds, left) {
                Ok(0) => return Ok(Waited::TimedOut),
                Ok(_) => break,
                Err(nix::errno::Errno::EINTR) => continue,
                Err(_) => break,
            }
        }
    }
    Ok(state::read_json::<Exit>(&dir.exit())?.map_or(Waited::ShimGone, Waited::Exit))
}

/// Waits up to `timeout` (`None`: forever) for the process `pid` that started at `start` to
/// exit; true once it has (or never was).
fn await_process(pid: i32, start: Option<u64>, timeout: Option<Duration>) -> bool {
    let Ok(pidfd) = sys::pidfd_open(Pid::from_raw(pid)) else { return true };
    if !state::process_alive(pid, start) {
        return true;
    }
    let deadline = timeout.map(|t| std::time::Instant::now() + t);
    loop {
        let left = match deadline {
            None => PollTimeout::NONE,
            Some(d) => PollTimeout::try_from(d.saturating_duration_since(std::time::Instant::now()))
                .unwrap_or(PollTimeout::MAX),
        };
        let mut fds = [PollFd::new(pidfd.as_fd(), PollFlags::POLLIN)];
        match nix::poll::poll(&mut fds, left) {
            Ok(0) => return false,
            Err(nix::errno::Errno::EINTR) => continue,
            _ => return true,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A stand-in shim (this test) holds the `exited` fifo of a container whose "shim" process
    /// keeps running: `wait` returns the record as soon as the fifo is closed after it is
    /// written, without waiting for that process to end.
    /// A container "c" under a temporary root whose shim is `shim` (a stand-in process) and whose
    /// init is `init`, with the `exited` fifo made and held open as a shim holds it.
    fn stand_in(root: &Path, init: i32, shim: i32) -> anyhow::Result<(Dir, std::fs::File)> {
        let dir = Dir::new(root, "c")?;
        std::fs::create_dir_all(&dir.path)?;
        let record = Record {
            id: "c".into(),
            pid: init,
            shim_pid: shim,
            bundle: root.into(),
            created: String::new(),
            cgroups_path: None,
            log_path: None,
            backend: "native".into(),
            annotations: Default::default(),
            hooks: None,
            detached: false,
            start_time: None,
            shared_mounts: None,
            rootfs_mount: None,
        };
        state::write_json(&dir.record(), &record)?;
        nix::unistd::mkfifo(&dir.exited(), nix::sys::stat::Mode::from_bits_truncate(0o600))?;
        let held = std::fs::File::options().read(true).write(true).open(dir.exited())?;
        Ok((dir, held))
    }

    /// The init has exited, its (stand-in) shim not yet recorded it: `state` waits for the
    /// record, woken by the fifo, and reports the exit with its code instead of a bare stop.
    #[test]
    fn state_of_an_exited_init_waits_for_its_record() -> anyhow::Result<()> {
        let root = tempfile::tempdir()?;
        let rt = Native::new(root.path(), "/nonexistent-helper");
        let mut gone = Command::new("true").spawn()?;
        gone.wait()?;
        let mut shim = Command::new("sleep").arg("30").spawn()?;
        let (dir, held) = stand_in(root.path(), gone.id() as i32, shim.id() as i32)?;
        let asker = std::thread::spawn(move || rt.state("c"));
        std::thread::sleep(Duration::from_millis(100));
        let exit = Exit { code: 7, signal: None, oom_killed: false };
        state::write_json(&dir.exit(), &exit)?;
        drop(held);
        let st = asker.join().expect("state thread");
        let _ = shim.kill();
        let _ = shim.wait();
        let st = st?;
        assert_eq!((st.status, st.exit), (Status::Stopped, Some(exit)));
        Ok(())
    }

    #[test]
    fn wait_returns_once_the_exit_record_is_announced_not_when_the_shim_ends() -> anyhow::Result<()> {
        let root = tempfile::tempdir()?;
        let rt = Native::new(root.path(), "/nonexistent-helper");
        let mut shim = Command::new("sleep").arg("30").spawn()?;
        let (dir, held) = stand_in(root.path(), shim.id() as i32, shim.id() as i32)?;
        let waiter = std::thread::spawn(move || rt.wait("c", Some(Duration::from_secs(20))));
        std::thread::sleep(Duration::from_millis(100));
        assert!(!waiter.is_finished(), "nothing announced yet");
        let exit = Exit { code: 7, signal: None, oom_killed: false };
        state::write_json(&dir.exit(), &exit)?;
        drop(held);
        let got = waiter.join().expect("waiter thread");
        let still_running = shim.try_wait()?.is_none();
        let _ = shim.kill();
        let _ = shim.wait();
        assert_eq!(got?, exit);
        assert!(still_running, "the stand-in shim was still running when wait returned");
        Ok(())
    }
}
