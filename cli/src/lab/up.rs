//! `kaji lab up` and `kaji lab restart`: checks, network namespaces, control plane, forwarder,
//! nodes, demo — one progress line per step.

use super::topology::{self, Lab, BRIDGE, BRIDGE_IP, PREFIX_LEN, REGISTRY, UPSTREAM_DOMAIN};
use super::{demo, deps, dns, image, net, procs, registry, security, step, State};
use anyhow::{bail, Context, Result};
use k8s_openapi::api::core::v1::{Endpoints, Node};
use kube::api::{Api, ListParams};
use std::time::{Duration, Instant};

pub async fn up(lab: Lab, with_demo: bool, install: bool) -> Result<()> {
    if !nix::unistd::geteuid().is_root() {
        bail!("kaji lab needs root: it creates network namespaces, cgroups and mounts (sudo kaji lab up)");
    }
    // Outside a progress step: the installer prints one line per package it installs.
    deps::ensure(install)?;
    step("checking what the lab needs", async { preflight(&lab) }).await?;
    std::fs::create_dir_all(&lab.dir).with_context(|| format!("cannot create {}", lab.dir.display()))?;
    trust_dir(&lab.dir)?;
    // Absolute, so the leftover check recognises mounts and command lines below it.
    let lab = Lab { dir: lab.dir.canonicalize()?, ..lab };
    let state = State { lab: lab.clone(), components: lab.components() };
    state.save()?;
    let result = start(&state, with_demo).await;
    if result.is_err() {
        let dir = lab.dir.display();
        eprintln!("kaji lab up failed; what it started is still running: `kaji lab down --dir {dir}` removes it (logs in {dir})");
    }
    result
}

/// The lab's directory holds its CA key and admin kubeconfig, and the default one is in /tmp:
/// another user who made it first (or a symlink in its place) would own the cluster. It must be a
/// directory of root's that no one else may write; it is left traversable (0711) for the pods of
/// `hostUsers: false`, whose root is nobody on the host.
fn trust_dir(dir: &std::path::Path) -> Result<()> {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    let meta = std::fs::symlink_metadata(dir).with_context(|| format!("cannot read {}", dir.display()))?;
    if !meta.is_dir() {
        bail!("{} is not a directory (a symlink?): refusing to use it as the lab's directory", dir.display());
    }
    if meta.uid() != 0 {
        bail!(
            "{} is owned by uid {}, not root: refusing to use it (remove it or pass --dir)",
            dir.display(),
            meta.uid()
        );
    }
    if meta.mode() & 0o777 != 0o711 {
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o711))
            .with_context(|| format!("cannot restrict {}", dir.display()))?;
    }
    Ok(())
}

async fn start(state: &State, with_demo: bool) -> Result<()> {
    let lab = &state.lab;
    let what = format!("creating network namespace {} (bridge {BRIDGE} {BRIDGE_IP}/{PREFIX_LEN})", lab.netns());
    step(&what, async { net::run_plan(&lab.lab_net_plan()) }).await?;
    for i in lab.node_ids() {
        let what = format!("creating network namespace {} (eth0 {}/{PREFIX_LEN})", lab.node_netns(i), Lab::node_ip(i));
        step(&what, async { net::run_plan(&lab.node_net_plan(i)) }).await?;
    }
    let what = "making the lab's certificates (CA, apiserver, control plane, node serving pairs)";
    step(what, async { security::certificates(lab) }).await?;
    if lab.ha {
        for i in 1..=topology::ETCD_MEMBERS {
            let (name, client, _) = Lab::etcd_member(i);
            step(&format!("starting {name} in {} ({client})", lab.netns()), spawn(state, &name)).await?;
        }
    }
    for (name, port) in lab.apiserver_names().into_iter().zip(lab.apiserver_ports()) {
        let store = if lab.ha { "etcd" } else { "embedded store" };
        let what = format!("starting kaji-{name} in {} ({BRIDGE_IP}:{port}, {store})", lab.netns());
        step(&what, spawn(state, &name)).await?;
    }
    let what = format!("starting the API forwarder (127.0.0.1:{} to {})", lab.port, lab.netns());
    step(&what, spawn(state, "forward")).await?;
    let what = format!("starting docker-registry in {} ({REGISTRY})", lab.netns());
    step(&what, async {
        registry::write_config(lab)?;
        spawn(state, "registry").await
    })
    .await?;
    let what = format!(
        "starting dnsmasq in {} ({BRIDGE_IP}:53, the nodes' resolver: answers {UPSTREAM_DOMAIN}, forwards nothing)",
        lab.netns()
    );
    step(&what, async {
        std::fs::write(lab.resolv_conf(), Lab::resolv_conf_text()).context("cannot write the lab's resolv.conf")?;
        spawn(state, "dns-upstream").await
    })
    .await?;
    let client = security::client(lab).await?;
    // On etcd the apiservers answer once the members have elected a leader: give it longer.
    let api_timeout = Duration::from_secs(if lab.ha { 90 } else { 30 });
    step("waiting for the API", wait_ready(&client, api_timeout)).await?;
    if lab.ha {
        let what = format!("waiting for the {} apiservers to join the kubernetes Endpoints", topology::HA_APISERVERS);
        step(&what, wait_apiservers(&client, lab.apiserver_ports().collect())).await?;
    }
    let kubeconfig = lab.kubeconfig();
    let what = "binding the controller manager (system:kube-controller-manager) to cluster-admin, as install.sh";
    step(what, security::bindings(&client)).await?;
    for c in lab.elected_names() {
        step(&format!("starting kaji-{c} in {}", lab.netns()), spawn(state, &c)).await?;
    }
    let rootfs = lab.dir.join("demo-rootfs");
    step(&format!("building the demo image from {}", image::BUSYBOX), async { image::busybox_rootfs(&rootfs) }).await?;
    let what = format!("pushing it to the registry as {REGISTRY}/{}", registry::SEED);
    step(&what, registry::seed(lab, &rootfs)).await?;
    let what = "creating the nodes' bootstrap token (kube-system Secret, 24h) and bootstrap kubeconfig";
    step(what, security::join_token(lab, &client)).await?;
    for i in lab.node_ids() {
        let what = format!(
            "starting node {} (kaji-agent, kaji-proxy in {}, {})",
            Lab::node_name(i),
            lab.node_netns(i),
            Lab::node_ip(i)
        );
        step(&what, async {
            image::import(lab, i, &rootfs)?;
            spawn(state, &format!("agent-{i}")).await?;
            spawn(state, &format!("proxy-{i}")).await
        })
        .await?;
    }
    let _ = std::fs::remove_dir_all(&rootfs);
    step(
        &format!("waiting for {} node(s) to be Ready (each joins with the token)", lab.nodes),
        wait_nodes(&client, lab.nodes),
    )
    .await?;
    step(&format!("routing the pod CIDRs from {} to the nodes", lab.netns()), route_pods(lab, &client)).await?;
    let what = format!("building the kaji-dns image and pushing it to the registry as {REGISTRY}/{}", dns::IMAGE);
    step(&what, async { registry::publish(lab, dns::image(&lab.dir.join("dns-rootfs"))?, dns::IMAGE).await }).await?;
    step(&dns::describe(), dns::apply(&client, &lab.pod_server())).await?;
    if with_demo {
        let what =
            format!("applying the demo workload (namespace demo: deployment hello x{}, service hello)", lab.nodes);
        step(&what, demo::apply(&client, lab.nodes)).await?;
        let what = "waiting for the demo pods, one per node";
        step(what, demo::wait_spread(&client, lab.nodes, Duration::from_secs(120))).await?;
    }
    let what = format!("waiting for cluster DNS ({} kaji-dns pods ready)", dns::REPLICAS);
    step(&what, dns::wait_ready(&client, Duration::from_secs(120))).await?;
    step("checking that every component still runs", async { all_running(state) }).await?;
    let dir = lab.dir.display();
    let dir_flag =
        if lab.dir == std::path::Path::new(super::DEFAULT_DIR) { String::new() } else { format!(" --dir {dir}") };
    println!(
        "\nkaji lab is up: {} node(s), API {} (TLS, RBAC; forwarded into {}); files in {dir}",
        lab.nodes,
        lab.server(),
        lab.netns()
    );
    println!("  export KUBECONFIG={}", kubeconfig.display());
    if with_demo {
        println!("  kubectl get pods -n demo -o wide             # one pod per node");
        println!("  kubectl logs -n demo deploy/hello -c peers   # answers from the other nodes");
    }
    println!("  kaji lab status{dir_flag}        # components and nodes");
    println!("  kaji lab logs agent-1{dir_flag}  # any component's log");
    println!("  kaji lab down{dir_flag}          # stop it (add --purge to delete its files)");
    Ok(())
}

/// Refuses early and clearly: not root, a tool or binary missing, this lab (or one on this port)
/// already there, the port taken.
fn preflight(lab: &Lab) -> Result<()> {
    if !nix::unistd::geteuid().is_root() {
        bail!("kaji lab needs root: it creates network namespaces, cgroups and mounts");
    }
    for (tool, flag, package) in [(net::IP, "-V", "iproute2"), (procs::NSENTER, "--version", "util-linux")] {
        let ok = std::process::Command::new(tool).arg(flag).output().is_ok_and(|o| o.status.success());
        if !ok {
            bail!("`{tool}` is missing (apt-get install {package})");
        }
    }
    for c in lab.components() {
        procs::sibling_binary(&c.binary)?;
    }
    // Not a lab process: its image is built from it.
    procs::sibling_binary("kaji-dns")?;
    if !std::path::Path::new(image::BUSYBOX).exists() {
        bail!("{} is missing: the demo image is built from it (apt-get install busybox-static)", image::BUSYBOX);
    }
    if let Ok(old) = State::load(&lab.dir) {
        if let Some((c, pid)) = old.components.iter().find_map(|c| procs::running(&lab.dir, c).map(|p| (c, p))) {
            bail!(
                "a lab is already running from {} ({} pid {pid}); run `kaji lab down --dir {}` first",
                lab.dir.display(),
                c.name,
                lab.dir.display()
            );
        }
    }
    if let Some(ns) = net::lab_namespaces(lab).first() {
        bail!("network namespace {ns} exists: a lab on port {} is up or was not taken down (`kaji lab down --dir <its dir>`)", lab.port);
    }
    std::net::TcpListener::bind(("127.0.0.1", lab.port))
        .with_context(|| format!("127.0.0.1:{} is taken; pick another --port", lab.port))?;
    Ok(())
}

async fn spawn(state: &State, name: &str) -> Result<()> {
    let c = state.component(name)?;
    procs::spawn(&state.lab.dir, c).map(drop)
}

/// A component that started and then exited (a port taken, a failed bootstrap) fails `up`
/// instead of leaving a lab that only looks up.
fn all_running(state: &State) -> Result<()> {
    let dead: Vec<String> = state
        .components
        .iter()
        .filter(|c| procs::running(&state.lab.dir, c).is_none())
        .map(|c| format!("{} (see {})", c.name, procs::log_file(&state.lab.dir, &c.name).display()))
        .collect();
    if dead.is_empty() {
        Ok(())
    } else {
        bail!("exited after starting: {}", dead.join(", "))
    }
}

/// `kaji lab restart <component>`: stop it (if running) and start it as `up` did.
pub fn restart(state: &State, name: &str) -> Result<()> {
    let c = state.component(name)?;
    let dir = &state.lab.dir;
    if let Some(pid) = procs::running(dir, c) {
        eprint!("stopping {name} (pid {pid}) ... ");
        if !procs::stop(pid, &c.binary, Duration::from_secs(15)) {
            eprintln!("failed: still running");
            bail!("{name} (pid {pid}) did not stop");
        }
        eprintln!("done");
    }
    eprint!("starting {name} ... ");
    match procs::spawn(dir, c) {
        Ok(pid) => {
            eprintln!("done (pid {pid})");
            Ok(())
        }
        Err(e) => {
            eprintln!("failed: {e:#}");
            Err(e)
        }
    }
}

async fn wait_ready(client: &kube::Client, timeout: Duration) -> Result<()> {
    let deadline = Instant::now() + timeout;
    loop {
        match client.apiserver_version().await {
            Ok(_) => return Ok(()),
            Err(e) if Instant::now() > deadline => {
                bail!("no answer through the forwarder after {timeout:?}: {e} (see apiserver*.log, forward.log)")
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
        }
    }
}

/// Every apiserver listed in the `kubernetes` Endpoints (its lease reconciler runs, so it is
/// up and on the shared store); one that died starting is named.
async fn wait_apiservers(client: &kube::Client, ports: Vec<u16>) -> Result<()> {
    let eps = Api::<Endpoints>::namespaced(client.clone(), "default");
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let listed: Vec<i32> = eps
            .get_opt("kubernetes")
            .await
            .ok()
            .flatten()
            .and_then(|e| e.subsets)
            .unwrap_or_default()
            .iter()
            .flat_map(|s| s.ports.iter().flatten().map(|p| p.port))
            .collect();
        let missing: Vec<usize> =
            (1..).zip(&ports).filter(|(_, p)| !listed.contains(&i32::from(**p))).map(|(i, _)| i).collect();
        if missing.is_empty() {
            return Ok(());
        }
        if Instant::now() > deadline {
            let logs: Vec<String> = missing.iter().map(|i| format!("apiserver-{i}.log")).collect();
            bail!("apiserver(s) {missing:?} not in the kubernetes Endpoints after 60s (see {})", logs.join(", "));
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Whether the Node reports Ready=True.
pub fn ready(node: &Node) -> bool {
    node.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

/// Routes every node's pod CIDR inside the lab's namespace (`net::pod_route_plan`).
pub async fn route_pods(lab: &Lab, client: &kube::Client) -> Result<()> {
    let nodes = Api::<Node>::all(client.clone()).list(&ListParams::default()).await?;
    super::net::run_plan(&super::net::pod_route_plan(&lab.netns(), &nodes.items))
}

async fn wait_nodes(client: &kube::Client, want: u8) -> Result<()> {
    let nodes = Api::<Node>::all(client.clone());
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let list = nodes.list(&ListParams::default()).await?;
        let ready = list.items.iter().filter(|n| ready(n)).count();
        if ready >= usize::from(want) {
            return Ok(());
        }
        if Instant::now() > deadline {
            bail!("{ready} of {want} nodes Ready after 120s (see agent-<i>.log)");
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn a_lab_dir_someone_else_owns_or_a_symlink_is_refused() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let dir = tmp.path().join("lab");
        std::fs::create_dir(&dir).expect("mkdir");
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o777)).expect("chmod");
        trust_dir(&dir).expect("root's own directory");
        assert_eq!(std::fs::metadata(&dir).expect("stat").permissions().mode() & 0o777, 0o711, "no one else writes");
        std::os::unix::fs::chown(&dir, Some(65534), None).expect("chown (root)");
        let err = trust_dir(&dir).expect_err("nobody's").to_string();
        assert!(
            err.ends_with("is owned by uid 65534, not root: refusing to use it (remove it or pass --dir)"),
            "{err}"
        );
        let link = tmp.path().join("link");
        std::os::unix::fs::symlink("/", &link).expect("symlink");
        assert!(trust_dir(&link).expect_err("symlink").to_string().contains("not a directory (a symlink?)"));
    }
}
