//! kaji-image: the agent's image subsystem. Pulls images from OCI distribution registries (or
//! imports OCI layouts and `docker save` archives), unpacks each layer once into a directory
//! overlayfs can stack, and keeps an index that survives restarts.
//!
//! - `reference`: docker's reference normalization
//! - `auth`: credentials from `.dockerconfigjson`, `WWW-Authenticate` parsing
//! - `registry`: the v2 HTTP client for one pull (auth dance, verified downloads, error mapping)
//! - `manifest`: manifest/index/config documents and platform selection
//! - `digest`: sha256 digests and verification
//! - `unpack`: layer tar → overlayfs lowerdir (whiteouts, ownership, path-escape checks)
//! - `store`: the on-disk store and local operations; `pull`, `import`, `gc`: the rest of its API
//! - `meta`: the persisted index
//! - `testing` (feature `testing`): a throwaway registry and image builders for tests
pub mod auth;
pub mod digest;
pub mod error;
pub mod gc;
mod import;
pub mod manifest;
mod meta;
mod pull;
pub mod reference;
pub mod registry;
pub mod store;
#[cfg(any(test, feature = "testing"))]
pub mod testing;
pub mod unpack;

pub use auth::{credentials_from_docker_config, Credentials};
pub use error::{Error, Result};
pub use manifest::{ImageConfig, Platform};
pub use reference::{normalize, Reference};
pub use store::{Image, Stats, Store, StoreOptions};
