//! `kaji`: the command for people without kubectl — and `kaji lab`, the one-command try-out.

mod lab;

use clap::{Parser, Subcommand};
use std::process::ExitCode;

#[derive(Parser, Debug)]
#[command(name = "kaji", version, about = "kaji (舵): a small, real, Kubernetes-compatible cluster")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Run a kaji cluster on this machine.
    Lab {
        #[command(subcommand)]
        command: lab::LabCommand,
    },
}

#[tokio::main]
async fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Lab { command } => lab::run(command).await,
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}
