//! Raw HTTP/1.1 to the lab's API over TLS as the lab's admin (the client certificate and CA of
//! the kubeconfig `kaji lab up` wrote), for tests and benches that count bytes and connections
//! themselves (watch streams, one patch per connection) instead of going through kubectl.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

/// How to reach the lab's API through its forwarder on 127.0.0.1:<port>; cheap to clone into
/// threads.
#[derive(Clone)]
pub struct Api {
    pub port: u16,
    tls: Arc<rustls::ClientConfig>,
    ca_pem: String,
}

/// One open connection to the API.
pub type Stream = rustls::StreamOwned<rustls::ClientConnection, TcpStream>;

/// A `<key>-data:` value of a kubeconfig (base64), decoded.
fn kubeconfig_data(text: &str, key: &str) -> String {
    use base64::Engine;
    let b64 = text
        .lines()
        .find_map(|l| l.trim().strip_prefix(&format!("{key}: ")).map(str::trim))
        .unwrap_or_else(|| panic!("the lab's kubeconfig has no {key}"));
    let bytes = base64::engine::general_purpose::STANDARD.decode(b64).expect("base64 in the kubeconfig");
    String::from_utf8(bytes).expect("PEM in the kubeconfig")
}

impl Api {
    /// The admin's identity from `kubeconfig` (certificate-authority-data, client-certificate-data,
    /// client-key-data).
    pub fn from_kubeconfig(kubeconfig: &Path, port: u16) -> Api {
        kaji_pki::install_crypto_provider();
        let text = std::fs::read_to_string(kubeconfig).expect("the lab's kubeconfig");
        let ca = kubeconfig_data(&text, "certificate-authority-data");
        let cert = kubeconfig_data(&text, "client-certificate-data");
        let key = kubeconfig_data(&text, "client-key-data");
        let tls = kaji_pki::tls::client_config(&ca, Some((&cert, &key))).expect("a TLS client config");
        Api { port, tls: Arc::new(tls), ca_pem: ca }
    }

    /// The same server check, but no client certificate: an anonymous client.
    pub fn without_identity(&self) -> Api {
        let text = self.ca_pem.clone();
        let tls = kaji_pki::tls::client_config(&text, None).expect("a TLS client config");
        Api { port: self.port, tls: Arc::new(tls), ca_pem: self.ca_pem.clone() }
    }

    /// A TLS connection to 127.0.0.1:<port>, the server checked against the lab's CA.
    pub fn connect(&self) -> std::io::Result<Stream> {
        let tcp = TcpStream::connect(("127.0.0.1", self.port))?;
        tcp.set_read_timeout(Some(Duration::from_secs(30)))?;
        let name = rustls::pki_types::ServerName::try_from("127.0.0.1").expect("an IP is a server name");
        let conn = rustls::ClientConnection::new(self.tls.clone(), name).map_err(std::io::Error::other)?;
        Ok(rustls::StreamOwned::new(conn, tcp))
    }

    /// One request with its own connection; (status, body). 0 = no answer.
    pub fn http(&self, method: &str, path: &str, content_type: &str, body: &str) -> (u16, String) {
        let Ok(mut s) = self.connect() else { return (0, String::new()) };
        let req = format!(
            "{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        );
        if s.write_all(req.as_bytes()).is_err() {
            return (0, String::new());
        }
        let mut raw = Vec::new();
        // The server closes after its answer; a missing close_notify is not an error here.
        let _ = s.read_to_end(&mut raw);
        let out = String::from_utf8_lossy(&raw);
        let status = out.split(' ').nth(1).and_then(|c| c.parse().ok()).unwrap_or(0);
        (status, out.split_once("\r\n\r\n").map(|(_, b)| b.to_string()).unwrap_or_default())
    }
}
