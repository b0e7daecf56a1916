//! The answer to one question (pure), as CoreDNS's kubernetes plugin gives it: A/AAAA for
//! ClusterIP Services, the ready endpoints of headless ones, endpoint and pod names; CNAME for
//! ExternalName Services; SRV for ports; PTR for Service and endpoint addresses; SOA, NS and
//! `dns-version` TXT at the zone; NXDOMAIN (with the zone's SOA) for names that do not exist
//! and NODATA for names without records of the type asked. Questions outside the zone, and
//! reverse questions about addresses the cluster does not know, are for the upstream resolver.

use crate::index::Index;
use crate::model::{self, Kind};
use crate::request::{self, Invalid, Request, Space};
use hickory_server::proto::op::ResponseCode;
use hickory_server::proto::rr::rdata::{A, AAAA, CNAME, NS, PTR, SOA, SRV, TXT};
use hickory_server::proto::rr::{Name, RData, Record, RecordType};
use std::collections::HashSet;
use std::net::IpAddr;

/// CoreDNS's `dns-version` TXT: the version of the Kubernetes DNS specification served.
pub const SCHEMA_VERSION: &str = "1.1.0";

/// Whether `<ip-with-dashes>.<namespace>.pod.<zone>` answers (CoreDNS's `pods` option).
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Pods {
    /// NXDOMAIN for every pod name.
    Disabled,
    /// The address in the name, if the namespace exists (kubeadm's default Corefile).
    Insecure,
}

#[derive(Clone, Debug)]
pub struct Settings {
    /// The cluster domain, e.g. `cluster.local.`.
    pub zone: Name,
    /// TTL of every answer and of negative answers (the SOA minimum).
    pub ttl: u32,
    pub pods: Pods,
    /// The Service whose ClusterIP `ns.dns.<zone>` (the zone's NS) resolves to.
    pub dns_service: (String, String),
}

/// A response made here: always authoritative.
#[derive(Clone, Debug, PartialEq)]
pub struct Reply {
    pub rcode: ResponseCode,
    pub answers: Vec<Record>,
    pub authority: Vec<Record>,
    pub additionals: Vec<Record>,
}

#[derive(Clone, Debug, PartialEq)]
pub enum Outcome {
    Reply(Reply),
    /// The name is a CNAME to a name outside the zone (an ExternalName Service): `reply` holds
    /// the CNAME; the upstream's answers for `target` (same type) belong after it. If the
    /// upstream cannot be asked, the answer is `unanswered` (NODATA), as CoreDNS's.
    Chase {
        reply: Reply,
        target: Name,
        unanswered: Reply,
    },
    /// Not ours: ask the upstream resolver.
    Forward,
    /// Zone transfers are not served.
    Refused,
}

/// Answers `qname`/`qtype` from `idx`.
pub fn answer(idx: &Index, s: &Settings, qname: &Name, qtype: RecordType) -> Outcome {
    let lower = qname.to_lowercase();
    let labels: Vec<String> = lower.iter().map(|l| String::from_utf8_lossy(l).into_owned()).collect();
    let labels: Vec<&str> = labels.iter().map(String::as_str).collect();
    if !s.zone.zone_of(qname) {
        return if request::is_reverse(&labels) { reverse(idx, s, qname, qtype, &labels) } else { Outcome::Forward };
    }
    let base = &labels[..labels.len() - usize::from(s.zone.num_labels())];
    // The zone as the client spelled it.
    let zone = qname.trim_to(usize::from(s.zone.num_labels()));
    let z = Zone { idx, s, zone: &zone };
    z.question(qname, base, qtype)
}

struct Zone<'a> {
    idx: &'a Index,
    s: &'a Settings,
    zone: &'a Name,
}

/// What a name resolves to (CoreDNS's msg.Service): an address or a name, a port (None: no
/// port, no SRV record) and the name SRV records point at, relative to the zone.
#[derive(Debug)]
struct Hit {
    host: Host,
    port: Option<u16>,
    target: String,
}

#[derive(Debug)]
enum Host {
    Ip(IpAddr),
    Name(String),
}

impl Zone<'_> {
    fn question(&self, qname: &Name, base: &[&str], qtype: RecordType) -> Outcome {
        let records = match qtype {
            RecordType::AXFR | RecordType::IXFR => return Outcome::Refused,
            RecordType::A | RecordType::AAAA => {
                return match self.addresses(qname, base, qtype, &mut Vec::new()) {
                    Ok(Addresses { records, chase: Some(target) }) => Outcome::Chase {
                        reply: self.reply(ResponseCode::NoError, records, vec![]),
                        target,
                        unanswered: self.negative(ResponseCode::NoError),
                    },
                    Ok(Addresses { records, chase: None }) => self.finish(Ok((records, vec![]))),
                    Err(Invalid) => self.finish(Err(Invalid)),
                };
            }
            RecordType::TXT if base == ["dns-version"] => {
                let txt = RData::TXT(TXT::new(vec![SCHEMA_VERSION.into()]));
                Ok((vec![Record::from_rdata(qname.clone(), 28800, txt)], vec![]))
            }
            // Only `dns-version` has a TXT record: NODATA for names that exist, else NXDOMAIN.
            RecordType::TXT => match self.hits(base) {
                Ok(h) if !h.is_empty() => Ok((vec![], vec![])),
                _ => Err(Invalid),
            },
            RecordType::CNAME => self.hits(base).map(|hits| {
                let first = hits.into_iter().next();
                let cname = first.and_then(|h| match h.host {
                    Host::Name(t) => fqdn(&t).map(|t| self.record(qname, RData::CNAME(CNAME(t)))),
                    Host::Ip(_) => None,
                });
                (cname.into_iter().collect(), vec![])
            }),
            RecordType::SRV => self.srv(qname, base),
            RecordType::SOA => Ok((vec![self.soa()], vec![])),
            RecordType::NS if base.is_empty() => Ok(self.ns()),
            // Everything else: NODATA if the name exists (has an address), else NXDOMAIN.
            _ => self.addresses(qname, base, RecordType::A, &mut Vec::new()).map(|_| (vec![], vec![])),
        };
        self.finish(records)
    }

    /// NXDOMAIN for a name that does not exist (SERVFAIL while the caches are not synced: it may
    /// just not be known yet), NODATA for no records, else the records.
    fn finish(&self, records: Result<(Vec<Record>, Vec<Record>), Invalid>) -> Outcome {
        Outcome::Reply(match records {
            Err(Invalid) if !self.idx.synced => self.negative(ResponseCode::ServFail),
            Err(Invalid) => self.negative(ResponseCode::NXDomain),
            Ok((answers, _)) if answers.is_empty() => self.negative(ResponseCode::NoError),
            Ok((answers, additionals)) => self.reply(ResponseCode::NoError, answers, additionals),
        })
    }

    fn reply(&self, rcode: ResponseCode, answers: Vec<Record>, additionals: Vec<Record>) -> Reply {
        Reply { rcode, answers, authority: vec![], additionals }
    }

    fn negative(&self, rcode: ResponseCode) -> Reply {
        Reply { rcode, answers: vec![], authority: vec![self.soa()], additionals: vec![] }
    }

    /// `<zone> SOA ns.dns.<zone> hostmaster.<zone> <serial> 7200 1800 86400 <ttl>`.
    fn soa(&self) -> Record {
        let sub = |l: &str| {
            Name::from_ascii(l).and_then(|n| n.append_domain(self.zone)).unwrap_or_else(|_| self.zone.clone())
        };
        let soa = SOA::new(sub("ns.dns"), sub("hostmaster"), self.idx.serial, 7200, 1800, 86400, self.s.ttl);
        Record::from_rdata(self.zone.clone(), self.s.ttl.min(300), RData::SOA(soa))
    }

    fn ns(&self) -> (Vec<Record>, Vec<Record>) {
        let Ok(ns) = Name::from_ascii("ns.dns").and_then(|n| n.append_domain(self.zone)) else {
            return (vec![], vec![]);
        };
        let glue = self.ns_ips().into_iter().map(|ip| self.record(&ns, address(ip))).collect();
        (vec![self.record(self.zone, RData::NS(NS(ns.clone())))], glue)
    }

    fn ns_ips(&self) -> Vec<IpAddr> {
        let (namespace, name) = &self.s.dns_service;
        match self.idx.service(namespace, name).map(|s| &s.kind) {
            Some(Kind::ClusterIp(ips)) => ips.clone(),
            _ => vec![],
        }
    }

    fn record(&self, name: &Name, data: RData) -> Record {
        Record::from_rdata(name.clone(), self.s.ttl, data)
    }

    /// A or AAAA records for `qname`, following CNAMEs inside the zone (at most 8 deep, no
    /// loops); a CNAME out of the zone is left for the caller to chase upstream.
    fn addresses(
        &self,
        qname: &Name,
        base: &[&str],
        qtype: RecordType,
        chain: &mut Vec<Name>,
    ) -> Result<Addresses, Invalid> {
        let hits = if base == ["ns", "dns"] {
            self.ns_ips().into_iter().map(|ip| Hit { host: Host::Ip(ip), port: None, target: String::new() }).collect()
        } else {
            self.hits(base)?
        };
        let mut out = Addresses::default();
        let mut seen = HashSet::new();
        for hit in hits {
            match hit.host {
                Host::Ip(ip) if ip.is_ipv4() == (qtype == RecordType::A) => {
                    if seen.insert(ip) {
                        out.records.push(self.record(qname, address(ip)));
                    }
                }
                Host::Ip(_) => {}
                Host::Name(target) => {
                    let Some(target) = fqdn(&target) else { continue };
                    if target.to_lowercase() == qname.to_lowercase() {
                        continue;
                    }
                    if chain.len() > 7 || chain.iter().any(|n| n.to_lowercase() == target.to_lowercase()) {
                        continue;
                    }
                    let cname = self.record(qname, RData::CNAME(CNAME(target.clone())));
                    if !self.s.zone.zone_of(&target) {
                        out.records.push(cname);
                        out.chase = Some(target);
                        continue;
                    }
                    chain.push(target.clone());
                    let lower = target.to_lowercase();
                    let labels: Vec<String> = lower.iter().map(|l| String::from_utf8_lossy(l).into_owned()).collect();
                    let labels: Vec<&str> = labels.iter().map(String::as_str).collect();
                    let inner = &labels[..labels.len() - usize::from(self.s.zone.num_labels())];
                    if let Ok(next) = self.addresses(&target, inner, qtype, chain) {
                        if !next.records.is_empty() {
                            out.records.push(cname);
                            out.records.extend(next.records);
                            out.chase = out.chase.or(next.chase);
                        }
                    }
                }
            }
        }
        Ok(out)
    }

    /// SRV records (priority 0, weight 100 shared evenly, as CoreDNS's) pointing at the
    /// Service's or each endpoint's name, with their addresses as additional records.
    fn srv(&self, qname: &Name, base: &[&str]) -> Result<(Vec<Record>, Vec<Record>), Invalid> {
        let hits: Vec<Hit> = self.hits(base)?.into_iter().filter(|h| matches!(h.host, Host::Ip(_))).collect();
        let weight = u16::try_from(100 / hits.len().max(1)).unwrap_or(100).max(1);
        let (mut records, mut extra) = (vec![], vec![]);
        let (mut seen_srv, mut seen_addr) = (HashSet::new(), HashSet::new());
        for hit in &hits {
            let (Host::Ip(ip), Some(port)) = (&hit.host, hit.port) else { continue };
            let Some(target) = fqdn(&format!("{}.{}", hit.target, self.zone)) else { continue };
            if seen_srv.insert((hit.target.clone(), port)) {
                records.push(self.record(qname, RData::SRV(SRV::new(0, weight, port, target.clone()))));
            }
            if seen_addr.insert((hit.target.clone(), *ip)) {
                extra.push(self.record(&target, address(*ip)));
            }
        }
        Ok((records, extra))
    }

    /// What a name below the zone resolves to (CoreDNS's Records: findServices/findPods).
    fn hits(&self, base: &[&str]) -> Result<Vec<Hit>, Invalid> {
        let r = request::parse(base)?;
        let Some(space) = r.space else { return Ok(vec![]) };
        if !self.idx.has_namespace(r.namespace) {
            return Err(Invalid);
        }
        if r.service.is_empty() {
            return Ok(vec![]);
        }
        match space {
            Space::Pod => self.pod(&r),
            Space::Svc => self.service(&r),
        }
    }

    fn pod(&self, r: &Request<'_>) -> Result<Vec<Hit>, Invalid> {
        if self.s.pods == Pods::Disabled {
            return Err(Invalid);
        }
        let ip = request::pod_ip(r.service).ok_or(Invalid)?;
        Ok(vec![Hit { host: Host::Ip(ip), port: None, target: format!("{}.{}.pod", r.service, r.namespace) }])
    }

    fn service(&self, r: &Request<'_>) -> Result<Vec<Hit>, Invalid> {
        let svc = self.idx.service(r.namespace, r.service).ok_or(Invalid)?;
        let svc_name = format!("{}.{}.svc", svc.name, svc.namespace);
        let mut hits = vec![];
        match &svc.kind {
            Kind::ExternalName(target) if r.endpoint.is_empty() => {
                hits.push(Hit { host: Host::Name(target.clone()), port: None, target: svc_name });
            }
            Kind::ExternalName(_) => {}
            // Endpoint names answer for any Service with endpoints, headless or not.
            kind if *kind == Kind::Headless || !r.endpoint.is_empty() => {
                for slice in self.idx.slices(&svc.namespace, &svc.name) {
                    for e in &slice.endpoints {
                        for ip in &e.addresses {
                            let label = model::endpoint_label(e.hostname.as_deref(), *ip);
                            if !r.endpoint.is_empty() && !r.endpoint.eq_ignore_ascii_case(&label) {
                                continue;
                            }
                            for p in &slice.ports {
                                if request::port_matches(r.port, &p.name, r.protocol, &p.protocol) {
                                    let target = format!("{label}.{svc_name}");
                                    hits.push(Hit { host: Host::Ip(*ip), port: p.port, target });
                                }
                            }
                        }
                    }
                }
            }
            Kind::ClusterIp(ips) => {
                for p in svc.ports.iter().filter(|p| request::port_matches(r.port, &p.name, r.protocol, &p.protocol)) {
                    for ip in ips {
                        hits.push(Hit { host: Host::Ip(*ip), port: p.port, target: svc_name.clone() });
                    }
                }
            }
            Kind::Headless => {}
        }
        if hits.is_empty() {
            return Err(Invalid);
        }
        Ok(hits)
    }
}

#[derive(Debug, Default)]
struct Addresses {
    records: Vec<Record>,
    chase: Option<Name>,
}

/// PTR for an address the cluster knows; everything else in the reverse zones goes upstream.
fn reverse(idx: &Index, s: &Settings, qname: &Name, qtype: RecordType, labels: &[&str]) -> Outcome {
    if qtype != RecordType::PTR {
        return Outcome::Forward;
    }
    let names = request::reverse_ip(labels).map(|ip| idx.names_of(ip)).unwrap_or_default();
    let answers: Vec<Record> = names
        .iter()
        .filter_map(|n| fqdn(&format!("{n}.{}", s.zone)))
        .map(|target| Record::from_rdata(qname.clone(), s.ttl, RData::PTR(PTR(target))))
        .collect();
    if answers.is_empty() {
        return Outcome::Forward;
    }
    Outcome::Reply(Reply { rcode: ResponseCode::NoError, answers, authority: vec![], additionals: vec![] })
}

fn address(ip: IpAddr) -> RData {
    match ip {
        IpAddr::V4(v4) => RData::A(A(v4)),
        IpAddr::V6(v6) => RData::AAAA(AAAA(v6)),
    }
}

/// A fully qualified name from text (None for one that is not a valid name).
fn fqdn(name: &str) -> Option<Name> {
    let mut n = Name::from_ascii(name).ok()?;
    n.set_fqdn(true);
    Some(n)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{Endpoint, Port, Service, Slice};
    use std::sync::Arc;

    fn ip(s: &str) -> IpAddr {
        s.parse().expect("an address")
    }

    fn name(s: &str) -> Name {
        Name::from_ascii(s).expect("a name")
    }

    fn settings() -> Settings {
        Settings {
            zone: name("cluster.local."),
            ttl: 5,
            pods: Pods::Insecure,
            dns_service: ("kube-system".into(), "kube-dns".into()),
        }
    }

    fn port(name: &str, protocol: &str, port: u16) -> Port {
        Port { name: name.into(), protocol: protocol.into(), port: Some(port) }
    }

    /// shop/web (ClusterIP, port http), shop/db (headless, db-0 and db-1 ready, one unnamed
    /// endpoint), shop/mail (ExternalName), kube-system/kube-dns.
    fn index(synced: bool) -> Index {
        let svc = |ns: &str, n: &str, kind: Kind, ports: Vec<Port>| {
            Arc::new(Service { namespace: ns.into(), name: n.into(), kind, ports })
        };
        let services = [
            svc("shop", "web", Kind::ClusterIp(vec![ip("10.96.0.20")]), vec![port("http", "TCP", 80)]),
            svc("shop", "db", Kind::Headless, vec![port("pg", "TCP", 5432)]),
            svc("shop", "mail", Kind::ExternalName("mail.example.com".into()), vec![]),
            svc("shop", "alias", Kind::ExternalName("web.shop.svc.cluster.local".into()), vec![]),
            svc(
                "kube-system",
                "kube-dns",
                Kind::ClusterIp(vec![ip("10.96.0.10")]),
                vec![port("dns", "UDP", 53), port("dns-tcp", "TCP", 53)],
            ),
        ];
        let slices = [
            Arc::new(Slice {
                namespace: "shop".into(),
                service: "db".into(),
                ports: vec![port("pg", "TCP", 5432)],
                endpoints: vec![
                    Endpoint { addresses: vec![ip("10.244.1.5")], hostname: Some("db-0".into()) },
                    Endpoint { addresses: vec![ip("10.244.2.6")], hostname: Some("db-1".into()) },
                    Endpoint { addresses: vec![ip("10.244.3.7")], hostname: None },
                ],
            }),
            Arc::new(Slice {
                namespace: "shop".into(),
                service: "web".into(),
                ports: vec![port("http", "TCP", 8080)],
                endpoints: vec![Endpoint { addresses: vec![ip("10.244.1.9")], hostname: None }],
            }),
        ];
        let namespaces = ["shop".to_string(), "kube-system".to_string(), "default".to_string()];
        Index::build(&services, &slices, &namespaces, 42, synced)
    }

    fn ask(idx: &Index, q: &str, t: RecordType) -> Outcome {
        answer(idx, &settings(), &name(q), t)
    }

    fn reply(o: Outcome) -> Reply {
        match o {
            Outcome::Reply(r) => r,
            other => panic!("want a reply, got {other:?}"),
        }
    }

    /// The answer section as `name type ttl data` lines.
    fn lines(records: &[Record]) -> Vec<String> {
        records.iter().map(|r| format!("{} {} {} {}", r.name, r.record_type(), r.ttl, r.data)).collect()
    }

    #[test]
    fn a_cluster_ip_service_answers_its_address_with_a_five_second_ttl() {
        let r = reply(ask(&index(true), "web.shop.svc.cluster.local.", RecordType::A));
        assert_eq!(r.rcode, ResponseCode::NoError);
        assert_eq!(lines(&r.answers), ["web.shop.svc.cluster.local. A 5 10.96.0.20"]);
        let upper = reply(ask(&index(true), "WEB.Shop.svc.cluster.local.", RecordType::A));
        assert_eq!(upper.answers.len(), 1, "names are case-insensitive");
    }

    #[test]
    fn a_headless_service_answers_each_ready_endpoint_and_endpoints_answer_by_hostname() {
        let idx = index(true);
        let r = reply(ask(&idx, "db.shop.svc.cluster.local.", RecordType::A));
        let mut got: Vec<String> = r.answers.iter().map(|a| a.data.to_string()).collect();
        got.sort();
        assert_eq!(got, ["10.244.1.5", "10.244.2.6", "10.244.3.7"]);
        let r = reply(ask(&idx, "db-1.db.shop.svc.cluster.local.", RecordType::A));
        assert_eq!(lines(&r.answers), ["db-1.db.shop.svc.cluster.local. A 5 10.244.2.6"]);
        let r = reply(ask(&idx, "10-244-3-7.db.shop.svc.cluster.local.", RecordType::A));
        assert_eq!(lines(&r.answers), ["10-244-3-7.db.shop.svc.cluster.local. A 5 10.244.3.7"]);
        let r = reply(ask(&idx, "10-244-1-9.web.shop.svc.cluster.local.", RecordType::A));
        assert_eq!(r.answers.len(), 1, "endpoint names answer for ClusterIP Services too");
        let r = reply(ask(&idx, "db-9.db.shop.svc.cluster.local.", RecordType::A));
        assert_eq!(r.rcode, ResponseCode::NXDomain);
    }

    #[test]
    fn srv_records_point_at_the_service_or_each_endpoint_with_addresses_as_additionals() {
        let idx = index(true);
        let r = reply(ask(&idx, "_http._tcp.web.shop.svc.cluster.local.", RecordType::SRV));
        assert_eq!(
            lines(&r.answers),
            ["_http._tcp.web.shop.svc.cluster.local. SRV 5 0 100 80 web.shop.svc.cluster.local."]
        );
        assert_eq!(lines(&r.additionals), ["web.shop.svc.cluster.local. A 5 10.96.0.20"]);
        let r = reply(ask(&idx, "_pg._tcp.db.shop.svc.cluster.local.", RecordType::SRV));
        let mut got = lines(&r.answers);
        got.sort();
        assert_eq!(
            got,
            [
                "_pg._tcp.db.shop.svc.cluster.local. SRV 5 0 33 5432 10-244-3-7.db.shop.svc.cluster.local.",
                "_pg._tcp.db.shop.svc.cluster.local. SRV 5 0 33 5432 db-0.db.shop.svc.cluster.local.",
                "_pg._tcp.db.shop.svc.cluster.local. SRV 5 0 33 5432 db-1.db.shop.svc.cluster.local.",
            ]
        );
        assert_eq!(r.additionals.len(), 3);
        let r = reply(ask(&idx, "_http._udp.web.shop.svc.cluster.local.", RecordType::SRV));
        assert_eq!(r.rcode, ResponseCode::NXDomain, "no UDP port named http");
        let r = reply(ask(&idx, "web.shop.svc.cluster.local.", RecordType::SRV));
        assert_eq!(r.answers.len(), 1, "SRV without port and protocol lists every port");
    }

    #[test]
    fn unknown_names_in_the_zone_are_nxdomain_with_the_soa_and_missing_types_are_nodata() {
        let idx = index(true);
        for q in ["nope.shop.svc.cluster.local.", "web.nons.svc.cluster.local.", "web.shop.cluster.local."] {
            let r = reply(ask(&idx, q, RecordType::A));
            assert_eq!(r.rcode, ResponseCode::NXDomain, "{q}");
            assert!(r.answers.is_empty());
            assert_eq!(
                lines(&r.authority),
                ["cluster.local. SOA 5 ns.dns.cluster.local. hostmaster.cluster.local. 42 7200 1800 86400 5"],
                "{q}"
            );
        }
        let r = reply(ask(&idx, "web.shop.svc.cluster.local.", RecordType::AAAA));
        assert_eq!((r.rcode, r.answers.len(), r.authority.len()), (ResponseCode::NoError, 0, 1), "NODATA");
        let r = reply(ask(&idx, "web.shop.svc.cluster.local.", RecordType::MX));
        assert_eq!((r.rcode, r.answers.len()), (ResponseCode::NoError, 0));
        let r = reply(ask(&idx, "nope.shop.svc.cluster.local.", RecordType::MX));
        assert_eq!(r.rcode, ResponseCode::NXDomain);
    }

    #[test]
    fn before_the_caches_are_synced_an_unknown_name_is_servfail_not_nxdomain() {
        let r = reply(ask(&index(false), "nope.shop.svc.cluster.local.", RecordType::A));
        assert_eq!(r.rcode, ResponseCode::ServFail);
    }

    #[test]
    fn external_name_services_are_cnames_chased_upstream_or_inside_the_zone() {
        let idx = index(true);
        match ask(&idx, "mail.shop.svc.cluster.local.", RecordType::A) {
            Outcome::Chase { reply, target, unanswered } => {
                assert_eq!(lines(&reply.answers), ["mail.shop.svc.cluster.local. CNAME 5 mail.example.com."]);
                assert_eq!(target, name("mail.example.com."));
                assert_eq!((unanswered.rcode, unanswered.answers.len()), (ResponseCode::NoError, 0));
            }
            other => panic!("want a chase, got {other:?}"),
        }
        let r = reply(ask(&idx, "alias.shop.svc.cluster.local.", RecordType::A));
        assert_eq!(
            lines(&r.answers),
            [
                "alias.shop.svc.cluster.local. CNAME 5 web.shop.svc.cluster.local.",
                "web.shop.svc.cluster.local. A 5 10.96.0.20"
            ]
        );
        let r = reply(ask(&idx, "mail.shop.svc.cluster.local.", RecordType::CNAME));
        assert_eq!(lines(&r.answers), ["mail.shop.svc.cluster.local. CNAME 5 mail.example.com."]);
    }

    #[test]
    fn ptr_answers_for_service_and_endpoint_addresses_and_the_rest_is_forwarded() {
        let idx = index(true);
        let r = reply(ask(&idx, "20.0.96.10.in-addr.arpa.", RecordType::PTR));
        assert_eq!(lines(&r.answers), ["20.0.96.10.in-addr.arpa. PTR 5 web.shop.svc.cluster.local."]);
        let r = reply(ask(&idx, "5.1.244.10.in-addr.arpa.", RecordType::PTR));
        assert_eq!(lines(&r.answers), ["5.1.244.10.in-addr.arpa. PTR 5 db-0.db.shop.svc.cluster.local."]);
        assert_eq!(ask(&idx, "1.1.168.192.in-addr.arpa.", RecordType::PTR), Outcome::Forward);
        assert_eq!(ask(&idx, "example.com.", RecordType::A), Outcome::Forward);
        assert_eq!(ask(&idx, "cluster.local.example.com.", RecordType::A), Outcome::Forward);
    }

    #[test]
    fn the_zone_has_its_soa_ns_version_and_pod_names() {
        let idx = index(true);
        let r = reply(ask(&idx, "cluster.local.", RecordType::NS));
        assert_eq!(lines(&r.answers), ["cluster.local. NS 5 ns.dns.cluster.local."]);
        assert_eq!(lines(&r.additionals), ["ns.dns.cluster.local. A 5 10.96.0.10"]);
        let r = reply(ask(&idx, "cluster.local.", RecordType::SOA));
        assert_eq!(r.answers.len(), 1);
        let r = reply(ask(&idx, "dns-version.cluster.local.", RecordType::TXT));
        assert_eq!(lines(&r.answers), ["dns-version.cluster.local. TXT 28800 1.1.0"]);
        let r = reply(ask(&idx, "10-244-1-5.shop.pod.cluster.local.", RecordType::A));
        assert_eq!(lines(&r.answers), ["10-244-1-5.shop.pod.cluster.local. A 5 10.244.1.5"]);
        let r = reply(ask(&idx, "10-244-1-5.nons.pod.cluster.local.", RecordType::A));
        assert_eq!(r.rcode, ResponseCode::NXDomain, "pods insecure still needs the namespace");
        let disabled = Settings { pods: Pods::Disabled, ..settings() };
        let r = reply(answer(&idx, &disabled, &name("10-244-1-5.shop.pod.cluster.local."), RecordType::A));
        assert_eq!(r.rcode, ResponseCode::NXDomain);
        assert_eq!(ask(&idx, "cluster.local.", RecordType::AXFR), Outcome::Refused);
    }
}
