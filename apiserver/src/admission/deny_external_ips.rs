//! DenyServiceExternalIPs (Kubernetes' admission plugin of that name, off by default): no new
//! `spec.externalIPs` on Services — a create with any, or an update adding one the Service did not
//! have, is refused; keeping or removing existing ones passes. ExternalIPs let whoever writes a
//! Service capture traffic for any address the nodes route (CVE-2020-8554).

use crate::auth::authz::message::resource_forbidden;
use crate::auth::{Admission, AdmissionRequest, Operation};
use crate::http::errors::ApiResult;
use serde_json::Value;

pub const NAME: &str = "DenyServiceExternalIPs";

pub struct DenyServiceExternalIps;

fn external_ips(svc: Option<&Value>) -> Vec<&str> {
    svc.and_then(|s| s.pointer("/spec/externalIPs"))
        .and_then(Value::as_array)
        .map(|ips| ips.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default()
}

/// `isSubset`: every external IP of `new` was already on `old` (none at all always is).
pub fn adds_nothing(new: Option<&Value>, old: Option<&Value>) -> bool {
    let new = external_ips(new);
    if new.is_empty() {
        return true;
    }
    if old.is_none() {
        return false;
    }
    let old = external_ips(old);
    new.iter().all(|ip| old.contains(ip))
}

impl Admission for DenyServiceExternalIps {
    fn validate(&self, req: &AdmissionRequest<'_>, object: Option<&Value>) -> ApiResult<()> {
        let handled = matches!(req.operation, Operation::Create | Operation::Update)
            && req.resource.group.is_empty()
            && req.resource.plural == "services"
            && req.subresource.is_none();
        if !handled || adds_nothing(object, req.old) {
            return Ok(());
        }
        let name = if req.name.is_empty() {
            object.and_then(|o| o.pointer("/metadata/name")).and_then(Value::as_str).unwrap_or("")
        } else {
            req.name
        };
        Err(resource_forbidden("", "services", name, "Use of external IPs is denied by admission control"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn svc(ips: &[&str]) -> Value {
        json!({"spec": {"externalIPs": ips}})
    }

    #[test]
    fn only_external_ips_the_service_did_not_have_are_new() {
        assert!(adds_nothing(Some(&json!({"spec": {}})), None));
        assert!(adds_nothing(Some(&svc(&[])), None));
        assert!(!adds_nothing(Some(&svc(&["1.2.3.4"])), None), "a create with any");
        assert!(adds_nothing(Some(&svc(&["1.2.3.4"])), Some(&svc(&["1.2.3.4", "5.6.7.8"]))), "one removed");
        assert!(adds_nothing(Some(&svc(&["5.6.7.8", "1.2.3.4"])), Some(&svc(&["1.2.3.4", "5.6.7.8"]))), "kept");
        assert!(!adds_nothing(Some(&svc(&["1.2.3.4", "9.9.9.9"])), Some(&svc(&["1.2.3.4"]))), "one added");
        assert!(!adds_nothing(Some(&svc(&["1.2.3.4"])), Some(&json!({"spec": {}}))));
    }
}
