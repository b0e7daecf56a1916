//! The exec helper (`kaji-runtime nsenter`, like `runc init` for `runc exec`): a freshly exec'd,
//! single-threaded process that joins a running container's cgroup, namespaces and root, forks,
//! and in the child applies the process spec's hardening and execs the command. It stays the
//! command's parent and exits with its status (128 + n for signal n).
//!
//! Why a re-exec'd helper: the agent is multi-threaded (tokio). setns(2) into a mount namespace
//! refuses multi-threaded callers, and a fork of a multi-threaded process may inherit locks
//! other threads held. Why the fork: joining a PID namespace only applies to children.
//!
//! The caller hands the command's stdio as fds 0–2 and a report pipe as fd 3, on which the
//! helper writes `ok <pid>` once the command runs (or `error: <why>`), then `exit <code>`.

use std::fs::File;
use std::io::{Read, Write};
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::os::unix::fs::MetadataExt;
use std::os::unix::net::UnixStream;
use std::path::PathBuf;

use nix::fcntl::{FcntlArg, FdFlag, OFlag};
use nix::sched::CloneFlags;
use nix::sys::wait::{waitpid, WaitStatus};
use nix::unistd::Pid;
use oci_spec::runtime::Process;

use crate::state::{self, Dir, Record, State, Status};
use crate::sys::{self, Forked};
use crate::{cgroups, init, seccomp, spec};

/// The fd on which the helper reports to its caller (3 + N when N fds are passed through).
pub const REPORT_FD: i32 = 3;

/// Arguments of the hidden `nsenter` subcommand.
#[derive(Debug, Clone, Default)]
pub struct Args {
    pub root: PathBuf,
    pub id: String,
    /// The OCI process (JSON) to run.
    pub process: PathBuf,
    /// stdin is a terminal that becomes the command's controlling terminal.
    pub tty: bool,
    /// Open a terminal inside the container (on its devpts, as `runc exec -t` does) and send
    /// its master over the socket on fd 4 + `preserve_fds`; the command's stdio is its slave.
    pub new_tty: bool,
    /// Fds 3 to 2 + N are passed to the command; the report pipe is then fd 3 + N.
    pub preserve_fds: u32,
    /// Exit once the command runs: it is left to our caller's reaper (`runc exec --detach`).
    pub detach: bool,
    /// Run the command in this sub-cgroup of the container's (`[controller:]path`).
    pub cgroup: Option<String>,
}

/// The namespaces an exec'd process joins, in the order they are joined: the user namespace
/// first (it owns the others), the mount namespace last, because its files (/proc/<pid>/ns/*)
/// are the host's.
const NAMESPACES: [(&str, CloneFlags); 7] = [
    ("user", CloneFlags::CLONE_NEWUSER),
    ("cgroup", CloneFlags::CLONE_NEWCGROUP),
    ("ipc", CloneFlags::CLONE_NEWIPC),
    ("uts", CloneFlags::CLONE_NEWUTS),
    ("net", CloneFlags::CLONE_NEWNET),
    ("pid", CloneFlags::CLONE_NEWPID),
    ("mnt", CloneFlags::CLONE_NEWNS),
];

type Failure = String;

fn chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut cur = e.source();
    while let Some(c) = cur {
        s.push_str(": ");
        s.push_str(&c.to_string());
        cur = c.source();
    }
    s
}

/// Entry point of `kaji-runtime nsenter`; returns the process exit code to exit with.
pub fn main(args: Args) -> i32 {
    let report_fd = REPORT_FD + args.preserve_fds as i32;
    let Some(fd) = sys::take_inherited_fd(report_fd) else {
        eprintln!("kaji-runtime nsenter: no report pipe on fd {report_fd} (this verb is run by the runtime)");
        return 255;
    };
    let _ = nix::fcntl::fcntl(fd.as_raw_fd(), FcntlArg::F_SETFD(FdFlag::FD_CLOEXEC));
    let mut report = File::from(fd);
    let console = match args.new_tty {
        true => match sys::take_inherited_fd(report_fd + 1) {
            Some(c) => {
                let _ = nix::fcntl::fcntl(c.as_raw_fd(), FcntlArg::F_SETFD(FdFlag::FD_CLOEXEC));
                Some(c)
            }
            None => {
                let _ = writeln!(report, "error: no terminal socket on fd {}", report_fd + 1);
                return 255;
            }
        },
        false => None,
    };
    match run(&args, &mut report, console) {
        Ok(code) => code,
        Err(msg) => {
            let _ = writeln!(report, "error: {msg}");
            255
        }
    }
}

/// The namespace files of `pid` that differ from ours (joining our own is pointless, and
/// hostNetwork-style containers share some with the host).
fn namespaces_of(pid: i32) -> Result<Vec<(File, CloneFlags)>, Failure> {
    let mut out = Vec::new();
    for (name, flag) in NAMESPACES {
        let theirs = format!("/proc/{pid}/ns/{name}");
        let ours = format!("/proc/self/ns/{name}");
        let same = match (std::fs::metadata(&theirs), std::fs::metadata(&ours)) {
            (Ok(a), Ok(b)) => a.ino() == b.ino() && a.dev() == b.dev(),
            (Err(e), _) => return Err(format!("failed to stat {theirs}: {e}")),
            (_, Err(_)) => false,
        };
        if !same {
            out.push((File::open(&theirs).map_err(|e| format!("failed to open {theirs}: {e}"))?, flag));
        }
    }
    Ok(out)
}

/// The root directory of `pid` (what `/` is to it), opened from the outside.
///
/// Joining a mount namespace leaves us at that namespace's root (the topmost mount on it), not
/// at the container's: the two are the same only when the container's init pivoted from the
/// namespace's root. An init created by a runtime that was itself chrooted (a node agent in a
/// chroot, `chroot /host` style) pivots from its chroot, so its rootfs ends up mounted on the
/// chroot's directory while the namespace's root stays the host's `/`; and an init without a
/// mount namespace of its own is chrooted into its rootfs. In both, a command that only joined
/// the namespaces would run the host's binaries on the host's files. So, as `nsenter --root`
/// does, the command is chrooted into the init's own root.
fn root_of(pid: i32) -> Result<File, Failure> {
    let path = format!("/proc/{pid}/root");
    File::open(&path).map_err(|e| format!("failed to open {path}: {e}"))
}

/// Makes `root` (a directory opened by [`root_of`]) our root and working directory. After the
/// namespaces are joined: the directory is then one of the namespace we are in.
fn enter_root(root: &File) -> Result<(), Failure> {
    nix::unistd::fchdir(root.as_raw_fd()).map_err(|e| format!("failed to enter the container's root: {e}"))?;
    nix::unistd::chroot(".").map_err(|e| format!("failed to chroot into the container's root: {e}"))
}

fn run(args: &Args, report: &mut File, console: Option<OwnedFd>) -> Result<i32, Failure> {
    let dir = Dir::new(&args.root, &args.id).map_err(|e| chain(&e))?;
    let record = state::read_json::<Record>(&dir.record())
        .map_err(|e| chain(&e))?
        .ok_or_else(|| format!("container {} does not exist", args.id))?;
    let text = std::fs::read(&args.process).map_err(|e| format!("failed to read {}: {e}", args.process.display()))?;
    let process: Process =
        serde_json::from_slice(&text).map_err(|e| format!("invalid process {}: {e}", args.process.display()))?;
    let spec = spec::load(&record.bundle).map_err(|e| chain(&e))?;
    if process.args().as_ref().is_none_or(|a| a.is_empty()) {
        return Err("process.args is empty".into());
    }
    // Pin the init while its namespace files are opened: a reused pid would be someone else's.
    let pidfd =
        sys::pidfd_open(Pid::from_raw(record.pid)).map_err(|e| format!("container {} is not running: {e}", args.id))?;
    let namespaces = namespaces_of(record.pid)?;
    let root = root_of(record.pid)?;
    if nix::sys::signal::kill(Pid::from_raw(record.pid), None).is_err() {
        return Err(format!("container {} is not running", args.id));
    }
    drop(pidfd);
    // SCMP_ACT_NOTIFY: the command's listener goes to the agent, as the init's did. Connected
    // now, while listenerPath (a host path) is reachable.
    let notify = spec.linux().as_ref().and_then(|l| l.seccomp().as_ref()).filter(|p| seccomp::uses_notify(p));
    let agent = match notify {
        Some(profile) => Some(seccomp::connect_listener(profile).map_err(|e| chain(&e))?),
        None => None,
    };
    let (listener_ours, listener_theirs) = match notify {
        Some(_) => {
            let (a, b) =
                UnixStream::pair().map_err(|e| format!("failed to create the seccomp listener socket: {e}"))?;
            (Some(a), Some(OwnedFd::from(b)))
        }
        None => (None, None),
    };
    if let Some(path) = &record.cgroups_path {
        let path = match args.cgroup.as_deref() {
            // runc's "[controller:]path": the sub-cgroup in every hierarchy that has it.
            Some(sub) => path.join(sub.rsplit_once(':').map_or(sub, |(_, p)| p).trim_start_matches('/')),
            None => path.clone(),
        };
        cgroups::join(&path, nix::unistd::getpid()).map_err(|e| chain(&e))?;
    }
    for (file, flag) in &namespaces {
        nix::sched::setns(file, *flag).map_err(|e| format!("failed to join {flag:?} namespace: {e}"))?;
        if *flag == CloneFlags::CLONE_NEWUSER {
            crate::init::become_root_of_user_namespace().map_err(|e| chain(&e))?;
        }
    }
    drop(namespaces);
    enter_root(&root)?;
    drop(root);
    let (err_r, err_w) = nix::unistd::pipe2(OFlag::O_CLOEXEC).map_err(|e| format!("failed to create pipe: {e}"))?;
    let me = nix::unistd::getpid();
    match sys::fork().map_err(|e| format!("failed to fork: {e}"))? {
        Forked::Child => {
            drop(err_r);
            drop(listener_ours);
            let err = child(&spec, &process, args, console, me, listener_theirs);
            let mut w = File::from(err_w);
            let _ = w.write_all(err.as_bytes());
            std::process::exit(255);
        }
        Forked::Parent(pid) => {
            drop((err_w, listener_theirs));
            if let (Some(sock), Some(agent), Some(profile)) = (&listener_ours, &agent, notify) {
                // Sent once the filter is loaded; nothing if it failed before (EOF at its exit).
                if let Ok(Some(fd)) = sys::recv_fd(std::os::fd::AsFd::as_fd(sock)) {
                    let running = State {
                        oci_version: state::OCI_VERSION.into(),
                        id: record.id.clone(),
                        status: Status::Running,
                        pid: record.pid,
                        bundle: record.bundle.clone(),
                        created: record.created.clone(),
                        annotations: record.annotations.clone(),
                        exit: None,
                    };
                    let message = seccomp::process_state(profile, pid.as_raw(), &running);
                    if let Err(e) = seccomp::send_to_listener(profile, agent, &message, fd.as_fd()) {
                        let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGKILL);
                        let _ = waitpid(pid, None);
                        return Err(chain(&e));
                    }
                }
            }
            // The command alone holds its stdio now: its exit gives the caller EOF.
            if let Ok(null) = File::options().read(true).write(true).open("/dev/null") {
                for fd in 0..3 {
                    let _ = nix::unistd::dup2(null.as_raw_fd(), fd);
                }
            }
            let mut why = String::new();
            let _ = File::from(err_r).read_to_string(&mut why);
            if !why.is_empty() {
                let _ = waitpid(pid, None);
                return Err(why);
            }
            let _ = writeln!(report, "ok {pid}");
            if args.detach {
                return Ok(0);
            }
            let code = wait(pid);
            let _ = writeln!(report, "exit {code}");
            Ok(code)
        }
    }
}

/// Shell convention: the exit code, or 128 + the signal that ended it.
fn wait(pid: Pid) -> i32 {
    loop {
        match waitpid(pid, None) {
            Ok(WaitStatus::Exited(_, c)) => return c,
            Ok(WaitStatus::Signaled(_, s, _)) => return 128 + s as i32,
            Err(nix::errno::Errno::EINTR) | Ok(_) => continue,
            Err(_) => return 255,
        }
    }
}

/// In the forked child, now inside the container's PID namespace: become a session leader
/// (with the terminal as controlling terminal), harden as the spec says, exec. Returns only
/// the reason it failed.
fn child(
    spec: &oci_spec::runtime::Spec,
    process: &Process,
    args: &Args,
    console: Option<OwnedFd>,
    parent: Pid,
    listener: Option<OwnedFd>,
) -> String {
    // A detached command outlives us; otherwise it must not outlive its helper.
    if !args.detach {
        if let Err(e) = sys::set_parent_death_signal() {
            return format!("failed to set parent death signal: {e}");
        }
    }
    // Seen from inside a PID namespace it joined, the parent (outside) is pid 0.
    let ppid = nix::unistd::getppid();
    if ppid != parent && ppid.as_raw() != 0 {
        return "the exec helper exited".into();
    }
    if let Some(sock) = console {
        // On the container's own devpts: `tty` in it shows /dev/pts/N.
        let (master, slave) = match sys::open_pty(None) {
            Ok(p) => p,
            Err(e) => return format!("failed to open a terminal in the container: {e}"),
        };
        if let Err(e) = sys::send_fd(std::os::fd::AsFd::as_fd(&sock), std::os::fd::AsFd::as_fd(&master)) {
            return format!("failed to pass the terminal: {e}");
        }
        drop((master, sock));
        for fd in 0..3 {
            if let Err(e) = nix::unistd::dup2(slave.as_raw_fd(), fd) {
                return format!("failed to set up the terminal as stdio: {e}");
            }
        }
    }
    if let Err(e) = nix::unistd::setsid() {
        return format!("failed to start a session: {e}");
    }
    if args.tty || args.new_tty {
        if let Err(e) = sys::set_controlling_terminal(0) {
            return format!("failed to set the controlling terminal: {e}");
        }
    }
    match init::apply_process(spec, process) {
        Ok(mut prepared) => {
            if let (Some(sock), Some(fd)) = (listener, prepared.listener.take()) {
                if let Err(e) = sys::send_fd(std::os::fd::AsFd::as_fd(&sock), std::os::fd::AsFd::as_fd(&fd)) {
                    return format!("failed to pass the seccomp listener: {e}");
                }
            }
            chain(&prepared.exec(args.preserve_fds))
        }
        Err(e) => chain(&e),
    }
}

/// Reads the helper's first report line: the command's pid, or why it did not start.
pub fn parse_started(line: &str) -> Result<i32, String> {
    let line = line.trim_end();
    if let Some(pid) = line.strip_prefix("ok ") {
        return pid.parse().map_err(|_| format!("malformed report {line:?}"));
    }
    match line.strip_prefix("error: ") {
        Some(why) => Err(why.to_string()),
        None if line.is_empty() => Err("the exec helper exited without reporting".into()),
        None => Err(format!("malformed report {line:?}")),
    }
}

/// Reads the helper's last report line: the command's exit code.
pub fn parse_exit(line: &str) -> Option<i32> {
    line.trim_end().strip_prefix("exit ")?.parse().ok()
}

/// An fd for the command's stdio that reads nothing / discards everything.
pub fn null() -> std::io::Result<OwnedFd> {
    File::options().read(true).write(true).open("/dev/null").map(OwnedFd::from)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reports_parse_into_pid_error_and_exit_code() {
        assert_eq!(parse_started("ok 42\n"), Ok(42));
        assert_eq!(
            parse_started("error: executable \"nope\" not found\n"),
            Err("executable \"nope\" not found".into())
        );
        assert!(parse_started("").is_err_and(|e| e.contains("without reporting")));
        assert!(parse_started("ok x").is_err());
        assert_eq!(parse_exit("exit 137\n"), Some(137));
        assert_eq!(parse_exit("ok 1"), None);
    }

    #[test]
    fn the_mount_namespace_is_joined_last() {
        assert_eq!(NAMESPACES.last().map(|n| n.1), Some(CloneFlags::CLONE_NEWNS));
        assert!(NAMESPACES.iter().any(|n| n.1 == CloneFlags::CLONE_NEWPID));
    }
}
