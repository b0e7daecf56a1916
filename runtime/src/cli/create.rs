//! The lifecycle verbs: `create`, `run`, `start`, `state`, `kill`, `delete`, `list`. The native
//! backend's `create` and `run` make the container in this process, with no shim and with the
//! caller's stdio (see the module above); everything else goes through the library.

use std::fmt::Write as _;
use std::os::fd::AsFd;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context};
use clap::Args;
use nix::unistd::Pid;

use super::foreground::{self, Bridge, Signals};
use super::{logging, parse_signal, Global};
use crate::launch::{self, Streams};
use crate::state::{self, Dir, Status};
use crate::{cgroups, spec, sys, ContainerRuntime, CreateOptions, Native};

#[derive(Args, Debug, Clone)]
pub struct CreateArgs {
    pub id: String,
    /// The bundle: a directory with config.json.
    #[arg(long, short, default_value = ".")]
    pub bundle: PathBuf,
    /// A unix socket to send the master of the container's terminal to (process.terminal).
    #[arg(long)]
    pub console_socket: Option<PathBuf>,
    /// Write the init's pid here.
    #[arg(long)]
    pub pid_file: Option<PathBuf>,
    /// Move the rootfs onto / and chroot instead of pivot_root (for a rootfs on a ramdisk).
    #[arg(long)]
    pub no_pivot: bool,
    /// Accepted for runc compatibility: the container keeps the caller's session keyring.
    #[arg(long)]
    pub no_new_keyring: bool,
    /// Pass fds 3 to 2 + N (after $LISTEN_FDS) to the container's process.
    #[arg(long, default_value_t = 0)]
    pub preserve_fds: u32,
    /// kaji: a shim keeps the container's stdout/stderr in this CRI-format log and records its
    /// exit code (instead of passing the caller's stdio through).
    #[arg(long)]
    pub log_path: Option<PathBuf>,
}

#[derive(Args, Debug, Clone)]
pub struct RunArgs {
    #[command(flatten)]
    pub create: CreateArgs,
    /// Start it and exit, leaving it to our caller's reaper.
    #[arg(long, short)]
    pub detach: bool,
    /// Do not delete the container after it exits.
    #[arg(long)]
    pub keep: bool,
    /// Do not become a child subreaper (for the container's processes reparented to us).
    #[arg(long)]
    pub no_subreaper: bool,
}

fn native(g: &Global) -> anyhow::Result<Native> {
    Ok(Native::new(&g.root, g.helper()?))
}

/// Whether this verb goes through the library (a shim, or another runtime binary) rather than
/// making the container here.
fn through_library(g: &Global, a: &CreateArgs) -> bool {
    g.runtime != "native" || a.log_path.is_some()
}

pub fn create(g: &Global, a: &CreateArgs) -> anyhow::Result<()> {
    if through_library(g, a) {
        let rt = g.backend()?;
        let st = rt.create(&a.id, &a.bundle, &CreateOptions { log_path: a.log_path.clone(), ..Default::default() })?;
        return write_pid_file(a.pid_file.as_deref(), st.pid);
    }
    let made = make(g, a, true)?;
    if let Err(e) = write_pid_file(a.pid_file.as_deref(), made.pid.as_raw()) {
        let _ = native(g)?.delete(&a.id, true);
        return Err(e);
    }
    Ok(())
}

/// A container made here: its init waits for `start`.
struct Made {
    pid: Pid,
    /// The terminal's master, when no console socket took it (foreground `run`).
    master: Option<std::fs::File>,
}

/// Makes the container in this process (see [`launch::native`]); `detach`: nobody here will
/// wait for it (`create`, `run -d`).
fn make(g: &Global, a: &CreateArgs, detach: bool) -> anyhow::Result<Made> {
    if g.systemd_cgroup && !Path::new("/run/systemd/system").is_dir() {
        bail!("systemd not running on this host, can't use systemd as cgroups manager");
    }
    let bundle = std::path::absolute(&a.bundle).with_context(|| format!("bad bundle {}", a.bundle.display()))?;
    let spec = spec::load(&bundle)?;
    let terminal = spec.process().as_ref().and_then(|p| p.terminal()).unwrap_or(false);
    match (terminal, &a.console_socket) {
        (true, None) if detach => {
            bail!("cannot allocate tty if kaji-runtime will detach without setting console socket")
        }
        (false, Some(_)) => bail!("cannot use console socket if kaji-runtime will not detach or allocate tty"),
        _ => {}
    }
    // Connected before anything is made: a wrong path fails the create with nothing to undo.
    let console = match &a.console_socket {
        Some(p) => Some(
            std::os::unix::net::UnixStream::connect(p)
                .with_context(|| format!("failed to connect to console socket {}", p.display()))?,
        ),
        None => None,
    };
    let (listen_fds, extra_env) = socket_activation();
    let dir = Dir::new(&g.root, &a.id)?;
    dir.create()?;
    let req = launch::Request {
        id: &a.id,
        bundle: &bundle,
        streams: Streams::Inherit,
        log_path: None,
        preserve_fds: listen_fds + a.preserve_fds,
        no_pivot: a.no_pivot,
        detached: true,
        extra_env,
    };
    let launched = match launch::native(&req, &dir) {
        Ok(l) => l,
        Err(msg) => {
            let _ = dir.remove();
            bail!("{msg}");
        }
    };
    let master = launched.terminal.map(|p| p.master);
    let master = match (master, console) {
        (Some(m), Some(sock)) => {
            if let Err(e) = sys::send_with_fd(sock.as_fd(), b"/dev/ptmx", m.as_fd()) {
                let _ = native(g)?.delete(&a.id, true);
                bail!("failed to send the terminal to the console socket: {e}");
            }
            None
        }
        (m, _) => m,
    };
    Ok(Made { pid: launched.pid, master })
}

/// `$LISTEN_FDS` (systemd socket activation) meant for us: passed on to the container's process
/// as fds 3.., with `LISTEN_FDS` and `LISTEN_PID=1` in its environment, as runc does.
fn socket_activation() -> (u32, Vec<String>) {
    let ours = std::env::var("LISTEN_PID").ok().and_then(|p| p.parse::<u32>().ok()) == Some(std::process::id());
    match std::env::var("LISTEN_FDS").ok().and_then(|n| n.parse::<u32>().ok()) {
        Some(n) if ours && n > 0 => (n, vec![format!("LISTEN_FDS={n}"), "LISTEN_PID=1".into()]),
        _ => (0, Vec::new()),
    }
}

/// Writes `pid` to `path` atomically (a temp file beside it, renamed), as runc does.
pub(super) fn write_pid_file(path: Option<&Path>, pid: i32) -> anyhow::Result<()> {
    let Some(path) = path else { return Ok(()) };
    let path = std::path::absolute(path)?;
    let name = path.file_name().context("pid file has no name")?.to_string_lossy();
    let tmp = path.with_file_name(format!(".{name}"));
    std::fs::write(&tmp, pid.to_string()).with_context(|| format!("writing {}", tmp.display()))?;
    std::fs::rename(&tmp, &path).with_context(|| format!("writing {}", path.display()))
}

pub fn run(g: &Global, a: &RunArgs) -> anyhow::Result<i32> {
    if through_library(g, &a.create) {
        let id = &a.create.id;
        let rt = g.backend()?;
        let opts = CreateOptions { log_path: a.create.log_path.clone(), ..Default::default() };
        let st = rt.create(id, &a.create.bundle, &opts)?;
        write_pid_file(a.create.pid_file.as_deref(), st.pid)?;
        rt.start(id)?;
        if a.detach {
            return Ok(0);
        }
        let exit = rt.wait(id, None)?;
        if !a.keep {
            rt.delete(id, true)?;
        }
        return Ok(exit.code);
    }
    if !a.no_subreaper {
        sys::set_child_subreaper().context("failed to become a child subreaper")?;
    }
    // Blocked before the container exists, so no signal meant for it is lost: they wait in
    // the signalfd until it runs, and are forwarded then. The init unblocks them before exec.
    let signals = match a.detach {
        true => None,
        false => Some(Signals::block()?),
    };
    let made = make(g, &a.create, a.detach)?;
    let rt = native(g)?;
    let id = &a.create.id;
    let started = write_pid_file(a.create.pid_file.as_deref(), made.pid.as_raw()).and_then(|()| Ok(rt.start(id)?));
    let result = match (started, signals) {
        (Err(e), _) => Err(e),
        (Ok(()), None) => return Ok(0),
        (Ok(()), Some(signals)) => {
            let terminal = made.master.map(Bridge::start);
            Ok(foreground::wait(&signals, made.pid, made.pid, terminal))
        }
    };
    if !a.keep || result.is_err() {
        rt.delete(id, true)?;
    }
    result
}

pub fn start(g: &Global, id: &str) -> anyhow::Result<()> {
    Ok(g.backend()?.start(id)?)
}

/// The state as `runc state` prints it: the OCI state plus `rootfs` and `owner`.
fn state_json(st: &crate::State) -> serde_json::Value {
    let mut v = serde_json::to_value(st).unwrap_or_default();
    let rootfs = spec::load(&st.bundle)
        .ok()
        .and_then(|s| spec::rootfs_path(&s, &st.bundle).ok())
        .map(|p| p.display().to_string())
        .unwrap_or_default();
    v["rootfs"] = rootfs.into();
    v["owner"] = "".into();
    v
}

pub fn state(g: &Global, id: &str) -> anyhow::Result<()> {
    let st = g.backend()?.state(id)?;
    logging::print(&format!("{}\n", serde_json::to_string_pretty(&state_json(&st))?));
    Ok(())
}

pub fn kill(g: &Global, id: &str, signal: Option<&str>, all: bool) -> anyhow::Result<()> {
    let sig = parse_signal(signal.unwrap_or("SIGTERM"))?;
    let rt = g.backend()?;
    if !all || g.runtime != "native" {
        return Ok(rt.kill(id, sig)?);
    }
    let st = rt.state(id)?;
    if st.status == Status::Stopped {
        bail!("container {id} is not running");
    }
    let record = state::read_json::<state::Record>(&Dir::new(&g.root, id)?.record())?
        .with_context(|| format!("container {id} does not exist"))?;
    let pids = match &record.cgroups_path {
        Some(p) => cgroups::pids(p)?,
        None => vec![Pid::from_raw(st.pid)],
    };
    for pid in pids {
        let _ = nix::sys::signal::kill(pid, sig);
    }
    Ok(())
}

pub fn delete(g: &Global, id: &str, force: bool) -> anyhow::Result<()> {
    match g.backend()?.delete(id, force) {
        Err(crate::container::Error::State(state::Error::NotFound(_))) => {
            // A create that died before recording the container may have left its directory.
            let _ = Dir::new(&g.root, id)?.remove();
            match force {
                true => Ok(()),
                false => bail!("container {id} does not exist"),
            }
        }
        other => Ok(other?),
    }
}

pub fn list(g: &Global, format: &str, quiet: bool) -> anyhow::Result<()> {
    let rt = g.backend()?;
    let states: Vec<crate::State> = rt.list()?.iter().filter_map(|id| rt.state(id).ok()).collect();
    let mut out = String::new();
    if quiet {
        for s in &states {
            out.push_str(&s.id);
            out.push('\n');
        }
    } else if format == "json" {
        let all: Vec<serde_json::Value> = states.iter().map(state_json).collect();
        out = serde_json::to_string(&all)? + "\n";
    } else {
        let rows: Vec<[String; 6]> = states
            .iter()
            .map(|s| {
                let status = serde_json::to_value(s.status).ok().and_then(|v| v.as_str().map(str::to_string));
                let bundle = s.bundle.display().to_string();
                [s.id.clone(), s.pid.to_string(), status.unwrap_or_default(), bundle, s.created.clone(), "root".into()]
            })
            .collect();
        out = table(&["ID", "PID", "STATUS", "BUNDLE", "CREATED", "OWNER"], &rows);
    }
    logging::print(&out);
    Ok(())
}

/// Pure: left-aligned columns, three spaces apart (runc's tabwriter layout).
pub fn table<const N: usize>(header: &[&str; N], rows: &[[String; N]]) -> String {
    let mut width = header.map(str::len);
    for r in rows {
        for (w, c) in width.iter_mut().zip(r) {
            *w = (*w).max(c.len());
        }
    }
    let mut out = String::new();
    let mut line = |cells: Vec<&str>| {
        let mut l = String::new();
        for (i, c) in cells.iter().enumerate() {
            if i + 1 == N {
                l.push_str(c);
            } else {
                let _ = write!(l, "{c:<w$}   ", w = width[i]);
            }
        }
        out.push_str(l.trim_end());
        out.push('\n');
    };
    line(header.to_vec());
    for r in rows {
        line(r.iter().map(String::as_str).collect());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tables_align_their_columns() {
        let rows = [["abc".to_string(), "1".to_string()], ["d".to_string(), "22".to_string()]];
        assert_eq!(table(&["ID", "PID"], &rows), "ID    PID\nabc   1\nd     22\n");
    }

    #[test]
    fn pid_files_are_written_whole() -> anyhow::Result<()> {
        let dir = tempfile::tempdir()?;
        let p = dir.path().join("pid");
        write_pid_file(Some(&p), 42)?;
        assert_eq!(std::fs::read_to_string(&p)?, "42");
        assert!(!dir.path().join(".pid").exists());
        Ok(())
    }
}
