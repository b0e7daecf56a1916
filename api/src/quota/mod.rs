//! ResourceQuota's arithmetic, shared by the quota controller and quota admission: quantities,
//! resource lists, what each kind costs, scopes, the admission check and the status calculation.

pub mod admit;
pub mod calculate;
pub mod list;
pub mod quantity;
pub mod replenish;
pub mod scopes;
pub mod usage;

pub use list::ResourceList;
pub use quantity::Quantity;
