//! The lookup tables one answer reads (pure): Services by name, EndpointSlices by Service,
//! namespaces, and every Service and endpoint address back to its names for PTR. Built whole
//! from the caches after each batch of changes and swapped in, so a query never sees half a
//! change and never waits for one.

use crate::model::{self, Kind, Service, Slice};
use std::collections::{HashMap, HashSet};
use std::net::IpAddr;
use std::sync::Arc;

#[derive(Debug, Default)]
pub struct Index {
    /// By `"<name>.<namespace>"`.
    services: HashMap<String, Arc<Service>>,
    /// The slices of each Service, by `"<service>.<namespace>"`.
    slices: HashMap<String, Vec<Arc<Slice>>>,
    namespaces: HashSet<String>,
    /// Address → names relative to the zone (`web.shop.svc`, `web-0.web.shop.svc`): a Service's
    /// ClusterIP names only that Service; an endpoint's address names every Service it serves.
    reverse: HashMap<IpAddr, Vec<String>>,
    /// The SOA serial: when the data last changed (Unix seconds), as CoreDNS's.
    pub serial: u32,
    /// Whether every watch has completed its first list: until then an unknown name may only be
    /// unknown to us (SERVFAIL, not NXDOMAIN).
    pub synced: bool,
}

impl Index {
    pub fn build<'a>(
        services: impl IntoIterator<Item = &'a Arc<Service>>,
        slices: impl IntoIterator<Item = &'a Arc<Slice>>,
        namespaces: impl IntoIterator<Item = &'a String>,
        serial: u32,
        synced: bool,
    ) -> Index {
        let mut idx = Index { serial, synced, ..Default::default() };
        for s in services {
            idx.services.insert(key(&s.name, &s.namespace), s.clone());
        }
        for s in slices {
            idx.slices.entry(key(&s.service, &s.namespace)).or_default().push(s.clone());
        }
        idx.namespaces = namespaces.into_iter().cloned().collect();
        // ClusterIPs first: an address that is a Service's answers with that Service only.
        let mut by_name: Vec<&Arc<Service>> = idx.services.values().collect();
        by_name.sort_by(|a, b| (&a.namespace, &a.name).cmp(&(&b.namespace, &b.name)));
        let mut cluster_ips = HashSet::new();
        for s in by_name {
            if let Kind::ClusterIp(ips) = &s.kind {
                for ip in ips {
                    if cluster_ips.insert(*ip) {
                        idx.reverse.insert(*ip, vec![format!("{}.{}.svc", s.name, s.namespace)]);
                    }
                }
            }
        }
        let mut slices: Vec<&Arc<Slice>> = idx.slices.values().flatten().collect();
        slices.sort_by(|a, b| (&a.namespace, &a.service).cmp(&(&b.namespace, &b.service)));
        for s in slices {
            for e in &s.endpoints {
                for ip in e.addresses.iter().filter(|ip| !cluster_ips.contains(ip)) {
                    let label = model::endpoint_label(e.hostname.as_deref(), *ip);
                    let name = format!("{label}.{}.{}.svc", s.service, s.namespace);
                    let names = idx.reverse.entry(*ip).or_default();
                    if !names.contains(&name) {
                        names.push(name);
                    }
                }
            }
        }
        idx
    }

    pub fn service(&self, namespace: &str, name: &str) -> Option<&Service> {
        self.services.get(&key(name, namespace)).map(|s| &**s)
    }

    /// The slices of Service `namespace/name`.
    pub fn slices(&self, namespace: &str, name: &str) -> &[Arc<Slice>] {
        self.slices.get(&key(name, namespace)).map_or(&[], Vec::as_slice)
    }

    pub fn has_namespace(&self, namespace: &str) -> bool {
        self.namespaces.contains(namespace)
    }

    /// The names (relative to the zone) `ip` belongs to.
    pub fn names_of(&self, ip: IpAddr) -> &[String] {
        self.reverse.get(&ip).map_or(&[], Vec::as_slice)
    }

    pub fn service_count(&self) -> usize {
        self.services.len()
    }
}

fn key(name: &str, namespace: &str) -> String {
    format!("{name}.{namespace}")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{Endpoint, Port};

    fn ip(s: &str) -> IpAddr {
        s.parse().expect("an address")
    }

    #[test]
    fn addresses_map_back_to_their_service_or_endpoint_names() {
        let web = Arc::new(Service {
            namespace: "shop".into(),
            name: "web".into(),
            kind: Kind::ClusterIp(vec![ip("10.96.0.20")]),
            ports: vec![],
        });
        let slice = |svc: &str| {
            Arc::new(Slice {
                namespace: "shop".into(),
                service: svc.into(),
                ports: vec![Port { name: "http".into(), protocol: "TCP".into(), port: Some(80) }],
                endpoints: vec![
                    Endpoint { addresses: vec![ip("10.244.1.5")], hostname: Some("web-0".into()) },
                    Endpoint { addresses: vec![ip("10.244.2.6")], hostname: None },
                ],
            })
        };
        let (a, b) = (slice("web"), slice("web-headless"));
        let idx = Index::build([&web], [&a, &b], &["shop".to_string()], 7, true);
        assert_eq!(idx.names_of(ip("10.96.0.20")), ["web.shop.svc"]);
        assert_eq!(idx.names_of(ip("10.244.1.5")), ["web-0.web.shop.svc", "web-0.web-headless.shop.svc"]);
        assert_eq!(idx.names_of(ip("10.244.2.6")), ["10-244-2-6.web.shop.svc", "10-244-2-6.web-headless.shop.svc"]);
        assert!(idx.names_of(ip("10.0.0.1")).is_empty());
        assert_eq!(idx.slices("shop", "web").len(), 1);
        assert!(idx.has_namespace("shop") && !idx.has_namespace("other"));
    }
}
