//! kaji-controllers: the controller manager — the ReplicaSet, ReplicationController, Deployment,
//! Endpoints, EndpointSlice, disruption (PodDisruptionBudget status), DaemonSet, Job, CronJob,
//! TTL-after-finished, StatefulSet, node lifecycle, node IPAM, garbage collector, namespace, pod GC,
//! ServiceAccount, ResourceQuota, root CA publisher, ClusterRole aggregation, CSR approving, signing
//! and cleaning and local-path provisioner loops on `kube::runtime::Controller`, over shared caches,
//! behind an optional Lease.

pub mod certificates;
pub mod clusterroleaggregation;
pub mod cronjob;
pub mod daemonset;
pub mod deployment;
pub mod discovery;
pub mod disruption;
pub mod endpoints;
pub use kaji_component::events;
pub mod expectations;
pub mod gc;
pub mod http;
pub mod informer;
pub mod job;
pub mod localpath;
pub use kaji_component::leader;
pub mod meta;
pub mod metrics;
pub mod namespace;
pub mod nodeipam;
pub mod nodelifecycle;
pub mod podgc;
pub mod replicaset;
pub mod resourcequota;
pub mod rootca;
pub mod serviceaccount;
pub mod shared;
pub mod statefulset;
pub mod ttl;

use crate::informer::Informer;
use crate::leader::LeaderElection;
use crate::metrics::Metrics;
use crate::shared::Shared;
use futures::StreamExt;
use k8s_openapi::api::apps::v1::{ControllerRevision, DaemonSet, Deployment, ReplicaSet, StatefulSet};
use k8s_openapi::api::batch::v1::{CronJob, Job};
use k8s_openapi::api::certificates::v1::CertificateSigningRequest;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{
    ConfigMap, Endpoints, Namespace, Node, PersistentVolume, PersistentVolumeClaim, Pod, ReplicationController,
    ResourceQuota, Secret, Service, ServiceAccount,
};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::api::rbac::v1::ClusterRole;
use k8s_openapi::api::storage::v1::StorageClass;
use kube::api::Api;
use kube::runtime::watcher;
use std::net::SocketAddr;
use std::sync::Arc;
use tokio::sync::watch;
use tokio::task::JoinHandle;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("failed to listen on {addr}")]
    Listen {
        addr: SocketAddr,
        #[source]
        source: std::io::Error,
    },
    #[error("lost the leader lease {0}")]
    LostLease(String),
    #[error("a cache stopped before it synced")]
    CacheSync,
    #[error("controller manager task failed")]
    Join(#[source] tokio::task::JoinError),
    #[error("invalid node IPAM settings")]
    NodeIpam(#[source] nodeipam::cidr::Error),
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

#[derive(Clone, Debug)]
pub struct Config {
    pub leader_election: Option<LeaderElection>,
    /// Where to serve /healthz and /metrics (port 0 picks one); `None` serves nothing.
    pub metrics_addr: Option<SocketAddr>,
    /// Node health timing and the eviction rate.
    pub node_lifecycle: nodelifecycle::Settings,
    /// Pod CIDR allocation (`--allocate-node-cidrs`); `None` turns the node IPAM controller off.
    pub node_ipam: Option<nodeipam::Settings>,
    /// The garbage collector (`--enable-garbage-collector`); `None` turns it off.
    pub garbage_collector: Option<gc::Settings>,
    /// Emptying and finalizing deleted namespaces.
    pub namespace: namespace::Settings,
    /// Collecting orphaned, unscheduled terminating and excess terminated pods.
    pub pod_gc: podgc::Settings,
    /// The cluster CA bundle (PEM) published as `kube-root-ca.crt` in every namespace
    /// (`--root-ca-file`); `None` turns the root CA publisher off.
    pub root_ca: Option<String>,
    /// The cluster CA csrsigning issues with (`--cluster-signing-cert-file`/`-key-file`);
    /// `None` turns the signer off (the approver always runs).
    pub csr_signing: Option<certificates::signer::Settings>,
    /// The Job controller's pod failure back-off.
    pub job_backoff: job::backoff::Settings,
    /// The local-path provisioner (and its default `local-path` StorageClass); `None` turns it off.
    pub local_path: Option<localpath::Settings>,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            leader_election: None,
            metrics_addr: None,
            node_lifecycle: nodelifecycle::Settings::default(),
            node_ipam: Some(nodeipam::Settings::default()),
            garbage_collector: Some(gc::Settings::default()),
            namespace: namespace::Settings::default(),
            pod_gc: podgc::Settings::default(),
            root_ca: None,
            csr_signing: None,
            job_backoff: job::backoff::Settings::default(),
            local_path: None,
        }
    }
}

/// A running controller manager.
pub struct Handle {
    /// The bound /healthz and /metrics address, if serving.
    pub metrics_addr: Option<SocketAddr>,
    stop: watch::Sender<bool>,
    task: JoinHandle<Result<()>>,
}

impl Handle {
    /// A sender that stops the manager when it sends `true`.
    pub fn stopper(&self) -> watch::Sender<bool> {
        self.stop.clone()
    }

    /// Runs until stopped (or the lease is lost).
    pub async fn wait(self) -> Result<()> {
        self.task.await.map_err(Error::Join)?
    }

    /// Stops the controllers (reconciles in flight finish) and releases the lease.
    pub async fn shutdown(self) -> Result<()> {
        let _ = self.stop.send(true);
        self.wait().await
    }
}

/// Starts the manager: metrics server, leader election (if configured), caches, controllers.
pub async fn start(client: kube::Client, config: Config) -> Result<Handle> {
    if let Some(ipam) = &config.node_ipam {
        ipam.check().map_err(Error::NodeIpam)?;
    }
    let metrics = Arc::new(Metrics::default());
    let (stop, stop_rx) = watch::channel(false);
    let metrics_addr = match config.metrics_addr {
        Some(addr) => {
            let listener =
                tokio::net::TcpListener::bind(addr).await.map_err(|source| Error::Listen { addr, source })?;
            let bound = listener.local_addr().map_err(|source| Error::Listen { addr, source })?;
            tokio::spawn(http::serve(listener, metrics.clone(), stop_rx.clone()));
            Some(bound)
        }
        None => None,
    };
    let task = tokio::spawn(run(client, config, metrics, stop_rx));
    Ok(Handle { metrics_addr, stop, task })
}

async fn run(
    client: kube::Client,
    config: Config,
    metrics: Arc<Metrics>,
    mut stop: watch::Receiver<bool>,
) -> Result<()> {
    let work = controllers(client.clone(), &config, metrics, stop.clone());
    match leader::while_leading(&client, config.leader_election.as_ref(), &mut stop, work).await {
        leader::Led::Stopped => Ok(()),
        leader::Led::Done(r) => r,
        leader::Led::Lost(name) => Err(Error::LostLease(name)),
    }
}

/// Starts the caches, waits for them to sync, then runs every controller until `stop`.
async fn controllers(
    client: kube::Client,
    config: &Config,
    metrics: Arc<Metrics>,
    stop: watch::Receiver<bool>,
) -> Result<()> {
    let shared = || Shared::new(client.clone(), metrics.clone());
    let mut pods = Informer::<Pod>::new(Api::all(client.clone()));
    let mut sets = Informer::<ReplicaSet>::new(Api::all(client.clone()));

    let rs_ctx = Arc::new(replicaset::Ctx {
        shared: shared(),
        pods: pods.store(),
        owners: sets.store(),
        expectations: Default::default(),
    });
    let rs_triggers = (sets.subscribe(), pods.subscribe());
    // Kubernetes runs ReplicationControllers with the ReplicaSet controller's code; so does kaji.
    let mut rcs = Informer::<ReplicationController>::new(Api::all(client.clone()));
    let rc_ctx = Arc::new(replicaset::Ctx {
        shared: shared(),
        pods: pods.store(),
        owners: rcs.store(),
        expectations: Default::default(),
    });
    let rc_triggers = (rcs.subscribe(), pods.subscribe());
    let mut deployments = Informer::<Deployment>::new(Api::all(client.clone()));
    let d_ctx = Arc::new(deployment::Ctx { shared: shared(), sets: sets.store(), deployments: deployments.store() });
    let d_triggers = (deployments.subscribe(), sets.subscribe());
    let mut services = Informer::<Service>::new(Api::all(client.clone()));
    let mut endpoints = Informer::<Endpoints>::new(Api::all(client.clone()));
    let mut slices = Informer::<EndpointSlice>::new(Api::all(client.clone()));
    let ep_ctx = Arc::new(endpoints::Ctx {
        shared: shared(),
        services: services.store(),
        pods: pods.store(),
        endpoints: endpoints.store(),
    });
    let ep_triggers = (services.subscribe(), pods.subscribe(), endpoints.subscribe());
    let es_ctx = Arc::new(endpoints::slice::Ctx {
        shared: shared(),
        services: services.store(),
        pods: pods.store(),
        slices: slices.store(),
    });
    let es_triggers = (services.subscribe(), pods.subscribe(), slices.subscribe());
    let mut nodes = Informer::<Node>::new(Api::all(client.clone()));
    let mut leases = Informer::<Lease>::new(Api::namespaced(client.clone(), nodelifecycle::LEASE_NAMESPACE));
    let nl_ctx =
        Arc::new(nodelifecycle::Ctx::new(shared(), config.node_lifecycle, nodes.store(), leases.store(), pods.store()));
    let nl_triggers = (nodes.subscribe(), leases.subscribe(), pods.subscribe());
    let ipam_triggers = config.node_ipam.map(|settings| (settings, nodes.subscribe(), nodes.subscribe_deleted()));
    let mut namespaces = Informer::<Namespace>::new(Api::all(client.clone()));
    let ns_ctx =
        Arc::new(namespace::Ctx { shared: shared(), settings: config.namespace, namespaces: namespaces.store() });
    let ns_triggers = namespaces.subscribe();
    let mut accounts = Informer::<ServiceAccount>::with_config(
        Api::all(client.clone()),
        watcher::Config::default().fields(&format!("metadata.name={}", serviceaccount::DEFAULT)),
    );
    let sa_ctx =
        Arc::new(serviceaccount::Ctx { shared: shared(), namespaces: namespaces.store(), accounts: accounts.store() });
    let sa_triggers = (namespaces.subscribe(), accounts.subscribe());
    let mut root_cms = Informer::<ConfigMap>::with_config(
        Api::all(client.clone()),
        watcher::Config::default().fields(&format!("metadata.name={}", rootca::CONFIG_MAP)),
    );
    let rootca = config.root_ca.clone().map(|ca| {
        let ctx = Arc::new(rootca::Ctx {
            shared: shared(),
            ca,
            namespaces: namespaces.store(),
            config_maps: root_cms.store(),
        });
        (ctx, namespaces.subscribe(), root_cms.subscribe())
    });
    let mut csrs = Informer::<CertificateSigningRequest>::new(Api::all(client.clone()));
    let approver_ctx = Arc::new(certificates::approver::Ctx { shared: shared(), csrs: csrs.store() });
    let approver_triggers = csrs.subscribe();
    let cleaner_ctx = Arc::new(certificates::cleaner::Ctx { shared: shared(), csrs: csrs.store() });
    let signer = config.csr_signing.clone().map(|settings| {
        let ctx = Arc::new(certificates::signer::Ctx { shared: shared(), settings, csrs: csrs.store() });
        (ctx, csrs.subscribe())
    });
    let mut cluster_roles = Informer::<ClusterRole>::new(Api::all(client.clone()));
    let agg_ctx = Arc::new(clusterroleaggregation::Ctx { shared: shared(), roles: cluster_roles.store() });
    let agg_triggers = (cluster_roles.subscribe(), cluster_roles.subscribe());
    let podgc_ctx = Arc::new(podgc::Ctx::new(shared(), config.pod_gc, pods.store(), nodes.store()));
    let mut jobs = Informer::<Job>::new(Api::all(client.clone()));
    let job_ctx = Arc::new(job::Ctx::new(shared(), jobs.store(), pods.store(), config.job_backoff));
    let job_triggers = (jobs.subscribe(), pods.subscribe(), pods.subscribe());
    let ttl_ctx = Arc::new(ttl::Ctx { shared: shared(), jobs: jobs.store() });
    let ttl_triggers = jobs.subscribe();
    let mut cron_jobs = Informer::<CronJob>::new(Api::all(client.clone()));
    let cj_ctx = Arc::new(cronjob::Ctx::new(shared(), cron_jobs.store(), jobs.store()));
    let cj_triggers = (cron_jobs.subscribe(), jobs.subscribe());
    let mut daemon_sets = Informer::<DaemonSet>::new(Api::all(client.clone()));
    let mut revisions = Informer::<ControllerRevision>::new(Api::all(client.clone()));
    let ds_ctx =
        Arc::new(daemonset::Ctx::new(shared(), daemon_sets.store(), pods.store(), nodes.store(), revisions.store()));
    let ds_triggers = (daemon_sets.subscribe(), pods.subscribe(), nodes.subscribe(), revisions.subscribe());
    let mut stateful_sets = Informer::<StatefulSet>::new(Api::all(client.clone()));
    let sts_ctx = Arc::new(statefulset::Ctx {
        shared: shared(),
        sets: stateful_sets.store(),
        pods: pods.store(),
        revisions: revisions.store(),
    });
    let sts_triggers = (stateful_sets.subscribe(), pods.subscribe());
    let mut budgets = Informer::<PodDisruptionBudget>::new(Api::all(client.clone()));
    let pdb_ctx = Arc::new(disruption::Ctx {
        shared: shared(),
        budgets: budgets.store(),
        pods: pods.store(),
        replica_sets: sets.store(),
        replication_controllers: rcs.store(),
        deployments: deployments.store(),
        stateful_sets: stateful_sets.store(),
    });
    let pdb_triggers = (budgets.subscribe(), pods.subscribe());
    let mut quotas = Informer::<ResourceQuota>::new(Api::all(client.clone()));
    let mut all_cms = Informer::<ConfigMap>::new(Api::all(client.clone()));
    let mut secrets = Informer::<Secret>::new(Api::all(client.clone()));
    let mut quota_claims = Informer::<PersistentVolumeClaim>::new(Api::all(client.clone()));
    let rq_ctx = Arc::new(resourcequota::Ctx {
        shared: shared(),
        stores: resourcequota::Stores {
            quotas: quotas.store(),
            pods: pods.store(),
            services: services.store(),
            config_maps: all_cms.store(),
            secrets: secrets.store(),
            claims: quota_claims.store(),
            replication_controllers: rcs.store(),
            replica_sets: sets.store(),
            deployments: deployments.store(),
            stateful_sets: stateful_sets.store(),
            daemon_sets: daemon_sets.store(),
            jobs: jobs.store(),
            cron_jobs: cron_jobs.store(),
        },
    });
    let rq_own = quotas.subscribe().boxed();
    let rq_triggers = {
        use resourcequota::replenish as r;
        resourcequota::Triggers {
            quotas: quotas.subscribe_filtered(r("", "resourcequotas")).boxed(),
            pods: pods.subscribe_filtered(r("", "pods")).boxed(),
            services: services.subscribe_filtered(r("", "services")).boxed(),
            config_maps: all_cms.subscribe_filtered(r("", "configmaps")).boxed(),
            secrets: secrets.subscribe_filtered(r("", "secrets")).boxed(),
            claims: quota_claims.subscribe_filtered(r("", "persistentvolumeclaims")).boxed(),
            replication_controllers: rcs.subscribe_filtered(r("", "replicationcontrollers")).boxed(),
            replica_sets: sets.subscribe_filtered(r("apps", "replicasets")).boxed(),
            deployments: deployments.subscribe_filtered(r("apps", "deployments")).boxed(),
            stateful_sets: stateful_sets.subscribe_filtered(r("apps", "statefulsets")).boxed(),
            daemon_sets: daemon_sets.subscribe_filtered(r("apps", "daemonsets")).boxed(),
            jobs: jobs.subscribe_filtered(r("batch", "jobs")).boxed(),
            cron_jobs: cron_jobs.subscribe_filtered(r("batch", "cronjobs")).boxed(),
        }
    };
    let local_path = config.local_path.clone().map(|settings| {
        let mut claims = Informer::<PersistentVolumeClaim>::new(Api::all(client.clone()));
        let mut volumes = Informer::<PersistentVolume>::new(Api::all(client.clone()));
        let classes = Informer::<StorageClass>::new(Api::all(client.clone()));
        let ctx = Arc::new(localpath::Ctx {
            shared: shared(),
            settings,
            claims: claims.store(),
            volumes: volumes.store(),
            classes: classes.store(),
            pods: pods.store(),
        });
        let triggers = (claims.subscribe(), volumes.subscribe(), claims.subscribe());
        (ctx, triggers, (claims, volumes, classes))
    });

    let stores_ready = {
        let (p, s, rc, d) = (pods.store(), sets.store(), rcs.store(), deployments.store());
        let (svc, ep, es) = (services.store(), endpoints.store(), slices.store());
        let (n, l, ns) = (nodes.store(), leases.store(), namespaces.store());
        let (sa, cm, cr) = (accounts.store(), root_cms.store(), cluster_roles.store());
        let csr = csrs.store();
        let (j, cj) = (jobs.store(), cron_jobs.store());
        let (dss, crs, sts) = (daemon_sets.store(), revisions.store(), stateful_sets.store());
        let pdbs = budgets.store();
        let (rq, acm, sec, qc) = (quotas.store(), all_cms.store(), secrets.store(), quota_claims.store());
        async move {
            p.wait_until_ready().await.is_ok()
                && s.wait_until_ready().await.is_ok()
                && rc.wait_until_ready().await.is_ok()
                && d.wait_until_ready().await.is_ok()
                && svc.wait_until_ready().await.is_ok()
                && ep.wait_until_ready().await.is_ok()
                && es.wait_until_ready().await.is_ok()
                && n.wait_until_ready().await.is_ok()
                && l.wait_until_ready().await.is_ok()
                && ns.wait_until_ready().await.is_ok()
                && sa.wait_until_ready().await.is_ok()
                && cm.wait_until_ready().await.is_ok()
                && cr.wait_until_ready().await.is_ok()
                && csr.wait_until_ready().await.is_ok()
                && j.wait_until_ready().await.is_ok()
                && cj.wait_until_ready().await.is_ok()
                && dss.wait_until_ready().await.is_ok()
                && crs.wait_until_ready().await.is_ok()
                && sts.wait_until_ready().await.is_ok()
                && pdbs.wait_until_ready().await.is_ok()
                && rq.wait_until_ready().await.is_ok()
                && acm.wait_until_ready().await.is_ok()
                && sec.wait_until_ready().await.is_ok()
                && qc.wait_until_ready().await.is_ok()
        }
    };
    pods.spawn(stop.clone());
    sets.spawn(stop.clone());
    rcs.spawn(stop.clone());
    deployments.spawn(stop.clone());
    services.spawn(stop.clone());
    endpoints.spawn(stop.clone());
    slices.spawn(stop.clone());
    let node_store = nodes.store();
    nodes.spawn(stop.clone());
    leases.spawn(stop.clone());
    namespaces.spawn(stop.clone());
    accounts.spawn(stop.clone());
    root_cms.spawn(stop.clone());
    cluster_roles.spawn(stop.clone());
    csrs.spawn(stop.clone());
    jobs.spawn(stop.clone());
    cron_jobs.spawn(stop.clone());
    daemon_sets.spawn(stop.clone());
    stateful_sets.spawn(stop.clone());
    revisions.spawn(stop.clone());
    budgets.spawn(stop.clone());
    quotas.spawn(stop.clone());
    all_cms.spawn(stop.clone());
    secrets.spawn(stop.clone());
    quota_claims.spawn(stop.clone());
    let local_path = match local_path {
        Some((ctx, triggers, (claims, volumes, classes))) => {
            let stores = (claims.store(), volumes.store(), classes.store());
            claims.spawn(stop.clone());
            volumes.spawn(stop.clone());
            classes.spawn(stop.clone());
            let ready = stores.0.wait_until_ready().await.is_ok()
                && stores.1.wait_until_ready().await.is_ok()
                && stores.2.wait_until_ready().await.is_ok();
            if !ready {
                return if *stop.borrow() { Ok(()) } else { Err(Error::CacheSync) };
            }
            Some((ctx, triggers))
        }
        None => None,
    };
    let mut stop_wait = stop.clone();
    // A stop while the caches sync ends their watches too: check the stop first so a manager
    // stopped early shuts down cleanly instead of reporting a cache failure.
    tokio::select! {
        biased;
        _ = stop_wait.wait_for(|s| *s) => return Ok(()),
        ok = stores_ready => if !ok {
            return if *stop.borrow() { Ok(()) } else { Err(Error::CacheSync) };
        },
    }
    tracing::info!("caches synced; starting controllers");
    let ipam = match ipam_triggers {
        Some((settings, triggers, deleted)) => {
            let ctx = nodeipam::Ctx::new(shared(), settings, node_store).map_err(Error::NodeIpam)?;
            Some((Arc::new(ctx), triggers, deleted))
        }
        None => None,
    };
    let stopped = |mut rx: watch::Receiver<bool>| async move {
        let _ = rx.wait_for(|s| *s).await;
    };
    tokio::join!(
        replicaset::run(rs_ctx, rs_triggers.0, rs_triggers.1, stopped(stop.clone())),
        replicaset::run(rc_ctx, rc_triggers.0, rc_triggers.1, stopped(stop.clone())),
        deployment::run(d_ctx, d_triggers.0, d_triggers.1, stopped(stop.clone())),
        endpoints::run(ep_ctx, ep_triggers.0, ep_triggers.1, ep_triggers.2, stopped(stop.clone())),
        endpoints::slice::run(es_ctx, es_triggers.0, es_triggers.1, es_triggers.2, stopped(stop.clone())),
        nodelifecycle::run(nl_ctx, nl_triggers.0, nl_triggers.1, nl_triggers.2, stopped(stop.clone())),
        async {
            if let Some((ctx, triggers, deleted)) = ipam {
                nodeipam::run(ctx, triggers, deleted, stopped(stop.clone())).await;
            }
        },
        async {
            if let Some(settings) = config.garbage_collector {
                gc::run(shared(), settings, stop.clone()).await;
            }
        },
        namespace::run(ns_ctx, ns_triggers, stopped(stop.clone())),
        podgc::run(podgc_ctx, stopped(stop.clone())),
        disruption::run(pdb_ctx, pdb_triggers.0, pdb_triggers.1, stopped(stop.clone())),
        serviceaccount::run(sa_ctx, sa_triggers.0, sa_triggers.1, stopped(stop.clone())),
        async {
            if let Some((ctx, namespaces, config_maps)) = rootca {
                rootca::run(ctx, namespaces, config_maps, stopped(stop.clone())).await;
            }
        },
        certificates::approver::run(approver_ctx, approver_triggers, stopped(stop.clone())),
        certificates::cleaner::run(cleaner_ctx, stopped(stop.clone())),
        async {
            if let Some((ctx, triggers)) = signer {
                certificates::signer::run(ctx, triggers, stopped(stop.clone())).await;
            }
        },
        clusterroleaggregation::run(agg_ctx, agg_triggers.0, agg_triggers.1, stopped(stop.clone())),
        job::run(
            job_ctx,
            job_triggers.0,
            job_triggers.1,
            job_triggers.2.filter_map(|p| futures::future::ready(p.ok())),
            stopped(stop.clone())
        ),
        ttl::run(ttl_ctx, ttl_triggers, stopped(stop.clone())),
        cronjob::run(cj_ctx, cj_triggers.0, cj_triggers.1, stopped(stop.clone())),
        daemonset::run(ds_ctx, ds_triggers.0, ds_triggers.1, ds_triggers.2, ds_triggers.3, stopped(stop.clone())),
        statefulset::run(sts_ctx, sts_triggers.0, sts_triggers.1, stopped(stop.clone())),
        resourcequota::run(rq_ctx, rq_own, rq_triggers, stopped(stop.clone())),
        async {
            if let Some((ctx, (claims, volumes, claims_for_volumes))) = local_path {
                localpath::run(ctx, claims, volumes, claims_for_volumes, stopped(stop.clone())).await;
            }
        },
    );
    Ok(())
}
