//! One file per kind: what the write path asks of a kind, as Kubernetes' REST strategies
//! (`RESTCreateStrategy`, `RESTUpdateStrategy`, the table convertor) answer it.
//!
//! A kind served this way is this module's file plus its row in [`crate::resources::RESOURCES`]
//! (the file's `INFO`); the dispatchers (`schema::normalize`, `defaults::apply_defaults`,
//! `validation::*`, `table::*` and the apiserver's registry) consult [`strategy`] first and hold no
//! branch for it. The kinds served before this existed still have their branches there and move
//! here one by one.

pub mod csi_driver;
pub mod csi_node;
pub mod csi_storage_capacity;
pub mod device_class;
pub mod flow_schema;
pub mod ingress;
pub mod ingress_class;
pub mod ip_address;
pub mod limit_range;
pub mod mutating_webhook_configuration;
pub mod network_policy;
pub mod pod_disruption_budget;
pub mod priority_class;
pub mod priority_level;
pub mod resource_claim;
pub mod resource_claim_template;
pub mod resource_slice;
pub mod runtime_class;
pub mod service_cidr;
#[cfg(test)]
mod test_support;
pub mod validating_admission_policy;
pub mod validating_admission_policy_binding;
pub mod validating_webhook_configuration;
pub mod volume_attachment;
pub mod volume_attributes_class;

use serde_json::Value;

use crate::schema::SchemaError;
use crate::table::columns::Column;
use crate::table::obj::Obj;
use crate::validation::meta::NameRule;
use crate::validation::Cause;

/// What a kind's strategy decides; every method but `normalize` has the answer most kinds give.
pub trait Strategy: Sync {
    /// Decode the object as the kind's k8s-openapi type and encode it back (the fields the
    /// schema knows, typed).
    fn normalize(&self, obj: &Value) -> Result<Value, SchemaError>;

    /// `SetObjectDefaults_<Kind>` and the strategy's own defaults, in place; a value the client
    /// set is never replaced.
    fn defaults(&self, _obj: &mut Value) {}

    /// What `metadata.name` must be (most kinds: a DNS-1123 subdomain).
    fn name_rule(&self) -> NameRule {
        NameRule::Subdomain
    }

    /// `Validate<Kind>` beyond object metadata, on create and update.
    fn validate(&self, _obj: &Value, _out: &mut Vec<Cause>) {}

    /// `Validate<Kind>Update`: what may not change from `old` (after `validate` of `new`).
    fn validate_update(&self, _new: &Value, _old: &Value, _out: &mut Vec<Cause>) {}

    /// `Validate<Kind>StatusUpdate` beyond metadata.
    fn validate_status(&self, _new: &Value, _old: &Value, _out: &mut Vec<Cause>) {}

    /// `PrepareForCreate` clears a status the client sent (kinds whose status is the system's).
    fn resets_status_on_create(&self) -> bool {
        false
    }

    /// The API sets `metadata.generation` and bumps it when anything but metadata and status changes.
    fn tracks_generation(&self) -> bool {
        false
    }

    /// DELETE answers with the object rather than a Success Status (`ReturnDeletedObject`).
    fn returns_deleted_object(&self) -> bool {
        false
    }

    /// Why this object may not be deleted (the kind's REST storage refusing), if it may not.
    fn forbids_delete(&self, _obj: &Value) -> Option<String> {
        None
    }

    /// The objects of this kind every cluster has (the apiserver writes those missing at start).
    fn builtin(&self) -> Vec<Value> {
        Vec::new()
    }

    /// The columns kubectl prints (after Name); empty: Kubernetes' default table (Name, Created At).
    fn columns(&self) -> Vec<Column> {
        Vec::new()
    }

    /// One row's cells after the name, in the order of `columns` (the age cell is passed in
    /// for the kinds that print it).
    fn cells(&self, _obj: Obj<'_>, _age: &Value) -> Vec<Value> {
        Vec::new()
    }
}

/// A kind's strategy inside its [`crate::resources::ResourceInfo`] row (compared by address).
#[derive(Clone, Copy)]
pub struct StrategyRef(pub &'static dyn Strategy);

impl std::fmt::Debug for StrategyRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Strategy")
    }
}

impl PartialEq for StrategyRef {
    fn eq(&self, other: &Self) -> bool {
        std::ptr::addr_eq(self.0 as *const dyn Strategy, other.0 as *const dyn Strategy)
    }
}

impl Eq for StrategyRef {}

/// The strategy of `kind`, when the kind is served through one.
pub fn strategy(kind: &str) -> Option<(&'static crate::resources::ResourceInfo, &'static dyn Strategy)> {
    let info = crate::resources::by_kind(kind)?;
    info.strategy.map(|s| (info, s.0))
}

pub(crate) use crate::schema::roundtrip;

/// A `ResourceInfo` row for a kind served through `strategy` (version v1, no categories, not
/// created by PUT).
#[macro_export]
#[doc(hidden)]
macro_rules! kind_info {
    ($group:expr, $kind:expr, $plural:expr, $singular:expr, $namespaced:expr, $short:expr, $subs:expr, $strategy:expr) => {
        $crate::resources::ResourceInfo {
            group: $group,
            version: "v1",
            kind: $kind,
            plural: $plural,
            singular: $singular,
            namespaced: $namespaced,
            short_names: $short,
            categories: &[],
            subresources: $subs,
            create_on_update: false,
            strategy: Some($crate::kinds::StrategyRef($strategy)),
        }
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_strategy_kind_is_found_by_its_kind() {
        for r in crate::resources::RESOURCES.iter().filter(|r| r.strategy.is_some()) {
            let (info, _) = strategy(r.kind).expect("served through its strategy");
            assert_eq!(info, r);
            assert_eq!(info.singular, r.kind.to_lowercase(), "{}", r.kind);
        }
    }
}
