//! Node IPAM controller. Desired: every node holds a pod CIDR (`spec.podCIDR` and `spec.podCIDRs`),
//! a node-sized subnet of the cluster CIDR that no other node holds. Observed: the nodes' CIDRs,
//! which are also the allocator's only state — rebuilt from the nodes at start, freed on deletion.

pub mod cidr;

use crate::shared::Shared;
use cidr::{Cidr, CidrSet};
use futures::{Stream, StreamExt};
use k8s_openapi::api::core::v1::Node;
use kube::api::{Api, PostParams};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::reflector::Store;
use kube::runtime::watcher;
use kube::ResourceExt;
use std::sync::{Arc, Mutex, MutexGuard};

pub const NAME: &str = "nodeipam";

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("failed to {action} for node {node}")]
    Api {
        action: &'static str,
        node: String,
        #[source]
        source: kube::Error,
    },
    #[error("no pod CIDR left in {cluster} for node {node}")]
    Exhausted { node: String, cluster: Cidr },
}

/// The controller's flags.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Settings {
    /// `--cluster-cidr`.
    pub cluster_cidr: Cidr,
    /// `--node-cidr-mask-size`.
    pub node_mask_size: u8,
}

impl Default for Settings {
    fn default() -> Self {
        Self { cluster_cidr: "10.244.0.0/16".parse().expect("a valid literal CIDR"), node_mask_size: 24 }
    }
}

impl Settings {
    /// An empty allocator for these settings, or why they are unusable.
    pub fn check(&self) -> Result<(), cidr::Error> {
        CidrSet::new(self.cluster_cidr, self.node_mask_size).map(|_| ())
    }
}

pub struct Ctx {
    pub shared: Shared,
    pub settings: Settings,
    pub nodes: Store<Node>,
    cidrs: Mutex<CidrSet>,
}

impl Ctx {
    /// The allocator rebuilt from the CIDRs the (synced) node cache shows.
    pub fn new(shared: Shared, settings: Settings, nodes: Store<Node>) -> Result<Self, cidr::Error> {
        let held = nodes.state().iter().flat_map(|n| node_cidrs(n)).collect::<Vec<_>>();
        let (set, foreign) = CidrSet::rebuild(settings.cluster_cidr, settings.node_mask_size, held)?;
        for c in foreign {
            tracing::warn!(cidr = %c, cluster = %settings.cluster_cidr, "a node holds a pod CIDR outside the cluster CIDR");
        }
        tracing::info!(cluster = %settings.cluster_cidr, allocated = set.allocated(), "node CIDR allocator rebuilt");
        Ok(Self { shared, settings, nodes, cidrs: Mutex::new(set) })
    }

    fn cidrs(&self) -> MutexGuard<'_, CidrSet> {
        // A panic while holding the lock cannot leave the set half-updated: every method is one step.
        self.cidrs.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

/// The node's pod CIDRs (`podCIDRs`, or the single `podCIDR`) that parse.
pub fn node_cidrs(node: &Node) -> Vec<Cidr> {
    let Some(spec) = node.spec.as_ref() else { return Vec::new() };
    let list = match (&spec.pod_cidrs, &spec.pod_cidr) {
        (Some(list), _) if !list.is_empty() => list.clone(),
        (_, Some(one)) if !one.is_empty() => vec![one.clone()],
        _ => Vec::new(),
    };
    list.iter().filter_map(|s| s.parse().ok()).collect()
}

#[tracing::instrument(skip_all, fields(controller = NAME, object = %node.name_any()))]
pub async fn reconcile(node: Arc<Node>, ctx: Arc<Ctx>) -> Result<Action, Error> {
    let key = node.name_any();
    ctx.shared.reconciled(NAME, &key, sync(&node, &ctx, &key)).await
}

pub fn error_policy(node: Arc<Node>, err: &Error, ctx: Arc<Ctx>) -> Action {
    ctx.shared.failed(NAME, &node.name_any(), err)
}

async fn sync(node: &Node, ctx: &Ctx, name: &str) -> Result<Action, Error> {
    if node.metadata.deletion_timestamp.is_some() {
        return Ok(Action::await_change());
    }
    let held = node_cidrs(node);
    let has_cidr = node.spec.as_ref().is_some_and(|s| {
        s.pod_cidrs.as_ref().is_some_and(|l| !l.is_empty()) || s.pod_cidr.as_ref().is_some_and(|c| !c.is_empty())
    });
    if has_cidr {
        let mut cidrs = ctx.cidrs();
        for c in &held {
            if let Err(e) = cidrs.occupy(c) {
                tracing::debug!(node = %name, error = %e, "not tracking the node's pod CIDR");
            }
        }
        return Ok(Action::await_change());
    }
    let Some(cidr) = ctx.cidrs().allocate() else {
        let cluster = ctx.settings.cluster_cidr;
        tracing::warn!(node = %name, cluster = %cluster, "no pod CIDR left to allocate");
        let message = format!("Node {name} status is now: CIDRNotAvailable");
        ctx.shared.recorder.normal(node, "CIDRNotAvailable", message).await;
        return Err(Error::Exhausted { node: name.to_string(), cluster });
    };
    let mut next = node.clone();
    let spec = next.spec.get_or_insert_with(Default::default);
    spec.pod_cidr = Some(cidr.to_string());
    spec.pod_cidrs = Some(vec![cidr.to_string()]);
    let api: Api<Node> = Api::all(ctx.shared.client.clone());
    match api.replace(name, &PostParams::default(), &next).await {
        Ok(_) => {
            tracing::info!(node = %name, cidr = %cidr, "allocated pod CIDR");
            Ok(Action::await_change())
        }
        Err(source) => {
            // Not written (a stale cache, a deleted node): the CIDR is still free.
            if let Err(e) = ctx.cidrs().release(&cidr) {
                tracing::error!(cidr = %cidr, error = %e, "cannot release an allocated CIDR");
            }
            match source {
                kube::Error::Api(s) if s.code == 404 => Ok(Action::await_change()),
                source => Err(Error::Api { action: "set the pod CIDR", node: name.to_string(), source }),
            }
        }
    }
}

/// Frees the CIDRs of deleted nodes.
async fn release_deleted(ctx: Arc<Ctx>, deleted: impl Stream<Item = Node> + Send + 'static) {
    let mut deleted = std::pin::pin!(deleted);
    while let Some(node) = deleted.next().await {
        for c in node_cidrs(&node) {
            match ctx.cidrs().release(&c) {
                Ok(()) => tracing::info!(node = %node.name_any(), cidr = %c, "released pod CIDR"),
                Err(e) => tracing::debug!(node = %node.name_any(), error = %e, "not releasing"),
            }
        }
    }
}

/// Runs the controller until `stop` resolves (and the deletion stream ends with its watch).
pub async fn run(
    ctx: Arc<Ctx>,
    nodes: impl Stream<Item = Result<Node, watcher::Error>> + Send + 'static,
    deleted: impl Stream<Item = Node> + Send + 'static,
    stop: impl std::future::Future<Output = ()> + Send + Sync + 'static,
) {
    let controller = Controller::for_stream(nodes, ctx.nodes.clone())
        .graceful_shutdown_on(stop)
        .run(reconcile, error_policy, ctx.clone())
        .for_each(|_| futures::future::ready(()));
    futures::join!(controller, release_deleted(ctx, deleted));
}
