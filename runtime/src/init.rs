//! The container init: what the cloned child of the shim does before it becomes the container's
//! process — join namespaces, build the rootfs, run the createContainer hooks before pivot_root,
//! hostname, rlimits, user, capabilities, no_new_privs, seccomp — then wait for `start`, run the
//! startContainer hooks and exec. [`apply_process`] is the process hardening alone, shared with
//! exec (`nsenter`).

use std::ffi::CString;
use std::io::{BufRead, Read, Write};
use std::os::fd::{AsRawFd, OwnedFd};
use std::path::{Path, PathBuf};

use caps::{CapSet, CapsHashSet};
use nix::mount::MsFlags;
use nix::sys::resource::{setrlimit, Resource};
use nix::unistd::{Gid, Uid};
use oci_spec::runtime::{Capability, PosixRlimitType, Process, Spec};

use crate::hooks::{self, Point};
use crate::state::{State, Status};
use crate::{cgroups, namespaces, rootfs, seccomp};

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(transparent)]
    Namespaces(#[from] namespaces::Error),
    #[error(transparent)]
    Rootfs(#[from] rootfs::Error),
    #[error(transparent)]
    Seccomp(#[from] seccomp::Error),
    #[error(transparent)]
    Hook(#[from] hooks::Error),
    #[error("the shim did not let setup continue")]
    Sync(#[source] std::io::Error),
    #[error("failed to {op}")]
    Sys {
        op: String,
        #[source]
        source: nix::Error,
    },
    #[error("failed to set capabilities")]
    Caps(#[source] caps::errors::CapsError),
    #[error("executable {0:?} not found in rootfs or $PATH")]
    NotFound(String),
    #[error("argument or environment contains a NUL byte")]
    Nul,
    #[error("failed to wait for start")]
    Start(#[source] std::io::Error),
    #[error(transparent)]
    Cgroups(#[from] cgroups::Error),
    #[error("the shim did not make the container's cgroups")]
    CgroupsNotReady,
    #[error("failed to set sysctl {key}")]
    Sysctl {
        key: String,
        #[source]
        source: std::io::Error,
    },
    #[error("failed to set oom_score_adj")]
    OomScoreAdj(#[source] std::io::Error),
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

fn sys(op: impl Into<String>) -> impl FnOnce(nix::Error) -> Error {
    let op = op.into();
    move |source| Error::Sys { op, source }
}

/// How the init enters its cgroups on a cgroup v1 host: the shim makes them and applies their
/// limits while the init builds its rootfs, then writes `ok` to `ready` (if it cannot, it kills
/// the init and reports why). The init moves itself in — the one migration the kernel does
/// without its global threadgroup lock — as late as it can and still before anything that
/// depends on it: hooks, a new cgroup namespace (rooted where its creator is), and dropping
/// privileges. The trade-off: what the init's setup allocates in the kernel (its mounts, the
/// pages of /dev's tmpfs) is charged to the shim's cgroup, not the container's, as it would be
/// for the part of runc's setup before its parent moves the init in.
pub struct CgroupEntry {
    pub ready: std::fs::File,
    pub path: PathBuf,
}

/// A [`CgroupEntry`] with the hierarchies opened while the init still sees them.
struct PendingCgroup {
    entry: CgroupEntry,
    hierarchies: cgroups::Hierarchies,
}

/// Enters the cgroups of `pending`, once; nothing when already done or there are none.
fn enter_cgroups(pending: &mut Option<PendingCgroup>) -> Result<()> {
    let Some(PendingCgroup { entry, hierarchies }) = pending.take() else {
        return Ok(());
    };
    let mut line = String::new();
    std::io::BufReader::new(&entry.ready).read_line(&mut line).map_err(Error::Sync)?;
    if line.trim_end() != "ok" {
        return Err(Error::CgroupsNotReady);
    }
    hierarchies.enter(&entry.path)?;
    Ok(())
}

/// Everything the child needs, prepared by the shim before clone.
pub struct Context<'a> {
    pub spec: &'a Spec,
    /// `None` without a cgroup, or on cgroup v2, where the shim moves the init in before it
    /// starts.
    pub cgroup: Option<CgroupEntry>,
    /// The spec asks for a new cgroup namespace, which the init makes once in its cgroups (it
    /// was cloned without one).
    pub new_cgroup_namespace: bool,
    pub rootfs: rootfs::Source<'a>,
    pub plan: &'a namespaces::Plan,
    /// The read end of the stdin fifo; `None`: /dev/null.
    pub stdin: Option<OwnedFd>,
    pub stdout: OwnedFd,
    pub stderr: OwnedFd,
    /// `process.terminal`: a socket to the shim. The init opens a terminal inside the container
    /// (on its own devpts, so `tty` and `ttyname` see /dev/pts/0, as with runc), sends the
    /// master over it, and uses the slave as stdin, stdout and stderr and as its controlling
    /// terminal in a session of its own; `stdin`, `stdout` and `stderr` are then unused.
    pub terminal: Option<OwnedFd>,
    /// The start fifo, opened read-write so a read blocks until `start` writes a byte.
    pub start: std::fs::File,
    /// The spec's hooks (the init runs createContainer and startContainer itself).
    pub hooks: Option<&'a oci_spec::runtime::Hooks>,
    /// The state hooks see, less status and pid (which the init fills in).
    pub hook_state: State,
    /// Where a startContainer hook failure is reported to `start` (see `Dir::start_status`).
    pub start_status: Option<std::fs::File>,
    /// Fds 3 to 2 + N are passed to the container's process (see [`Prepared::exec`]).
    pub preserve_fds: u32,
    /// Move the rootfs onto / and chroot instead of pivot_root.
    pub no_pivot: bool,
    /// The init outlives its creator once set up (no parent death signal after `ready`).
    pub detached: bool,
    /// Added to the process's environment.
    pub extra_env: &'a [String],
    /// The container's cgroups path (the spec's, or the default one).
    pub cgroups_path: Option<&'a Path>,
    /// With SCMP_ACT_NOTIFY in the profile: a socket to the creator for the filter's listener.
    pub seccomp_listener: Option<OwnedFd>,
    /// The user namespace joined by path was joined before the clone (by the bridge process of
    /// `launch::clone_in_joined_userns`): the init is in it already.
    pub userns_joined: bool,
}

/// What the init needs from the shim at its two synchronisation points.
pub trait Parent {
    /// The mounts are in place and pivot_root has not happened: the shim has applied the cgroup
    /// limits and runs the hooks that belong in the runtime namespace (prestart, createRuntime).
    /// Returns once they succeeded; createContainer hooks run next.
    fn runtime_hooks(&mut self) -> std::io::Result<()>;
    /// Setup succeeded; the init now blocks on the start fifo.
    fn ready(&mut self) -> std::io::Result<()>;
}

/// Runs the init up to exec. Returns only on error (the caller reports it and exits).
pub fn run(ctx: Context<'_>, parent: &mut dyn Parent) -> Error {
    match setup_and_exec(ctx, parent) {
        Ok(never) => match never {},
        Err(e) => e,
    }
}

enum Never {}

/// The state for hooks the init runs: the pid as the container sees it (the spec's rule for
/// hooks in the container namespace).
fn state(template: &State, status: Status) -> State {
    State { status, pid: nix::unistd::getpid().as_raw(), ..template.clone() }
}

fn setup_and_exec(mut ctx: Context<'_>, parent: &mut dyn Parent) -> Result<Never> {
    let spec = ctx.spec;
    let process = spec.process().as_ref().ok_or(Error::NotFound(String::new()))?;
    let with_env;
    let process = match ctx.extra_env.is_empty() {
        true => process,
        false => {
            let mut p = process.clone();
            p.env_mut().get_or_insert_with(Vec::new).extend(ctx.extra_env.iter().cloned());
            with_env = p;
            &with_env
        }
    };
    let new_userns = ctx.plan.clone_flags.contains(nix::sched::CloneFlags::CLONE_NEWUSER);
    let joins_userns = ctx.plan.join_in_child.iter().any(|(f, _)| *f == nix::sched::CloneFlags::CLONE_NEWUSER);
    // Cloned into a user namespace, the init is its root once the creator has written the maps
    // (before it let the init go). Before the parent death signal: a change of uid clears it.
    if new_userns {
        become_root_of_user_namespace()?;
    }
    // A user namespace joined by path comes first; it also takes the host's privileges away.
    if joins_userns {
        if !ctx.userns_joined {
            namespaces::join(&ctx.plan.join_in_child[..1])?;
        }
        become_root_of_user_namespace()?;
    }
    crate::sys::set_parent_death_signal().map_err(sys("set parent death signal"))?;
    // Nothing may ptrace or read /proc/<pid>/fd of the init while it holds host handles (as
    // runc's init, since CVE-2016-9962); exec makes the container's process dumpable again.
    nix::sys::prctl::set_dumpable(false).map_err(sys("make the init non-dumpable"))?;
    // While it may still raise it (lowering it needs no privilege, raising it CAP_SYS_RESOURCE
    // in the host's user namespace: in a user namespace of its own, its creator wrote it).
    if let (Some(adj), false) = (process.oom_score_adj(), new_userns || joins_userns) {
        std::fs::write("/proc/self/oom_score_adj", adj.to_string()).map_err(Error::OomScoreAdj)?;
    }
    namespaces::join(&ctx.plan.join_in_child[usize::from(joins_userns)..])?;
    let mut cgroup = match ctx.cgroup.take() {
        Some(entry) => Some(PendingCgroup { hierarchies: cgroups::Hierarchies::open()?, entry }),
        None => None,
    };
    if ctx.new_cgroup_namespace {
        enter_cgroups(&mut cgroup)?;
        nix::sched::unshare(nix::sched::CloneFlags::CLONE_NEWCGROUP).map_err(sys("create a cgroup namespace"))?;
    }

    let devnull = std::fs::File::open("/dev/null").map_err(Error::Start)?;
    let propagation = match spec.linux().as_ref().and_then(|l| l.rootfs_propagation().as_deref()) {
        Some("slave") | Some("rslave") => MsFlags::MS_SLAVE,
        Some("shared") | Some("rshared") => MsFlags::MS_SHARED,
        _ => MsFlags::MS_PRIVATE,
    };
    // Without a mount namespace of its own (runc allows it) the mounts are the host's.
    let own_mounts = ctx.plan.clone_flags.contains(nix::sched::CloneFlags::CLONE_NEWNS);
    let source = std::mem::replace(&mut ctx.rootfs, rootfs::Source::Dir(Path::new("/")));
    let root = rootfs::prepare(source, propagation, own_mounts)?;
    let cgroupns = ctx.plan.clone_flags.contains(nix::sched::CloneFlags::CLONE_NEWCGROUP)
        || ctx.plan.join_in_child.iter().any(|(f, _)| *f == nix::sched::CloneFlags::CLONE_NEWCGROUP);
    for m in spec.mounts().iter().flatten() {
        if m.typ().as_deref() == Some("cgroup") {
            // It shows the cgroups the init is in: only now does it wait for them.
            enter_cgroups(&mut cgroup)?;
            let flags = rootfs::parse_options(m.options().as_deref().unwrap_or_default()).flags;
            crate::cgroupfs::mount(&root, m.destination(), flags, cgroupns, ctx.cgroups_path)?;
            continue;
        }
        rootfs::mount_one(&root, m)?;
    }
    if spec
        .mounts()
        .iter()
        .flatten()
        .any(|m| m.destination() == Path::new("/dev") && m.typ().as_deref() == Some("tmpfs"))
    {
        let devices = spec.linux().as_ref().and_then(|l| l.devices().clone()).unwrap_or_default();
        rootfs::populate_dev(&root, &devices, new_userns || joins_userns)?;
    }
    if hooks::any(ctx.hooks, &[Point::Prestart, Point::CreateRuntime, Point::CreateContainer]) {
        enter_cgroups(&mut cgroup)?;
        parent.runtime_hooks().map_err(Error::Sync)?;
    }
    hooks::run_all(ctx.hooks, Point::CreateContainer, &state(&ctx.hook_state, Status::Creating), Some(&root))?;
    match (own_mounts, ctx.no_pivot) {
        (false, _) => rootfs::chroot(&root)?,
        (true, true) => rootfs::move_root(&root)?,
        (true, false) => rootfs::pivot(&root)?,
    }
    // Before /proc/sys is made read-only (runc's order).
    for (key, value) in spec.linux().as_ref().and_then(|l| l.sysctl().as_ref()).into_iter().flatten() {
        let path = Path::new("/proc/sys").join(key.replace('.', "/"));
        std::fs::write(&path, value.as_bytes()).map_err(|source| Error::Sysctl { key: key.clone(), source })?;
    }
    rootfs::harden(spec, own_mounts)?;

    if ctx.plan.clone_flags.contains(nix::sched::CloneFlags::CLONE_NEWUTS) {
        if let Some(h) = spec.hostname() {
            nix::unistd::sethostname(h).map_err(sys("set hostname"))?;
        }
        if let Some(d) = spec.domainname() {
            crate::sys::set_domainname(d).map_err(sys("set domainname"))?;
        }
    }
    let hardening = prepare_process(spec, process)?;
    enter_cgroups(&mut cgroup)?;
    let mut prepared = hardening.apply()?;
    // SCMP_ACT_NOTIFY: the listener goes to the creator, which hands it to `listenerPath`.
    if let (Some(sock), Some(fd)) = (&ctx.seccomp_listener, prepared.listener.take()) {
        crate::sys::send_fd(std::os::fd::AsFd::as_fd(sock), std::os::fd::AsFd::as_fd(&fd))
            .map_err(sys("pass the seccomp listener to the runtime"))?;
    }

    let slave = match &ctx.terminal {
        Some(sock) => {
            let errno = |e: std::io::Error| nix::errno::Errno::from_raw(e.raw_os_error().unwrap_or(libc::EIO));
            let (master, slave) = crate::sys::open_pty(None).map_err(errno).map_err(sys("open a terminal"))?;
            crate::sys::send_fd(std::os::fd::AsFd::as_fd(sock), std::os::fd::AsFd::as_fd(&master))
                .map_err(sys("pass the terminal to the shim"))?;
            Some(slave)
        }
        None => None,
    };
    let stdin = ctx.stdin.as_ref().map_or(devnull.as_raw_fd(), |fd| fd.as_raw_fd());
    let (stdin, stdout, stderr) = match &slave {
        Some(t) => (t.as_raw_fd(), t.as_raw_fd(), t.as_raw_fd()),
        None => (stdin, ctx.stdout.as_raw_fd(), ctx.stderr.as_raw_fd()),
    };
    nix::unistd::dup2(stdin, 0).map_err(sys("set up stdin"))?;
    nix::unistd::dup2(stdout, 1).map_err(sys("set up stdout"))?;
    nix::unistd::dup2(stderr, 2).map_err(sys("set up stderr"))?;
    if slave.is_some() {
        nix::unistd::setsid().map_err(sys("start a session for the terminal"))?;
        crate::sys::set_controlling_terminal(0).map_err(sys("set the controlling terminal"))?;
    }
    if ctx.detached {
        crate::sys::clear_parent_death_signal().map_err(sys("clear the parent death signal"))?;
    }
    parent.ready().map_err(Error::Start)?;
    let mut byte = [0u8; 1];
    ctx.start.read_exact(&mut byte).map_err(Error::Start)?;
    if let Some(mut status) = ctx.start_status.take() {
        if let Err(e) = hooks::run_all(ctx.hooks, Point::StartContainer, &state(&ctx.hook_state, Status::Created), None)
        {
            let msg = hooks::chain(&e);
            let _ = writeln!(status, "error: {msg}");
            let _ = writeln!(std::io::stderr(), "kaji-runtime: {msg}");
            return Err(e.into());
        }
    }
    let err = prepared.exec(ctx.preserve_fds);
    let _ = std::io::stderr().write_all(b"kaji-runtime: exec failed\n");
    Err(err)
}

/// In a user namespace just entered (cloned into, or joined): uid and gid 0 of that namespace,
/// as runc's init does, so that what it makes there (mount points, /dev) belongs to a mapped
/// owner. Its capabilities in the namespace stay.
pub fn become_root_of_user_namespace() -> Result<()> {
    let (root_u, root_g) = (Uid::from_raw(0), Gid::from_raw(0));
    nix::unistd::setresgid(root_g, root_g, root_g).map_err(sys("become gid 0 of the user namespace"))?;
    nix::unistd::setresuid(root_u, root_u, root_u).map_err(sys("become uid 0 of the user namespace"))?;
    Ok(())
}

/// A process ready to be exec'd: the executable found in the (container's) root, argv, envp.
pub struct Prepared {
    exe: CString,
    args: Vec<CString>,
    env: Vec<CString>,
    /// The seccomp filter's listener (SCMP_ACT_NOTIFY), for the runtime to hand to the agent
    /// at `listenerPath`; dropped at exec at the latest (it is close-on-exec).
    pub listener: Option<OwnedFd>,
}

impl Prepared {
    /// execve(2); returns only on failure. Before it: every signal back to its default action
    /// and none blocked ([`crate::sys::reset_signals`]: whatever the runtime inherited must not
    /// reach the container's process), fds 3 to 2 + `preserve_fds` passed, every fd above them
    /// close-on-exec.
    pub fn exec(&self, preserve_fds: u32) -> Error {
        let first_closed = 3 + preserve_fds as i32;
        for fd in 3..first_closed {
            if let Err(source) = crate::sys::clear_cloexec(fd) {
                return Error::Sys { op: format!("pass fd {fd}"), source };
            }
        }
        if let Err(source) = crate::sys::cloexec_from(first_closed) {
            return Error::Sys { op: format!("close fds from {first_closed} on exec"), source };
        }
        crate::sys::reset_signals();
        match nix::unistd::execve(&self.exe, &self.args, &self.env) {
            Err(source) => Error::Sys { op: format!("exec {}", self.exe.to_string_lossy()), source },
            Ok(never) => match never {},
        }
    }
}

/// The hardening a process spec asks for, resolved but not yet applied: the executable found in
/// the current root, argv, envp, and the compiled seccomp filter. Preparing changes nothing
/// about the process, so the init does it while its cgroups are still being made.
pub struct Hardening<'a> {
    process: &'a Process,
    prepared: Prepared,
    filter: Option<std::borrow::Cow<'static, seccomp::Filter>>,
}

pub fn prepare_process<'a>(spec: &Spec, process: &'a Process) -> Result<Hardening<'a>> {
    let exe = find_executable(process)?;
    let args = cstrings(process.args().iter().flatten())?;
    let env = cstrings(process.env().iter().flatten())?;
    let filter = match spec.linux().as_ref().and_then(|l| l.seccomp().as_ref()) {
        Some(profile) => Some(seccomp::filter_for(profile)?),
        None => None,
    };
    Ok(Hardening { process, prepared: Prepared { exe, args, env, listener: None }, filter })
}

impl Hardening<'_> {
    /// Applies it to the calling process in the order runc does: rlimits, seccomp (before
    /// dropping capabilities unless no_new_privs lets an unprivileged process load it), cwd,
    /// user and groups, capabilities, no_new_privs.
    pub fn apply(self) -> Result<Prepared> {
        let process = self.process;
        for rl in process.rlimits().iter().flatten() {
            setrlimit(resource(rl.typ()), rl.soft(), rl.hard()).map_err(sys(format!("set rlimit {}", rl.typ())))?;
        }
        let nnp = process.no_new_privileges().unwrap_or(false);
        let mut prepared = self.prepared;
        // Without no_new_privs, loading a filter needs CAP_SYS_ADMIN: do it before dropping caps.
        if let (Some(f), false) = (&self.filter, nnp) {
            prepared.listener = seccomp::load(f)?;
        }
        let cwd = PathBuf::from(process.cwd());
        nix::unistd::chdir(&cwd).map_err(sys(format!("chdir to {}", cwd.display())))?;
        set_user_and_caps(process)?;
        if nnp {
            nix::sys::prctl::set_no_new_privs().map_err(sys("set no_new_privs"))?;
        }
        if let (Some(f), true) = (&self.filter, nnp) {
            prepared.listener = seccomp::load(f)?;
        }
        Ok(prepared)
    }
}

/// The hardening of [`Hardening`], prepared and applied at once. Used by the container init and
/// by every process exec'd into the container, so both get the same.
pub fn apply_process(spec: &Spec, process: &Process) -> Result<Prepared> {
    prepare_process(spec, process)?.apply()
}

fn cstrings<'a>(items: impl Iterator<Item = &'a String>) -> Result<Vec<CString>> {
    items.map(|s| CString::new(s.as_bytes()).map_err(|_| Error::Nul)).collect()
}

fn find_executable(process: &Process) -> Result<CString> {
    let arg0 = process.args().iter().flatten().next().cloned().unwrap_or_default();
    let candidate = |p: &Path| p.is_file().then(|| p.to_path_buf());
    let found = if arg0.contains('/') {
        candidate(Path::new(&arg0))
    } else {
        let path = process.env().iter().flatten().find_map(|e| e.strip_prefix("PATH=")).unwrap_or("/usr/bin:/bin");
        path.split(':').find_map(|dir| candidate(&Path::new(dir).join(&arg0)))
    };
    let found = found.ok_or_else(|| Error::NotFound(arg0.clone()))?;
    CString::new(found.as_os_str().as_encoded_bytes()).map_err(|_| Error::Nul)
}

fn resource(t: PosixRlimitType) -> Resource {
    match t {
        PosixRlimitType::RlimitCpu => Resource::RLIMIT_CPU,
        PosixRlimitType::RlimitFsize => Resource::RLIMIT_FSIZE,
        PosixRlimitType::RlimitData => Resource::RLIMIT_DATA,
        PosixRlimitType::RlimitStack => Resource::RLIMIT_STACK,
        PosixRlimitType::RlimitCore => Resource::RLIMIT_CORE,
        PosixRlimitType::RlimitRss => Resource::RLIMIT_RSS,
        PosixRlimitType::RlimitNproc => Resource::RLIMIT_NPROC,
        PosixRlimitType::RlimitNofile => Resource::RLIMIT_NOFILE,
        PosixRlimitType::RlimitMemlock => Resource::RLIMIT_MEMLOCK,
        PosixRlimitType::RlimitAs => Resource::RLIMIT_AS,
        PosixRlimitType::RlimitLocks => Resource::RLIMIT_LOCKS,
        PosixRlimitType::RlimitSigpending => Resource::RLIMIT_SIGPENDING,
        PosixRlimitType::RlimitMsgqueue => Resource::RLIMIT_MSGQUEUE,
        PosixRlimitType::RlimitNice => Resource::RLIMIT_NICE,
        PosixRlimitType::RlimitRtprio => Resource::RLIMIT_RTPRIO,
        PosixRlimitType::RlimitRttime => Resource::RLIMIT_RTTIME,
    }
}

/// Converts OCI capability names to the `caps` crate's (both use the kernel's CAP_* names).
pub fn to_caps(set: &std::collections::HashSet<Capability>) -> CapsHashSet {
    set.iter()
        .filter_map(|c| serde_json::to_value(c).ok())
        .filter_map(|v| v.as_str().and_then(|s| s.parse::<caps::Capability>().ok()))
        .collect()
}

fn set_user_and_caps(process: &Process) -> Result<()> {
    let user = process.user();
    let caps = process.capabilities().as_ref();
    let get = |f: fn(&oci_spec::runtime::LinuxCapabilities) -> &Option<std::collections::HashSet<Capability>>| {
        caps.and_then(|c| f(c).as_ref()).map(to_caps).unwrap_or_default()
    };
    let bounding = get(|c| c.bounding());
    // The bounding set can only shrink, and shrinking needs CAP_SETPCAP, which we still hold.
    for cap in caps::read(None, CapSet::Bounding).map_err(Error::Caps)? {
        if !bounding.contains(&cap) {
            caps::drop(None, CapSet::Bounding, cap).map_err(Error::Caps)?;
        }
    }
    nix::sys::prctl::set_keepcaps(true).map_err(sys("keep capabilities across setuid"))?;
    let groups: Vec<Gid> = user.additional_gids().iter().flatten().map(|g| Gid::from_raw(*g)).collect();
    nix::unistd::setgroups(&groups).map_err(sys("set additional gids"))?;
    nix::unistd::setresgid(Gid::from_raw(user.gid()), Gid::from_raw(user.gid()), Gid::from_raw(user.gid()))
        .map_err(sys(format!("set gid {}", user.gid())))?;
    nix::unistd::setresuid(Uid::from_raw(user.uid()), Uid::from_raw(user.uid()), Uid::from_raw(user.uid()))
        .map_err(sys(format!("set uid {}", user.uid())))?;
    nix::sys::prctl::set_keepcaps(false).map_err(sys("reset keepcaps"))?;
    // Effective must stay a subset of permitted at every step: shrink it first.
    caps::set(None, CapSet::Effective, &get(|c| c.effective())).map_err(Error::Caps)?;
    caps::set(None, CapSet::Permitted, &get(|c| c.permitted())).map_err(Error::Caps)?;
    caps::set(None, CapSet::Inheritable, &get(|c| c.inheritable())).map_err(Error::Caps)?;
    caps::clear(None, CapSet::Ambient).map_err(Error::Caps)?;
    // Best effort, as runc: the kernel refuses (EPERM) an ambient capability that is not both
    // permitted and inheritable, and `runc spec` lists ambient capabilities it does not make
    // inheritable; such a spec still runs, with the ambient capabilities it can have.
    for cap in get(|c| c.ambient()) {
        let _ = caps::raise(None, CapSet::Ambient, cap);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn oci_capability_names_map_to_kernel_capabilities() {
        let set = crate::spec::default_capabilities();
        let mapped = to_caps(&set);
        assert_eq!(mapped.len(), set.len());
        assert!(mapped.contains(&caps::Capability::CAP_NET_BIND_SERVICE));
    }
}
