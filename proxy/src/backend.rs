//! The proxy mode: iptables (kube-proxy's iptables layout; the default) or nftables (one table
//! of our own) — one `sync` for the controller either way.

use crate::iptables::{self, Iptables};
use crate::model::Model;
use crate::nftables::{self, Nft};
use crate::sync::{self, Outcome};

/// How the node is programmed.
#[derive(Clone, Debug)]
pub enum Backend {
    Iptables(Iptables),
    Nftables(Nft),
}

impl Default for Backend {
    fn default() -> Self {
        Backend::Iptables(Iptables::host())
    }
}

impl Backend {
    /// "iptables" or "nftables", as `--proxy-mode` names it.
    pub fn mode(&self) -> &'static str {
        match self {
            Backend::Iptables(_) => "iptables",
            Backend::Nftables(_) => "nftables",
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(transparent)]
    Iptables(#[from] iptables::Error),
    #[error(transparent)]
    Nftables(#[from] nftables::nft::Error),
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// The syncer of the chosen mode.
pub enum Syncer {
    Iptables(sync::Syncer),
    Nftables(nftables::Syncer),
}

impl Syncer {
    pub fn new(backend: &Backend) -> Self {
        match backend {
            Backend::Iptables(ipt) => Syncer::Iptables(sync::Syncer::new(ipt.clone())),
            Backend::Nftables(nft) => Syncer::Nftables(nftables::Syncer::new(nft.clone())),
        }
    }

    /// Programs `model`: everything when `full` (or when the installed state is unknown),
    /// otherwise only what changed since the last successful sync.
    pub fn sync(&mut self, model: Model, full: bool) -> Result<Outcome> {
        match self {
            Syncer::Iptables(s) => Ok(s.sync(&model, full)?),
            // Kept as the applied state (no copy of 10,000 service ports).
            Syncer::Nftables(s) => Ok(s.sync_owned(model, full)?),
        }
    }
}
