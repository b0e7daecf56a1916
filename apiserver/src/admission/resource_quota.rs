//! ResourceQuota admission (Kubernetes' plugin of that name, on by default): a write that would
//! take a namespace past any quota that covers it is refused with Kubernetes' 403 message, and an
//! admitted one is charged to the quotas' `status.used` before it is stored — through the store,
//! at the quota's revision, so two writes racing for the last unit cannot both pass. Dry runs are
//! judged but never charged. The decision itself is `kaji_api::quota::admit::check`.

use crate::auth::authz::message::resource_forbidden;
use crate::auth::{Admission, AdmissionRequest, Operation};
use crate::http::errors::{ApiError, ApiResult};
use crate::storage::{self, KeyValue, Store};
use kaji_api::quota::admit::{self, QuotaView, Write};
use kaji_api::quota::list;
use serde_json::Value;
use std::collections::BTreeSet;
use std::sync::Arc;

pub const NAME: &str = "ResourceQuota";

/// How often a charge that lost a race is decided again on fresh quotas (Kubernetes retries 3 times).
const ATTEMPTS: usize = 4;

pub struct ResourceQuotaAdmission {
    pub store: Arc<dyn Store>,
}

impl ResourceQuotaAdmission {
    fn quotas(&self, ns: &str) -> ApiResult<Vec<(KeyValue, Value)>> {
        let info = kaji_api::resources::by_kind("ResourceQuota").expect("resourcequotas are served");
        let (kvs, _) = self.store.list(&info.namespace_prefix(Some(ns))).map_err(ApiError::internal)?;
        Ok(kvs.into_iter().filter_map(|kv| serde_json::from_slice::<Value>(&kv.value).ok().map(|v| (kv, v))).collect())
    }
}

impl Admission for ResourceQuotaAdmission {
    fn validate(&self, req: &AdmissionRequest<'_>, object: Option<&Value>) -> ApiResult<()> {
        let (Some(ns), Some(obj)) = (req.namespace, object) else { return Ok(()) };
        if !matches!(req.operation, Operation::Create | Operation::Update) || !req.resource.namespaced {
            return Ok(());
        }
        let now = jiff::Timestamp::now().as_second();
        let write = Write {
            group: req.resource.group,
            resource: req.resource.plural,
            subresource: req.subresource,
            old: req.old,
            object: obj,
            now,
        };
        let name = if req.name.is_empty() {
            obj.pointer("/metadata/name").and_then(Value::as_str).unwrap_or("")
        } else {
            req.name
        };
        // Quotas already charged by an earlier attempt are not charged again.
        let mut charged: BTreeSet<String> = BTreeSet::new();
        let mut last_conflict = None;
        for _ in 0..ATTEMPTS {
            let quotas: Vec<(KeyValue, Value)> = self
                .quotas(ns)?
                .into_iter()
                .filter(|(_, q)| !charged.contains(q.pointer("/metadata/name").and_then(Value::as_str).unwrap_or("")))
                .collect();
            if quotas.is_empty() {
                return Ok(());
            }
            let views: Vec<QuotaView> = quotas.iter().map(|(_, q)| QuotaView::from_json(q)).collect();
            let changes = admit::check(&views, &write)
                .map_err(|msg| resource_forbidden(req.resource.group, req.resource.plural, name, &msg))?;
            if changes.is_empty() || req.dry_run {
                return Ok(());
            }
            last_conflict = None;
            for (i, used) in changes {
                let (kv, quota) = &quotas[i];
                let mut quota = quota.clone();
                quota["status"]["used"] = list::to_json(&used);
                let bytes = serde_json::to_vec(&quota).map_err(ApiError::internal)?;
                match self.store.update(&kv.key, &bytes, kv.mod_revision) {
                    Ok(_) => {
                        charged.insert(views[i].name.clone());
                    }
                    Err(storage::Error::Conflict { .. } | storage::Error::NotFound(_)) => {
                        last_conflict = Some(views[i].name.clone());
                    }
                    Err(e) => return Err(ApiError::internal(e)),
                }
            }
            if last_conflict.is_none() {
                return Ok(());
            }
        }
        let quota = last_conflict.unwrap_or_default();
        Err(ApiError::conflict(
            "",
            "resourcequotas",
            &quota,
            "the object has been modified; please apply your changes to the latest version and try again",
        ))
    }
}
