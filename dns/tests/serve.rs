//! kaji-dns against a real apiserver: Services and EndpointSlices created through the API are
//! answered over UDP and TCP, unknown names are NXDOMAIN, other names go to an upstream resolver
//! (a small one run here, on loopback), a large answer is truncated over UDP and whole over TCP,
//! and /readyz, /metrics and the lame-duck shutdown behave.

use hickory_server::proto::op::{Message, MessageType, OpCode, Query, ResponseCode};
use hickory_server::proto::rr::rdata::A;
use hickory_server::proto::rr::{Name, RData, Record, RecordType};
use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kaji_dns::answer::{Pods, Settings};
use kube::api::{Api, PostParams};
use serde_json::json;
use std::net::SocketAddr;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpStream, UdpSocket};

fn name(s: &str) -> Name {
    Name::from_ascii(s).expect("a name")
}

/// One question over UDP (no EDNS: answers are cut at 512 bytes).
async fn udp(server: SocketAddr, q: &str, t: RecordType) -> anyhow::Result<Message> {
    let socket = UdpSocket::bind("127.0.0.1:0").await?;
    let mut m = Message::query();
    m.metadata.id = 7;
    m.metadata.recursion_desired = true;
    m.add_query(Query::query(name(q), t));
    socket.send_to(&m.to_vec()?, server).await?;
    let mut buf = vec![0u8; 65535];
    let n = tokio::time::timeout(Duration::from_secs(5), socket.recv(&mut buf)).await??;
    let reply = Message::from_vec(&buf[..n])?;
    anyhow::ensure!(reply.metadata.id == 7, "the reply carries the query's id");
    Ok(reply)
}

/// One question over TCP (two-byte length prefix).
async fn tcp(server: SocketAddr, q: &str, t: RecordType) -> anyhow::Result<Message> {
    let mut stream = TcpStream::connect(server).await?;
    let mut m = Message::query();
    m.metadata.id = 9;
    m.add_query(Query::query(name(q), t));
    let bytes = m.to_vec()?;
    stream.write_all(&u16::try_from(bytes.len())?.to_be_bytes()).await?;
    stream.write_all(&bytes).await?;
    let len = tokio::time::timeout(Duration::from_secs(5), stream.read_u16()).await??;
    let mut buf = vec![0u8; usize::from(len)];
    stream.read_exact(&mut buf).await?;
    Ok(Message::from_vec(&buf)?)
}

fn addresses(m: &Message) -> Vec<String> {
    let mut v: Vec<String> =
        m.answers.iter().filter(|r| r.record_type() == RecordType::A).map(|r| r.data.to_string()).collect();
    v.sort();
    v
}

/// The upstream's answer to a question: `www.example.test A 192.0.2.1`, NXDOMAIN for the rest.
fn upstream_answer(q: &Message) -> Option<Vec<u8>> {
    let mut r = Message::new(q.metadata.id, MessageType::Response, OpCode::Query);
    r.metadata.recursion_desired = q.metadata.recursion_desired;
    r.metadata.recursion_available = true;
    r.add_queries(q.queries.clone());
    match q.queries.first() {
        Some(query) if query.name().to_lowercase() == name("www.example.test.") => {
            r.add_answer(Record::from_rdata(query.name().clone(), 60, RData::A(A::new(192, 0, 2, 1))));
        }
        _ => r.metadata.response_code = ResponseCode::NXDomain,
    }
    r.to_vec().ok()
}

/// A resolver for `example.test.` on loopback, over UDP and TCP on one port (what the upstream of
/// a node would be).
async fn upstream() -> anyhow::Result<SocketAddr> {
    let (socket, listener) = loop {
        let socket = UdpSocket::bind("127.0.0.1:0").await?;
        // The same port for TCP; another UDP port if that one is taken for TCP.
        if let Ok(l) = tokio::net::TcpListener::bind(socket.local_addr()?).await {
            break (socket, l);
        }
    };
    let addr = socket.local_addr()?;
    tokio::spawn(async move {
        let mut buf = vec![0u8; 4096];
        while let Ok((n, from)) = socket.recv_from(&mut buf).await {
            let Ok(q) = Message::from_vec(&buf[..n]) else { continue };
            if let Some(bytes) = upstream_answer(&q) {
                let _ = socket.send_to(&bytes, from).await;
            }
        }
    });
    tokio::spawn(async move {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        while let Ok((mut conn, _)) = listener.accept().await {
            tokio::spawn(async move {
                let mut len = [0u8; 2];
                while conn.read_exact(&mut len).await.is_ok() {
                    let mut buf = vec![0u8; usize::from(u16::from_be_bytes(len))];
                    if conn.read_exact(&mut buf).await.is_err() {
                        return;
                    }
                    let Some(bytes) = Message::from_vec(&buf).ok().as_ref().and_then(upstream_answer) else { return };
                    let Ok(n) = u16::try_from(bytes.len()) else { return };
                    if conn.write_all(&n.to_be_bytes()).await.is_err() || conn.write_all(&bytes).await.is_err() {
                        return;
                    }
                }
            });
        }
    });
    Ok(addr)
}

async fn eventually<F, Fut>(what: &str, mut check: F) -> anyhow::Result<()>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = anyhow::Result<bool>>,
{
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    loop {
        if check().await? {
            return Ok(());
        }
        anyhow::ensure!(tokio::time::Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn answers_services_from_the_api_and_forwards_the_rest() -> anyhow::Result<()> {
    let data = tempfile::tempdir()?;
    let api = kaji_apiserver::start(kaji_apiserver::Config::new("127.0.0.1:0".parse()?, data.path().into())).await?;
    let client = kube::Client::try_from(kube::Config::new(format!("http://{}", api.addr).parse()?))?;
    let config = kaji_dns::Config {
        listen: "127.0.0.1:0".parse()?,
        settings: Settings {
            zone: name("cluster.local."),
            ttl: 5,
            pods: Pods::Insecure,
            dns_service: ("kube-system".into(), "kube-dns".into()),
        },
        upstreams: vec![upstream().await?],
        forward_timeout: Duration::from_secs(2),
        tcp_idle_timeout: Duration::from_secs(5),
        lameduck: Duration::from_millis(300),
        metrics_addr: Some("127.0.0.1:0".parse()?),
    };
    let dns = kaji_dns::start(client.clone(), config).await?;
    let server = dns.dns_addr;
    let http = format!("http://{}", dns.metrics_addr.expect("metrics address"));
    let get = |path: &'static str| {
        let http = http.clone();
        async move {
            let mut s = TcpStream::connect(http.trim_start_matches("http://")).await?;
            s.write_all(format!("GET {path} HTTP/1.0\r\nHost: x\r\n\r\n").as_bytes()).await?;
            let mut out = String::new();
            s.read_to_string(&mut out).await?;
            anyhow::Ok(out)
        }
    };
    eventually("ready", || async { Ok(get("/readyz").await?.starts_with("HTTP/1.0 200")) }).await?;

    // The `kubernetes` Service (made by the apiserver) and a new one resolve.
    let svcs: Api<Service> = Api::namespaced(client.clone(), "default");
    let web: Service = serde_json::from_value(json!({"metadata": {"name": "web"},
        "spec": {"ports": [{"name": "http", "port": 80, "protocol": "TCP"}]}}))?;
    let web = svcs.create(&PostParams::default(), &web).await?;
    let web_ip = web.spec.and_then(|s| s.cluster_ip).unwrap_or_default();
    eventually("web's A record", || async {
        Ok(addresses(&udp(server, "web.default.svc.cluster.local.", RecordType::A).await?) == [web_ip.clone()])
    })
    .await?;
    let m = tcp(server, "web.default.svc.cluster.local.", RecordType::A).await?;
    assert_eq!(addresses(&m), std::slice::from_ref(&web_ip), "TCP answers the same");
    assert!(m.metadata.authoritative);
    assert_eq!(m.answers[0].ttl, 5);
    let m = udp(server, "kubernetes.default.svc.cluster.local.", RecordType::A).await?;
    assert_eq!(m.answers.len(), 1, "the kubernetes Service resolves: {m:?}");
    let m = udp(server, "_http._tcp.web.default.svc.cluster.local.", RecordType::SRV).await?;
    assert_eq!(m.answers.len(), 1, "SRV for the named port: {m:?}");
    assert_eq!(m.answers[0].data.to_string(), "0 100 80 web.default.svc.cluster.local.");

    // Unknown names in the zone: NXDOMAIN with the SOA; outside it: the upstream's answer.
    let m = udp(server, "nope.default.svc.cluster.local.", RecordType::A).await?;
    assert_eq!(m.metadata.response_code, ResponseCode::NXDomain);
    assert_eq!(m.authorities.first().map(Record::record_type), Some(RecordType::SOA));
    let m = udp(server, "www.example.test.", RecordType::A).await?;
    assert_eq!((m.metadata.response_code, addresses(&m)), (ResponseCode::NoError, vec!["192.0.2.1".to_string()]));
    let m = udp(server, "nope.example.test.", RecordType::A).await?;
    assert_eq!(m.metadata.response_code, ResponseCode::NXDomain);
    // A question that came over TCP is forwarded over TCP (dig +tcp +search walks the search
    // domains through here: a SERVFAIL on one ends its walk).
    let m = tcp(server, "www.example.test.", RecordType::A).await?;
    assert_eq!((m.metadata.response_code, addresses(&m)), (ResponseCode::NoError, vec!["192.0.2.1".to_string()]));
    let m = tcp(server, "nope.example.test.", RecordType::A).await?;
    assert_eq!(m.metadata.response_code, ResponseCode::NXDomain);

    // A headless Service with 60 ready endpoints: more than 512 bytes of answers.
    let db: Service = serde_json::from_value(json!({"metadata": {"name": "db"}, "spec": {"clusterIP": "None"}}))?;
    svcs.create(&PostParams::default(), &db).await?;
    let endpoints: Vec<serde_json::Value> = (1..=60)
        .map(|i| json!({"addresses": [format!("10.244.{}.{}", i / 250, i % 250 + 1)], "conditions": {"ready": true}}))
        .collect();
    let slice: EndpointSlice = serde_json::from_value(json!({
        "metadata": {"name": "db-1", "labels": {"kubernetes.io/service-name": "db"}},
        "addressType": "IPv4", "endpoints": endpoints}))?;
    Api::<EndpointSlice>::namespaced(client.clone(), "default").create(&PostParams::default(), &slice).await?;
    eventually("db's endpoints over TCP", || async {
        Ok(addresses(&tcp(server, "db.default.svc.cluster.local.", RecordType::A).await?).len() == 60)
    })
    .await?;
    let m = udp(server, "db.default.svc.cluster.local.", RecordType::A).await?;
    assert!(m.metadata.truncation, "a UDP answer over 512 bytes is truncated");
    assert!(m.answers.len() < 60);

    let metrics = get("/metrics").await?;
    assert!(metrics.contains("coredns_dns_requests_total{"), "{metrics}");
    assert!(metrics.contains("plugin=\"forward\""), "{metrics}");

    // SIGTERM's path: not ready at once, still answering during the lame-duck period.
    let stopper = dns.stopper();
    stopper.send_replace(true);
    assert!(get("/readyz").await?.starts_with("HTTP/1.0 503"));
    let m = udp(server, "web.default.svc.cluster.local.", RecordType::A).await?;
    assert_eq!(addresses(&m), [web_ip], "still answering while lame");
    tokio::time::timeout(Duration::from_secs(10), dns.wait()).await??;
    Ok(())
}
