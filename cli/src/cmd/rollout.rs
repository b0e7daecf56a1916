//! `kaji rollout status`: follows a Deployment until its rollout is complete, printing kubectl's
//! progress lines; fails when the Progressing condition says ProgressDeadlineExceeded.

use super::delete::parse_duration;
use super::single;
use crate::cluster::Cluster;
use crate::errors;
use crate::output::emit;
use anyhow::{anyhow, bail, Result};
use futures::TryStreamExt as _;
use k8s_openapi::api::apps::v1::Deployment;
use kube::api::Api;
use kube::runtime::watcher;
use std::time::Duration;

#[derive(clap::Subcommand, Debug)]
pub enum Command {
    /// Wait for a Deployment's rollout to finish, printing its progress.
    Status(StatusArgs),
}

#[derive(clap::Args, Debug)]
pub struct StatusArgs {
    /// deployment/NAME (also deployment NAME).
    #[arg(required = true, value_name = "TYPE/NAME")]
    pub target: Vec<String>,
    /// Keep watching until the rollout finishes (`--watch=false`: print the status once).
    #[arg(short, long, default_value_t = true, num_args = 0..=1, default_missing_value = "true", action = clap::ArgAction::Set)]
    pub watch: bool,
    /// Give up after this long (e.g. 5m); default: as long as it takes.
    #[arg(long, value_parser = parse_duration)]
    pub timeout: Option<Duration>,
}

pub async fn run(cl: &Cluster, cmd: Command) -> Result<()> {
    let Command::Status(args) = cmd;
    let (kind, name) = single(&args.target)?;
    let r = cl.resolve(&kind).await?;
    if r.kind != "Deployment" {
        bail!("no status viewer has been implemented for {}", r.qualified_plural());
    }
    let api: Api<Deployment> = Api::namespaced(cl.client.clone(), &cl.namespace);
    let d = api.get(&name).await.map_err(errors::api)?;
    let (msg, done) = status(&d).map_err(anyhow::Error::msg)?;
    emit(&msg)?;
    if done || !args.watch {
        return Ok(());
    }
    let follow = follow(api, &name, msg);
    match args.timeout {
        Some(t) => tokio::time::timeout(t, follow)
            .await
            .unwrap_or_else(|_| Err(anyhow!("timed out waiting for the condition"))),
        None => follow.await,
    }
}

/// Prints each new status line until the rollout is done.
async fn follow(api: Api<Deployment>, name: &str, mut last: String) -> Result<()> {
    let config = watcher::Config::default().fields(&format!("metadata.name={name}"));
    let stream = watcher(api, config);
    futures::pin_mut!(stream);
    while let Some(event) = stream.try_next().await? {
        let d = match event {
            watcher::Event::Apply(d) | watcher::Event::InitApply(d) => d,
            watcher::Event::Delete(_) => bail!("deployment {name:?} was deleted"),
            watcher::Event::Init | watcher::Event::InitDone => continue,
        };
        let (msg, done) = status(&d).map_err(anyhow::Error::msg)?;
        if msg != last {
            emit(&msg)?;
            last = msg;
        }
        if done {
            return Ok(());
        }
    }
    bail!("the watch of deployment {name:?} ended")
}

/// kubectl's DeploymentStatusViewer: the line to print and whether the rollout is complete;
/// Err when it exceeded its progress deadline.
pub fn status(d: &Deployment) -> Result<(String, bool), String> {
    let name = d.metadata.name.as_deref().unwrap_or("");
    let generation = d.metadata.generation.unwrap_or(0);
    let st = d.status.clone().unwrap_or_default();
    if generation > st.observed_generation.unwrap_or(0) {
        return Ok(("Waiting for deployment spec update to be observed...\n".into(), false));
    }
    let progressing = st.conditions.iter().flatten().find(|c| c.type_.as_deref() == Some("Progressing"));
    if progressing.is_some_and(|c| c.reason.as_deref() == Some("ProgressDeadlineExceeded")) {
        return Err(format!("deployment {name:?} exceeded its progress deadline"));
    }
    let want = d.spec.replicas;
    let (updated, total, available) =
        (st.updated_replicas.unwrap_or(0), st.replicas.unwrap_or(0), st.available_replicas.unwrap_or(0));
    if let Some(want) = want.filter(|w| updated < *w) {
        let msg = format!("Waiting for deployment {name:?} rollout to finish: {updated} out of {want} new replicas have been updated...\n");
        return Ok((msg, false));
    }
    if total > updated {
        let msg = format!(
            "Waiting for deployment {name:?} rollout to finish: {} old replicas are pending termination...\n",
            total - updated
        );
        return Ok((msg, false));
    }
    if available < updated {
        let msg = format!("Waiting for deployment {name:?} rollout to finish: {available} of {updated} updated replicas are available...\n");
        return Ok((msg, false));
    }
    Ok((format!("deployment {name:?} successfully rolled out\n"), true))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn deployment(generation: i64, status: serde_json::Value) -> Deployment {
        serde_json::from_value(json!({
            "metadata": {"name": "web", "generation": generation},
            "spec": {"replicas": 3, "selector": {}, "template": {}},
            "status": status,
        }))
        .expect("deployment")
    }

    #[test]
    fn an_unobserved_generation_waits_for_the_controller() {
        let d = deployment(
            2,
            json!({"observedGeneration": 1, "replicas": 3, "updatedReplicas": 3, "availableReplicas": 3}),
        );
        assert_eq!(status(&d), Ok(("Waiting for deployment spec update to be observed...\n".into(), false)));
    }

    #[test]
    fn progress_is_reported_in_kubectls_order() {
        let cases = [
            (
                json!({"observedGeneration": 2, "replicas": 4, "updatedReplicas": 1}),
                "1 out of 3 new replicas have been updated...",
            ),
            (
                json!({"observedGeneration": 2, "replicas": 4, "updatedReplicas": 3}),
                "1 old replicas are pending termination...",
            ),
            (
                json!({"observedGeneration": 2, "replicas": 3, "updatedReplicas": 3, "availableReplicas": 2}),
                "2 of 3 updated replicas are available...",
            ),
        ];
        for (st, want) in cases {
            let (msg, done) = status(&deployment(2, st)).expect("in progress");
            assert_eq!(msg, format!("Waiting for deployment \"web\" rollout to finish: {want}\n"));
            assert!(!done);
        }
    }

    #[test]
    fn complete_when_all_updated_replicas_are_available() {
        let d = deployment(
            2,
            json!({"observedGeneration": 2, "replicas": 3, "updatedReplicas": 3, "availableReplicas": 3}),
        );
        assert_eq!(status(&d), Ok(("deployment \"web\" successfully rolled out\n".into(), true)));
    }

    #[test]
    fn an_exceeded_progress_deadline_is_an_error() {
        let d = deployment(
            2,
            json!({"observedGeneration": 2, "replicas": 3, "updatedReplicas": 1,
            "conditions": [{"type": "Progressing", "status": "False", "reason": "ProgressDeadlineExceeded"}]}),
        );
        assert_eq!(status(&d), Err("deployment \"web\" exceeded its progress deadline".into()));
    }
}
