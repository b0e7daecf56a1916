//! `kaji lab up|status|down`: start the control plane on this machine with the embedded store,
//! write a kubeconfig, and apply a demo workload.
//!
//! The lab runs the apiserver, the controller manager, the scheduler and (as root) one node: a
//! kaji-agent with its own root directory and cgroup parent, its demo image imported from the
//! host's busybox so nothing is downloaded. Multi-node labs in network namespaces come with the
//! pod network (see README).

use anyhow::{bail, Context, Result};
use clap::Subcommand;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Namespace, Service};
use kube::api::{Api, PostParams};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const DEFAULT_DIR: &str = "/tmp/kaji-lab";

#[derive(Subcommand, Debug)]
pub enum LabCommand {
    /// Start the lab (in the background) and apply the demo workload.
    Up {
        /// Where the lab keeps its store, logs, pid file and kubeconfig.
        #[arg(long, default_value = DEFAULT_DIR)]
        dir: PathBuf,
        /// apiserver port on 127.0.0.1.
        #[arg(long, default_value_t = 6443)]
        port: u16,
        /// Do not apply the demo workload.
        #[arg(long)]
        no_demo: bool,
    },
    /// Show whether the lab is running.
    Status {
        #[arg(long, default_value = DEFAULT_DIR)]
        dir: PathBuf,
    },
    /// Stop everything the lab started (its data stays unless --purge).
    Down {
        #[arg(long, default_value = DEFAULT_DIR)]
        dir: PathBuf,
        /// Also delete the lab directory (store, logs, kubeconfig).
        #[arg(long)]
        purge: bool,
    },
}

pub async fn run(cmd: LabCommand) -> Result<()> {
    match cmd {
        LabCommand::Up { dir, port, no_demo } => up(&dir, port, !no_demo).await,
        LabCommand::Status { dir } => status(&dir).await,
        LabCommand::Down { dir, purge } => down(&dir, purge),
    }
}

/// Print one progress line: `step ... done` or `step ... failed: why`.
async fn step<T, F: std::future::Future<Output = Result<T>>>(what: &str, f: F) -> Result<T> {
    eprint!("{what} ... ");
    match f.await {
        Ok(v) => {
            eprintln!("done");
            Ok(v)
        }
        Err(e) => {
            eprintln!("failed: {e:#}");
            Err(e)
        }
    }
}

fn sibling_binary(name: &str) -> Result<PathBuf> {
    let me = std::env::current_exe().context("cannot find the kaji binary's own path")?;
    let p = me.with_file_name(name);
    if !p.exists() {
        bail!("{} not found beside {}; build the workspace first (cargo build --release)", name, me.display());
    }
    Ok(p)
}

/// The lab's processes, in start order.
const COMPONENTS: &[&str] = &["apiserver", "controller-manager", "scheduler", "agent"];

/// The demo image, imported into the node's store from the host's busybox-static.
const DEMO_IMAGE: &str = "kaji.local/busybox:lab";
const NODE_NAME: &str = "kaji-lab-node-1";
const BUSYBOX: &str = "/bin/busybox";

fn node_dir(dir: &Path) -> PathBuf {
    dir.join("node-1")
}

/// A root filesystem with busybox and its applets, /etc/passwd and /etc/group.
fn busybox_rootfs(root: &Path) -> Result<()> {
    if !Path::new(BUSYBOX).exists() {
        bail!("{BUSYBOX} not found: the demo image is built from it (apt-get install busybox-static)");
    }
    let _ = std::fs::remove_dir_all(root);
    for d in ["bin", "etc", "tmp", "proc", "sys", "dev", "root", "www"] {
        std::fs::create_dir_all(root.join(d))?;
    }
    std::fs::copy(BUSYBOX, root.join("bin/busybox"))?;
    let list = Command::new(BUSYBOX).arg("--list").output().context("busybox --list")?;
    for applet in String::from_utf8_lossy(&list.stdout).lines().map(str::trim).filter(|a| !a.is_empty()) {
        if applet != "busybox" {
            std::os::unix::fs::symlink("busybox", root.join("bin").join(applet))?;
        }
    }
    std::fs::write(
        root.join("etc/passwd"),
        "root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/:/bin/false\n",
    )?;
    std::fs::write(root.join("etc/group"), "root:x:0:\nnogroup:x:65534:\n")?;
    std::fs::write(root.join("www/index.html"), "hello from kaji\n")?;
    Ok(())
}

/// Builds and imports the demo image into the node's store, then starts the agent.
fn start_node(dir: &Path, server: &str, port: u16) -> Result<i32> {
    let node = node_dir(dir);
    std::fs::create_dir_all(&node)?;
    let parent = format!("kaji-lab-{port}");
    std::fs::write(node.join("cgroup-parent"), &parent)?;
    let rootfs = dir.join("demo-rootfs");
    busybox_rootfs(&rootfs)?;
    let agent = sibling_binary("kaji-agent")?;
    let out = Command::new(&agent)
        .arg("--root-dir")
        .arg(&node)
        .args(["image", "import", "--tag", DEMO_IMAGE, "--cmd", "sh"])
        .arg(&rootfs)
        .output()
        .context("cannot run kaji-agent image import")?;
    if !out.status.success() {
        bail!("importing the demo image failed: {}", String::from_utf8_lossy(&out.stderr).trim());
    }
    let _ = std::fs::remove_dir_all(&rootfs);
    let node_s = node.to_string_lossy().to_string();
    let agent_port = port.saturating_add(3).to_string();
    let args: Vec<String> = [
        "--master",
        server,
        "--node-name",
        NODE_NAME,
        "--node-ip",
        "127.0.0.1",
        "--root-dir",
        &node_s,
        "--cgroup-parent",
        &parent,
        "--address",
        "127.0.0.1",
        "--port",
        &agent_port,
        // As kind does: a lab shares the developer's disk, so a nearly full disk must not
        // taint its only node.
        "--eviction-hard",
        "nodefs.available<0%",
    ]
    .map(String::from)
    .to_vec();
    spawn(dir, "agent", &args)
}

/// Removes the node's containers, sandboxes, volumes and cgroups (the agent is stopped).
fn clean_node(dir: &Path) -> Result<()> {
    let node = node_dir(dir);
    let Ok(parent) = std::fs::read_to_string(node.join("cgroup-parent")) else { return Ok(()) };
    let out = Command::new(sibling_binary("kaji-agent")?)
        .arg("--root-dir")
        .arg(&node)
        .args(["--cgroup-parent", parent.trim(), "cleanup"])
        .output()
        .context("cannot run kaji-agent cleanup")?;
    if !out.status.success() {
        bail!("cleaning up the node failed: {}", String::from_utf8_lossy(&out.stderr).trim());
    }
    Ok(())
}

fn pid_file(dir: &Path, component: &str) -> PathBuf {
    dir.join(format!("{component}.pid"))
}

fn read_pid(dir: &Path, component: &str) -> Option<i32> {
    std::fs::read_to_string(pid_file(dir, component)).ok()?.trim().parse().ok()
}

/// Whether `pid` is alive and is `kaji-<component>` (a stale pid file must never make us signal
/// some other process that reused the number).
fn alive(pid: i32, component: &str) -> bool {
    let want = format!("kaji-{component}");
    std::fs::read_link(format!("/proc/{pid}/exe"))
        .map(|exe| exe.file_name().is_some_and(|n| n.to_string_lossy().starts_with(&want)))
        .unwrap_or(false)
}

/// Start `kaji-<component>` in the background with its log in the lab dir; returns its pid.
fn spawn(dir: &Path, component: &str, args: &[String]) -> Result<i32> {
    let bin = sibling_binary(&format!("kaji-{component}"))?;
    let log = std::fs::File::create(dir.join(format!("{component}.log")))?;
    let child = Command::new(bin)
        .args(args)
        .stdin(Stdio::null())
        .stdout(log.try_clone()?)
        .stderr(log)
        .spawn()
        .with_context(|| format!("cannot start kaji-{component}"))?;
    let pid = child.id() as i32;
    std::fs::write(pid_file(dir, component), pid.to_string())?;
    Ok(pid)
}

fn stop(pid: i32, component: &str) {
    let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), nix::sys::signal::Signal::SIGTERM);
    let deadline = Instant::now() + Duration::from_secs(15);
    while alive(pid, component) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    if alive(pid, component) {
        let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), nix::sys::signal::Signal::SIGKILL);
    }
}

fn kubeconfig(server: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- cluster:\n    server: {server}\n  name: kaji-lab\ncontexts:\n- context:\n    cluster: kaji-lab\n    user: admin\n  name: kaji-lab\ncurrent-context: kaji-lab\nusers:\n- name: admin\n  user: {{}}\n"
    )
}

async fn client(server: &str) -> Result<kube::Client> {
    let config = kube::Config::new(server.parse().context("bad server URL")?);
    kube::Client::try_from(config).context("cannot build a client")
}

async fn wait_ready(client: &kube::Client) -> Result<()> {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        match client.apiserver_version().await {
            Ok(_) => return Ok(()),
            Err(e) if Instant::now() > deadline => bail!("apiserver not ready after 30s: {e}"),
            Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
        }
    }
}

async fn up(dir: &Path, port: u16, demo: bool) -> Result<()> {
    for c in COMPONENTS {
        if let Some(pid) = read_pid(dir, c).filter(|p| alive(*p, c)) {
            bail!("a lab is already running from {} (kaji-{c} pid {pid}); run `kaji lab down` first", dir.display());
        }
    }
    std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let server = format!("http://127.0.0.1:{port}");
    let data = dir.join("apiserver-data").to_string_lossy().to_string();
    let args: Vec<String> =
        ["--bind-address", "127.0.0.1", "--port", &port.to_string(), "--data-dir", &data].map(String::from).to_vec();
    let pid = step("starting kaji-apiserver (embedded store)", async { spawn(dir, "apiserver", &args) }).await?;
    let c = client(&server).await?;
    if let Err(e) = step("waiting for the API", wait_ready(&c)).await {
        stop(pid, "apiserver");
        return Err(e.context(format!("see {}", dir.join("apiserver.log").display())));
    }
    let kc = dir.join("kubeconfig");
    step("writing kubeconfig", async { std::fs::write(&kc, kubeconfig(&server)).context("cannot write kubeconfig") })
        .await?;
    // /healthz and /metrics of the others sit on the next ports up.
    for (i, c) in ["controller-manager", "scheduler"].iter().enumerate() {
        let metrics_port = port.saturating_add(1 + i as u16).to_string();
        let args: Vec<String> = ["--master", &server, "--bind-address", "127.0.0.1", "--metrics-port", &metrics_port]
            .map(String::from)
            .to_vec();
        step(&format!("starting kaji-{c} (metrics on 127.0.0.1:{metrics_port})"), async { spawn(dir, c, &args) })
            .await?;
    }
    let root = nix::unistd::geteuid().is_root();
    if root {
        let what = format!("starting kaji-agent as node {NODE_NAME} (server on 127.0.0.1:{})", port.saturating_add(3));
        step(&what, async { start_node(dir, &server, port) }).await?;
    }
    if demo {
        step("applying the demo workload (namespace demo: deployment + service hello)", apply_demo(&c)).await?;
    }
    println!(
        "\nkaji lab is up: apiserver {server} (pid {pid}), controller manager, scheduler{}; data in {}",
        if root { format!(", node {NODE_NAME}") } else { String::new() },
        dir.display()
    );
    println!("  export KUBECONFIG={}", kc.display());
    println!("  kubectl get all -n demo");
    println!("  kaji lab down            # stop it (add --purge to delete its data)");
    if !root {
        println!("\nNote: nodes need root (namespaces, cgroups, mounts); without one the demo pods stay Pending:");
        println!("`kubectl describe pod -n demo` says why. Run `kaji lab up` as root to get a node.");
    }
    Ok(())
}

async fn apply_demo(c: &kube::Client) -> Result<()> {
    let ns: Namespace = serde_json::from_value(serde_json::json!({"metadata": {"name": "demo"}}))?;
    create_or_keep(Api::<Namespace>::all(c.clone()), ns).await?;
    let deploy: Deployment = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "hello", "labels": {"app": "hello"}},
        "spec": {"replicas": 2, "selector": {"matchLabels": {"app": "hello"}},
                 "template": {"metadata": {"labels": {"app": "hello"}},
                              "spec": {"terminationGracePeriodSeconds": 5,
                                       "containers": [{"name": "hello", "image": DEMO_IMAGE,
                                        "command": ["httpd", "-f", "-v", "-p", "8080", "-h", "/www"],
                                        "ports": [{"containerPort": 8080}]}]}}}
    }))?;
    create_or_keep(Api::<Deployment>::namespaced(c.clone(), "demo"), deploy).await?;
    let svc: Service = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "hello"},
        "spec": {"selector": {"app": "hello"}, "ports": [{"port": 80, "targetPort": 8080}]}
    }))?;
    create_or_keep(Api::<Service>::namespaced(c.clone(), "demo"), svc).await
}

async fn create_or_keep<K>(api: Api<K>, obj: K) -> Result<()>
where
    K: kube::Resource + Clone + std::fmt::Debug + serde::de::DeserializeOwned + serde::Serialize,
{
    match api.create(&PostParams::default(), &obj).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(s)) if s.code == 409 => Ok(()),
        Err(e) => Err(e.into()),
    }
}

async fn status(dir: &Path) -> Result<()> {
    let mut any = false;
    for c in COMPONENTS {
        match read_pid(dir, c) {
            Some(pid) if alive(pid, c) => {
                any = true;
                println!("kaji-{c}: running (pid {pid})");
            }
            _ => println!("kaji-{c}: not running"),
        }
    }
    if any {
        let server = std::fs::read_to_string(dir.join("kubeconfig"))
            .ok()
            .and_then(|k| k.lines().find_map(|l| l.trim().strip_prefix("server: ").map(str::to_string)))
            .unwrap_or_default();
        let ready = match client(&server).await {
            Ok(c) => c.apiserver_version().await.is_ok(),
            Err(_) => false,
        };
        println!("API {server}: {}", if ready { "ready" } else { "not answering" });
        println!("kubeconfig: {}", dir.join("kubeconfig").display());
    }
    Ok(())
}

fn down(dir: &Path, purge: bool) -> Result<()> {
    // Stop in reverse start order: clients before the apiserver.
    for c in COMPONENTS.iter().rev() {
        if let Some(pid) = read_pid(dir, c) {
            if alive(pid, c) {
                eprint!("stopping kaji-{c} (pid {pid}) ... ");
                stop(pid, c);
                eprintln!("{}", if alive(pid, c) { "still running" } else { "done" });
            }
            let _ = std::fs::remove_file(pid_file(dir, c));
        }
    }
    if node_dir(dir).exists() {
        eprint!("removing the node's containers, sandboxes and cgroups ... ");
        match clean_node(dir) {
            Ok(()) => eprintln!("done"),
            Err(e) => eprintln!("failed: {e:#}"),
        }
    }
    if purge && dir.exists() {
        std::fs::remove_dir_all(dir).with_context(|| format!("cannot remove {}", dir.display()))?;
        eprintln!("removed {}", dir.display());
    }
    Ok(())
}
