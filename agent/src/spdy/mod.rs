//! SPDY/3.1, the server side kubectl's streaming commands speak: the frames (`frame`), header
//! compression (`compress`), a multiplexed connection of client-opened streams (`conn`), the
//! HTTP upgrade and protocol negotiation Kubernetes does (`upgrade`), and SPDY tunnelled in
//! WebSocket binary messages (`tunnel`, kubectl ≥ 1.31's port-forward).

pub mod compress;
pub mod conn;
pub mod frame;
pub mod tunnel;
pub mod upgrade;

pub use conn::{Connection, Sender, Stream};

/// A header block: (lowercase name, value) pairs in order.
pub type Headers = Vec<(String, String)>;

/// The value of header `name` (names compare case-insensitively).
pub fn header<'a>(h: &'a Headers, name: &str) -> Option<&'a str> {
    h.iter().find(|(k, _)| k.eq_ignore_ascii_case(name)).map(|(_, v)| v.as_str())
}

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("unsupported SPDY version {0}")]
    Version(u16),
    #[error("truncated {what} frame")]
    Truncated { what: &'static str },
    #[error("header compression failed: {0}")]
    Compression(String),
    #[error("frame of {0} bytes is too large")]
    TooLarge(usize),
    #[error("the SPDY connection is closed")]
    Closed,
}

pub type Result<T, E = Error> = std::result::Result<T, E>;
