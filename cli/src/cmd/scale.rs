//! `kaji scale`: sets `spec.replicas` through the `scale` subresource (autoscaling/v1 Scale).

use super::single;
use crate::cluster::Cluster;
use crate::errors;
use crate::output::emit;
use anyhow::{bail, Result};
use serde_json::{json, Value};

#[derive(clap::Args, Debug)]
pub struct Args {
    /// deployment/NAME, replicaset/NAME, statefulset/NAME or replicationcontroller/NAME (also TYPE NAME).
    #[arg(required = true, value_name = "TYPE/NAME")]
    pub target: Vec<String>,
    /// The new number of replicas.
    #[arg(long, required = true)]
    pub replicas: u32,
    /// Only scale if the current number of replicas is this (a precondition).
    #[arg(long)]
    pub current_replicas: Option<u32>,
}

pub async fn run(cl: &Cluster, args: Args) -> Result<()> {
    let (kind, name) = single(&args.target)?;
    let r = cl.resolve(&kind).await?;
    let uri = format!("{}/{name}/scale", r.path(cl.namespace_for(&r)));
    let mut patch = json!({"spec": {"replicas": args.replicas}});
    if let Some(expected) = args.current_replicas {
        let scale = cl.get_json(&uri, "application/json").await?;
        let current = scale["spec"]["replicas"].as_u64().unwrap_or(0);
        if current != u64::from(expected) {
            bail!("expected replicas to be {expected}, was {current}");
        }
        // The precondition holds only for the version read.
        patch["metadata"] = json!({"resourceVersion": scale["metadata"]["resourceVersion"]});
    }
    let req = http::Request::patch(&uri)
        .header(http::header::CONTENT_TYPE, "application/merge-patch+json")
        .header(http::header::ACCEPT, "application/json")
        .body(serde_json::to_vec(&patch)?)?;
    let _: Value = cl.client.request(req).await.map_err(errors::api)?;
    emit(&format!("{}/{name} scaled\n", r.qualified_kind()))
}
