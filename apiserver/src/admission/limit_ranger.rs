//! LimitRanger: containers get their namespace's LimitRange defaults, and pods and claims outside
//! its bounds are refused (the rules are `kaji_api::kinds::limit_range`'s).

use super::lookup::{aggregate, list};
use crate::auth::authz::message::resource_forbidden;
use crate::auth::{Admission, AdmissionRequest, Operation};
use crate::http::errors::ApiResult;
use crate::storage::Store;
use kaji_api::kinds::limit_range::{check_claim, check_pod, default_pod};
use serde_json::Value;
use std::sync::Arc;

pub const NAME: &str = "LimitRanger";

pub struct LimitRanger {
    pub store: Arc<dyn Store>,
}

impl LimitRanger {
    /// The namespace's LimitRanges when the request is one LimitRanger looks at.
    fn ranges(&self, req: &AdmissionRequest<'_>) -> ApiResult<Vec<Value>> {
        let applies = req.subresource.is_none()
            && match req.resource.kind {
                "Pod" => req.operation == Operation::Create,
                "PersistentVolumeClaim" => matches!(req.operation, Operation::Create | Operation::Update),
                _ => false,
            };
        match req.namespace {
            Some(ns) if applies => list(self.store.as_ref(), "LimitRange", Some(ns)),
            _ => Ok(Vec::new()),
        }
    }
}

impl Admission for LimitRanger {
    fn admit(&self, req: &AdmissionRequest<'_>, object: Option<&mut Value>) -> ApiResult<()> {
        let Some(obj) = object else { return Ok(()) };
        if req.resource.kind != "Pod" {
            return Ok(());
        }
        let ranges = self.ranges(req)?;
        if !ranges.is_empty() {
            default_pod(&ranges, obj);
        }
        Ok(())
    }

    fn validate(&self, req: &AdmissionRequest<'_>, object: Option<&Value>) -> ApiResult<()> {
        let Some(obj) = object else { return Ok(()) };
        let ranges = self.ranges(req)?;
        if ranges.is_empty() {
            return Ok(());
        }
        let errs = match req.resource.kind {
            "Pod" => check_pod(&ranges, obj),
            _ => check_claim(&ranges, obj),
        };
        if errs.is_empty() {
            return Ok(());
        }
        Err(resource_forbidden(req.resource.group, req.resource.plural, req.name, &aggregate(&errs)))
    }
}
