//! `kaji logs`: a container's log through the apiserver's `pods/log` (which asks the node's
//! agent); for a workload (`deploy/web`) one of its pods, as kubectl picks.

use super::delete::parse_duration;
use crate::cluster::Cluster;
use crate::errors;
use anyhow::{bail, Context, Result};
use futures::AsyncReadExt as _;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ListParams, LogParams};
use serde_json::Value;
use std::io::Write as _;
use std::time::Duration;

#[derive(clap::Args, Debug)]
pub struct Args {
    /// POD, pod/POD, or TYPE/NAME of a workload with a selector (deployment/web: one of its pods).
    #[arg(value_name = "POD|TYPE/NAME")]
    pub target: String,
    /// The container (default: the pod's only one, else its default-container annotation or first).
    #[arg(short, long)]
    pub container: Option<String>,
    /// Keep streaming as the container writes.
    #[arg(short, long)]
    pub follow: bool,
    /// Only the last N lines (-1: all).
    #[arg(long, default_value_t = -1, allow_negative_numbers = true)]
    pub tail: i64,
    /// The log of the container's previous run (after a restart).
    #[arg(short, long)]
    pub previous: bool,
    /// Prefix each line with its RFC 3339 timestamp.
    #[arg(long)]
    pub timestamps: bool,
    /// Only lines newer than this (e.g. 10s, 5m, 1h).
    #[arg(long, value_parser = parse_duration)]
    pub since: Option<Duration>,
}

pub async fn run(cl: &Cluster, args: Args) -> Result<()> {
    let pods: Api<Pod> = Api::namespaced(cl.client.clone(), &cl.namespace);
    let pod_name = pod_for(cl, &args.target).await?;
    let pod = pods.get(&pod_name).await.map_err(errors::api)?;
    let container = match &args.container {
        Some(c) => c.clone(),
        None => default_container(&serde_json::to_value(&pod)?)?,
    };
    let lp = LogParams {
        container: Some(container),
        follow: args.follow,
        previous: args.previous,
        timestamps: args.timestamps,
        tail_lines: (args.tail >= 0).then_some(args.tail),
        since_seconds: args.since.map(|d| d.as_secs().max(1) as i64),
        ..Default::default()
    };
    let mut stream = pods.log_stream(&pod_name, &lp).await.map_err(errors::api)?;
    let mut buf = vec![0u8; 32 * 1024];
    loop {
        let n = stream.read(&mut buf).await.context("reading the log stream")?;
        if n == 0 {
            return Ok(());
        }
        let mut out = std::io::stdout().lock();
        match out.write_all(&buf[..n]).and_then(|()| out.flush()) {
            Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => return Ok(()),
            other => other?,
        }
    }
}

/// The pod `target` names: itself, or the first of a workload's pods (by name).
pub(super) async fn pod_for(cl: &Cluster, target: &str) -> Result<String> {
    let Some((kind, name)) = target.split_once('/') else {
        return Ok(target.to_string());
    };
    let r = cl.resolve(kind).await?;
    if r.kind == "Pod" {
        return Ok(name.to_string());
    }
    let obj = cl.get_json(&format!("{}/{name}", r.path(cl.namespace_for(&r))), "application/json").await?;
    let Some(selector) = super::selector_string(&obj["spec"]["selector"]) else {
        bail!("cannot find the pods of {target}: it has no selector");
    };
    let pods: Api<Pod> = Api::namespaced(cl.client.clone(), &cl.namespace);
    let mut names: Vec<String> = pods
        .list(&ListParams::default().labels(&selector))
        .await
        .map_err(errors::api)?
        .items
        .into_iter()
        .filter_map(|p| p.metadata.name)
        .collect();
    names.sort();
    match names.first() {
        None => bail!("no pods of {target} (selector {selector})"),
        Some(first) => {
            if names.len() > 1 {
                eprintln!("Found {} pods, using pod/{first}", names.len());
            }
            Ok(first.clone())
        }
    }
}

/// kubectl's choice without `-c`: the only container, else the
/// `kubectl.kubernetes.io/default-container` annotation, else the first (saying so).
pub fn default_container(pod: &Value) -> Result<String> {
    let names = |key: &str| -> Vec<String> {
        pod["spec"][key]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|c| c["name"].as_str().map(str::to_string))
            .collect()
    };
    let containers = names("containers");
    let Some(first) = containers.first() else {
        bail!("pod {:?} has no containers", pod["metadata"]["name"].as_str().unwrap_or(""));
    };
    if containers.len() == 1 {
        return Ok(first.clone());
    }
    let chosen = pod["metadata"]["annotations"]["kubectl.kubernetes.io/default-container"]
        .as_str()
        .filter(|c| containers.iter().any(|n| n == c))
        .unwrap_or(first)
        .to_string();
    let mut all = containers.clone();
    all.extend(names("initContainers").into_iter().map(|n| format!("{n} (init)")));
    eprintln!("Defaulted container {chosen:?} out of: {}", all.join(", "));
    Ok(chosen)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_default_container_is_the_annotated_one_else_the_first() {
        let mut pod = json!({"metadata": {"name": "p"}, "spec": {"containers": [{"name": "a"}, {"name": "b"}]}});
        assert_eq!(default_container(&pod).expect("first"), "a");
        pod["metadata"]["annotations"] = json!({"kubectl.kubernetes.io/default-container": "b"});
        assert_eq!(default_container(&pod).expect("annotated"), "b");
        let single = json!({"spec": {"containers": [{"name": "only"}]}});
        assert_eq!(default_container(&single).expect("only"), "only");
        assert!(default_container(&json!({"spec": {}})).is_err());
    }
}
