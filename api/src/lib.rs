//! kaji-api: what every component shares beyond k8s-openapi — no IO, no tokio.

pub mod cron;
pub mod defaults;
pub mod kinds;
pub mod pod_security;
pub mod quota;
pub mod resources;
pub mod scheduling;
pub mod schema;
pub mod selector;
pub mod strategic;
pub mod table;
pub mod validation;
pub mod version;
pub mod webhook;
