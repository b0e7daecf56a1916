//! The node's NAT rules for pods: masquerading of pod traffic leaving the cluster network and
//! hostPort DNAT. Rendered by a pure function from the IPAM leases and applied in one
//! `iptables-restore --noflush` (only kaji's own chains are rewritten), with the jumps from the
//! built-in chains inserted once.

use std::fmt::Write as _;
use std::net::Ipv4Addr;

use ipnet::Ipv4Net;

use super::ipam::Lease;

pub const POSTROUTING: &str = "KAJI-POSTROUTING";
pub const HOSTPORTS: &str = "KAJI-HOSTPORTS";

/// (built-in chain, jump rule) pairs, in the nat table.
pub const JUMPS: &[(&str, &[&str])] = &[
    ("POSTROUTING", &["-m", "comment", "--comment", "kaji pod masquerade", "-j", POSTROUTING]),
    (
        "PREROUTING",
        &["-m", "comment", "--comment", "kaji hostports", "-m", "addrtype", "--dst-type", "LOCAL", "-j", HOSTPORTS],
    ),
    (
        "OUTPUT",
        &["-m", "comment", "--comment", "kaji hostports", "-m", "addrtype", "--dst-type", "LOCAL", "-j", HOSTPORTS],
    ),
];

/// The nat table's kaji chains for the pods holding `leases`.
pub fn render(pod_cidr: Ipv4Net, cluster_cidr: Ipv4Net, leases: &[(Ipv4Addr, Lease)]) -> String {
    let mut out = String::from("*nat\n");
    let _ = writeln!(out, ":{POSTROUTING} - [0:0]");
    let _ = writeln!(out, ":{HOSTPORTS} - [0:0]");
    let mut ports: Vec<(&Ipv4Addr, &Lease, &super::ipam::HostPort)> =
        leases.iter().flat_map(|(ip, l)| l.host_ports.iter().map(move |hp| (ip, l, hp))).collect();
    ports.sort_by_key(|(ip, _, hp)| (hp.host_port, hp.protocol.clone(), **ip));
    for (ip, lease, hp) in &ports {
        let proto = hp.protocol.to_ascii_lowercase();
        let dst = hp.host_ip.map(|h| format!("-d {h}/32 ")).unwrap_or_default();
        let _ = writeln!(
            out,
            "-A {HOSTPORTS} {dst}-p {proto} -m {proto} --dport {} -m comment --comment \"{} hostPort {}\" -j DNAT --to-destination {ip}:{}",
            hp.host_port, lease.pod, hp.host_port, hp.container_port
        );
    }
    // A pod reaching its own or a neighbour's hostPort through the node address: without
    // masquerading, the answer would bypass the DNAT on the bridge.
    for (ip, _, hp) in &ports {
        let proto = hp.protocol.to_ascii_lowercase();
        let _ = writeln!(
            out,
            "-A {POSTROUTING} -s {pod_cidr} -d {ip}/32 -p {proto} -m {proto} --dport {} -m conntrack --ctstate DNAT -j MASQUERADE",
            hp.container_port
        );
    }
    let _ = writeln!(out, "-A {POSTROUTING} -s {pod_cidr} -d {cluster_cidr} -j RETURN");
    let _ = writeln!(
        out,
        "-A {POSTROUTING} -s {pod_cidr} ! -d 224.0.0.0/4 -m comment --comment \"pod traffic leaving the cluster network\" -j MASQUERADE"
    );
    out.push_str("COMMIT\n");
    out
}

/// The table that removes every kaji chain (after the jumps are gone).
pub fn render_cleanup() -> String {
    format!("*nat\n:{POSTROUTING} - [0:0]\n:{HOSTPORTS} - [0:0]\n-X {POSTROUTING}\n-X {HOSTPORTS}\nCOMMIT\n")
}

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("cannot run {0}")]
    Spawn(&'static str, #[source] std::io::Error),
    #[error("{0} failed: {1}")]
    Failed(String, String),
}

async fn run(program: &'static str, args: &[&str], stdin: Option<&str>) -> Result<bool, Error> {
    use tokio::io::AsyncWriteExt;
    let mut cmd = tokio::process::Command::new(program);
    cmd.args(args)
        .stdin(if stdin.is_some() { std::process::Stdio::piped() } else { std::process::Stdio::null() })
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped());
    let mut child = cmd.spawn().map_err(|e| Error::Spawn(program, e))?;
    if let (Some(input), Some(mut pipe)) = (stdin, child.stdin.take()) {
        pipe.write_all(input.as_bytes()).await.map_err(|e| Error::Spawn(program, e))?;
        drop(pipe);
    }
    let out = child.wait_with_output().await.map_err(|e| Error::Spawn(program, e))?;
    if !out.status.success() && stdin.is_some() {
        return Err(Error::Failed(
            format!("{program} {}", args.join(" ")),
            String::from_utf8_lossy(&out.stderr).trim().to_string(),
        ));
    }
    Ok(out.status.success())
}

/// Writes `table` atomically, then makes sure the jumps into it exist.
pub async fn apply(table: &str) -> Result<(), Error> {
    run("iptables-restore", &["-w", "5", "--noflush"], Some(table)).await?;
    for (chain, rule) in JUMPS {
        let mut check = vec!["-w", "5", "-t", "nat", "-C", chain];
        check.extend_from_slice(rule);
        if !run("iptables", &check, None).await? {
            let mut insert = vec!["-w", "5", "-t", "nat", "-I", chain, "1"];
            insert.extend_from_slice(rule);
            if !run("iptables", &insert, None).await? {
                return Err(Error::Failed(
                    format!("iptables {}", insert.join(" ")),
                    "could not insert the jump".into(),
                ));
            }
        }
    }
    Ok(())
}

/// Removes the jumps and the kaji chains (nothing else).
pub async fn remove() -> Result<(), Error> {
    for (chain, rule) in JUMPS {
        loop {
            let mut del = vec!["-w", "5", "-t", "nat", "-D", chain];
            del.extend_from_slice(rule);
            if !run("iptables", &del, None).await? {
                break;
            }
        }
    }
    let mut probe = vec!["-w", "5", "-t", "nat", "-n", "-L", POSTROUTING];
    if run("iptables", &probe, None).await? {
        run("iptables-restore", &["-w", "5", "--noflush"], Some(&render_cleanup())).await?;
    } else {
        probe[5] = HOSTPORTS;
        if run("iptables", &probe, None).await? {
            run("iptables", &["-w", "5", "-t", "nat", "-F", HOSTPORTS], None).await?;
            run("iptables", &["-w", "5", "-t", "nat", "-X", HOSTPORTS], None).await?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::super::ipam::HostPort;
    use super::*;

    fn net(s: &str) -> Ipv4Net {
        s.parse().expect("cidr")
    }

    #[test]
    fn masquerades_only_traffic_leaving_the_cluster_network() {
        let out = render(net("10.244.1.0/24"), net("10.244.0.0/16"), &[]);
        assert_eq!(
            out,
            "*nat\n:KAJI-POSTROUTING - [0:0]\n:KAJI-HOSTPORTS - [0:0]\n\
             -A KAJI-POSTROUTING -s 10.244.1.0/24 -d 10.244.0.0/16 -j RETURN\n\
             -A KAJI-POSTROUTING -s 10.244.1.0/24 ! -d 224.0.0.0/4 -m comment --comment \"pod traffic leaving the cluster network\" -j MASQUERADE\n\
             COMMIT\n"
        );
    }

    #[test]
    fn host_ports_become_dnat_rules_with_hairpin_masquerade() {
        let lease = Lease {
            uid: "u1".into(),
            pod: "demo/web".into(),
            host_ports: vec![
                HostPort { protocol: "TCP".into(), host_port: 8080, container_port: 80, host_ip: None },
                HostPort {
                    protocol: "UDP".into(),
                    host_port: 5353,
                    container_port: 53,
                    host_ip: Some(Ipv4Addr::new(172, 30, 0, 11)),
                },
            ],
        };
        let out = render(net("10.244.1.0/24"), net("10.244.0.0/16"), &[(Ipv4Addr::new(10, 244, 1, 7), lease)]);
        let lines: Vec<&str> = out.lines().collect();
        assert!(lines.contains(
            &"-A KAJI-HOSTPORTS -d 172.30.0.11/32 -p udp -m udp --dport 5353 -m comment --comment \"demo/web hostPort 5353\" -j DNAT --to-destination 10.244.1.7:53"
        ), "{out}");
        assert!(lines.contains(
            &"-A KAJI-HOSTPORTS -p tcp -m tcp --dport 8080 -m comment --comment \"demo/web hostPort 8080\" -j DNAT --to-destination 10.244.1.7:80"
        ), "{out}");
        assert!(lines.contains(
            &"-A KAJI-POSTROUTING -s 10.244.1.0/24 -d 10.244.1.7/32 -p tcp -m tcp --dport 80 -m conntrack --ctstate DNAT -j MASQUERADE"
        ), "{out}");
        // Hairpin rules come before the RETURN that would skip them.
        let hairpin = lines.iter().position(|l| l.contains("--ctstate DNAT")).expect("hairpin");
        let ret = lines.iter().position(|l| l.ends_with("-j RETURN")).expect("return");
        assert!(hairpin < ret);
    }

    #[test]
    fn rendering_is_stable_whatever_the_lease_order() {
        let mk = |uid: &str, port: u16| Lease {
            uid: uid.into(),
            pod: format!("ns/{uid}"),
            host_ports: vec![HostPort { protocol: "TCP".into(), host_port: port, container_port: 80, host_ip: None }],
        };
        let a = (Ipv4Addr::new(10, 244, 1, 2), mk("a", 9000));
        let b = (Ipv4Addr::new(10, 244, 1, 3), mk("b", 8000));
        let one = render(net("10.244.1.0/24"), net("10.244.0.0/16"), &[a.clone(), b.clone()]);
        let two = render(net("10.244.1.0/24"), net("10.244.0.0/16"), &[b, a]);
        assert_eq!(one, two);
    }
}
