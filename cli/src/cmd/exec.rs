//! `kaji exec`: runs a command in a container through the apiserver's `pods/exec` (WebSocket,
//! `v5.channel.k8s.io`), carries stdin/stdout/stderr, and exits with the command's exit code.

use super::logs::{default_container, pod_for};
use crate::cluster::Cluster;
use crate::errors::{self, Exit};
use anyhow::{anyhow, bail, Result};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Status;
use kube::api::{Api, AttachParams};
use serde_json::Value;
use std::io::{IsTerminal as _, Read as _};
use tokio::io::{AsyncRead, AsyncReadExt as _, AsyncWriteExt as _};

#[derive(clap::Args, Debug)]
#[command(after_help = "Example: kaji exec web -c app -- ls /etc; kaji exec -it web -- sh")]
pub struct Args {
    /// POD, pod/POD, or TYPE/NAME of a workload (one of its pods).
    #[arg(value_name = "POD|TYPE/NAME")]
    pub target: String,
    /// The container (default: the pod's only one, else its default-container annotation or first).
    #[arg(short, long)]
    pub container: Option<String>,
    /// Pass stdin to the command.
    #[arg(short = 'i', long)]
    pub stdin: bool,
    /// Allocate a terminal (with -i on a terminal: raw mode, stderr merged into stdout).
    #[arg(short = 't', long)]
    pub tty: bool,
    /// The command and its arguments, after `--`.
    #[arg(last = true, required = true, value_name = "COMMAND")]
    pub command: Vec<String>,
}

pub async fn run(cl: &Cluster, args: Args) -> Result<()> {
    let pods: Api<Pod> = Api::namespaced(cl.client.clone(), &cl.namespace);
    let name = pod_for(cl, &args.target).await?;
    let pod = serde_json::to_value(pods.get(&name).await.map_err(errors::api)?)?;
    let container = match &args.container {
        Some(c) => check_container(&pod, c)?,
        None => default_container(&pod)?,
    };
    if let Some(phase @ ("Succeeded" | "Failed")) = pod["status"]["phase"].as_str() {
        bail!("cannot exec into a container in a completed pod; current phase is {phase}");
    }
    let ap = AttachParams {
        container: Some(container),
        stdin: args.stdin,
        stdout: true,
        stderr: !args.tty,
        tty: args.tty,
        ..Default::default()
    };
    let _raw = (args.tty && args.stdin).then(RawTerminal::enter).flatten();
    let mut proc = pods.exec(&name, args.command.clone(), &ap).await.map_err(|e| {
        anyhow!("unable to upgrade connection: {}", errors::one_line(&errors::api(e)).trim_start_matches("error: "))
    })?;
    let status = proc.take_status().expect("the status is taken once, here");
    if let Some(mut writer) = proc.stdin() {
        // A plain thread reads stdin: a pending tokio stdin read would hold up the runtime's
        // shutdown after the command exits.
        let (tx, mut rx) = tokio::sync::mpsc::channel::<Vec<u8>>(8);
        std::thread::spawn(move || {
            let mut buf = [0u8; 8192];
            let mut input = std::io::stdin();
            while let Ok(n) = input.read(&mut buf) {
                if n == 0 || tx.blocking_send(buf[..n].to_vec()).is_err() {
                    break;
                }
            }
        });
        tokio::spawn(async move {
            while let Some(chunk) = rx.recv().await {
                if writer.write_all(&chunk).await.is_err() {
                    return;
                }
            }
            // End of stdin: v5's close signal tells the command.
            let _ = writer.shutdown().await;
        });
    }
    let out = pump(proc.stdout(), std::io::stdout);
    let err = pump(proc.stderr(), std::io::stderr);
    let _ = tokio::join!(out, err);
    let status = status.await;
    let _ = proc.join().await;
    match outcome(status.as_ref()) {
        Outcome::Success => Ok(()),
        Outcome::Exit(code) => {
            eprintln!("command terminated with exit code {code}");
            Err(Exit(code).into())
        }
        Outcome::Failed(msg) => Err(anyhow!(msg)),
    }
}

/// Copies a remote stream to a local one as it arrives.
async fn pump<R: AsyncRead + Unpin, W: std::io::Write>(from: Option<R>, to: fn() -> W) {
    let Some(mut from) = from else { return };
    let mut buf = vec![0u8; 16 * 1024];
    while let Ok(n) = from.read(&mut buf).await {
        let mut w = to();
        if n == 0 || w.write_all(&buf[..n]).and_then(|()| w.flush()).is_err() {
            return;
        }
    }
}

fn check_container(pod: &Value, c: &str) -> Result<String> {
    let known = ["containers", "initContainers"]
        .iter()
        .flat_map(|k| pod["spec"][*k].as_array().into_iter().flatten())
        .any(|x| x["name"] == c);
    if !known {
        bail!("container {c} is not valid for pod {}", pod["metadata"]["name"].as_str().unwrap_or(""));
    }
    Ok(c.to_string())
}

#[derive(Debug, PartialEq, Eq)]
pub enum Outcome {
    Success,
    Exit(u8),
    Failed(String),
}

/// What the status channel said: success, a non-zero exit code, or another failure.
pub fn outcome(status: Option<&Status>) -> Outcome {
    let Some(s) = status else {
        return Outcome::Failed("the connection closed without the command's exit status".into());
    };
    if s.status.as_deref() == Some("Success") {
        return Outcome::Success;
    }
    let causes = s.details.as_ref().and_then(|d| d.causes.as_ref()).into_iter().flatten();
    let code = causes
        .filter(|_| s.reason.as_deref() == Some("NonZeroExitCode"))
        .find(|c| c.reason.as_deref() == Some("ExitCode"))
        .and_then(|c| c.message.as_deref()?.parse::<u8>().ok());
    match (code, s.message.as_deref()) {
        (Some(c), _) => Outcome::Exit(c),
        (None, Some(m)) if !m.is_empty() => Outcome::Failed(m.to_string()),
        (None, _) => Outcome::Failed(format!("exec failed: {}", s.reason.as_deref().unwrap_or("unknown reason"))),
    }
}

/// The local terminal in raw mode for `-it`, restored when dropped.
struct RawTerminal(nix::sys::termios::Termios);

impl RawTerminal {
    fn enter() -> Option<Self> {
        use nix::sys::termios::{cfmakeraw, tcgetattr, tcsetattr, SetArg};
        let stdin = std::io::stdin();
        if !stdin.is_terminal() {
            return None;
        }
        let saved = tcgetattr(&stdin).ok()?;
        let mut raw = saved.clone();
        cfmakeraw(&mut raw);
        tcsetattr(&stdin, SetArg::TCSANOW, &raw).ok()?;
        Some(Self(saved))
    }
}

impl Drop for RawTerminal {
    fn drop(&mut self) {
        let _ = nix::sys::termios::tcsetattr(std::io::stdin(), nix::sys::termios::SetArg::TCSANOW, &self.0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn status(v: Value) -> Status {
        serde_json::from_value(v).expect("status")
    }

    #[test]
    fn the_status_channel_gives_the_exit_code() {
        assert_eq!(outcome(Some(&status(json!({"status": "Success"})))), Outcome::Success);
        let failed = status(json!({"status": "Failure", "reason": "NonZeroExitCode", "message": "exit code 3",
                                   "details": {"causes": [{"reason": "ExitCode", "message": "3"}]}}));
        assert_eq!(outcome(Some(&failed)), Outcome::Exit(3));
        let other = status(json!({"status": "Failure", "reason": "InternalError", "message": "runtime gone"}));
        assert_eq!(outcome(Some(&other)), Outcome::Failed("runtime gone".into()));
        assert!(matches!(outcome(None), Outcome::Failed(_)));
    }

    #[test]
    fn an_unknown_container_is_refused_before_connecting() {
        let pod = json!({"metadata": {"name": "web"}, "spec": {"containers": [{"name": "app"}], "initContainers": [{"name": "setup"}]}});
        assert_eq!(check_container(&pod, "setup").expect("init"), "setup");
        assert_eq!(
            check_container(&pod, "nope").expect_err("unknown").to_string(),
            "container nope is not valid for pod web"
        );
    }
}
