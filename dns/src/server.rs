//! The DNS request handler hickory-server calls for every message, over UDP and TCP: checks the
//! message, asks `answer` (the cluster's records) and, for what is not the cluster's, the
//! forwarder; writes the response (hickory truncates it to the client's UDP buffer and sets TC)
//! and counts it.

use crate::answer::{self, Outcome, Reply, Settings};
use crate::forward::{Forwarder, Question};
use crate::metrics::{DurationLabels, ForwardLabels, ForwardResponseLabels, Metrics, RequestLabels, ResponseLabels};
use crate::zone::Current;
use hickory_server::net::runtime::Time;
use hickory_server::net::xfer::Protocol;
use hickory_server::proto::op::{Edns, Header, HeaderCounts, Message, MessageType, Metadata, OpCode, ResponseCode};
use hickory_server::proto::rr::{DNSClass, Record, RecordType};
use hickory_server::server::{Request, RequestHandler, ResponseHandler, ResponseInfo};
use hickory_server::zone_handler::MessageResponseBuilder;
use std::sync::Arc;
use std::time::Instant;

pub struct Handler {
    pub current: Arc<Current>,
    pub settings: Settings,
    pub forwarder: Forwarder,
    pub metrics: Arc<Metrics>,
    /// `dns://:<port>`, the metrics' `server` label.
    pub server_label: String,
}

/// Who made an answer (the responses' `plugin` label).
#[derive(Clone, Copy)]
enum Source {
    Kubernetes,
    Forward,
    Server,
}

impl Source {
    fn label(self) -> &'static str {
        match self {
            Source::Kubernetes => "kubernetes",
            Source::Forward => "forward",
            Source::Server => "",
        }
    }
}

/// A response: header flags and the three sections.
struct Response {
    metadata: Metadata,
    answers: Vec<Record>,
    authority: Vec<Record>,
    additionals: Vec<Record>,
}

#[async_trait::async_trait]
impl RequestHandler for Handler {
    async fn handle_request<R: ResponseHandler, T: Time>(&self, request: &Request, handle: R) -> ResponseInfo {
        let started = Instant::now();
        let qtype = request.queries.queries().first().map(|q| q.query_type());
        let (source, response) = self.respond(request).await;
        let info = send(request, handle, response).await;
        self.count(request, qtype, source, &info, started);
        info
    }
}

impl Handler {
    async fn respond(&self, request: &Request) -> (Source, Response) {
        let error = |rcode| (Source::Server, empty(request, rcode));
        if request.metadata.op_code != OpCode::Query {
            return error(ResponseCode::NotImp);
        }
        let Ok(info) = request.request_info() else { return error(ResponseCode::FormErr) };
        let query = info.query.original().clone();
        let outcome = if query.query_class() == DNSClass::IN {
            answer::answer(&self.current.get(), &self.settings, query.name(), query.query_type())
        } else {
            Outcome::Forward
        };
        let question = |query| Question {
            query,
            recursion_desired: request.metadata.recursion_desired,
            checking_disabled: request.metadata.checking_disabled,
            edns: request.edns.as_ref(),
            tcp: request.protocol() != Protocol::Udp,
        };
        match outcome {
            Outcome::Reply(reply) => (Source::Kubernetes, authoritative(request, reply)),
            Outcome::Refused => error(ResponseCode::Refused),
            Outcome::Forward => match self.forward(&question(query)).await {
                Some(m) => (Source::Forward, relayed(request, m)),
                None => error(ResponseCode::ServFail),
            },
            Outcome::Chase { mut reply, target, unanswered } => {
                let mut q = query.clone();
                q.set_name(target);
                match self.forward(&question(q)).await {
                    Some(m) => {
                        reply.answers.extend(m.answers);
                        let mut r = authoritative(request, reply);
                        r.metadata.truncation = m.metadata.truncation;
                        (Source::Kubernetes, r)
                    }
                    None => (Source::Kubernetes, authoritative(request, unanswered)),
                }
            }
        }
    }

    async fn forward(&self, q: &Question<'_>) -> Option<Message> {
        let started = Instant::now();
        match self.forwarder.forward(q).await {
            Ok((upstream, message)) => {
                let to = upstream.to_string();
                let rcode = message.metadata.response_code.to_str().to_string();
                self.metrics.forward_requests.get_or_create(&ForwardLabels { to: to.clone() }).inc();
                let labels = ForwardResponseLabels { to, rcode };
                self.metrics.forward_responses.get_or_create(&labels).inc();
                self.metrics.forward_duration.get_or_create(&labels).observe(started.elapsed().as_secs_f64());
                Some(message)
            }
            Err(e) => {
                tracing::warn!(name = %q.query.name(), qtype = %q.query.query_type(), error = %e, "cannot forward");
                None
            }
        }
    }

    fn count(
        &self,
        request: &Request,
        qtype: Option<RecordType>,
        source: Source,
        info: &ResponseInfo,
        started: Instant,
    ) {
        let server = self.server_label.clone();
        let r#type = type_label(qtype);
        let proto = if request.protocol() == Protocol::Udp { "udp" } else { "tcp" };
        let family = if request.src().is_ipv4() { "1" } else { "2" };
        let view = String::new();
        let zone = ".".to_string();
        self.metrics
            .requests
            .get_or_create(&RequestLabels {
                server: server.clone(),
                zone: zone.clone(),
                view: view.clone(),
                proto: proto.into(),
                family: family.into(),
                r#type: r#type.clone(),
            })
            .inc();
        self.metrics
            .responses
            .get_or_create(&ResponseLabels {
                server: server.clone(),
                zone: zone.clone(),
                view: view.clone(),
                rcode: info.response_code.to_str().to_string(),
                plugin: source.label().into(),
            })
            .inc();
        self.metrics
            .request_duration
            .get_or_create(&DurationLabels { server, zone, view, r#type })
            .observe(started.elapsed().as_secs_f64());
    }
}

/// The types CoreDNS names in its metrics; the rest are `other`.
fn type_label(t: Option<RecordType>) -> String {
    use RecordType::*;
    match t {
        Some(t @ (A | AAAA | CNAME | PTR | SRV | TXT | MX | NS | SOA | HTTPS | SVCB | ANY | AXFR | IXFR | CAA)) => {
            t.to_string()
        }
        _ => "other".into(),
    }
}

/// An answer from the cluster's records: authoritative, recursion available (we forward).
fn authoritative(request: &Request, reply: Reply) -> Response {
    let mut metadata = Metadata::response_from_request(&request.metadata);
    metadata.authoritative = true;
    metadata.recursion_available = true;
    metadata.response_code = reply.rcode;
    Response { metadata, answers: reply.answers, authority: reply.authority, additionals: reply.additionals }
}

/// The upstream's answer under the client's message id, with the upstream's flags and sections
/// (its OPT record is the forwarder's: ours is made for the client).
fn relayed(request: &Request, m: Message) -> Response {
    let mut metadata = Metadata::response_from_request(&request.metadata);
    metadata.response_code = m.metadata.response_code;
    metadata.authoritative = m.metadata.authoritative;
    metadata.truncation = m.metadata.truncation;
    metadata.recursion_available = m.metadata.recursion_available;
    metadata.authentic_data = m.metadata.authentic_data;
    Response { metadata, answers: m.answers, authority: m.authorities, additionals: m.additionals }
}

fn empty(request: &Request, rcode: ResponseCode) -> Response {
    let mut metadata = Metadata::response_from_request(&request.metadata);
    metadata.response_code = rcode;
    metadata.recursion_available = true;
    Response { metadata, answers: vec![], authority: vec![], additionals: vec![] }
}

/// Writes `response` to the client. A client that sent EDNS gets an OPT record back with its own
/// buffer size, which is also what a UDP answer is truncated to (512 bytes without EDNS).
async fn send<R: ResponseHandler>(request: &Request, mut handle: R, response: Response) -> ResponseInfo {
    let edns = request.edns.as_ref().map(|e| {
        let mut ours = Edns::new();
        ours.set_max_payload(e.max_payload().max(512)).set_dnssec_ok(e.flags().dnssec_ok);
        ours
    });
    let mut builder = MessageResponseBuilder::from_message_request(request);
    if let Some(e) = &edns {
        builder.edns(e);
    }
    let id = response.metadata.id;
    let message = builder.build(
        response.metadata,
        response.answers.iter(),
        response.authority.iter(),
        std::iter::empty(),
        response.additionals.iter(),
    );
    match handle.send_response(message).await {
        Ok(info) => info,
        Err(e) => {
            tracing::debug!(error = %e, src = %request.src(), "cannot send the response");
            let mut metadata = Metadata::new(id, MessageType::Response, OpCode::Query);
            metadata.response_code = ResponseCode::ServFail;
            ResponseInfo::from(Header { metadata, counts: HeaderCounts::default() })
        }
    }
}
