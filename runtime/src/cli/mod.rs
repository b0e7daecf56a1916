//! `kaji-runtime`'s command line: runc's global flags, verbs and flags, so that container engines
//! (podman's conmon, containerd's runc shim) and people can use it in runc's place, plus the
//! hidden helper verbs the library execs (`fork-server`, `nsenter`).
//!
//! Containers the CLI creates have no shim, as with runc: `create` leaves the init waiting for
//! `start` with the caller's stdio and exits, so the init is reparented to the caller's reaper
//! (conmon is a child subreaper, and waits for it); `run` stays its parent and waits for it.

mod cgroup;
mod create;
mod exec;
mod features;
mod foreground;
pub mod logging;

use std::path::PathBuf;
use std::str::FromStr;

use anyhow::Context;
use clap::{Args, Parser, Subcommand};
use nix::sys::signal::Signal;

use crate::{ContainerRuntime, Native, Runc};

#[derive(Parser, Debug)]
#[command(name = "kaji-runtime", version, about = "kaji's OCI container runtime, with runc's command line")]
pub struct Cli {
    #[command(flatten)]
    pub global: Global,
    #[command(subcommand)]
    pub command: Verb,
}

/// Flags that come before the verb (and may follow it).
#[derive(Args, Debug, Clone)]
pub struct Global {
    /// Directory for container state (should be on a tmpfs).
    #[arg(long, global = true, default_value = "/run/kaji-runtime")]
    pub root: PathBuf,
    /// Backend: `native`, or the path/name of an OCI runtime binary such as `runc`.
    #[arg(long, global = true, default_value = "native")]
    pub runtime: String,
    /// Log at debug level.
    #[arg(long, global = true)]
    pub debug: bool,
    /// Write log lines here instead of to stderr.
    #[arg(long, global = true)]
    pub log: Option<PathBuf>,
    /// Log format: `text` (logfmt, as runc) or `json` (one object per line: level, msg, time).
    #[arg(long, global = true, default_value = "text", value_parser = ["text", "json"])]
    pub log_format: String,
    /// Use systemd for cgroups: cgroupsPath is "slice:prefix:name" (e.g. "system.slice:runc:1").
    #[arg(long, global = true)]
    pub systemd_cgroup: bool,
    /// Accepted for runc compatibility: `true`, `false` or `auto` (before the verb only: `spec`
    /// has a `--rootless` flag of its own).
    #[arg(long, hide = true)]
    pub rootless: Option<String>,
    /// Accepted for runc compatibility (checkpoint/restore is not supported).
    #[arg(long, global = true, hide = true)]
    pub criu: Option<PathBuf>,
}

#[derive(Subcommand, Debug)]
pub enum Verb {
    /// Create a container from a bundle; it waits for `start`.
    Create(create::CreateArgs),
    /// Run the process of a created container.
    Start { id: String },
    /// Print the container's state as JSON.
    State { id: String },
    /// Send a signal (name or number, default SIGTERM) to the container's init.
    Kill {
        /// Send it to every process of the container.
        #[arg(long, short)]
        all: bool,
        id: String,
        signal: Option<String>,
    },
    /// Delete a stopped container (or any, with --force).
    Delete {
        /// Kill it first (SIGKILL) if it still runs.
        #[arg(long, short)]
        force: bool,
        id: String,
    },
    /// Create and start a container, and wait for it: exits with its process's exit code.
    Run(create::RunArgs),
    /// List containers.
    #[command(alias = "ls")]
    List {
        #[arg(long, short, default_value = "table", value_parser = ["table", "json"])]
        format: String,
        /// Only the ids.
        #[arg(long, short)]
        quiet: bool,
    },
    /// Run a command in a running container (its namespaces, cgroup and hardening).
    Exec(exec::ExecArgs),
    /// Freeze every process of a container.
    Pause { id: String },
    /// Thaw a paused container.
    Resume { id: String },
    /// Change the cgroup limits of a running container.
    Update(cgroup::UpdateArgs),
    /// List the processes of a container.
    Ps {
        #[arg(long, short, default_value = "table", value_parser = ["table", "json"])]
        format: String,
        id: String,
        /// Options for ps(1) (default -ef).
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        ps_args: Vec<String>,
    },
    /// Print a container's resource usage and OOM events as JSON lines.
    Events {
        /// Print the usage once and exit.
        #[arg(long)]
        stats: bool,
        /// How often to print the usage (e.g. 5s, 500ms).
        #[arg(long, default_value = "5s")]
        interval: String,
        id: String,
    },
    /// Print what this runtime supports, as JSON.
    Features,
    /// Write a default config.json for a bundle.
    Spec {
        #[arg(long, short, default_value = ".")]
        bundle: PathBuf,
        /// A spec for a container run by an unprivileged user.
        #[arg(long)]
        rootless: bool,
    },
    /// Forks shims on request (see the library's `forkserver`); its socket is fd 3.
    #[command(hide = true)]
    ForkServer,
    /// Runs one command in a container (see the library's `nsenter`).
    #[command(hide = true)]
    Nsenter {
        #[arg(long)]
        id: String,
        #[arg(long)]
        process: PathBuf,
        #[arg(long)]
        tty: bool,
        /// Open the terminal inside the container and send its master over fd 4 + N.
        #[arg(long)]
        new_tty: bool,
        #[arg(long, default_value_t = 0)]
        preserve_fds: u32,
        /// Exit once the command runs (it is left to our caller's reaper).
        #[arg(long)]
        detach: bool,
        /// Join this sub-cgroup of the container's.
        #[arg(long)]
        cgroup: Option<String>,
    },
}

/// Signal by name (`KILL`, `SIGKILL`, `kill`) or number.
pub fn parse_signal(s: &str) -> anyhow::Result<Signal> {
    if let Ok(n) = s.parse::<i32>() {
        return Signal::try_from(n).with_context(|| format!("unknown signal {s:?}"));
    }
    let name = s.to_ascii_uppercase();
    let name = if name.starts_with("SIG") { name } else { format!("SIG{name}") };
    Signal::from_str(&name).with_context(|| format!("unknown signal {s:?}"))
}

impl Global {
    fn helper(&self) -> anyhow::Result<PathBuf> {
        std::env::current_exe().context("cannot find own executable")
    }

    /// The library's backend for the verbs that go through it.
    fn backend(&self) -> anyhow::Result<Box<dyn ContainerRuntime>> {
        let helper = self.helper()?;
        Ok(match self.runtime.as_str() {
            "native" => Box::new(Native::new(&self.root, helper)),
            binary => Box::new(Runc::new(&self.root, helper, binary)),
        })
    }
}

/// Entry point: parses the command line, runs the verb, returns the exit code.
pub fn main() -> i32 {
    let cli = Cli::parse();
    // The helper verbs are single-threaded and log nothing of their own.
    match cli.command {
        Verb::ForkServer => return crate::forkserver::main(),
        Verb::Nsenter { id, process, tty, new_tty, preserve_fds, detach, cgroup } => {
            let args = crate::nsenter::Args {
                root: cli.global.root.clone(),
                id,
                process,
                tty,
                new_tty,
                preserve_fds,
                detach,
                cgroup,
            };
            return crate::nsenter::main(args);
        }
        _ => {}
    }
    let log = match logging::init(&cli.global) {
        Ok(l) => l,
        Err(e) => {
            eprintln!("kaji-runtime: {e:#}");
            return 1;
        }
    };
    match run(cli) {
        Ok(code) => code,
        Err(e) => {
            let msg = format!("{e:#}");
            tracing::error!("{msg}");
            if log.to_file {
                eprintln!("{msg}");
            }
            1
        }
    }
}

fn run(cli: Cli) -> anyhow::Result<i32> {
    let g = &cli.global;
    match &cli.command {
        Verb::Create(a) => create::create(g, a).map(|()| 0),
        Verb::Run(a) => create::run(g, a),
        Verb::Start { id } => create::start(g, id).map(|()| 0),
        Verb::State { id } => create::state(g, id).map(|()| 0),
        Verb::Kill { all, id, signal } => create::kill(g, id, signal.as_deref(), *all).map(|()| 0),
        Verb::Delete { force, id } => create::delete(g, id, *force).map(|()| 0),
        Verb::List { format, quiet } => create::list(g, format, *quiet).map(|()| 0),
        Verb::Exec(a) => exec::exec(g, a),
        Verb::Pause { id } => g.backend()?.pause(id).map(|()| 0).map_err(Into::into),
        Verb::Resume { id } => g.backend()?.resume(id).map(|()| 0).map_err(Into::into),
        Verb::Update(a) => cgroup::update(g, a).map(|()| 0),
        Verb::Ps { format, id, ps_args } => cgroup::ps(g, id, format, ps_args).map(|()| 0),
        Verb::Events { stats, interval, id } => cgroup::events(g, id, *stats, interval).map(|()| 0),
        Verb::Features => features::features().map(|()| 0),
        Verb::Spec { bundle, rootless } => features::spec(bundle, *rootless).map(|()| 0),
        Verb::ForkServer | Verb::Nsenter { .. } => anyhow::bail!("helper verbs are handled before logging starts"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn signals_parse_by_name_short_name_and_number() {
        assert_eq!(parse_signal("SIGKILL").ok(), Some(Signal::SIGKILL));
        assert_eq!(parse_signal("term").ok(), Some(Signal::SIGTERM));
        assert_eq!(parse_signal("9").ok(), Some(Signal::SIGKILL));
        assert!(parse_signal("SIGNOPE").is_err());
    }

    #[test]
    fn flags_may_follow_the_id_as_with_runc() {
        let cli = Cli::try_parse_from(["kaji-runtime", "--root", "/tmp/r", "create", "c1", "--bundle", "/b"]);
        assert!(matches!(cli.map(|c| c.command), Ok(Verb::Create(ref a)) if a.id == "c1"));
        let cli = Cli::try_parse_from(["kaji-runtime", "delete", "--force", "c1"]);
        assert!(matches!(cli.map(|c| c.command), Ok(Verb::Delete { force: true, .. })));
    }

    /// The command lines podman's conmon and containerd's runc shim run, as they run them.
    #[test]
    fn the_command_lines_engines_run_parse() {
        let lines: &[&[&str]] = &[
            &[
                "--root",
                "/run/r",
                "--log",
                "/l",
                "--log-format",
                "json",
                "--systemd-cgroup",
                "create",
                "--bundle",
                "/b",
                "id",
            ],
            &["create", "--bundle", "/b", "--pid-file", "/p", "--console-socket", "/s", "--no-pivot", "id"],
            &["create", "--bundle", "/b", "--preserve-fds", "2", "--no-new-keyring", "id"],
            &["--debug", "start", "id"],
            &["kill", "id", "15"],
            &["kill", "--all", "id", "KILL"],
            &["delete", "--force", "id"],
            &["exec", "--pid-file", "/p", "--process", "/f", "--detach", "--tty", "--console-socket", "/s", "id"],
            &[
                "exec", "-e", "A=1", "--cwd", "/", "-u", "1:2", "-g", "3", "--cap", "CAP_KILL", "-t", "id", "sh", "-c",
                "x",
            ],
            &["exec", "--preserve-fds", "1", "--no-new-privs", "--ignore-paused", "id", "ls", "-l"],
            &["pause", "id"],
            &["resume", "id"],
            &["update", "--resources", "-", "id"],
            &["update", "--memory", "64m", "--memory-swap", "-1", "--pids-limit", "10", "--cpu-quota", "5000", "id"],
            &["ps", "--format", "json", "id"],
            &["ps", "id", "-o", "pid,comm"],
            &["events", "--stats", "id"],
            &["events", "--interval", "1s", "id"],
            &["features"],
            &["run", "-d", "--keep", "--pid-file", "/p", "-b", "/b", "--no-subreaper", "id"],
            &["list", "-q"],
            &["state", "id"],
            &["spec", "--rootless"],
        ];
        for line in lines {
            let argv = std::iter::once("kaji-runtime").chain(line.iter().copied());
            if let Err(e) = Cli::try_parse_from(argv) {
                panic!("{line:?}: {e}");
            }
        }
    }
}
