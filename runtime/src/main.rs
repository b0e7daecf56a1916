//! `kaji-runtime`: an OCI-runtime command line with runc's shape (global flags before the verb),
//! and the hidden `fork-server` verb the library execs once to fork each container's shim.

use std::io::Write;
use std::path::PathBuf;
use std::str::FromStr;

use anyhow::{bail, Context};
use clap::{Parser, Subcommand};
use kaji_runtime::{ContainerRuntime, CreateOptions, Native, Runc};
use nix::sys::signal::Signal;

#[derive(Parser)]
#[command(name = "kaji-runtime", version, about = "kaji's OCI container runtime")]
struct Cli {
    /// Directory for container state.
    #[arg(long, global = true, default_value = "/run/kaji-runtime")]
    root: PathBuf,
    /// Backend: `native`, or the path/name of an OCI runtime binary such as `runc`.
    #[arg(long, global = true, default_value = "native")]
    runtime: String,
    /// Accepted for runc compatibility (ignored).
    #[arg(long, global = true, hide = true)]
    log: Option<PathBuf>,
    #[arg(long, global = true, hide = true)]
    log_format: Option<String>,
    #[command(subcommand)]
    command: Verb,
}

#[derive(Subcommand)]
enum Verb {
    /// Create a container from a bundle; it waits for `start`.
    Create {
        id: String,
        #[arg(long, short, default_value = ".")]
        bundle: PathBuf,
        #[arg(long)]
        pid_file: Option<PathBuf>,
        /// Write the container's stdout/stderr here in CRI log format.
        #[arg(long)]
        log_path: Option<PathBuf>,
    },
    /// Run the process of a created container.
    Start { id: String },
    /// Print the container's state as JSON.
    State { id: String },
    /// Send a signal (name or number, default SIGTERM).
    Kill { id: String, signal: Option<String> },
    /// Delete a stopped container (or any, with --force).
    Delete {
        id: String,
        #[arg(long, short)]
        force: bool,
    },
    /// Create, start and wait; exits with the container's exit code.
    Run {
        id: String,
        #[arg(long, short, default_value = ".")]
        bundle: PathBuf,
        #[arg(long)]
        log_path: Option<PathBuf>,
    },
    /// List container ids.
    List,
    /// Run a command in a running container (its namespaces, cgroup and hardening); exits with
    /// the command's exit code. Without --process, the container's own process spec is used
    /// with the given arguments.
    Exec {
        id: String,
        /// An OCI process JSON file describing the command.
        #[arg(long)]
        process: Option<PathBuf>,
        /// Run on a new terminal.
        #[arg(long, short)]
        tty: bool,
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        command: Vec<String>,
    },
    /// Forks shims on request (see the library's `forkserver`); its socket is fd 3.
    #[command(hide = true)]
    ForkServer,
    #[command(hide = true)]
    Nsenter {
        #[arg(long)]
        id: String,
        #[arg(long)]
        process: PathBuf,
        #[arg(long)]
        tty: bool,
    },
}

fn parse_signal(s: &str) -> anyhow::Result<Signal> {
    if let Ok(n) = s.parse::<i32>() {
        return Signal::try_from(n).with_context(|| format!("unknown signal {s}"));
    }
    let name = s.to_ascii_uppercase();
    let name = if name.starts_with("SIG") { name } else { format!("SIG{name}") };
    Signal::from_str(&name).with_context(|| format!("unknown signal {s}"))
}

fn backend(cli: &Cli) -> anyhow::Result<Box<dyn ContainerRuntime>> {
    let helper = std::env::current_exe().context("cannot find own executable")?;
    Ok(match cli.runtime.as_str() {
        "native" => Box::new(Native::new(&cli.root, helper)),
        binary => Box::new(Runc::new(&cli.root, helper, binary)),
    })
}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    if let Verb::ForkServer = &cli.command {
        // Single-threaded on purpose: it forks the shims, which clone container inits.
        std::process::exit(kaji_runtime::forkserver::main());
    }
    if let Verb::Nsenter { id, process, tty } = &cli.command {
        let args =
            kaji_runtime::nsenter::Args { root: cli.root.clone(), id: id.clone(), process: process.clone(), tty: *tty };
        std::process::exit(kaji_runtime::nsenter::main(args));
    }
    // Our warnings (a failed poststart or poststop hook) show by default; libcgroups warns about
    // every controller a host lacks, which is not worth a line per command.
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn,libcgroups=error"));
    tracing_subscriber::fmt().with_writer(std::io::stderr).with_env_filter(filter).init();
    let rt = backend(&cli)?;
    match &cli.command {
        Verb::Create { id, bundle, pid_file, log_path } => {
            let st = rt.create(id, bundle, &CreateOptions { log_path: log_path.clone(), ..Default::default() })?;
            if let Some(f) = pid_file {
                std::fs::write(f, st.pid.to_string()).with_context(|| format!("writing {}", f.display()))?;
            }
        }
        Verb::Start { id } => rt.start(id)?,
        Verb::State { id } => {
            let st = rt.state(id)?;
            let mut out = std::io::stdout();
            serde_json::to_writer_pretty(&mut out, &st)?;
            writeln!(out)?;
        }
        Verb::Kill { id, signal } => rt.kill(id, parse_signal(signal.as_deref().unwrap_or("SIGTERM"))?)?,
        Verb::Delete { id, force } => rt.delete(id, *force)?,
        Verb::Run { id, bundle, log_path } => {
            rt.create(id, bundle, &CreateOptions { log_path: log_path.clone(), ..Default::default() })?;
            rt.start(id)?;
            let exit = rt.wait(id, None)?;
            rt.delete(id, true)?;
            std::process::exit(exit.code);
        }
        Verb::List => {
            for id in rt.list()? {
                println!("{id}");
            }
        }
        Verb::Exec { id, process, tty, command } => {
            std::process::exit(exec(rt.as_ref(), id, process.as_deref(), *tty, command)?)
        }
        Verb::Nsenter { .. } | Verb::ForkServer => bail!("unreachable: helper verbs handled above"),
    }
    Ok(())
}

/// `exec`: our stdio copied to and from the command's; returns its exit code.
fn exec(
    rt: &dyn ContainerRuntime,
    id: &str,
    process: Option<&std::path::Path>,
    tty: bool,
    command: &[String],
) -> anyhow::Result<i32> {
    use std::io::copy;
    let mut p: oci_spec::runtime::Process = match process {
        Some(f) => serde_json::from_slice(&std::fs::read(f).with_context(|| format!("reading {}", f.display()))?)?,
        None => {
            let st = rt.state(id)?;
            let spec = kaji_runtime::spec::load(&st.bundle)?;
            spec.process().clone().context("the container's spec has no process")?
        }
    };
    if !command.is_empty() {
        p.set_args(Some(command.to_vec()));
    }
    let opts = kaji_runtime::ExecOptions { stdin: true, stdout: true, stderr: true, tty, size: None };
    let mut e = rt.exec(id, &p, &opts)?;
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
        assert!(matches!(cli.map(|c| c.command), Ok(Verb::Create { ref id, .. }) if id == "c1"));
        let cli = Cli::try_parse_from(["kaji-runtime", "delete", "--force", "c1"]);
        assert!(matches!(cli.map(|c| c.command), Ok(Verb::Delete { force: true, .. })));
    }
}
