//! `kaji lab node add`: one more node in a running lab, made exactly as `up` makes its nodes (its
//! own network namespace on the lab bridge, the demo image, kaji-agent and kaji-proxy), recorded in
//! `lab.json` so `status`, `logs`, `restart` and `down` know it.

use super::topology::{Lab, PREFIX_LEN};
use super::{image, net, procs, security, step, up, State};
use anyhow::{bail, Result};
use k8s_openapi::api::core::v1::Node;
use kube::api::Api;
use std::time::{Duration, Instant};

/// The most nodes a lab has (node IPs are 172.30.0.11 up to .210).
const MAX_NODES: u8 = 200;

pub async fn add(mut state: State) -> Result<()> {
    if !nix::unistd::geteuid().is_root() {
        bail!("kaji lab node add needs root: it creates a network namespace, cgroups and mounts");
    }
    let lab = state.lab.clone();
    if lab.nodes >= MAX_NODES {
        bail!("the lab already has {MAX_NODES} nodes, the most it can have");
    }
    let running = state.components.iter().any(|c| procs::running(&lab.dir, c).is_some());
    if !running {
        bail!("the lab in {} is not running; start it with `kaji lab up`", lab.dir.display());
    }
    let i = lab.nodes + 1;
    if net::exists(&lab.node_netns(i)) {
        bail!(
            "network namespace {} exists already (a node add that failed half-way? `kaji lab down` removes it)",
            lab.node_netns(i)
        );
    }
    // Recorded first: whatever the steps below leave running, `down` finds and removes.
    state.lab = Lab { nodes: i, ..lab };
    state.components = state.lab.components();
    state.save()?;
    let lab = &state.lab;
    let what = format!("creating network namespace {} (eth0 {}/{PREFIX_LEN})", lab.node_netns(i), Lab::node_ip(i));
    step(&what, async { net::run_plan(&lab.node_net_plan(i)) }).await?;
    let client = security::client(lab).await?;
    step("issuing its serving certificate and a new bootstrap token", async {
        security::serving_pair(lab, &lab.pki().load_ca()?, i)?;
        security::join_token(lab, &client).await
    })
    .await?;
    let rootfs = lab.dir.join(format!("demo-rootfs-{i}"));
    step(&format!("building the demo image from {}", image::BUSYBOX), async { image::busybox_rootfs(&rootfs) }).await?;
    let name = Lab::node_name(i);
    let what = format!("starting node {name} (kaji-agent, kaji-proxy in {}, {})", lab.node_netns(i), Lab::node_ip(i));
    let started = step(&what, async {
        image::import(lab, i, &rootfs)?;
        procs::spawn(&lab.dir, state.component(&format!("agent-{i}"))?)?;
        procs::spawn(&lab.dir, state.component(&format!("proxy-{i}"))?).map(drop)
    })
    .await;
    let _ = std::fs::remove_dir_all(&rootfs);
    started?;
    step(&format!("waiting for {name} to be Ready"), wait_ready(&client, &name, Duration::from_secs(60))).await?;
    step(&format!("routing its pod CIDR from {}", lab.netns()), up::route_pods(lab, &client)).await?;
    println!("node {name} added: the lab has {i} nodes (`kaji lab logs agent-{i}`, `kaji lab restart proxy-{i}`)");
    Ok(())
}

async fn wait_ready(client: &kube::Client, name: &str, timeout: Duration) -> Result<()> {
    let nodes = Api::<Node>::all(client.clone());
    let deadline = Instant::now() + timeout;
    loop {
        if nodes.get_opt(name).await?.is_some_and(|n| up::ready(&n)) {
            return Ok(());
        }
        if Instant::now() > deadline {
            bail!("{name} not Ready after {timeout:?} (see agent-{}.log)", name.rsplit('-').next().unwrap_or("?"));
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}
