//! Questions the cluster cannot answer go to the upstream resolvers (the node's, from the
//! pod's /etc/resolv.conf under dnsPolicy Default), as CoreDNS's `forward . /etc/resolv.conf`:
//! the client's question as asked (RD and CD bits, its EDNS buffer size and DO bit), over the
//! protocol it came on (a truncated UDP answer stays truncated, so the client retries over TCP),
//! to one upstream after another until one answers.

use futures::StreamExt;
use hickory_server::net::runtime::TokioRuntimeProvider;
use hickory_server::net::tcp::TcpClientStream;
use hickory_server::net::udp::UdpClientStream;
use hickory_server::net::xfer::{DnsExchange, DnsHandle};
use hickory_server::net::NetError;
use hickory_server::proto::op::{DnsRequest, DnsRequestOptions, Edns, Message, Query};
use std::net::{IpAddr, SocketAddr};
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("no upstream resolver configured")]
    NoUpstream,
    #[error("upstream {upstream} failed")]
    Upstream {
        upstream: SocketAddr,
        #[source]
        source: NetError,
    },
    #[error("upstream {upstream} did not answer")]
    NoAnswer { upstream: SocketAddr },
    #[error("cannot read {path}")]
    ResolvConf {
        path: String,
        #[source]
        source: std::io::Error,
    },
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// The question as the client asked it.
#[derive(Clone, Debug)]
pub struct Question<'a> {
    pub query: Query,
    pub recursion_desired: bool,
    pub checking_disabled: bool,
    pub edns: Option<&'a Edns>,
    pub tcp: bool,
}

pub struct Forwarder {
    upstreams: Vec<Upstream>,
    timeout: Duration,
    /// The runtime the TCP exchanges' background tasks run in: hickory keeps them in a JoinSet
    /// that lives as long as a clone of this provider does, so it must outlive every exchange (a
    /// provider made per question aborted the task before it sent anything: every question that
    /// came over TCP was a SERVFAIL).
    provider: TokioRuntimeProvider,
    /// Where the next question starts, so load spreads over the upstreams.
    next: AtomicUsize,
}

struct Upstream {
    addr: SocketAddr,
    /// A fresh socket (random source port) per question; the exchange only multiplexes.
    udp: DnsExchange<TokioRuntimeProvider>,
}

impl Forwarder {
    /// Forwards to `upstreams`, each try bounded by `timeout`. Must run inside the tokio runtime
    /// (each UDP exchange spawns its background task).
    pub fn new(upstreams: Vec<SocketAddr>, timeout: Duration) -> Self {
        let upstreams = upstreams
            .into_iter()
            .map(|addr| Upstream {
                addr,
                udp: UdpClientStream::builder(addr, TokioRuntimeProvider::default())
                    .with_timeout(Some(timeout))
                    .exchange(),
            })
            .collect();
        Forwarder { upstreams, timeout, provider: TokioRuntimeProvider::default(), next: AtomicUsize::new(0) }
    }

    pub fn upstreams(&self) -> Vec<SocketAddr> {
        self.upstreams.iter().map(|u| u.addr).collect()
    }

    /// The first answer from an upstream (tried in turn), with the upstream that gave it.
    pub async fn forward(&self, q: &Question<'_>) -> Result<(SocketAddr, Message)> {
        if self.upstreams.is_empty() {
            return Err(Error::NoUpstream);
        }
        let start = self.next.fetch_add(1, Ordering::Relaxed);
        let mut last = Error::NoUpstream;
        for i in 0..self.upstreams.len() {
            let up = &self.upstreams[(start + i) % self.upstreams.len()];
            match self.ask(up, q).await {
                Ok(m) => return Ok((up.addr, m)),
                Err(e) => {
                    tracing::debug!(upstream = %up.addr, error = %e, "upstream failed; trying the next");
                    last = e;
                }
            }
        }
        Err(last)
    }

    async fn ask(&self, up: &Upstream, q: &Question<'_>) -> Result<Message> {
        let mut message = Message::query();
        message.queries.push(q.query.clone());
        message.metadata.recursion_desired = q.recursion_desired;
        message.metadata.checking_disabled = q.checking_disabled;
        if let Some(edns) = q.edns {
            let mut e = Edns::new();
            e.set_max_payload(edns.max_payload().max(512)).set_dnssec_ok(edns.flags().dnssec_ok);
            message.edns = Some(e);
        }
        let request = DnsRequest::new(message, DnsRequestOptions::default());
        let upstream = up.addr;
        let fail = |source| Error::Upstream { upstream, source };
        let mut responses = if q.tcp {
            let tcp = TcpClientStream::exchange(up.addr, None, self.timeout, None, self.provider.clone())
                .await
                .map_err(fail)?;
            tcp.send(request)
        } else {
            up.udp.send(request)
        };
        match tokio::time::timeout(self.timeout, responses.next()).await {
            Ok(Some(Ok(response))) => Ok(response.into_message()),
            Ok(Some(Err(e))) => Err(fail(e)),
            Ok(None) | Err(_) => Err(Error::NoAnswer { upstream }),
        }
    }
}

/// The nameservers of a resolv.conf (port 53), in order.
pub fn nameservers(path: &Path) -> Result<Vec<SocketAddr>> {
    let text = std::fs::read_to_string(path)
        .map_err(|source| Error::ResolvConf { path: path.display().to_string(), source })?;
    Ok(parse_nameservers(&text))
}

fn parse_nameservers(text: &str) -> Vec<SocketAddr> {
    text.lines()
        .filter_map(|l| {
            let mut f = l.split_whitespace();
            (f.next() == Some("nameserver")).then(|| f.next()).flatten()
        })
        // An IPv6 link-local address may carry a zone (`fe80::1%eth0`): not supported, skipped.
        .filter_map(|ip| ip.parse::<IpAddr>().ok())
        .map(|ip| SocketAddr::new(ip, 53))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nameservers_come_from_resolv_conf_in_order() {
        let text =
            "# generated\nsearch lab.test\nnameserver 172.30.0.1\nnameserver ::1\noptions ndots:2\nnameserver bad\n";
        let got: Vec<String> = parse_nameservers(text).iter().map(ToString::to_string).collect();
        assert_eq!(got, ["172.30.0.1:53", "[::1]:53"]);
    }
}
