//! The security pipeline on the plain-HTTP test port, with the real binary: static bearer tokens
//! authenticate, a token nobody knows is 401, a mode that allows nothing answers 403 with
//! Kubernetes' message, and `system:masters` is above every mode. (kubectl sends no bearer token
//! over plain HTTP; its side is tested over TLS.)

mod common;

use common::{http_with, ApiServer};

const TOKENS: &str = "alice-token,alice,1001,\"dev,qa\"\nroot-token,root,0,system:masters\n";

fn server_denying_everything(dir: &std::path::Path) -> ApiServer {
    let tokens = dir.join("tokens.csv");
    std::fs::write(&tokens, TOKENS).expect("write the token file");
    let tokens = tokens.to_string_lossy().to_string();
    ApiServer::start_with(&dir.join("data"), &["--token-auth-file", &tokens, "--authorization-mode", "AlwaysDeny"])
}

#[test]
fn tokens_authenticate_and_the_authorizer_decides() {
    let dir = tempfile::tempdir().expect("tempdir");
    let server = server_denying_everything(dir.path());
    let get = |token: Option<&str>, path: &str| {
        let auth = token.map(|t| format!("Bearer {t}"));
        let headers: Vec<(&str, &str)> = auth.iter().map(|a| ("Authorization", a.as_str())).collect();
        http_with(&server.addr, "GET", path, &headers, None, "")
    };

    let (code, body) = get(Some("alice-token"), "/api/v1/namespaces/default/pods");
    assert_eq!(code, 403, "{body}");
    let status: serde_json::Value = serde_json::from_str(&body).expect("a Status");
    assert_eq!(status["reason"], "Forbidden");
    assert_eq!(
        status["message"],
        r#"pods is forbidden: User "alice" cannot list resource "pods" in API group "" in the namespace "default": Everything is forbidden."#
    );

    let (code, body) = get(Some("nobody-knows-this"), "/api/v1/namespaces/default/pods");
    assert_eq!(code, 401, "{body}");
    let status: serde_json::Value = serde_json::from_str(&body).expect("a Status");
    assert_eq!((status["reason"].as_str(), status["message"].as_str()), (Some("Unauthorized"), Some("Unauthorized")));
    assert_eq!(get(Some("nobody-knows-this"), "/healthz").0, 401, "a bad token never falls back");

    // system:masters is allowed whatever the modes say; so is the plain port's superuser.
    assert_eq!(get(Some("root-token"), "/api/v1/namespaces/default/pods").0, 200);
    assert_eq!(get(None, "/api/v1/namespaces").0, 200);
}
