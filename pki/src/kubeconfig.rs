//! Kubeconfig files with everything embedded (`certificate-authority-data`,
//! `client-certificate-data`/`client-key-data` or a token): one file is a whole identity.

use base64::Engine;

/// How the user proves who it is.
#[derive(Clone)]
pub enum Credentials {
    /// A client certificate and its key, PEM (embedded as `-data`).
    Certificate { cert_pem: String, key_pem: String },
    /// A client certificate and key in files (kubelet's `--kubeconfig` after TLS bootstrap
    /// points at its rotated pair this way).
    CertificateFiles { cert: String, key: String },
    /// A bearer token (a bootstrap token).
    Token(String),
    /// None: requests are anonymous.
    None,
}

impl std::fmt::Debug for Credentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Credentials::Certificate { .. } => f.write_str("Certificate(<redacted>)"),
            Credentials::CertificateFiles { cert, key } => write!(f, "CertificateFiles({cert}, {key})"),
            Credentials::Token(_) => f.write_str("Token(<redacted>)"),
            Credentials::None => f.write_str("None"),
        }
    }
}

/// One cluster, one user, one context that joins them.
#[derive(Debug, Clone)]
pub struct Kubeconfig {
    pub cluster: String,
    pub server: String,
    pub ca_pem: String,
    pub user: String,
    pub context: String,
    pub credentials: Credentials,
}

impl Kubeconfig {
    pub fn render(&self) -> String {
        let b64 = |s: &str| base64::engine::general_purpose::STANDARD.encode(s.as_bytes());
        let mut user = match &self.credentials {
            Credentials::Certificate { cert_pem, key_pem } => {
                format!("    client-certificate-data: {}\n    client-key-data: {}\n", b64(cert_pem), b64(key_pem))
            }
            Credentials::CertificateFiles { cert, key } => {
                format!("    client-certificate: {}\n    client-key: {}\n", quote(cert), quote(key))
            }
            Credentials::Token(t) => format!("    token: {}\n", quote(t)),
            Credentials::None => String::new(),
        };
        user = if user.is_empty() { " {}\n".to_string() } else { format!("\n{user}") };
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- cluster:\n    certificate-authority-data: {ca}\n    server: {server}\n  name: {cluster}\ncontexts:\n- context:\n    cluster: {cluster}\n    user: {user_name}\n  name: {context}\ncurrent-context: {context}\npreferences: {{}}\nusers:\n- name: {user_name}\n  user:{user}",
            ca = b64(&self.ca_pem),
            server = quote(&self.server),
            cluster = quote(&self.cluster),
            user_name = quote(&self.user),
            context = quote(&self.context),
        )
    }
}

/// A YAML double-quoted scalar.
fn quote(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            c if c.is_control() => out.push_str(&format!("\\x{:02x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_an_embedded_identity() {
        let kc = Kubeconfig {
            cluster: "kaji".into(),
            server: "https://127.0.0.1:6443".into(),
            ca_pem: "CA".into(),
            user: "admin".into(),
            context: "admin@kaji".into(),
            credentials: Credentials::Certificate { cert_pem: "C".into(), key_pem: "K".into() },
        };
        let text = kc.render();
        assert!(text.contains("certificate-authority-data: Q0E=\n    server: \"https://127.0.0.1:6443\"\n"), "{text}");
        assert!(text.contains("client-certificate-data: Qw==\n    client-key-data: Sw==\n"), "{text}");
        assert!(text.contains("current-context: \"admin@kaji\"\n"), "{text}");
        assert!(!format!("{kc:?}").contains("Sw=="));
        let token = Kubeconfig { credentials: Credentials::Token("abcdef.0123456789abcdef".into()), ..kc };
        assert!(token.render().ends_with("    token: \"abcdef.0123456789abcdef\"\n"));
    }
}
