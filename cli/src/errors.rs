//! Errors as kubectl prints them: `Error from server (NotFound): pods "web" not found`, and one
//! line for everything else.

use std::fmt;
use std::sync::OnceLock;

/// The server's URL, for connection errors.
static SERVER: OnceLock<String> = OnceLock::new();

pub fn set_server(url: &str) {
    let _ = SERVER.set(url.trim_end_matches('/').to_string());
}

/// An error the API server answered with (a `Status`); printed as is, without `error: `.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerError {
    pub code: u16,
    pub reason: String,
    pub message: String,
}

impl fmt::Display for ServerError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.reason.as_str() {
            // kubectl: `The Pod "bad" is invalid: spec.containers[0].image: Required value`.
            "Invalid" => write!(f, "The {}", self.message),
            "" => write!(f, "Error from server: {}", self.message),
            reason => write!(f, "Error from server ({reason}): {}", self.message),
        }
    }
}

impl std::error::Error for ServerError {}

/// An error already printed (one line per failed object); the command only exits non-zero.
#[derive(Debug)]
pub struct Reported;

impl fmt::Display for Reported {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("some operations failed")
    }
}

impl std::error::Error for Reported {}

/// The command ran (`exec`) and exited with this code, which `kaji` exits with too.
#[derive(Debug)]
pub struct Exit(pub u8);

impl fmt::Display for Exit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "command terminated with exit code {}", self.0)
    }
}

impl std::error::Error for Exit {}

/// A kube-rs error as the user should read it.
pub fn api(e: kube::Error) -> anyhow::Error {
    match e {
        kube::Error::Api(s) => {
            let reason = if s.reason.is_empty() { reason_for(s.code).to_string() } else { s.reason.clone() };
            ServerError { code: s.code, reason, message: s.message.clone() }.into()
        }
        kube::Error::HyperError(_) | kube::Error::Service(_) => {
            let at = SERVER.get().map(|s| format!(" at {s}")).unwrap_or_default();
            // The innermost cause says what happened ("Connection refused (os error 111)").
            let cause = std::iter::successors(Some(&e as &(dyn std::error::Error + 'static)), |e| e.source())
                .last()
                .map(ToString::to_string)
                .unwrap_or_default();
            anyhow::anyhow!("cannot reach the API server{at}: {cause}")
        }
        other => anyhow::anyhow!("{}", chain(&other)),
    }
}

/// Whether `e` is the server's NotFound.
pub fn is_not_found(e: &anyhow::Error) -> bool {
    e.downcast_ref::<ServerError>().is_some_and(|s| s.code == 404)
}

/// The reason Kubernetes gives a bare HTTP code (`StatusReasonForCode`).
fn reason_for(code: u16) -> &'static str {
    match code {
        400 => "BadRequest",
        401 => "Unauthorized",
        403 => "Forbidden",
        404 => "NotFound",
        405 => "MethodNotAllowed",
        409 => "Conflict",
        410 => "Gone",
        415 => "UnsupportedMediaType",
        422 => "Invalid",
        429 => "TooManyRequests",
        500 => "InternalError",
        503 => "ServiceUnavailable",
        504 => "Timeout",
        _ => "",
    }
}

/// `e` and its sources joined by `: `, skipping a source its wrapper already quotes.
fn chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut parts: Vec<String> = Vec::new();
    let mut cur = Some(e);
    while let Some(err) = cur {
        let text = err.to_string();
        if !parts.iter().any(|p| p.contains(&text)) {
            parts.push(text);
        }
        cur = err.source();
    }
    parts.join(": ")
}

/// What `main` prints for `e`: exactly one line.
pub fn one_line(e: &anyhow::Error) -> String {
    let text = match e.downcast_ref::<ServerError>() {
        Some(s) => s.to_string(),
        None => format!("error: {e:#}"),
    };
    text.split('\n').map(str::trim).filter(|l| !l.is_empty()).collect::<Vec<_>>().join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::core::Status;

    fn status(code: u16, reason: &str, message: &str) -> kube::Error {
        let mut s = Status::failure(message, reason);
        s.code = code;
        kube::Error::Api(s.boxed())
    }

    #[test]
    fn server_errors_read_like_kubectls() {
        let e = api(status(404, "NotFound", "deployments.apps \"x\" not found"));
        assert_eq!(one_line(&e), "Error from server (NotFound): deployments.apps \"x\" not found");
        assert!(is_not_found(&e));
        let e = api(status(409, "", "the object has been modified"));
        assert_eq!(one_line(&e), "Error from server (Conflict): the object has been modified");
    }

    #[test]
    fn validation_errors_name_the_object_like_kubectl() {
        let e = api(status(422, "Invalid", "Pod \"bad\" is invalid: spec.containers[0].image: Required value"));
        assert_eq!(one_line(&e), "The Pod \"bad\" is invalid: spec.containers[0].image: Required value");
    }

    #[test]
    fn other_errors_are_one_line_with_the_prefix() {
        let e = anyhow::anyhow!("first\n  second\n").context("reading x");
        assert_eq!(one_line(&e), "error: reading x: first second");
        assert!(!is_not_found(&e));
    }
}
