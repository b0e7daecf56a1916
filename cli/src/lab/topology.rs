//! The lab's shape, decided before anything runs (pure): namespace names, addresses, the `ip`
//! commands that build the network, and every component's binary, namespace and flags.

use super::security;
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

/// The lab network: a bridge in the lab namespace, nodes at `.11`, `.12`, … on it. Every lab has
/// its own lab namespace, so two labs use the same addresses without meeting.
pub const BRIDGE: &str = "br0";
pub const BRIDGE_IP: &str = "172.30.0.1";
pub const PREFIX_LEN: u8 = 24;
/// Node pod CIDRs are cut from this (the agents' and the controller manager's default).
pub const CLUSTER_CIDR: &str = "10.244.0.0/16";
/// The lab's registry, in the lab namespace on the bridge address.
pub const REGISTRY: &str = "172.30.0.1:5000";
pub const REGISTRY_BIN: &str = "/usr/bin/docker-registry";
/// Debian's dnsmasq-base: the lab's upstream resolver (what a node's resolv.conf points at).
pub const DNSMASQ_BIN: &str = "/usr/sbin/dnsmasq";
/// The only domain the lab's upstream resolver answers (from its own records; it forwards
/// nothing, so no question ever leaves the lab's namespaces).
pub const UPSTREAM_DOMAIN: &str = "kaji.lab";
/// The cluster DNS Service's address (kubeadm's: the tenth of the Service range) and domain.
pub const CLUSTER_DNS: &str = "10.96.0.10";
pub const CLUSTER_DOMAIN: &str = "cluster.local";
/// Debian's etcd-server (the HA lab's store).
pub const ETCD_BIN: &str = "/usr/bin/etcd";
/// The demo image, imported into every node's store from the host's busybox-static.
pub const DEMO_IMAGE: &str = "kaji.local/busybox:lab";

/// One lab: where it keeps its files, the apiserver's port (also the forwarder's on the host's
/// loopback, and part of every namespace and cgroup name) and its node count.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Lab {
    pub dir: PathBuf,
    pub port: u16,
    pub nodes: u8,
    /// `--ha`: 3 etcd members, 3 apiservers on it (ports `port`, `port+1`, `port+2` in the lab
    /// namespace), and 2 of each elected component.
    #[serde(default)]
    pub ha: bool,
}

/// etcd members of an HA lab, on the lab namespace's loopback.
pub const ETCD_MEMBERS: u8 = 3;
/// Apiservers of an HA lab, and instances of the scheduler and the controller manager.
pub const HA_APISERVERS: u8 = 3;
/// kube-controller-manager's and kube-scheduler's /healthz and /metrics ports (the defaults).
const CONTROLLER_MANAGER_PORT: u16 = 10257;
const SCHEDULER_PORT: u16 = 10259;
pub const HA_ELECTED: u8 = 2;

/// A process the lab runs: `binary` (a file beside `kaji`) with `args`, inside network namespace
/// `netns` (None: the host's). Its pid is kept in `<dir>/<name>.pid`, its output in `<name>.log`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Component {
    pub name: String,
    pub binary: String,
    pub netns: Option<String>,
    pub args: Vec<String>,
}

impl Lab {
    /// The lab namespace (bridge, control plane, registry).
    pub fn netns(&self) -> String {
        format!("kaji-lab-{}", self.port)
    }

    /// Whether a namespace or cgroup name belongs to this lab.
    pub fn owns(&self, name: &str) -> bool {
        let base = self.netns();
        name == base || name.strip_prefix(&base).is_some_and(|rest| rest.starts_with('-'))
    }

    pub fn node_netns(&self, i: u8) -> String {
        format!("kaji-lab-{}-node-{i}", self.port)
    }

    pub fn node_name(i: u8) -> String {
        format!("kaji-lab-node-{i}")
    }

    pub fn node_ip(i: u8) -> String {
        format!("172.30.0.{}", 10 + u16::from(i))
    }

    pub fn node_dir(&self, i: u8) -> PathBuf {
        self.dir.join(format!("node-{i}"))
    }

    /// Each node's pod cgroups live under this parent in every hierarchy.
    pub fn cgroup_parent(&self, i: u8) -> String {
        self.node_netns(i)
    }

    /// What the user's kubectl uses: the forwarder on the host's loopback.
    pub fn server(&self) -> String {
        format!("https://127.0.0.1:{}", self.port)
    }

    /// What the nodes use: the apiserver(s) on the lab bridge (comma-separated with --ha).
    pub fn bridge_server(&self) -> String {
        self.apiserver_ports().map(|p| format!("https://{BRIDGE_IP}:{p}")).collect::<Vec<_>>().join(",")
    }

    /// What the control plane in the lab namespace uses.
    fn local_servers(&self) -> String {
        self.apiserver_ports().map(|p| format!("https://127.0.0.1:{p}")).collect::<Vec<_>>().join(",")
    }

    /// The resolv.conf every node reads as the host's (`--resolv-conf`): the lab's resolver.
    pub fn resolv_conf(&self) -> PathBuf {
        self.dir.join("resolv.conf")
    }

    pub fn resolv_conf_text() -> String {
        format!("search {UPSTREAM_DOMAIN}\nnameserver {BRIDGE_IP}\n")
    }

    /// What pods in the cluster use to reach the apiserver(s) directly, with their
    /// ServiceAccount token and the CA of their projected volume.
    pub fn pod_server(&self) -> String {
        self.bridge_server()
    }

    /// The lab's upstream resolver on the bridge address, port 53: dnsmasq answering only its own
    /// records under kaji.lab (REFUSED for everything else: it has no upstream of its own).
    fn upstream_dns(&self) -> Component {
        let records = [("registry", BRIDGE_IP), ("apiserver", BRIDGE_IP)];
        let mut args = argv(&[
            "--keep-in-foreground",
            "--log-facility=-",
            "--log-queries",
            "--conf-file=/dev/null",
            "--no-resolv",
            "--no-hosts",
            "--pid-file=",
            "--bind-interfaces",
            &format!("--listen-address={BRIDGE_IP}"),
            "--port=53",
            &format!("--local=/{UPSTREAM_DOMAIN}/"),
        ]);
        args.extend(records.iter().map(|(n, ip)| format!("--host-record={n}.{UPSTREAM_DOMAIN},{ip}")));
        Component { name: "dns-upstream".into(), binary: DNSMASQ_BIN.into(), netns: Some(self.netns()), args }
    }

    /// The apiservers' ports inside the lab namespace (the first is also the forwarder's).
    pub fn apiserver_ports(&self) -> impl Iterator<Item = u16> {
        let (n, port) = (if self.ha { HA_APISERVERS } else { 1 }, self.port);
        (0..n).map(move |i| port + u16::from(i))
    }

    /// etcd member `i` (1-based): (name, client URL, peer URL), on the lab namespace's loopback.
    pub fn etcd_member(i: u8) -> (String, String, String) {
        let base = 2379 + 10 * u16::from(i - 1);
        (format!("etcd-{i}"), format!("http://127.0.0.1:{base}"), format!("http://127.0.0.1:{}", base + 1))
    }

    fn etcd_servers() -> String {
        (1..=ETCD_MEMBERS).map(|i| Lab::etcd_member(i).1).collect::<Vec<_>>().join(",")
    }

    fn etcd_components(&self) -> Vec<Component> {
        let peers: Vec<String> = (1..=ETCD_MEMBERS)
            .map(|i| {
                let (n, _, p) = Lab::etcd_member(i);
                format!("{n}={p}")
            })
            .collect();
        (1..=ETCD_MEMBERS)
            .map(|i| {
                let (name, client, peer) = Lab::etcd_member(i);
                let data = self.dir.join(&name);
                Component {
                    name: name.clone(),
                    binary: ETCD_BIN.into(),
                    netns: Some(self.netns()),
                    args: argv(&[
                        "--name",
                        &name,
                        "--data-dir",
                        &data.to_string_lossy(),
                        "--listen-client-urls",
                        &client,
                        "--advertise-client-urls",
                        &client,
                        "--listen-peer-urls",
                        &peer,
                        "--initial-advertise-peer-urls",
                        &peer,
                        "--initial-cluster",
                        &peers.join(","),
                        "--initial-cluster-state",
                        "new",
                        "--initial-cluster-token",
                        &self.netns(),
                        "--snapshot-count",
                        "10000",
                        "--log-level",
                        "warn",
                        "--logger",
                        "zap",
                    ]),
                }
            })
            .collect()
    }

    fn apiserver(&self, i: u8, port: u16) -> Component {
        let name = if self.ha { format!("apiserver-{i}") } else { "apiserver".into() };
        let mut args = argv(&["--bind-address", "0.0.0.0", "--secure-port", &port.to_string()]);
        args.extend(security::apiserver_args(self));
        if self.ha {
            args.extend(argv(&[
                "--data-dir",
                &self.dir.join(format!("{name}-data")).to_string_lossy(),
                "--storage",
                "etcd",
                "--etcd-servers",
                &Lab::etcd_servers(),
            ]));
        } else {
            args.extend(argv(&["--data-dir", &self.dir.join("apiserver-data").to_string_lossy()]));
        }
        Component { name, binary: "kaji-apiserver".into(), netns: Some(self.netns()), args }
    }

    /// The control plane's component names in start order: etcd members, apiservers.
    pub fn apiserver_names(&self) -> Vec<String> {
        self.components().into_iter().map(|c| c.name).filter(|n| n.starts_with("apiserver")).collect()
    }

    /// Names of the elected components (scheduler and controller manager instances).
    pub fn elected_names(&self) -> Vec<String> {
        self.components()
            .into_iter()
            .map(|c| c.name)
            .filter(|n| n.starts_with("scheduler") || n.starts_with("controller-manager"))
            .collect()
    }

    pub fn node_ids(&self) -> impl Iterator<Item = u8> {
        1..=self.nodes
    }

    pub fn state_file(dir: &Path) -> PathBuf {
        dir.join("lab.json")
    }

    /// The `ip` invocations that build the lab namespace and its bridge.
    pub fn lab_net_plan(&self) -> Vec<Vec<String>> {
        let ns = self.netns();
        let bridge_addr = format!("{BRIDGE_IP}/{PREFIX_LEN}");
        vec![
            argv(&["netns", "add", &ns]),
            argv(&["-n", &ns, "link", "set", "lo", "up"]),
            argv(&["-n", &ns, "link", "add", BRIDGE, "type", "bridge"]),
            argv(&["-n", &ns, "addr", "add", &bridge_addr, "dev", BRIDGE]),
            argv(&["-n", &ns, "link", "set", BRIDGE, "up"]),
        ]
    }

    /// The `ip` invocations that plug node `i` into the bridge. The veth pair is created in the
    /// lab namespace with its peer born in the node's, so no link ever exists in the host's.
    pub fn node_net_plan(&self, i: u8) -> Vec<Vec<String>> {
        let (lab, node) = (self.netns(), self.node_netns(i));
        let port = format!("node-{i}");
        let addr = format!("{}/{PREFIX_LEN}", Lab::node_ip(i));
        vec![
            argv(&["netns", "add", &node]),
            argv(&["-n", &lab, "link", "add", &port, "type", "veth", "peer", "name", "eth0", "netns", &node]),
            argv(&["-n", &lab, "link", "set", &port, "master", BRIDGE, "up"]),
            argv(&["-n", &node, "link", "set", "lo", "up"]),
            argv(&["-n", &node, "addr", "add", &addr, "dev", "eth0"]),
            argv(&["-n", &node, "link", "set", "eth0", "up"]),
            argv(&["-n", &node, "route", "add", "default", "via", BRIDGE_IP]),
        ]
    }

    /// Every component in start order (`down` stops them in reverse).
    pub fn components(&self) -> Vec<Component> {
        let lab = Some(self.netns());
        let local = if self.ha { self.local_servers() } else { self.server() };
        let mut all = if self.ha { self.etcd_components() } else { Vec::new() };
        for (i, port) in self.apiserver_ports().enumerate() {
            all.push(self.apiserver(i as u8 + 1, port));
        }
        let to: Vec<String> = self.apiserver_ports().map(|p| format!("127.0.0.1:{p}")).collect();
        all.extend([
            Component {
                name: "forward".into(),
                binary: "kaji".into(),
                netns: None,
                args: argv(&[
                    "lab",
                    "forward",
                    "--netns",
                    &self.netns(),
                    "--listen",
                    &format!("127.0.0.1:{}", self.port),
                    "--to",
                    &to.join(","),
                ]),
            },
            Component {
                name: "registry".into(),
                binary: REGISTRY_BIN.into(),
                netns: lab.clone(),
                args: argv(&["serve", &self.dir.join("registry/config.yml").to_string_lossy()]),
            },
            self.upstream_dns(),
        ]);
        // With --ha, instance i: its own /healthz and /metrics port (they share one namespace).
        let instances: Vec<(String, u16)> = if self.ha {
            (1..=HA_ELECTED).map(|i| (format!("-{i}"), 10 * u16::from(i - 1))).collect()
        } else {
            vec![(String::new(), 0)]
        };
        let elected = |default_port: u16, offset: u16| {
            if self.ha {
                argv(&["--leader-elect", "--metrics-port", &(default_port + offset).to_string()])
            } else {
                Vec::new()
            }
        };
        for (suffix, offset) in &instances {
            let mut args = security::controller_manager_args(self);
            args.extend(argv(&["--master", &local, "--allocate-node-cidrs", "true", "--cluster-cidr", CLUSTER_CIDR]));
            // The lab's nodes share one disk: each keeps its local-path volumes in its own directory.
            let volumes = self.dir.join("local-path").join("{node}");
            args.extend(argv(&[
                "--local-path-dir",
                &volumes.to_string_lossy(),
                "--local-path-helper-image",
                DEMO_IMAGE,
            ]));
            args.extend(elected(CONTROLLER_MANAGER_PORT, *offset));
            all.push(Component {
                name: format!("controller-manager{suffix}"),
                binary: "kaji-controller-manager".into(),
                netns: lab.clone(),
                args,
            });
        }
        for (suffix, offset) in &instances {
            let scheduler = self.pki().kubeconfig("scheduler");
            let mut args = argv(&["--kubeconfig", &scheduler.to_string_lossy(), "--master", &local]);
            args.extend(elected(SCHEDULER_PORT, *offset));
            all.push(Component {
                name: format!("scheduler{suffix}"),
                binary: "kaji-scheduler".into(),
                netns: lab.clone(),
                args,
            });
        }
        for i in self.node_ids() {
            all.push(self.agent(i));
        }
        for i in self.node_ids() {
            all.push(Component {
                name: format!("proxy-{i}"),
                binary: "kaji-proxy".into(),
                netns: Some(self.node_netns(i)),
                args: argv(&[
                    "--kubeconfig",
                    &self.pki().kubeconfig("proxy").to_string_lossy(),
                    "--master",
                    &self.bridge_server(),
                    "--hostname-override",
                    &Lab::node_name(i),
                    "--cluster-cidr",
                    CLUSTER_CIDR,
                ]),
            });
        }
        all
    }

    fn agent(&self, i: u8) -> Component {
        let mut args = security::agent_args(self, i);
        args.extend(argv(&[
            "--master",
            &self.bridge_server(),
            // Its plain /healthz on the node's address (the end-to-end suite reaches it from
            // pods on other nodes); :10250 is HTTPS for the apiserver only.
            "--healthz-bind-address",
            "0.0.0.0",
            "--node-name",
            &Lab::node_name(i),
            "--node-ip",
            &Lab::node_ip(i),
            "--root-dir",
            &self.node_dir(i).to_string_lossy(),
            "--cgroup-parent",
            &self.cgroup_parent(i),
            // Each lab node its own cgroup parent, even on a systemd host (whose driver would
            // put every node's pods in one scope).
            "--cgroup-driver",
            "cgroupfs",
            // kaji0 + a veth per pod, routes to the other nodes' pod CIDRs via their eth0.
            "--pod-network",
            "bridge",
            "--cluster-cidr",
            CLUSTER_CIDR,
            "--insecure-registry",
            REGISTRY,
            // As kind does: a lab shares the developer's disk, so a nearly full disk must
            // not taint its nodes.
            "--eviction-hard",
            "nodefs.available<0%",
            // As kubeadm configures kubelet; the node's resolver is the lab's, so nothing a
            // pod asks leaves the lab's namespaces.
            "--cluster-dns",
            CLUSTER_DNS,
            "--cluster-domain",
            CLUSTER_DOMAIN,
            "--resolv-conf",
            &self.resolv_conf().to_string_lossy(),
        ]));
        Component { name: format!("agent-{i}"), binary: "kaji-agent".into(), netns: Some(self.node_netns(i)), args }
    }

    /// `kaji-agent cleanup` for node `i` (run inside the node's namespace, the agent stopped).
    pub fn cleanup_args(&self, i: u8) -> Vec<String> {
        argv(&[
            "--root-dir",
            &self.node_dir(i).to_string_lossy(),
            "--cgroup-parent",
            &self.cgroup_parent(i),
            "--cgroup-driver",
            "cgroupfs",
            "cleanup",
        ])
    }
}

fn argv(parts: &[&str]) -> Vec<String> {
    parts.iter().map(|s| (*s).to_string()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lab() -> Lab {
        Lab { dir: PathBuf::from("/tmp/l"), port: 7001, nodes: 2, ha: false }
    }

    #[test]
    fn an_ha_lab_runs_etcd_three_apiservers_and_elected_pairs() {
        let l = Lab { ha: true, ..lab() };
        let all = l.components();
        let names: Vec<&str> = all.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(
            names[..11],
            [
                "etcd-1",
                "etcd-2",
                "etcd-3",
                "apiserver-1",
                "apiserver-2",
                "apiserver-3",
                "forward",
                "registry",
                "dns-upstream",
                "controller-manager-1",
                "controller-manager-2",
            ]
        );
        let args = |n: &str| all.iter().find(|c| c.name == n).map(|c| c.args.join(" ")).unwrap_or_default();
        assert!(args("apiserver-3").contains("--secure-port 7003"), "{}", args("apiserver-3"));
        assert!(args("apiserver-1").contains(
            "--storage etcd --etcd-servers http://127.0.0.1:2379,http://127.0.0.1:2389,http://127.0.0.1:2399"
        ));
        assert!(args("etcd-2").contains("--initial-cluster etcd-1=http://127.0.0.1:2380,etcd-2=http://127.0.0.1:2390"));
        assert!(args("forward").contains("--to 127.0.0.1:7001,127.0.0.1:7002,127.0.0.1:7003"));
        // The elected pairs share the lab namespace: each instance its own /healthz port.
        let ports: Vec<String> = ["controller-manager-1", "controller-manager-2", "scheduler-1", "scheduler-2"]
            .iter()
            .map(|n| {
                assert!(args(n).contains("--leader-elect"), "{n}");
                args(n).split("--metrics-port ").nth(1).and_then(|r| r.split(' ').next()).unwrap_or("").to_string()
            })
            .collect();
        assert_eq!(ports, ["10257", "10267", "10259", "10269"]);
        assert!(args("agent-1")
            .contains("--master https://172.30.0.1:7001,https://172.30.0.1:7002,https://172.30.0.1:7003"));
        assert_eq!(l.apiserver_names(), ["apiserver-1", "apiserver-2", "apiserver-3"]);
    }

    #[test]
    fn names_carry_the_port_so_two_labs_coexist() {
        let l = lab();
        assert_eq!(l.netns(), "kaji-lab-7001");
        assert_eq!(l.node_netns(2), "kaji-lab-7001-node-2");
        assert_eq!(l.cgroup_parent(1), "kaji-lab-7001-node-1");
        assert!(l.owns("kaji-lab-7001") && l.owns("kaji-lab-7001-node-3"));
        assert!(!l.owns("kaji-lab-70011") && !l.owns("kaji-lab-700") && !l.owns("kaji-lab-70011-node-1"));
    }

    #[test]
    fn every_ip_command_names_a_lab_namespace() {
        let l = lab();
        let plans = [l.lab_net_plan(), l.node_net_plan(1), l.node_net_plan(2)].concat();
        for cmd in &plans {
            let ns = match cmd.as_slice() {
                [netns, add, ns] if netns == "netns" && add == "add" => ns,
                [n, ns, ..] if n == "-n" => ns,
                other => panic!("command outside a namespace: {other:?}"),
            };
            assert!(l.owns(ns), "{cmd:?}");
        }
        let veth = &l.node_net_plan(2)[1];
        assert_eq!(
            veth.join(" "),
            "-n kaji-lab-7001 link add node-2 type veth peer name eth0 netns kaji-lab-7001-node-2"
        );
        assert!(l
            .node_net_plan(2)
            .iter()
            .any(|c| c.join(" ") == "-n kaji-lab-7001-node-2 addr add 172.30.0.12/24 dev eth0"));
    }

    #[test]
    fn control_plane_runs_in_the_lab_namespace_and_nodes_in_their_own() {
        let all = lab().components();
        let names: Vec<&str> = all.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(
            names,
            [
                "apiserver",
                "forward",
                "registry",
                "dns-upstream",
                "controller-manager",
                "scheduler",
                "agent-1",
                "agent-2",
                "proxy-1",
                "proxy-2"
            ]
        );
        let ns = |n: &str| all.iter().find(|c| c.name == n).and_then(|c| c.netns.clone());
        assert_eq!(ns("apiserver").as_deref(), Some("kaji-lab-7001"));
        assert_eq!(ns("forward"), None);
        assert_eq!(ns("registry").as_deref(), Some("kaji-lab-7001"));
        assert_eq!(ns("agent-2").as_deref(), Some("kaji-lab-7001-node-2"));
        assert_eq!(ns("proxy-1").as_deref(), Some("kaji-lab-7001-node-1"));
        let agent = all.iter().find(|c| c.name == "agent-2").map(|c| c.args.join(" ")).unwrap_or_default();
        for want in [
            "--bootstrap-kubeconfig /tmp/l/bootstrap-kubelet.conf --kubeconfig /tmp/l/nodes/kaji-lab-node-2/kubelet.conf",
            "--cert-dir /tmp/l/nodes/kaji-lab-node-2/pki",
            "--tls-cert-file /tmp/l/nodes/kaji-lab-node-2/kubelet.crt",
            "--client-ca-file /tmp/l/pki/ca.crt",
            "--master https://172.30.0.1:7001",
            "--node-ip 172.30.0.12",
            "--root-dir /tmp/l/node-2",
            "--cgroup-parent kaji-lab-7001-node-2 --cgroup-driver cgroupfs",
            "--pod-network bridge --cluster-cidr 10.244.0.0/16 --insecure-registry 172.30.0.1:5000",
            "--cluster-dns 10.96.0.10 --cluster-domain cluster.local --resolv-conf /tmp/l/resolv.conf",
        ] {
            assert!(agent.contains(want), "{agent} lacks {want}");
        }
        let dns = all.iter().find(|c| c.name == "dns-upstream").expect("the lab's resolver");
        assert_eq!(dns.netns.as_deref(), Some("kaji-lab-7001"));
        let args = dns.args.join(" ");
        for want in ["--no-resolv", "--listen-address=172.30.0.1", "--local=/kaji.lab/", "--conf-file=/dev/null"] {
            assert!(args.contains(want), "{args} lacks {want}");
        }
        assert!(!args.contains("--server"), "the lab's resolver forwards nowhere: {args}");
        assert_eq!(Lab::resolv_conf_text(), "search kaji.lab\nnameserver 172.30.0.1\n");
        let cm = all.iter().find(|c| c.name == "controller-manager").map(|c| c.args.join(" ")).unwrap_or_default();
        assert!(cm.contains("--allocate-node-cidrs true --cluster-cidr 10.244.0.0/16"), "{cm}");
        for want in [
            "--kubeconfig /tmp/l/controller-manager.conf",
            "--cluster-signing-cert-file /tmp/l/pki/ca.crt --cluster-signing-key-file /tmp/l/pki/ca.key",
            "--master https://127.0.0.1:7001",
        ] {
            assert!(cm.contains(want), "{cm} lacks {want}");
        }
        let args = |n: &str| all.iter().find(|c| c.name == n).map(|c| c.args.join(" ")).unwrap_or_default();
        assert!(args("scheduler").starts_with("--kubeconfig /tmp/l/scheduler.conf"), "{}", args("scheduler"));
        assert!(args("proxy-1").starts_with("--kubeconfig /tmp/l/proxy.conf"), "{}", args("proxy-1"));
        let api = args("apiserver");
        for want in [
            "--secure-port 7001",
            "--tls-cert-file /tmp/l/pki/apiserver.crt",
            "--client-ca-file /tmp/l/pki/ca.crt",
            "--kubelet-client-certificate /tmp/l/pki/apiserver-kubelet-client.crt",
            "--service-account-signing-key-file /tmp/l/pki/sa.key",
            "--authorization-mode Node,RBAC --enable-admission-plugins NodeRestriction,ServiceAccount",
            "--admission-control-config-file /tmp/l/admission.yaml",
            "--enable-bootstrap-token-auth",
        ] {
            assert!(api.contains(want), "{api} lacks {want}");
        }
        assert!(!api.contains("insecure"), "the lab serves HTTPS only: {api}");
    }
}
