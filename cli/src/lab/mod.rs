//! `kaji lab`: a multi-node kaji cluster on one Linux machine, in network namespaces, without
//! touching the host's network namespace. It is also the harness of the end-to-end tests.
//!
//! ```text
//!  host netns (untouched)         netns kaji-lab-<port>                   netns kaji-lab-<port>-node-<i>
//!  kubectl ─▶ 127.0.0.1:<port>    br0 172.30.0.1/24                       eth0 172.30.0.(10+i)/24, default via .1
//!             kaji lab forward ─▶ kaji-apiserver 0.0.0.0:<port>           kaji-agent (--pod-network bridge, :10250)
//!             (connects from a    docker-registry 172.30.0.1:5000         kaji-proxy (iptables of this netns)
//!              thread that        kaji-controller-manager, kaji-scheduler kaji0 + a veth per pod (the agent's)
//!              setns'd)           node-<i> ═══════ veth pair ═══════════▶ eth0
//! ```
//! - Namespaces and links are made with `ip netns add` / `ip -n <ns> …` only; each veth pair is
//!   created in the lab namespace with its peer born in the node's, so no link, address, route,
//!   rule or sysctl ever changes in the host's network namespace.
//! - Components run under `nsenter --net=/run/netns/<ns>`: only the network namespace changes
//!   (not the mount namespace, so the agent's mounts stay visible to a restarted agent and to
//!   `down`), and nsenter execs, so the pid in `<dir>/<name>.pid` is the component's own.
//! - The user's kubectl reaches the apiserver through `kaji lab forward` (a background `kaji`
//!   process, see `forward.rs`): it listens on the host's 127.0.0.1:<port> and connects into
//!   the lab namespace from a thread that entered it. Nodes reach the apiserver at
//!   172.30.0.1:<port>, and the apiserver reaches each agent (for `kubectl logs`) at its node IP.
//! - Images without a network: the demo image is imported into every node's store from the
//!   host's busybox-static, and the lab's registry (`registry.rs`) is seeded with the same
//!   busybox as 172.30.0.1:5000/kaji/busybox:lab; `kaji lab image push` adds more.
//! - `down` stops every pid whose `/proc/<pid>/exe` is still its component, runs
//!   `kaji-agent cleanup` inside each node's namespace, deletes the namespaces, and verifies that
//!   no namespace, cgroup, mount or process of the lab is left.

mod demo;
mod deps;
mod dns;
mod down;
mod forward;
mod image;
mod leftovers;
mod net;
mod node;
mod oci;
mod procs;
mod registry;
mod security;
mod status;
mod topology;
mod up;

use anyhow::{Context, Result};
use clap::Subcommand;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use topology::{Component, Lab};

const DEFAULT_DIR: &str = "/tmp/kaji-lab";

#[derive(Subcommand, Debug)]
pub enum LabCommand {
    /// Start a lab (in the background) and apply the demo workload. Needs root.
    Up {
        /// Where the lab keeps its store, node dirs, logs, pid files and kubeconfig.
        #[arg(long, default_value = DEFAULT_DIR)]
        dir: PathBuf,
        /// The apiserver's port; kubectl reaches it on 127.0.0.1:<port>. Namespace and cgroup
        /// names carry it, so labs on different ports (and dirs) coexist.
        #[arg(long, default_value_t = 6443)]
        port: u16,
        /// How many nodes, each in its own network namespace.
        #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u8).range(1..=200))]
        nodes: u8,
        /// Do not apply the demo workload.
        #[arg(long)]
        no_demo: bool,
        /// Do not install missing packages (apt); say what is missing and how to install it.
        #[arg(long)]
        no_install: bool,
        /// High availability: 3 etcd members and 3 apiservers on them (ports PORT..PORT+2 in the
        /// lab namespace; kubectl's forwarder and every component move to a live one), and two
        /// leader-elected schedulers and controller managers.
        #[arg(long)]
        ha: bool,
    },
    /// Show each component and node of the lab, and whether the API answers.
    Status {
        #[arg(long, default_value = DEFAULT_DIR)]
        dir: PathBuf,
    },
    /// Print a component's log: apiserver, forward, registry, controller-manager, scheduler, agent-<i>, proxy-<i>.
    Logs {
        component: String,
        #[arg(long, default_value = DEFAULT_DIR)]
        dir: PathBuf,
        /// Keep printing what is appended.
        #[arg(short, long)]
        follow: bool,
    },
    /// Stop one component and start it again exactly as `up` did.
    Restart {
        component: String,
        #[arg(long, default_value = DEFAULT_DIR)]
        dir: PathBuf,
    },
    /// Stop everything the lab started, remove its namespaces, cgroups and mounts, and check
    /// nothing is left (its data stays unless --purge).
    Down {
        #[arg(long, default_value = DEFAULT_DIR)]
        dir: PathBuf,
        /// Also delete the lab directory (store, node dirs, logs, kubeconfig).
        #[arg(long)]
        purge: bool,
    },
    /// Nodes of a running lab.
    Node {
        #[command(subcommand)]
        verb: NodeVerb,
    },
    /// The lab's registry (172.30.0.1:5000, reachable from every node).
    Image {
        #[command(subcommand)]
        verb: ImageVerb,
    },
    /// Forward 127.0.0.1:<port> into the lab namespace (started by `up`).
    #[command(hide = true)]
    Forward {
        #[arg(long)]
        netns: String,
        #[arg(long)]
        listen: SocketAddr,
        /// Where to connect, in order of preference (several: an HA lab's apiservers).
        #[arg(long, value_delimiter = ',', required = true)]
        to: Vec<SocketAddr>,
    },
}

#[derive(Subcommand, Debug)]
pub enum NodeVerb {
    /// Add one node (its own network namespace, kaji-agent and kaji-proxy) and wait until it
    /// is Ready. Needs root.
    Add {
        #[arg(long, default_value = DEFAULT_DIR)]
        dir: PathBuf,
    },
}

#[derive(Subcommand, Debug)]
pub enum ImageVerb {
    /// Push an OCI image layout directory or a docker-archive tar (`docker save`) to the lab's
    /// registry; pods then use `image: 172.30.0.1:5000/<repository>:<tag>`.
    Push {
        path: PathBuf,
        /// repository:tag to push as (default: the name recorded in the image).
        #[arg(long)]
        name: Option<String>,
        #[arg(long, default_value = DEFAULT_DIR)]
        dir: PathBuf,
    },
}

pub async fn run(cmd: LabCommand) -> Result<()> {
    match cmd {
        LabCommand::Up { dir, port, nodes, no_demo, no_install, ha } => {
            up::up(Lab { dir, port, nodes, ha }, !no_demo, !no_install).await
        }
        LabCommand::Status { dir } => status::status(&State::load(&dir)?).await,
        LabCommand::Logs { component, dir, follow } => status::logs(&State::load(&dir)?, &component, follow).await,
        LabCommand::Restart { component, dir } => up::restart(&State::load(&dir)?, &component),
        LabCommand::Down { dir, purge } => down::down(&dir, purge),
        LabCommand::Node { verb: NodeVerb::Add { dir } } => node::add(State::load(&dir)?).await,
        LabCommand::Image { verb: ImageVerb::Push { path, name, dir } } => {
            registry::push_command(&State::load(&dir)?, &path, name).await
        }
        LabCommand::Forward { netns, listen, to } => forward::run(&netns, listen, to).await,
    }
}

/// What `up` recorded in `<dir>/lab.json`: the lab and exactly what it started, so `status`,
/// `restart` and `down` act on the same processes and namespaces.
#[derive(Debug, serde::Serialize, serde::Deserialize)]
pub struct State {
    pub lab: Lab,
    pub components: Vec<Component>,
}

impl State {
    fn load(dir: &Path) -> Result<State> {
        let path = Lab::state_file(dir);
        let text = std::fs::read_to_string(&path).with_context(|| {
            format!("no lab in {} ({} is missing); start one with `kaji lab up`", dir.display(), path.display())
        })?;
        serde_json::from_str(&text).with_context(|| format!("cannot read {}", path.display()))
    }

    fn save(&self) -> Result<()> {
        let path = Lab::state_file(&self.lab.dir);
        std::fs::write(&path, serde_json::to_vec_pretty(self)?)
            .with_context(|| format!("cannot write {}", path.display()))
    }

    fn component(&self, name: &str) -> Result<&Component> {
        self.components.iter().find(|c| c.name == name).with_context(|| {
            let names: Vec<&str> = self.components.iter().map(|c| c.name.as_str()).collect();
            format!("no component {name:?} in this lab (it has: {})", names.join(", "))
        })
    }
}

/// Print one progress line: `what ... done` or `what ... failed: why`.
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
