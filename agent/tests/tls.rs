//! The agent's port over TLS, as on a real node: `kubectl exec` and `kubectl logs` reach the
//! container through the apiserver (which presents its kubelet client certificate), while
//! anyone else who calls the agent directly is refused — no certificate 401, a node's or the
//! proxy's certificate 403 in kubelet's words, another CA's certificate no connection at all.
//! Root only (a real container).

mod common;

use common::Node;
use http_body_util::{BodyExt, Empty};
use hyper::body::Bytes;
use kaji_pki::{Ca, CertSpec};
use serde_json::json;
use std::process::Command;
use std::sync::Arc;

/// GET or POST `path` on the agent at `addr` over TLS, trusting `ca_pem`, presenting `identity`.
async fn call(
    addr: std::net::SocketAddr,
    ca_pem: &str,
    identity: Option<&kaji_pki::Issued>,
    method: &str,
    path: &str,
) -> anyhow::Result<(u16, String)> {
    let config = kaji_pki::tls::client_config(ca_pem, identity.map(|i| (i.cert_pem.as_str(), i.key_pem.as_str())))?;
    let tcp = tokio::net::TcpStream::connect(addr).await?;
    let name = tokio_rustls::rustls::pki_types::ServerName::IpAddress(addr.ip().into());
    let tls = tokio_rustls::TlsConnector::from(Arc::new(config)).connect(name, tcp).await?;
    let (mut sender, conn) = hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(tls)).await?;
    tokio::spawn(conn);
    let req = hyper::Request::builder()
        .method(method)
        .uri(path)
        .header("host", addr.to_string())
        .body(Empty::<Bytes>::new())?;
    let resp = tokio::time::timeout(common::WAIT, sender.send_request(req)).await??;
    let code = resp.status().as_u16();
    let body = resp.into_body().collect().await?.to_bytes();
    Ok((code, String::from_utf8_lossy(&body).into_owned()))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_the_apiserver_may_exec_and_read_logs_on_the_agent() -> anyhow::Result<()> {
    let node = Node::start_secure().await?;
    node.pod("sleeper", json!({"containers": [{"name": "c", "command": ["sh", "-c", "echo started; sleep 3600"]}]}))
        .await?;
    node.wait_pod("sleeper", "Running", |p| common::phase(p) == "Running").await?;
    let pki = node.pki.as_ref().expect("a secure node");
    let admin = pki.kubeconfig("admin");
    let kubectl = |args: &[&str]| {
        Command::new("kubectl").arg("--kubeconfig").arg(&admin).args(args).env_remove("KUBECONFIG").output()
    };
    let out = kubectl(&["exec", "sleeper", "--", "echo", "hello over tls"])?;
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(String::from_utf8_lossy(&out.stdout), "hello over tls\n");
    let out = kubectl(&["logs", "sleeper"])?;
    assert_eq!(String::from_utf8_lossy(&out.stdout), "started\n", "{}", String::from_utf8_lossy(&out.stderr));

    let addr = node.agent.as_ref().and_then(|a| a.server_addr).expect("agent serving");
    let ca = pki.load_ca()?;
    let exec = "/exec/default/sleeper/c?command=id&output=1";
    let (code, body) = call(addr, ca.cert_pem(), None, "POST", exec).await?;
    assert_eq!((code, body.as_str()), (401, "Unauthorized"));
    let other_node = ca.issue(&CertSpec::client("system:node:other", &["system:nodes"]))?;
    let (code, body) = call(addr, ca.cert_pem(), Some(&other_node), "POST", exec).await?;
    assert_eq!(code, 403);
    assert_eq!(body, "Forbidden (user=system:node:other, verb=create, resource=nodes, subresource(s)=[proxy])\n");
    let proxy = ca.issue(&CertSpec::client("system:kube-proxy", &[]))?;
    let (code, _) = call(addr, ca.cert_pem(), Some(&proxy), "GET", "/containerLogs/default/sleeper/c").await?;
    assert_eq!(code, 403);
    let stranger_ca = Ca::generate("kubernetes", kaji_pki::ca::CA_VALIDITY)?;
    let stranger = stranger_ca.issue(&CertSpec::client("kube-apiserver-kubelet-client", &["system:masters"]))?;
    assert!(
        call(addr, ca.cert_pem(), Some(&stranger), "GET", "/pods").await.is_err(),
        "another CA's certificate gets no answer"
    );
    // The apiserver's own identity is let in.
    let apiserver = kaji_pki::Issued {
        cert_pem: kaji_pki::files::read(&pki.pki("apiserver-kubelet-client.crt"))?,
        key_pem: kaji_pki::files::read(&pki.pki("apiserver-kubelet-client.key"))?,
    };
    let (code, body) = call(addr, ca.cert_pem(), Some(&apiserver), "GET", "/containerLogs/default/sleeper/c").await?;
    assert_eq!((code, body.as_str()), (200, "started\n"));
    // Health is public; plain HTTP gets nothing.
    assert_eq!(call(addr, ca.cert_pem(), None, "GET", "/healthz").await?.0, 200);
    assert!(node.get("/pods").await.map(|(c, _)| c != 200).unwrap_or(true));
    // sh as pid 1 ignores SIGTERM: no grace period, as the other agent tests delete.
    node.pods("default").delete("sleeper", &kube::api::DeleteParams::default().grace_period(0)).await?;
    node.wait_gone("sleeper").await?;
    Ok(())
}
