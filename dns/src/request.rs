//! What a name asks for (pure), as CoreDNS's kubernetes plugin parses it: inside the cluster
//! zone `[_port._protocol.|endpoint.]service.namespace.svc|pod`, and in the reverse zones the
//! address a PTR name stands for.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Space {
    Svc,
    Pod,
}

/// The parts of a name below the zone. Empty strings are absent parts; an absent port or
/// protocol matches every one.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Request<'a> {
    /// None for the zone apex and `svc.<zone>`/`pod.<zone>` themselves (NODATA for everything).
    pub space: Option<Space>,
    pub namespace: &'a str,
    pub service: &'a str,
    pub endpoint: &'a str,
    pub port: &'a str,
    pub protocol: &'a str,
}

/// The name cannot exist in the zone (NXDOMAIN): not under `svc` or `pod`, or too many labels.
#[derive(Debug, PartialEq, Eq)]
pub struct Invalid;

/// Parses the labels of a name below the zone (`["web", "shop", "svc"]` for
/// `web.shop.svc.cluster.local.`), lowercase.
pub fn parse<'a>(labels: &[&'a str]) -> Result<Request<'a>, Invalid> {
    let mut r = Request::default();
    let mut rest = labels;
    let Some((&last, before)) = rest.split_last() else { return Ok(r) };
    r.space = match last {
        "svc" => Some(Space::Svc),
        "pod" => Some(Space::Pod),
        _ => return Err(Invalid),
    };
    rest = before;
    if let Some((&namespace, before)) = rest.split_last() {
        r.namespace = namespace;
        rest = before;
    } else {
        // `svc.<zone>` and `pod.<zone>`: NODATA, as the apex.
        r.space = None;
        return Ok(r);
    }
    if let Some((&service, before)) = rest.split_last() {
        r.service = service;
        rest = before;
    }
    match rest {
        [] => {}
        [endpoint] => r.endpoint = endpoint,
        [port, protocol] => {
            r.port = strip_underscore(port);
            r.protocol = strip_underscore(protocol);
        }
        _ => return Err(Invalid),
    }
    Ok(r)
}

fn strip_underscore(label: &str) -> &str {
    label.strip_prefix('_').unwrap_or(label)
}

/// Whether a port named `name` with `protocol` answers a request for `want_port`/`want_protocol`
/// (absent parts match everything; case does not matter).
pub fn port_matches(want_port: &str, name: &str, want_protocol: &str, protocol: &str) -> bool {
    (want_port.is_empty() || want_port.eq_ignore_ascii_case(name))
        && (want_protocol.is_empty() || want_protocol.eq_ignore_ascii_case(protocol))
}

/// The address a pod name stands for: `10-244-1-5` (exactly three dashes, none doubled) is IPv4,
/// anything else is tried as IPv6 with dashes for colons (`fd00--5`).
pub fn pod_ip(label: &str) -> Option<IpAddr> {
    if label.matches('-').count() == 3 && !label.contains("--") {
        label.replace('-', ".").parse::<Ipv4Addr>().ok().map(IpAddr::V4)
    } else {
        label.replace('-', ":").parse::<Ipv6Addr>().ok().map(IpAddr::V6)
    }
}

/// The address a full reverse name stands for (labels without the root, lowercase):
/// `5.1.244.10.in-addr.arpa` → 10.244.1.5, 32 nibbles + `ip6.arpa` → an IPv6 address. None for a
/// partial name (a reverse zone) or anything else.
pub fn reverse_ip(labels: &[&str]) -> Option<IpAddr> {
    match labels {
        [d, c, b, a, "in-addr", "arpa"] => {
            let octet = |s: &str| if s.len() > 1 && s.starts_with('0') { None } else { s.parse::<u8>().ok() };
            Some(IpAddr::V4(Ipv4Addr::new(octet(a)?, octet(b)?, octet(c)?, octet(d)?)))
        }
        [nibbles @ .., "ip6", "arpa"] if nibbles.len() == 32 => {
            let mut value: u128 = 0;
            for n in nibbles.iter().rev() {
                let [c] = n.as_bytes() else { return None };
                value = (value << 4) | u128::from((*c as char).to_digit(16)?);
            }
            Some(IpAddr::V6(Ipv6Addr::from(value)))
        }
        _ => None,
    }
}

/// Whether the labels are inside a reverse zone (`in-addr.arpa`, `ip6.arpa`).
pub fn is_reverse(labels: &[&str]) -> bool {
    labels.ends_with(&["in-addr", "arpa"]) || labels.ends_with(&["ip6", "arpa"])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(name: &str) -> Result<Request<'_>, Invalid> {
        let labels: Vec<&str> = if name.is_empty() { vec![] } else { name.split('.').collect() };
        parse(&labels)
    }

    #[test]
    fn names_parse_like_corednss_kubernetes_plugin() {
        let web = p("web.shop.svc").expect("valid");
        assert_eq!((web.space, web.namespace, web.service), (Some(Space::Svc), "shop", "web"));
        let ep = p("web-0.web.shop.svc").expect("valid");
        assert_eq!((ep.endpoint, ep.service, ep.port), ("web-0", "web", ""));
        let srv = p("_http._tcp.web.shop.svc").expect("valid");
        assert_eq!((srv.port, srv.protocol, srv.service, srv.endpoint), ("http", "tcp", "web", ""));
        let pod = p("10-244-1-5.shop.pod").expect("valid");
        assert_eq!((pod.space, pod.service), (Some(Space::Pod), "10-244-1-5"));
        let ns = p("shop.svc").expect("valid");
        assert_eq!((ns.space, ns.namespace, ns.service), (Some(Space::Svc), "shop", ""));
        assert_eq!(p("svc").expect("valid").space, None, "svc.<zone> is like the apex");
        assert_eq!(p("").expect("valid").space, None);
        assert_eq!(p("google.com"), Err(Invalid));
        assert_eq!(p("a.b.c.web.shop.svc"), Err(Invalid), "too long");
    }

    #[test]
    fn ports_match_by_name_and_protocol_ignoring_case() {
        assert!(port_matches("http", "HTTP", "tcp", "TCP"));
        assert!(port_matches("", "anything", "", "UDP"));
        assert!(!port_matches("http", "", "tcp", "TCP"), "an unnamed port answers no named query");
        assert!(!port_matches("dns", "dns", "tcp", "UDP"));
    }

    #[test]
    fn pod_and_reverse_names_give_addresses() {
        assert_eq!(pod_ip("10-244-1-5"), "10.244.1.5".parse().ok());
        assert_eq!(pod_ip("fd00--5"), "fd00::5".parse().ok());
        assert_eq!(pod_ip("web"), None);
        let v4: Vec<&str> = "5.1.244.10.in-addr.arpa".split('.').collect();
        assert_eq!(reverse_ip(&v4), "10.244.1.5".parse().ok());
        let v6 = "1.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.d.f.ip6.arpa";
        let v6: Vec<&str> = v6.split('.').collect();
        assert_eq!(reverse_ip(&v6), "fd00::1".parse().ok());
        let partial: Vec<&str> = "244.10.in-addr.arpa".split('.').collect();
        assert_eq!(reverse_ip(&partial), None);
        assert!(is_reverse(&partial) && !is_reverse(&["cluster", "local"]));
        let bad: Vec<&str> = "05.1.244.10.in-addr.arpa".split('.').collect();
        assert_eq!(reverse_ip(&bad), None);
    }
}
