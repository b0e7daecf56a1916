//! Authorizers (who may do what): RBAC over the stored roles and bindings, the Node authorizer
//! over the pod graph, the default policy reconciled at start, and the 403 they lead to.

pub mod bootstrap;
pub mod message;
pub mod node;
pub mod rbac;

use crate::cache::Cache;
use std::sync::Arc;

/// The authorizers that read the cluster's state: built once per apiserver over its watch cache.
pub struct Parts {
    pub rbac: Arc<rbac::Rbac>,
    pub node: Arc<node::NodeAuthorizer>,
}

impl Parts {
    /// The RBAC authorizer, and the Node authorizer whose pod graph follows the cache until `stop`.
    pub fn start(cache: &Arc<Cache>, stop: tokio::sync::watch::Receiver<bool>) -> Self {
        Self {
            rbac: Arc::new(rbac::Rbac::new(cache.clone())),
            node: Arc::new(node::NodeAuthorizer::start(cache.clone(), stop)),
        }
    }
}
