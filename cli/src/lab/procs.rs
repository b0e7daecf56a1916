//! The lab's processes: started in the background (inside their network namespace via
//! `nsenter --net`, which execs, so the recorded pid is the component's own), found again by pid
//! file, and signalled only after `/proc/<pid>/exe` proves the pid is still that component.

use super::topology::Component;
use anyhow::{bail, Context, Result};
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

pub const NSENTER: &str = "nsenter";

/// A file beside the running `kaji` (the workspace builds all binaries into one directory), or
/// `name` itself when it is an absolute path (a binary from a Debian package).
pub fn sibling_binary(name: &str) -> Result<PathBuf> {
    if Path::new(name).is_absolute() {
        if !Path::new(name).exists() {
            let file = Path::new(name).file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
            // The Debian package where it differs from the file's name.
            let package = match file.as_str() {
                "dnsmasq" => "dnsmasq-base".to_string(),
                "etcd" => "etcd-server".to_string(),
                _ => file,
            };
            bail!("{name} is missing (apt-get install {package})");
        }
        return Ok(PathBuf::from(name));
    }
    let me = std::env::current_exe().context("cannot find the kaji binary's own path")?;
    let p = me.with_file_name(name);
    if !p.exists() {
        bail!("{name} not found beside {}; build the workspace first (cargo build)", me.display());
    }
    Ok(p)
}

/// The namespace's nsfs file as `ip netns add` leaves it.
pub fn netns_path(netns: &str) -> PathBuf {
    Path::new("/run/netns").join(netns)
}

/// `binary args…`, run inside `netns` when given. nsenter without --fork execs the binary, so
/// the child's pid becomes the component's; only the network namespace is entered, so mounts
/// the agent makes stay visible to the host (a restarted agent and `down` need them).
pub fn command(binary: &Path, netns: Option<&str>, args: &[String]) -> Command {
    match netns {
        Some(ns) => {
            let mut c = Command::new(NSENTER);
            c.arg(format!("--net={}", netns_path(ns).display())).arg("--").arg(binary).args(args);
            c
        }
        None => {
            let mut c = Command::new(binary);
            c.args(args);
            c
        }
    }
}

pub fn pid_file(dir: &Path, name: &str) -> PathBuf {
    dir.join(format!("{name}.pid"))
}

pub fn log_file(dir: &Path, name: &str) -> PathBuf {
    dir.join(format!("{name}.log"))
}

pub fn read_pid(dir: &Path, name: &str) -> Option<i32> {
    std::fs::read_to_string(pid_file(dir, name)).ok()?.trim().parse().ok()
}

/// Whether `pid` is alive and its executable is `binary` (a stale pid file must never make us
/// signal some other process that reused the number). A rebuilt binary reads "<name> (deleted)".
pub fn is(pid: i32, binary: &str) -> bool {
    let binary = Path::new(binary).file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    std::fs::read_link(format!("/proc/{pid}/exe"))
        .ok()
        .and_then(|exe| exe.file_name().map(|n| n.to_string_lossy().into_owned()))
        .is_some_and(|n| n == binary || n == format!("{binary} (deleted)"))
}

/// The component's pid if it is running.
pub fn running(dir: &Path, c: &Component) -> Option<i32> {
    read_pid(dir, &c.name).filter(|pid| is(*pid, &c.binary))
}

/// Starts `c` in the background (own process group, so a Ctrl-C in the terminal that ran
/// `kaji lab up` does not reach it), output to its log; returns once it runs its own binary.
pub fn spawn(dir: &Path, c: &Component) -> Result<i32> {
    let bin = sibling_binary(&c.binary)?;
    let log_path = log_file(dir, &c.name);
    let log = std::fs::File::options()
        .create(true)
        .append(true)
        .open(&log_path)
        .with_context(|| format!("cannot open {}", log_path.display()))?;
    let mut child = command(&bin, c.netns.as_deref(), &c.args)
        .stdin(Stdio::null())
        .stdout(log.try_clone()?)
        .stderr(log)
        .process_group(0)
        .spawn()
        .with_context(|| format!("cannot start {} ({})", c.name, bin.display()))?;
    let pid = i32::try_from(child.id()).context("pid out of range")?;
    std::fs::write(pid_file(dir, &c.name), pid.to_string())?;
    let deadline = Instant::now() + Duration::from_secs(10);
    while !is(pid, &c.binary) {
        if let Some(status) = child.try_wait()? {
            bail!("{} exited at once ({status}); see {}", c.name, log_path.display());
        }
        if Instant::now() > deadline {
            bail!("{} did not start within 10s; see {}", c.name, log_path.display());
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    Ok(pid)
}

/// SIGTERM, up to `grace` to exit, then SIGKILL; true once the pid no longer runs `binary`.
pub fn stop(pid: i32, binary: &str, grace: Duration) -> bool {
    let signal = |s| {
        if is(pid, binary) {
            let _ = kill(Pid::from_raw(pid), s);
        }
    };
    signal(Signal::SIGTERM);
    let deadline = Instant::now() + grace;
    while is(pid, binary) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    signal(Signal::SIGKILL);
    let deadline = Instant::now() + Duration::from_secs(5);
    while is(pid, binary) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    !is(pid, binary)
}

/// Runs `binary args` (inside `netns` if given) to completion; the error carries its stderr.
pub fn run(binary: &Path, netns: Option<&str>, args: &[String]) -> Result<String> {
    let out = command(binary, netns, args)
        .stdin(Stdio::null())
        .output()
        .with_context(|| format!("cannot run {}", binary.display()))?;
    if !out.status.success() {
        let name = binary.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        bail!("{name} {} failed ({}): {}", args.join(" "), out.status, String::from_utf8_lossy(&out.stderr).trim());
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}
