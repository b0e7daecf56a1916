//! A pod's /etc/resolv.conf (pure), as kubelet forms it (pkg/kubelet/network/dns): the pod's
//! dnsPolicy picks the base — the cluster DNS (ClusterFirst, ClusterFirstWithHostNet), the
//! node's resolv.conf (Default, and ClusterFirst for hostNetwork pods), or nothing (None) — then
//! the pod's dnsConfig is merged in and the result cut to the resolver's limits.

use k8s_openapi::api::core::v1::Pod;
use std::net::IpAddr;

/// At most this many nameservers (glibc's MAXNS; validation.MaxDNSNameservers).
pub const MAX_NAMESERVERS: usize = 3;
/// At most this many search domains, of at most this many characters together
/// (validation.MaxDNSSearchPaths, MaxDNSSearchListChars).
pub const MAX_SEARCHES: usize = 32;
pub const MAX_SEARCH_CHARS: usize = 2048;

/// What the node gives: its resolver configuration and the cluster DNS settings.
#[derive(Clone, Copy, Debug)]
pub struct Node<'a> {
    /// The text of the node's resolv.conf (`--resolv-conf`); None when the flag is empty, which
    /// makes Default pods ask 127.0.0.1 with no search path, as kubelet's.
    pub resolv_conf: Option<&'a str>,
    pub cluster_dns: &'a [IpAddr],
    pub cluster_domain: &'a str,
    /// Whether the node's address is IPv6 (the loopback nameserver when --resolv-conf is empty).
    pub ipv6: bool,
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Config {
    pub nameservers: Vec<String>,
    pub searches: Vec<String>,
    /// `name` or `name:value`.
    pub options: Vec<String>,
}

/// A warning kubelet records as an event on the pod (`reason`, `message`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Warning {
    pub reason: &'static str,
    pub message: String,
}

impl Config {
    /// The file: `search`, then `nameserver` lines, then `options` (what the container runtime
    /// writes from kubelet's DNSConfig).
    pub fn render(&self) -> String {
        let mut out = String::new();
        if !self.searches.is_empty() {
            out.push_str(&format!("search {}\n", self.searches.join(" ")));
        }
        for ns in &self.nameservers {
            out.push_str(&format!("nameserver {ns}\n"));
        }
        if !self.options.is_empty() {
            out.push_str(&format!("options {}\n", self.options.join(" ")));
        }
        out
    }
}

/// Parses a resolv.conf: every `nameserver`, the last `search` line (trailing dots dropped, `.`
/// skipped), every `options` (a later one replaces an earlier one of the same name).
pub fn parse(text: &str) -> Config {
    let mut c = Config::default();
    for line in text.lines() {
        let line = line.split(['#', ';']).next().unwrap_or_default();
        let mut fields = line.split_whitespace();
        match fields.next() {
            Some("nameserver") => c.nameservers.extend(fields.next().map(String::from)),
            Some("search") => {
                c.searches = fields.filter(|s| *s != ".").map(|s| s.trim_end_matches('.').to_string()).collect()
            }
            Some("options") => c.options = merge_options(&c.options, fields.map(|o| (o.to_string(), None))),
            _ => {}
        }
    }
    c
}

/// Merges options by name; a later one replaces an earlier one in place (`ndots:5` + `ndots:2`
/// → `ndots:2`). `(name, Some(value))` pairs come from a pod's dnsConfig; `(text, None)` is an
/// option as written (`name` or `name:value`).
fn merge_options(base: &[String], more: impl IntoIterator<Item = (String, Option<String>)>) -> Vec<String> {
    let mut out: Vec<(String, Option<String>)> = base.iter().map(|o| split_option(o)).collect();
    for (name, value) in more {
        let (name, value) = match value {
            Some(v) => (name, Some(v)),
            None => split_option(&name),
        };
        match out.iter_mut().find(|(n, _)| *n == name) {
            Some(existing) => existing.1 = value,
            None => out.push((name, value)),
        }
    }
    out.into_iter().map(|(n, v)| v.filter(|v| !v.is_empty()).map_or(n.clone(), |v| format!("{n}:{v}"))).collect()
}

fn split_option(o: &str) -> (String, Option<String>) {
    match o.split_once(':') {
        Some((n, v)) => (n.to_string(), Some(v.to_string())),
        None => (o.to_string(), None),
    }
}

fn push_unique(list: &mut Vec<String>, items: impl IntoIterator<Item = String>) {
    for item in items {
        if !list.contains(&item) {
            list.push(item);
        }
    }
}

/// The pod's resolver configuration, and the warnings kubelet would record.
pub fn for_pod(pod: &Pod, node: Node<'_>) -> (Config, Vec<Warning>) {
    let spec = pod.spec.clone().unwrap_or_default();
    let namespace = pod.metadata.namespace.as_deref().unwrap_or("default");
    let host_network = spec.host_network.unwrap_or(false);
    let policy = spec.dns_policy.as_deref().unwrap_or("ClusterFirst");
    let mut warnings = vec![];
    let host = node.resolv_conf.map(parse).unwrap_or_default();
    let cluster = match policy {
        "None" => None,
        "ClusterFirstWithHostNet" => Some(true),
        "ClusterFirst" => Some(!host_network),
        _ => Some(false),
    };
    let mut config = match cluster {
        None => Config::default(),
        Some(true) if !node.cluster_dns.is_empty() => {
            let d = node.cluster_domain.trim_end_matches('.');
            let mut searches = vec![];
            if d.is_empty() {
                push_unique(&mut searches, host.searches);
            } else {
                let cluster = [format!("{namespace}.svc.{d}"), format!("svc.{d}"), d.to_string()];
                push_unique(&mut searches, cluster.into_iter().chain(host.searches));
            }
            Config {
                nameservers: node.cluster_dns.iter().map(ToString::to_string).collect(),
                searches,
                options: vec!["ndots:5".into()],
            }
        }
        Some(cluster) => {
            if cluster {
                warnings.push(Warning {
                    reason: "MissingClusterDNS",
                    message: format!(
                        "pod: \"{}_{namespace}\". kubelet does not have ClusterDNS IP configured and cannot create \
                         Pod using \"{policy}\" policy. Falling back to \"Default\" policy.",
                        pod.metadata.name.as_deref().unwrap_or_default()
                    ),
                });
            }
            match node.resolv_conf {
                Some(_) => host,
                None => Config {
                    nameservers: vec![if node.ipv6 { "::1" } else { "127.0.0.1" }.into()],
                    searches: vec![".".into()],
                    options: vec![],
                },
            }
        }
    };
    if let Some(c) = &spec.dns_config {
        push_unique(&mut config.nameservers, c.nameservers.iter().flatten().cloned());
        push_unique(&mut config.searches, c.searches.iter().flatten().cloned());
        let more = c
            .options
            .iter()
            .flatten()
            .filter_map(|o| Some((o.name.clone()?, Some(o.value.clone().unwrap_or_default()))));
        config.options = merge_options(&config.options, more);
    }
    fit_limits(&mut config, &mut warnings);
    (config, warnings)
}

/// Cuts nameservers and search domains to what the resolver uses, with kubelet's warnings.
fn fit_limits(c: &mut Config, warnings: &mut Vec<Warning>) {
    if c.nameservers.len() > MAX_NAMESERVERS {
        c.nameservers.truncate(MAX_NAMESERVERS);
        warnings.push(Warning {
            reason: "DNSConfigForming",
            message: format!(
                "Nameserver limits were exceeded, some nameservers have been omitted, the applied nameserver line is: {}",
                c.nameservers.join(" ")
            ),
        });
    }
    let mut cut = false;
    if c.searches.len() > MAX_SEARCHES {
        c.searches.truncate(MAX_SEARCHES);
        cut = true;
    }
    while c.searches.iter().map(String::len).sum::<usize>() + c.searches.len().saturating_sub(1) > MAX_SEARCH_CHARS {
        c.searches.pop();
        cut = true;
    }
    if cut {
        warnings.push(Warning {
            reason: "DNSConfigForming",
            message: format!(
                "Search Line limits were exceeded, some search paths have been omitted, the applied search line is: {}",
                c.searches.join(" ")
            ),
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const HOST: &str = "# the node's\nnameserver 172.30.0.1\nsearch lab.test corp.example.\noptions edns0 ndots:2\n";

    fn pod(spec: serde_json::Value) -> Pod {
        serde_json::from_value(json!({"metadata": {"name": "p", "namespace": "shop"}, "spec": spec})).expect("a pod")
    }

    fn node(cluster_dns: &[IpAddr]) -> Node<'_> {
        Node { resolv_conf: Some(HOST), cluster_dns, cluster_domain: "cluster.local", ipv6: false }
    }

    const DNS: [IpAddr; 1] = [IpAddr::V4(std::net::Ipv4Addr::new(10, 96, 0, 10))];

    #[test]
    fn cluster_first_pods_ask_the_cluster_dns_with_the_cluster_and_node_search_path() {
        let (c, w) = for_pod(&pod(json!({"containers": []})), node(&DNS));
        assert_eq!(
            c.render(),
            "search shop.svc.cluster.local svc.cluster.local cluster.local lab.test corp.example\n\
             nameserver 10.96.0.10\noptions ndots:5\n"
        );
        assert!(w.is_empty());
        let (hostnet, _) =
            for_pod(&pod(json!({"hostNetwork": true, "dnsPolicy": "ClusterFirstWithHostNet"})), node(&DNS));
        assert_eq!(hostnet, c, "ClusterFirstWithHostNet is ClusterFirst for hostNetwork pods");
    }

    #[test]
    fn default_and_host_network_cluster_first_pods_get_the_nodes_resolver() {
        let host = "search lab.test corp.example\nnameserver 172.30.0.1\noptions edns0 ndots:2\n";
        let (c, _) = for_pod(&pod(json!({"dnsPolicy": "Default"})), node(&DNS));
        assert_eq!(c.render(), host);
        let (c, _) = for_pod(&pod(json!({"hostNetwork": true})), node(&DNS));
        assert_eq!(c.render(), host, "ClusterFirst falls back to Default on the host network");
        let empty = Node { resolv_conf: None, ..node(&DNS) };
        let (c, _) = for_pod(&pod(json!({"dnsPolicy": "Default"})), empty);
        assert_eq!(c.render(), "search .\nnameserver 127.0.0.1\n", "--resolv-conf=\"\"");
    }

    #[test]
    fn without_a_cluster_dns_cluster_first_falls_back_to_default_with_a_warning() {
        let (c, w) = for_pod(&pod(json!({})), node(&[]));
        assert_eq!(c.nameservers, ["172.30.0.1"]);
        assert_eq!(w.len(), 1);
        assert_eq!(w[0].reason, "MissingClusterDNS");
        assert!(w[0].message.contains("Falling back to \"Default\" policy"), "{}", w[0].message);
    }

    #[test]
    fn dns_config_is_merged_and_policy_none_uses_only_it() {
        let cfg = json!({"nameservers": ["1.2.3.4", "10.96.0.10"], "searches": ["ns1.svc.cluster-domain.example", "my.dns.search.suffix"],
            "options": [{"name": "ndots", "value": "2"}, {"name": "edns0"}]});
        let (c, _) = for_pod(&pod(json!({"dnsPolicy": "None", "dnsConfig": cfg})), node(&DNS));
        assert_eq!(
            c.render(),
            "search ns1.svc.cluster-domain.example my.dns.search.suffix\nnameserver 1.2.3.4\nnameserver 10.96.0.10\n\
             options ndots:2 edns0\n",
            "the example of the Kubernetes docs"
        );
        let (c, _) = for_pod(&pod(json!({"dnsConfig": cfg})), node(&DNS));
        assert_eq!(c.nameservers, ["10.96.0.10", "1.2.3.4"], "duplicates dropped");
        assert_eq!(c.options, ["ndots:2", "edns0"], "the pod's ndots replaces the cluster's");
        assert_eq!(c.searches.len(), 7);
    }

    #[test]
    fn nameservers_and_search_paths_are_cut_to_the_resolvers_limits() {
        let cfg = json!({"nameservers": ["1.1.1.1", "2.2.2.2", "3.3.3.3"],
            "searches": (0..40).map(|i| format!("d{i}.example")).collect::<Vec<_>>()});
        let (c, w) = for_pod(&pod(json!({"dnsConfig": cfg})), node(&DNS));
        assert_eq!(c.nameservers, ["10.96.0.10", "1.1.1.1", "2.2.2.2"]);
        assert_eq!(c.searches.len(), MAX_SEARCHES);
        let reasons: Vec<&str> = w.iter().map(|w| w.reason).collect();
        assert_eq!(reasons, ["DNSConfigForming", "DNSConfigForming"]);
        let long = json!({"searches": (0..20).map(|i| format!("{i}{}", "x".repeat(200))).collect::<Vec<_>>()});
        let (c, _) = for_pod(&pod(json!({"dnsPolicy": "None", "dnsConfig": long})), node(&DNS));
        assert!(c.searches.join(" ").len() <= MAX_SEARCH_CHARS);
    }

    #[test]
    fn the_nodes_resolv_conf_is_read_like_the_resolver_does() {
        let c = parse("search a.example\nsearch b.example. .\nnameserver 1.1.1.1 # comment\noptions ndots:1\noptions ndots:3 rotate\n");
        assert_eq!(c.searches, ["b.example"], "the last search line wins");
        assert_eq!(c.nameservers, ["1.1.1.1"]);
        assert_eq!(c.options, ["ndots:3", "rotate"]);
    }
}
