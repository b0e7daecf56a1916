//! `kaji`: the command for people without kubectl — and `kaji lab`, the one-command try-out.

mod cluster;
mod cmd;
mod errors;
mod lab;
mod manifest;
mod merge;
mod output;
mod pki;
mod resources;
mod table;

use clap::{Parser, Subcommand};
use cluster::{Cluster, ConnArgs};
use std::process::ExitCode;

#[derive(Parser, Debug)]
#[command(
    name = "kaji",
    version,
    about = "kaji (舵): a small, real, Kubernetes-compatible cluster",
    after_help = "The cluster commands read the kubeconfig as kubectl does: --kubeconfig, else $KUBECONFIG, \
                  else ~/.kube/config (a lab's is <dir>/kubeconfig)."
)]
struct Cli {
    #[command(flatten)]
    conn: ConnArgs,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Create or update objects from manifests (YAML or JSON; files, directories, stdin).
    Apply(cmd::apply::Args),
    /// List objects as tables (or json/yaml/name), optionally watching for changes.
    Get(cmd::get::Args),
    /// Show the details of objects, with their events.
    Describe(cmd::describe::Args),
    /// Delete objects by name, selector or manifest, and wait until they are gone.
    Delete(cmd::delete::Args),
    /// Run a command in a container (exits with its exit code).
    Exec(cmd::exec::Args),
    /// Print a container's log.
    Logs(cmd::logs::Args),
    /// Set the number of replicas of a Deployment, ReplicaSet, StatefulSet or ReplicationController.
    Scale(cmd::scale::Args),
    /// Follow a rollout.
    Rollout {
        #[command(subcommand)]
        command: cmd::rollout::Command,
    },
    /// List events, oldest first.
    Events(cmd::events::Args),
    /// Bootstrap tokens, for nodes that join with `kaji-agent --bootstrap-kubeconfig`.
    Token {
        #[command(subcommand)]
        command: cmd::token::Command,
    },
    /// Print a shell completion script: `source <(kaji completion bash)`.
    Completion {
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
    /// The cluster's certificates and kubeconfigs.
    Pki {
        #[command(subcommand)]
        command: pki::PkiCommand,
    },
    /// Run a kaji cluster on this machine.
    Lab {
        #[command(subcommand)]
        command: lab::LabCommand,
    },
}

#[tokio::main]
async fn main() -> ExitCode {
    let cli = Cli::parse();
    kaji_pki::install_crypto_provider();
    let result = match cli.command {
        Command::Pki { command } => pki::run(command).await,
        // The connection flags are global (kubectl takes them anywhere); a lab has its own.
        Command::Lab { .. } if cli.conn != ConnArgs::default() => Err(anyhow::anyhow!(
            "--kubeconfig, --context and -n/--namespace do not apply to `kaji lab` (did you mean --nodes?)"
        )),
        Command::Lab { command } => lab::run(command).await.map_err(|e| {
            eprintln!("error: {e:#}");
            errors::Reported.into()
        }),
        Command::Completion { shell } => {
            use clap::CommandFactory as _;
            clap_complete::generate(shell, &mut Cli::command(), "kaji", &mut std::io::stdout());
            Ok(())
        }
        command => run(&cli.conn, command).await,
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) if e.downcast_ref::<errors::Reported>().is_some() => ExitCode::FAILURE,
        Err(e) if e.downcast_ref::<errors::Exit>().is_some() => {
            ExitCode::from(e.downcast_ref::<errors::Exit>().map_or(1, |x| x.0))
        }
        Err(e) => {
            eprintln!("{}", errors::one_line(&e));
            ExitCode::FAILURE
        }
    }
}

async fn run(conn: &ConnArgs, command: Command) -> anyhow::Result<()> {
    let cl = Cluster::connect(conn).await?;
    match command {
        Command::Apply(args) => cmd::apply::run(&cl, args).await,
        Command::Get(args) => cmd::get::run(&cl, args).await,
        Command::Describe(args) => cmd::describe::run(&cl, args).await,
        Command::Delete(args) => cmd::delete::run(&cl, args).await,
        Command::Exec(args) => cmd::exec::run(&cl, args).await,
        Command::Logs(args) => cmd::logs::run(&cl, args).await,
        Command::Scale(args) => cmd::scale::run(&cl, args).await,
        Command::Rollout { command } => cmd::rollout::run(&cl, command).await,
        Command::Events(args) => cmd::events::run(&cl, args).await,
        Command::Token { command } => cmd::token::run(&cl, command).await,
        Command::Lab { command } => lab::run(command).await,
        Command::Completion { .. } | Command::Pki { .. } => Ok(()),
    }
}
