//! Creating a native container, the parent's half: load and check the bundle, clone the init
//! with its namespaces, make its cgroups and apply their limits, run the hooks that belong in
//! the runtime's namespace, and record the container. The caller keeps what it returns: the shim
//! monitors the container; the CLI leaves it to its own caller's reaper (`runc create`) or
//! waits for it itself (`runc run`).

use std::fs::File;
use std::io::{BufRead, BufReader, Read, Write};
use std::os::fd::{AsFd, OwnedFd};
use std::path::{Path, PathBuf};

use nix::fcntl::OFlag;
use nix::sys::signal::{kill, Signal};
use nix::sys::wait::waitpid;
use nix::unistd::Pid;

use crate::cgroups::{self, Cgroup};
use crate::hooks::{self, chain, Point};
use crate::state::{self, Dir, Record, State, Status};
use crate::sys::{self, Forked};
use crate::{init, namespaces, rootfs, spec};

pub(crate) type Failure = String;

/// Where the container's stdio comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Streams {
    /// The shim's: stdout and stderr into pipes it pumps into the CRI log (the request's
    /// `log_path`) or /dev/null; with `stdin`, a fifo in the state dir (see [`stdin_fifo`]),
    /// otherwise /dev/null.
    Shim { stdin: bool },
    /// The caller's own fds 0, 1 and 2, handed to the container's process as they are: what
    /// `runc create` and `runc run` do, and what an engine (conmon) relies on.
    Inherit,
}

/// One container to create.
#[derive(Debug, Clone)]
pub struct Request<'a> {
    pub id: &'a str,
    pub bundle: &'a Path,
    pub streams: Streams,
    /// The CRI log the shim writes (recorded in the state).
    pub log_path: Option<&'a Path>,
    /// Fds 3 to 2 + N of the caller are passed to the container's process (`--preserve-fds`).
    pub preserve_fds: u32,
    /// Move the rootfs onto / and chroot instead of pivot_root (`--no-pivot`).
    pub no_pivot: bool,
    /// No shim: the init must outlive the process that created it, nobody records its exit,
    /// and its terminal's master goes back to the caller bare.
    pub detached: bool,
    /// Environment added to the process (`LISTEN_FDS` from socket activation).
    pub extra_env: Vec<String>,
}

/// A container whose init waits for `start`.
pub struct Launched {
    pub pid: Pid,
    /// Read ends of the log pipes (shim streams with a log).
    pub stdout: Option<OwnedFd>,
    pub stderr: Option<OwnedFd>,
    pub cgroups_path: Option<PathBuf>,
    pub stdin: Option<Keeper>,
    /// With `process.terminal`: the master the init sent.
    pub terminal: Option<Pty>,
    /// The container's mount namespace, held until the exit is recorded (see [`hold_mounts`]).
    pub mounts: Option<OwnedFd>,
}

/// The container's terminal as the creator receives it.
pub struct Pty {
    pub master: File,
    /// The resize fifo ([`Dir::resize`]), for a shim.
    pub resize: Option<File>,
    /// The stdin fifo's read end, which the shim copies into the terminal.
    pub stdin: Option<OwnedFd>,
}

/// The shim's hold on the container's stdin: `keeper` is a write end of the fifo, so the process
/// does not read end of file between attach sessions; a byte on `close` drops it.
pub struct Keeper {
    _keeper: OwnedFd,
    pub close: File,
}

/// Creates the stdin fifo and its close fifo in the state dir. Returns the read end for the
/// container's fd 0 and the shim's [`Keeper`]. The fifos live in the state dir, so they outlive
/// any agent and go away with `delete`.
pub fn stdin_fifo(dir: &Dir) -> Result<(OwnedFd, Keeper), Failure> {
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

/// Makes a fifo and opens it read-write: opening never blocks, and a read blocks until someone
/// writes.
pub fn fifo(path: &Path) -> Result<File, Failure> {
    nix::unistd::mkfifo(path, nix::sys::stat::Mode::from_bits_truncate(0o600))
        .map_err(|e| format!("failed to create {}: {e}", path.display()))?;
    File::options().read(true).write(true).open(path).map_err(|e| format!("failed to open {}: {e}", path.display()))
}

/// (read end, write end) of a log pipe.
pub type Pipe = (OwnedFd, OwnedFd);

pub fn log_pipes(log: bool) -> Result<(Option<Pipe>, Option<Pipe>), Failure> {
    if !log {
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

/// A close-on-exec copy of our fd `fd` (0, 1 or 2) for the init to install.
fn dup_ours(fd: i32) -> Result<OwnedFd, Failure> {
    let file = match fd {
        0 => std::io::stdin().as_fd().try_clone_to_owned(),
        1 => std::io::stdout().as_fd().try_clone_to_owned(),
        _ => std::io::stderr().as_fd().try_clone_to_owned(),
    };
    file.map_err(|e| format!("failed to pass fd {fd} to the container: {e}"))
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

/// `linux.netDevices` into the container's network namespace: the one it joins by path, or the
/// new one the init was cloned into.
fn move_net_devices(pid: Pid, linux: &oci_spec::runtime::Linux) -> Result<(), Failure> {
    let Some(devices) = linux.net_devices().as_ref().filter(|d| !d.is_empty()) else { return Ok(()) };
    let joined = linux.namespaces().iter().flatten().find_map(|n| match (n.typ(), n.path()) {
        (oci_spec::runtime::LinuxNamespaceType::Network, Some(p)) => Some(p.clone()),
        _ => None,
    });
    let path = joined.unwrap_or_else(|| format!("/proc/{pid}/ns/net").into());
    let ns = File::open(&path).map_err(|e| format!("failed to open network namespace {}: {e}", path.display()))?;
    crate::netdev::move_all(devices, ns.as_fd()).map_err(|e| chain(&e))
}

/// The init's side of the sync pipes (see [`init::Parent`]).
struct ToParent {
    go: File,
    rep: File,
}

impl init::Parent for ToParent {
    fn runtime_hooks(&mut self) -> std::io::Result<()> {
        self.rep.write_all(b"hooks\n")?;
        let mut b = [0u8; 1];
        self.go.read_exact(&mut b)
    }
    fn ready(&mut self) -> std::io::Result<()> {
        self.rep.write_all(b"ready\n")
    }
}

/// Writes the user namespace maps of the init `pid` (cloned into a new one, and waiting for
/// them), and its `oom_score_adj`, which it can no longer lower itself from in there.
fn write_id_maps(pid: Pid, linux: &oci_spec::runtime::Linux, oom_score_adj: Option<i32>) -> Result<(), Failure> {
    if let Some(adj) = oom_score_adj {
        std::fs::write(format!("/proc/{pid}/oom_score_adj"), adj.to_string())
            .map_err(|e| format!("failed to set oom_score_adj: {e}"))?;
    }
    let text = |maps: &Option<Vec<oci_spec::runtime::LinuxIdMapping>>| {
        let lines = maps.iter().flatten().map(|m| format!("{} {} {}\n", m.container_id(), m.host_id(), m.size()));
        lines.collect::<String>()
    };
    // gid_map first (as runc): nothing about it depends on the uid map.
    for (file, maps) in [("gid_map", linux.gid_mappings()), ("uid_map", linux.uid_mappings())] {
        let path = format!("/proc/{pid}/{file}");
        std::fs::write(&path, text(maps)).map_err(|e| format!("failed to write {path}: {e}"))?;
    }
    Ok(())
}

/// Clones the init into the new namespaces `flags` asks for, owned by the user namespace
/// `userns` joins (otherwise the host's would own them: its root could not make its mount
/// namespace private, nor mount /proc for its PID namespace). A bridge process joins the user
/// namespace and clones the init with `CLONE_PARENT`, so the init is still our child, then
/// sends its pid and exits — runc's nsexec does the same.
fn clone_in_joined_userns(
    flags: nix::sched::CloneFlags,
    userns: &(nix::sched::CloneFlags, PathBuf),
) -> Result<Forked, Failure> {
    let (r, w) = nix::unistd::pipe2(OFlag::O_CLOEXEC).map_err(|e| format!("failed to create sync pipe: {e}"))?;
    match sys::clone_process(nix::sched::CloneFlags::empty())
        .map_err(|e| format!("failed to clone container init: {e}"))?
    {
        Forked::Child => {
            drop(r);
            if namespaces::join(std::slice::from_ref(userns)).is_err() {
                sys::exit_now(1);
            }
            match sys::clone_process(flags | nix::sched::CloneFlags::CLONE_PARENT) {
                Ok(Forked::Child) => Ok(Forked::Child),
                Ok(Forked::Parent(pid)) => {
                    let _ = File::from(w).write_all(&pid.as_raw().to_ne_bytes());
                    sys::exit_now(0)
                }
                Err(_) => sys::exit_now(1),
            }
        }
        Forked::Parent(bridge) => {
            drop(w);
            let mut buf = [0u8; 4];
            let read = File::from(r).read_exact(&mut buf);
            let _ = waitpid(bridge, None);
            read.map_err(|_| format!("failed to clone container init into user namespace {}", userns.1.display()))?;
            Ok(Forked::Parent(Pid::from_raw(i32::from_ne_bytes(buf))))
        }
    }
}

/// What the state record says about a container, from its spec and how it was launched.
pub fn record(
    id: &str,
    bundle: &Path,
    pid: Pid,
    created: String,
    cgroups_path: Option<PathBuf>,
    backend: &str,
    spec: &oci_spec::runtime::Spec,
) -> Record {
    Record {
        id: id.to_string(),
        pid: pid.as_raw(),
        shim_pid: nix::unistd::getpid().as_raw(),
        bundle: bundle.to_path_buf(),
        created,
        cgroups_path,
        log_path: None,
        backend: backend.to_string(),
        annotations: spec.annotations().clone().unwrap_or_default(),
        hooks: None,
        detached: false,
        start_time: state::start_time(pid.as_raw()),
        shared_mounts: None,
        rootfs_mount: None,
    }
}

/// Creates the container `req` names; its init waits for `start`. On failure nothing of it is
/// left but the state dir, which the caller removes.
pub fn native(req: &Request<'_>, dir: &Dir) -> Result<Launched, Failure> {
    let spec = spec::load(req.bundle).map_err(|e| chain(&e))?;
    spec::validate(&spec, req.bundle).map_err(|e| chain(&e))?;
    // Idmapped rootfs and mounts are made on the host first; the init bind-mounts them. A
    // failed create takes them down with the guard, a created container at delete.
    let idmapped = match crate::idmap::needed(&spec) {
        true => Some(crate::idmap::prepare(&spec, req.bundle, dir).map_err(|e| chain(&e))?),
        false => None,
    };
    let spec = idmapped.as_ref().map_or(spec, |p| p.spec.clone());
    let linux = spec.linux().as_ref().ok_or("spec has no linux section")?;
    let plan = namespaces::plan(linux.namespaces().as_deref().unwrap_or_default()).map_err(|e| chain(&e))?;
    let created = jiff::Timestamp::now().to_string();
    let hooks = spec.hooks().as_ref();
    let hook_state = State {
        oci_version: state::OCI_VERSION.into(),
        id: req.id.to_string(),
        status: Status::Creating,
        pid: 0,
        bundle: req.bundle.to_path_buf(),
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
    let rootfs_dir = spec::rootfs_path(&spec, req.bundle).map_err(|e| chain(&e))?;
    let lower = spec::lowerdirs(&spec);
    if lower.is_some() {
        for d in [dir.rootfs(), dir.upper(), dir.work()] {
            std::fs::create_dir_all(&d).map_err(|e| format!("failed to create {}: {e}", d.display()))?;
        }
    }
    let terminal = spec.process().as_ref().and_then(|p| p.terminal()).unwrap_or(false);
    let (log, want_stdin) = match req.streams {
        Streams::Shim { stdin } => (req.log_path.is_some(), stdin),
        Streams::Inherit => (false, false),
    };
    // A terminal carries every stream; otherwise pipes, read by the shim into the log.
    let (out_pipe, err_pipe) = if terminal { (None, None) } else { log_pipes(log)? };
    // The init opens the terminal inside the container and sends us its master.
    let pty = match terminal {
        true => {
            let (ours, theirs) = std::os::unix::net::UnixStream::pair()
                .map_err(|e| format!("failed to create the terminal socket: {e}"))?;
            let resize = match req.detached {
                false => Some(fifo(&dir.resize())?),
                true => None,
            };
            Some((ours, OwnedFd::from(theirs), resize))
        }
        false => None,
    };
    let (stdin, keeper) = match want_stdin {
        true => stdin_fifo(dir).map(|(r, k)| (Some(r), Some(k)))?,
        false => (None, None),
    };
    // With a terminal, the shim copies stdin into it: the process reads the terminal.
    let (stdin, tty_stdin) = if terminal { (None, stdin) } else { (stdin, None) };
    let inherited = match (req.streams, terminal) {
        (Streams::Inherit, false) => Some((dup_ours(0)?, dup_ours(1)?, dup_ours(2)?)),
        _ => None,
    };
    // SCMP_ACT_NOTIFY: the init sends its filter's listener fd back over this, before `ready`.
    let notify = linux.seccomp().as_ref().filter(|p| crate::seccomp::uses_notify(p));
    let listener_sock = match notify {
        Some(_) => Some(
            std::os::unix::net::UnixStream::pair()
                .map_err(|e| format!("failed to create the seccomp listener socket: {e}"))?,
        ),
        None => None,
    };
    let (listener_ours, listener_theirs) = match listener_sock {
        Some((ours, theirs)) => (Some(ours), Some(OwnedFd::from(theirs))),
        None => (None, None),
    };
    let (go_r, go_w) = nix::unistd::pipe2(OFlag::O_CLOEXEC).map_err(|e| format!("failed to create sync pipe: {e}"))?;
    let (rep_r, rep_w) =
        nix::unistd::pipe2(OFlag::O_CLOEXEC).map_err(|e| format!("failed to create sync pipe: {e}"))?;
    namespaces::join(&plan.join_before_clone).map_err(|e| chain(&e))?;
    // Like runc, a container always gets cgroups: without a cgroupsPath, at a default path.
    let cgroups_path = Some(linux.cgroups_path().clone().unwrap_or_else(|| cgroups::default_path(req.id)));
    // v1/hybrid: we make the cgroups and apply their limits while the init builds its rootfs,
    // and tell it on `ready` when it can move itself in (see `init::CgroupEntry`). Made in
    // turn, before the clone, they were ~1 ms of every create.
    let v1 = match cgroups_path {
        Some(_) => cgroups::is_v1().map_err(|e| chain(&e))?,
        None => false,
    };
    // In a user namespace the init cannot write the host's cgroup files: we move it in.
    let userns = plan.clone_flags.contains(nix::sched::CloneFlags::CLONE_NEWUSER)
        || plan.join_in_child.iter().any(|(f, _)| *f == nix::sched::CloneFlags::CLONE_NEWUSER);
    let ready = match v1 && !userns {
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
    // A user namespace joined by path must own the namespaces the container gets new.
    let joined_userns = plan.join_in_child.iter().find(|(f, _)| *f == nix::sched::CloneFlags::CLONE_NEWUSER);
    let userns_joined = joined_userns.is_some() && !clone_flags.is_empty();
    let cloned = match joined_userns.filter(|_| userns_joined) {
        Some(userns) => clone_in_joined_userns(clone_flags, userns)?,
        None => sys::clone_process(clone_flags).map_err(|e| format!("failed to clone container init: {e}"))?,
    };
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
            let mut to_parent = ToParent { go: File::from(go_r), rep: File::from(rep_w) };
            let mut b = [0u8; 1];
            if to_parent.go.read_exact(&mut b).is_err() {
                std::process::exit(1);
            }
            let fd = |p: Option<(OwnedFd, OwnedFd)>| match p {
                Some((_r, w)) => Ok(w),
                None => null_fd(),
            };
            let (streams, terminal) = match (pty, inherited) {
                (Some((_, theirs, _)), _) => (null_fd().and_then(|o| Ok((None, o, null_fd()?))), Some(theirs)),
                (None, Some((i, o, e))) => (Ok((Some(i), o, e)), None),
                (None, None) => (fd(out_pipe).and_then(|o| Ok((stdin, o, fd(err_pipe)?))), None),
            };
            let (stdin, stdout, stderr) = match streams {
                Ok(s) => s,
                Err(m) => {
                    let _ = writeln!(to_parent.rep, "error: {m}");
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
                preserve_fds: req.preserve_fds,
                no_pivot: req.no_pivot,
                detached: req.detached,
                extra_env: &req.extra_env,
                cgroups_path: cgroups_path.as_deref(),
                seccomp_listener: listener_theirs,
                userns_joined,
            };
            let err = init::run(ctx, &mut to_parent);
            let _ = writeln!(to_parent.rep, "error: {}", chain(&err));
            std::process::exit(1);
        }
        Forked::Parent(pid) => {
            drop((go_r, rep_w, start, start_status, stdin, inherited, listener_theirs));
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
            let pty = pty.map(|(ours, theirs, resize)| {
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
                hooks::run_all_warn(hooks, Point::Poststop, &stopped, Some(req.bundle));
                msg
            };
            // v1: the init starts its setup now and enters its cgroups once we say they are
            // ready; otherwise (cgroup v2) it waits until we have moved it in. Either way before
            // any hook or user code runs.
            let mut go = File::from(go_w);
            if plan.clone_flags.contains(nix::sched::CloneFlags::CLONE_NEWUSER) {
                let adj = spec.process().as_ref().and_then(|p| p.oom_score_adj());
                if let Err(e) = write_id_maps(pid, linux, adj) {
                    return Err(fail(e));
                }
            }
            // Before any hook or the container's process runs, as runc does.
            if let Err(e) = move_net_devices(pid, linux) {
                return Err(fail(e));
            }
            let default = Default::default();
            let resources = linux.resources().as_ref().unwrap_or(&default);
            if let (Some(p), true, true) = (&cgroups_path, v1, userns) {
                let made = cgroups::create_v1(p).and_then(|()| cgroups::apply_v1(p, resources));
                if let Err(e) = made.and_then(|()| cgroups::join(p, pid)) {
                    return Err(fail(chain(&e)));
                }
                if go.write_all(b"g").is_err() {
                    return Err(fail("container init exited before setup".into()));
                }
            } else if let (Some(p), Some(mut ready)) = (&cgroups_path, ready) {
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
                            if let Err(e) = hooks::run_all(hooks, point, &creating, Some(req.bundle)) {
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
            // And its seccomp listener, which goes to the agent at listenerPath (as runc does).
            if let (Some(sock), Some(profile)) = (&listener_ours, notify) {
                let fd = match sys::recv_fd(sock.as_fd()) {
                    Ok(Some(fd)) => fd,
                    Ok(None) => return Err(fail("the init sent no seccomp listener".into())),
                    Err(e) => return Err(fail(format!("failed to receive the seccomp listener: {e}"))),
                };
                let creating = State { pid: pid.as_raw(), ..hook_state.clone() };
                let message = crate::seccomp::process_state(profile, pid.as_raw(), &creating);
                let sent = crate::seccomp::connect_listener(profile)
                    .and_then(|agent| crate::seccomp::send_to_listener(profile, &agent, &message, fd.as_fd()));
                if let Err(e) = sent {
                    return Err(fail(chain(&e)));
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
                    (None, Some(Pty { master, resize, stdin: tty_stdin }))
                }
                None => (out_pipe.map(|(r, _w)| r), None),
            };
            let base = record(req.id, req.bundle, pid, created, cgroups_path.clone(), "native", &spec);
            let log_path = req.log_path.map(Path::to_path_buf);
            // Its mounts are the host's: `delete` takes them down.
            let shared_mounts = match plan.clone_flags.contains(nix::sched::CloneFlags::CLONE_NEWNS) {
                true => None,
                false => Some(rootfs_dir.clone()),
            };
            let rootfs_mount = idmapped.and_then(crate::idmap::Prepared::keep);
            let record =
                Record { hooks: hooks.cloned(), detached: req.detached, log_path, shared_mounts, rootfs_mount, ..base };
            if let Err(e) = state::write_json(&dir.record(), &record) {
                return Err(fail(chain(&e)));
            }
            let mounts = if req.detached { None } else { hold_mounts(pid) };
            Ok(Launched { pid, stdout, stderr, cgroups_path, stdin: keeper, terminal, mounts })
        }
    }
}
