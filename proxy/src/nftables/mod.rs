//! The nftables mode (`--proxy-mode nftables`): one table of our own, `ip kaji-proxy`, in
//! kube-proxy's nftables layout — verdict maps from `ip . proto . port` to per-service chains —
//! except that the service chains DNAT themselves (per-endpoint chains only with session
//! affinity) and one set finds hairpin traffic; written by one `nft -f -` transaction per sync.

pub mod netlink;
pub mod nft;
pub mod plan;
pub mod render;
pub mod rule;
pub mod sync;
pub mod text;
pub mod tx;

pub use nft::Nft;
pub use render::render;
pub use sync::Syncer;
