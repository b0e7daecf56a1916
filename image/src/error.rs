//! The crate's error type. Pull errors end up verbatim in a pod's `ErrImagePull` message, so each
//! variant names the image and says what the registry (or the disk) answered.

use std::path::PathBuf;
use std::sync::Arc;

/// Everything that can go wrong in the image store. `Clone` so one failed pull can be handed to
/// every caller that was waiting on it.
#[derive(Debug, Clone, thiserror::Error)]
pub enum Error {
    #[error("invalid image reference {reference:?}: {reason}")]
    BadReference { reference: String, reason: String },

    /// The registry does not know the repository, tag or digest.
    #[error("failed to pull {reference:?}: {message} (registry {registry} answered {status})")]
    NotFound { reference: String, registry: String, status: u16, message: String },

    /// Credentials missing or rejected (401).
    #[error(
        "failed to pull {reference:?}: {message} (registry {registry} answered 401); \
         check the image pull secret's credentials"
    )]
    Unauthorized { reference: String, registry: String, message: String },

    /// Credentials accepted but not allowed to pull this repository (403).
    #[error("failed to pull {reference:?}: access denied: {message} (registry {registry} answered 403)")]
    Denied { reference: String, registry: String, message: String },

    /// Any other registry error, with the registry's own `{"errors":[{"code","message"}]}` parsed.
    #[error("failed to pull {reference:?}: registry {registry} answered {status}: {code}: {message}")]
    Registry { reference: String, registry: String, status: u16, code: String, message: String },

    /// The registry could not be reached or the connection broke.
    #[error("failed to pull {reference:?}: cannot reach registry at {url}: {detail}")]
    Network { reference: String, url: String, detail: String },

    /// Content did not hash to the digest that names it.
    #[error("{what} has digest {actual}, expected {expected}; the content is corrupt or was tampered with")]
    DigestMismatch { what: String, expected: String, actual: String },

    /// Media type, manifest schema or platform this store cannot handle.
    #[error("cannot use image {reference:?}: {message}")]
    Unsupported { reference: String, message: String },

    /// Malformed manifest, config, layer or archive.
    #[error("invalid {what}: {message}")]
    Invalid { what: String, message: String },

    /// Local lookup (remove, touch) of an image the store does not hold.
    #[error("image {0:?} is not present in the store")]
    NotPresent(String),

    #[error("failed to {action} {path}")]
    Io {
        action: &'static str,
        path: PathBuf,
        #[source]
        source: Arc<std::io::Error>,
    },
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    pub(crate) fn io(action: &'static str, path: impl Into<PathBuf>, source: std::io::Error) -> Error {
        Error::Io { action, path: path.into(), source: Arc::new(source) }
    }

    pub(crate) fn invalid(what: impl Into<String>, message: impl std::fmt::Display) -> Error {
        Error::Invalid { what: what.into(), message: message.to_string() }
    }

    /// Whether a retry may succeed without anyone changing anything (network trouble, 5xx, 429).
    pub fn is_transient(&self) -> bool {
        match self {
            Error::Network { .. } => true,
            Error::Registry { status, .. } => *status >= 500 || *status == 429,
            _ => false,
        }
    }
}

/// `IoContext::ctx` turns `io::Result` into our `Result` with the action and path attached.
pub(crate) trait IoContext<T> {
    fn ctx(self, action: &'static str, path: impl Into<PathBuf>) -> Result<T>;
}

impl<T> IoContext<T> for std::io::Result<T> {
    fn ctx(self, action: &'static str, path: impl Into<PathBuf>) -> Result<T> {
        self.map_err(|e| Error::io(action, path, e))
    }
}
