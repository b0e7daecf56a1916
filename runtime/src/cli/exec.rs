//! `exec`: a command in a running container, with runc's flags. The native backend runs the
//! `nsenter` helper with our stdio (or a terminal opened inside the container, whose master goes
//! to `--console-socket` or is bridged to ours); without `--detach` we wait for it, forwarding
//! signals, and exit with its code; with it, the command is left to our caller's reaper.

use std::io::{BufRead, BufReader};
use std::os::fd::{AsFd, OwnedFd};
use std::path::PathBuf;
use std::process::Command;

use anyhow::{bail, Context};
use clap::Args;
use nix::fcntl::OFlag;
use nix::unistd::Pid;
use oci_spec::runtime::{Capability, Process};

use super::foreground::{self, Bridge, Signals};
use super::Global;
use crate::state::{Dir, Status};
use crate::{nsenter, spec, sys, ExecOptions};

#[derive(Args, Debug, Clone)]
pub struct ExecArgs {
    pub id: String,
    /// The command and its arguments (without --process).
    #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
    pub command: Vec<String>,
    /// A unix socket to send the master of the command's terminal to.
    #[arg(long)]
    pub console_socket: Option<PathBuf>,
    /// Working directory in the container.
    #[arg(long)]
    pub cwd: Option<String>,
    /// Environment variables (KEY=value), added to the container's.
    #[arg(long, short)]
    pub env: Vec<String>,
    /// Run on a new terminal.
    #[arg(long, short)]
    pub tty: bool,
    /// uid[:gid] to run as.
    #[arg(long, short)]
    pub user: Option<String>,
    /// Additional gids.
    #[arg(long = "additional-gids", short = 'g')]
    pub additional_gids: Vec<u32>,
    /// An OCI process JSON file describing the command (the other process flags are ignored).
    #[arg(long, short)]
    pub process: Option<PathBuf>,
    /// Exit once the command runs, leaving it to our caller's reaper.
    #[arg(long, short)]
    pub detach: bool,
    /// Write the command's pid here.
    #[arg(long)]
    pub pid_file: Option<PathBuf>,
    /// Accepted for runc compatibility (no SELinux here).
    #[arg(long)]
    pub process_label: Option<String>,
    /// Accepted for runc compatibility (no AppArmor here).
    #[arg(long)]
    pub apparmor: Option<String>,
    /// Set no_new_privs for the command.
    #[arg(long)]
    pub no_new_privs: bool,
    /// Add a capability (e.g. CAP_KILL) to the command's sets.
    #[arg(long, short)]
    pub cap: Vec<String>,
    /// Pass fds 3 to 2 + N to the command.
    #[arg(long, default_value_t = 0)]
    pub preserve_fds: u32,
    /// Run it in this sub-cgroup of the container's: [controller:]path.
    #[arg(long)]
    pub cgroup: Option<String>,
    /// Allow exec into a paused container.
    #[arg(long)]
    pub ignore_paused: bool,
}

pub fn exec(g: &Global, a: &ExecArgs) -> anyhow::Result<i32> {
    let rt = g.backend()?;
    let st = rt.state(&a.id)?;
    match st.status {
        Status::Running => {}
        Status::Paused if a.ignore_paused => {}
        Status::Paused => bail!("cannot exec in a paused container (use --ignore-paused to override)"),
        other => bail!("cannot exec in a {} container", format!("{other:?}").to_lowercase()),
    }
    let process = process(a, &st.bundle)?;
    let tty = process.terminal().unwrap_or(false);
    match (tty, &a.console_socket) {
        (true, None) if a.detach => {
            bail!("cannot allocate tty if kaji-runtime will detach without setting console socket")
        }
        (false, Some(_)) => bail!("cannot use console socket if kaji-runtime will not detach or allocate tty"),
        _ => {}
    }
    if g.runtime != "native" {
        return through_library(rt.as_ref(), a, &process);
    }
    let console = match &a.console_socket {
        Some(p) => Some(
            std::os::unix::net::UnixStream::connect(p)
                .with_context(|| format!("failed to connect to console socket {}", p.display()))?,
        ),
        None => None,
    };
    let dir = Dir::new(&g.root, &a.id)?;
    let file = dir.path.join(format!("exec-{}-{}.json", std::process::id(), jiff::Timestamp::now().as_nanosecond()));
    std::fs::write(&file, serde_json::to_vec(&process)?).with_context(|| format!("writing {}", file.display()))?;
    let _cleanup = Remove(file.clone());
    // Blocked before the command exists (see `run`); the helper starts with none blocked.
    let signals = match a.detach {
        true => None,
        false => Some(Signals::block()?),
    };
    let (report_r, report_w) = nix::unistd::pipe2(OFlag::O_CLOEXEC).context("pipe")?;
    let first = nsenter::REPORT_FD + a.preserve_fds as i32;
    let mut fds = vec![(report_w, first)];
    let terminal_socket = match tty {
        true => {
            let (ours, theirs) = std::os::unix::net::UnixStream::pair().context("socketpair")?;
            fds.push((OwnedFd::from(theirs), first + 1));
            Some(ours)
        }
        false => None,
    };
    let mut cmd = Command::new(g.helper()?);
    cmd.arg("--root").arg(&g.root).arg("nsenter").arg("--id").arg(&a.id).arg("--process").arg(&file);
    cmd.arg("--preserve-fds").arg(a.preserve_fds.to_string());
    if tty {
        cmd.arg("--new-tty");
    }
    if a.detach {
        cmd.arg("--detach");
    }
    if let Some(c) = &a.cgroup {
        cmd.arg("--cgroup").arg(c);
    }
    let spawned = sys::spawn(&mut cmd, fds, false);
    drop(cmd);
    let mut helper = spawned.context("failed to start the exec helper")?;
    let mut report = BufReader::new(std::fs::File::from(report_r));
    let mut line = String::new();
    let _ = report.read_line(&mut line);
    let pid = match nsenter::parse_started(&line) {
        Ok(pid) => Pid::from_raw(pid),
        Err(why) => {
            let _ = helper.wait();
            bail!("{why}");
        }
    };
    let master = match terminal_socket {
        Some(sock) => {
            Some(std::fs::File::from(sys::recv_fd(sock.as_fd())?.context("the exec helper sent no terminal")?))
        }
        None => None,
    };
    let master = match (master, console) {
        (Some(m), Some(sock)) => {
            sys::send_with_fd(sock.as_fd(), b"/dev/ptmx", m.as_fd()).context("send the terminal")?;
            None
        }
        (m, _) => m,
    };
    super::create::write_pid_file(a.pid_file.as_deref(), pid.as_raw())?;
    match signals {
        // The helper exits as soon as it has reported.
        None => {
            let _ = helper.wait();
            Ok(0)
        }
        Some(signals) => {
            let child = Pid::from_raw(helper.id() as i32);
            Ok(foreground::wait(&signals, child, pid, master.map(Bridge::start)))
        }
    }
}

/// Removes a file when dropped.
struct Remove(PathBuf);

impl Drop for Remove {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// Another runtime binary: through the library's exec, our stdio copied to and from it.
fn through_library(rt: &dyn crate::ContainerRuntime, a: &ExecArgs, process: &Process) -> anyhow::Result<i32> {
    use std::io::copy;
    let tty = process.terminal().unwrap_or(false);
    let opts = ExecOptions { stdin: true, stdout: true, stderr: true, tty, size: None };
    let mut e = rt.exec(&a.id, process, &opts)?;
    let mut threads = Vec::new();
    if let Some(mut t) = e.terminal.take() {
        let mut input = t.try_clone()?;
        std::thread::spawn(move || copy(&mut std::io::stdin(), &mut input));
        threads.push(std::thread::spawn(move || copy(&mut t, &mut std::io::stdout())));
    }
    if let Some(mut i) = e.stdin.take() {
        std::thread::spawn(move || copy(&mut std::io::stdin(), &mut i));
    }
    if let Some(mut o) = e.stdout.take() {
        threads.push(std::thread::spawn(move || copy(&mut o, &mut std::io::stdout())));
    }
    if let Some(mut o) = e.stderr.take() {
        threads.push(std::thread::spawn(move || copy(&mut o, &mut std::io::stderr())));
    }
    let code = e.wait()?;
    for t in threads {
        let _ = t.join();
    }
    Ok(code)
}

/// The process to run: `--process`, or the container's own process with the flags applied, as
/// runc builds it.
fn process(a: &ExecArgs, bundle: &std::path::Path) -> anyhow::Result<Process> {
    if let Some(f) = &a.process {
        let text = std::fs::read(f).with_context(|| format!("reading {}", f.display()))?;
        let p: Process = serde_json::from_slice(&text).with_context(|| format!("invalid process {}", f.display()))?;
        if p.args().as_ref().is_none_or(|a| a.is_empty()) {
            bail!("args must not be empty");
        }
        return Ok(p);
    }
    if a.command.is_empty() {
        bail!("exec args cannot be empty");
    }
    let spec = spec::load(bundle)?;
    let mut p = spec.process().clone().context("the container's spec has no process")?;
    apply_flags(&mut p, a)?;
    Ok(p)
}

/// Pure: the exec flags over the container's process.
fn apply_flags(p: &mut Process, a: &ExecArgs) -> anyhow::Result<()> {
    p.set_args(Some(a.command.clone()));
    p.set_terminal(Some(a.tty));
    if let Some(cwd) = &a.cwd {
        p.set_cwd(cwd.into());
    }
    if !a.env.is_empty() {
        p.env_mut().get_or_insert_with(Vec::new).extend(a.env.iter().cloned());
    }
    if a.no_new_privs {
        p.set_no_new_privileges(Some(true));
    }
    if let Some(u) = &a.user {
        let (uid, gid) = match u.split_once(':') {
            Some((u, g)) => (u, Some(g)),
            None => (u.as_str(), None),
        };
        let mut user = p.user().clone();
        user.set_uid(uid.parse().with_context(|| format!("invalid uid {uid:?}"))?);
        if let Some(g) = gid {
            user.set_gid(g.parse().with_context(|| format!("invalid gid {g:?}"))?);
        }
        p.set_user(user);
    }
    if !a.additional_gids.is_empty() {
        let mut user = p.user().clone();
        user.additional_gids_mut().get_or_insert_with(Vec::new).extend(&a.additional_gids);
        p.set_user(user);
    }
    if !a.cap.is_empty() {
        let mut caps = p.capabilities().clone().unwrap_or_default();
        for name in &a.cap {
            let name = name.to_ascii_uppercase();
            let name = if name.starts_with("CAP_") { name } else { format!("CAP_{name}") };
            let cap: Capability =
                serde_json::from_value(name.clone().into()).with_context(|| format!("unknown capability {name}"))?;
            let add = |set: &Option<std::collections::HashSet<Capability>>| {
                let mut set = set.clone().unwrap_or_default();
                set.insert(cap);
                Some(set)
            };
            caps.set_bounding(add(caps.bounding()));
            caps.set_effective(add(caps.effective()));
            caps.set_permitted(add(caps.permitted()));
            // Ambient needs inheritable, which --cap does not add: only where the spec has some.
            if caps.inheritable().as_ref().is_some_and(|i| !i.is_empty()) {
                caps.set_ambient(add(caps.ambient()));
            }
        }
        p.set_capabilities(Some(caps));
    }
    if let Some(profile) = &a.apparmor {
        p.set_apparmor_profile(Some(profile.clone()));
    }
    if let Some(label) = &a.process_label {
        p.set_selinux_label(Some(label.clone()));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    fn args(line: &[&str]) -> ExecArgs {
        let argv = ["kaji-runtime", "exec"].into_iter().chain(line.iter().copied());
        match super::super::Cli::try_parse_from(argv).map(|c| c.command) {
            Ok(super::super::Verb::Exec(a)) => a,
            other => panic!("{line:?}: {other:?}"),
        }
    }

    #[test]
    fn flags_change_the_containers_process_as_runc_does() -> anyhow::Result<()> {
        let mut p = crate::spec::default_spec(&Default::default())?.process().clone().expect("process");
        let a =
            args(&["-e", "A=1", "--cwd", "/tmp", "-u", "7:8", "-g", "9", "--cap", "sys_admin", "-t", "c", "ls", "-l"]);
        apply_flags(&mut p, &a)?;
        assert_eq!(p.args().clone().unwrap_or_default(), vec!["ls", "-l"]);
        assert_eq!(p.terminal(), Some(true));
        assert_eq!(p.cwd(), &PathBuf::from("/tmp"));
        assert!(p.env().as_ref().is_some_and(|e| e.contains(&"A=1".to_string())));
        assert_eq!((p.user().uid(), p.user().gid()), (7, 8));
        assert_eq!(p.user().additional_gids().clone().unwrap_or_default(), vec![9]);
        let caps = p.capabilities().clone().expect("caps");
        assert!(caps.bounding().as_ref().is_some_and(|b| b.contains(&Capability::SysAdmin)));
        assert!(caps.effective().as_ref().is_some_and(|b| b.contains(&Capability::SysAdmin)));
        assert!(!caps.ambient().as_ref().is_some_and(|b| b.contains(&Capability::SysAdmin)));
        assert!(apply_flags(&mut p, &args(&["-u", "x", "c", "ls"])).is_err());
        Ok(())
    }
}
