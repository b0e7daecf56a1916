//! The HTTP side of SPDY: recognising `Upgrade: SPDY/3.1`, Kubernetes' stream-protocol
//! negotiation (`X-Stream-Protocol-Version`, the server's preference first) and the
//! `101 Switching Protocols` that hands the raw connection to a session.

use std::future::Future;

use axum::body::Body;
use axum::extract::Request;
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use hyper::upgrade::OnUpgrade;
use hyper_util::rt::TokioIo;

pub const SPDY_31: &str = "SPDY/3.1";
pub const PROTOCOL_VERSION: &str = "X-Stream-Protocol-Version";
pub const ACCEPTED_VERSIONS: &str = "X-Accepted-Stream-Protocol-Versions";

/// The upgraded connection a session gets.
pub type Upgraded = TokioIo<hyper::upgrade::Upgraded>;

fn upgrade_is(h: &HeaderMap, proto: &str) -> bool {
    h.get_all(header::UPGRADE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .any(|p| p.trim().eq_ignore_ascii_case(proto))
}

pub fn is_spdy(h: &HeaderMap) -> bool {
    upgrade_is(h, SPDY_31)
}

pub fn is_websocket(h: &HeaderMap) -> bool {
    upgrade_is(h, "websocket")
}

/// The protocols the client offers, in its order (several header lines, or comma lists).
pub fn offered(h: &HeaderMap) -> Vec<String> {
    h.get_all(PROTOCOL_VERSION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(|p| p.trim().to_string())
        .filter(|p| !p.is_empty())
        .collect()
}

/// Kubernetes' `httpstream.Handshake`: the first `supported` protocol the client offers; a client
/// that offers none gets the legacy protocol (`None`). Pure.
pub fn negotiate<'a>(offered: &[String], supported: &[&'a str]) -> Result<Option<&'a str>, String> {
    if offered.is_empty() {
        return Ok(None);
    }
    match supported.iter().find(|s| offered.iter().any(|o| o == *s)) {
        Some(p) => Ok(Some(p)),
        None => Err(format!(
            "unable to upgrade: unable to negotiate protocol: client supports [{}], server accepts [{}]",
            offered.join(" "),
            supported.join(" ")
        )),
    }
}

/// The 403 a failed negotiation gets, listing what we accept.
pub fn refuse(message: String, supported: &[&str]) -> Response {
    let mut resp = (StatusCode::FORBIDDEN, message).into_response();
    for p in supported {
        if let Ok(v) = p.parse() {
            resp.headers_mut().append(ACCEPTED_VERSIONS, v);
        }
    }
    resp
}

/// Answers 101 with the agreed `protocol` and runs `session` on the connection once upgraded.
pub fn accept<F, Fut>(mut req: Request, protocol: Option<&str>, session: F) -> Response
where
    F: FnOnce(Upgraded) -> Fut + Send + 'static,
    Fut: Future<Output = ()> + Send + 'static,
{
    let Some(on) = req.extensions_mut().remove::<OnUpgrade>() else {
        return (StatusCode::BAD_REQUEST, "Upgrade request required").into_response();
    };
    tokio::spawn(async move {
        match on.await {
            Ok(u) => session(TokioIo::new(u)).await,
            Err(e) => tracing::debug!(error = %e, "SPDY upgrade failed"),
        }
    });
    let mut resp = Response::builder()
        .status(StatusCode::SWITCHING_PROTOCOLS)
        .header(header::CONNECTION, "Upgrade")
        .header(header::UPGRADE, SPDY_31);
    if let Some(p) = protocol {
        resp = resp.header(PROTOCOL_VERSION, p);
    }
    resp.body(Body::empty()).unwrap_or_else(|_| StatusCode::INTERNAL_SERVER_ERROR.into_response())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_servers_preference_wins_and_a_mismatch_is_worded_as_kubernetes_words_it() {
        let mut h = HeaderMap::new();
        for p in ["v5.channel.k8s.io", "v4.channel.k8s.io, v3.channel.k8s.io"] {
            h.append(PROTOCOL_VERSION, p.parse().expect("header"));
        }
        let offered = offered(&h);
        assert_eq!(offered, ["v5.channel.k8s.io", "v4.channel.k8s.io", "v3.channel.k8s.io"]);
        assert_eq!(negotiate(&offered, &["v4.channel.k8s.io"]), Ok(Some("v4.channel.k8s.io")));
        assert_eq!(negotiate(&[], &["portforward.k8s.io"]), Ok(None));
        assert_eq!(
            negotiate(&["channel.k8s.io".into()], &["v4.channel.k8s.io"]),
            Err("unable to upgrade: unable to negotiate protocol: client supports [channel.k8s.io], server accepts [v4.channel.k8s.io]".into())
        );
        h.insert(header::UPGRADE, "SPDY/3.1".parse().expect("header"));
        assert!(is_spdy(&h) && !is_websocket(&h));
    }
}
