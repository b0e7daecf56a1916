//! flowcontrol.apiserver.k8s.io/v1 PriorityLevelConfiguration: a share of the apiserver's
//! concurrency and how requests queue for it.

use k8s_openapi::api::flowcontrol::v1 as fc;
use serde_json::{json, Value};

use super::{roundtrip, Strategy};
use crate::defaults::json::{default_str, default_value};
use crate::resources::{ResourceInfo, Subresource};
use crate::schema::SchemaError;
use crate::table::columns::{Column, AGE};
use crate::table::obj::Obj;
use crate::validation::json::{int, st};
use crate::validation::Cause;

pub struct PriorityLevel;

pub const INFO: ResourceInfo = crate::kind_info!(
    "flowcontrol.apiserver.k8s.io",
    "PriorityLevelConfiguration",
    "prioritylevelconfigurations",
    "prioritylevelconfiguration",
    false,
    &[],
    &[Subresource::Status],
    &PriorityLevel
);

const TYPES: [&str; 2] = ["Exempt", "Limited"];

impl Strategy for PriorityLevel {
    fn normalize(&self, obj: &Value) -> Result<Value, SchemaError> {
        roundtrip::<fc::PriorityLevelConfiguration>(obj)
    }

    fn defaults(&self, obj: &mut Value) {
        // SetDefaults_{Exempt,Limited}PriorityLevelConfiguration, SetDefaults_QueuingConfiguration.
        let Some(spec) = obj.get_mut("spec").and_then(Value::as_object_mut) else {
            return;
        };
        if let Some(e) = existing(spec, "exempt") {
            default_value(e, "nominalConcurrencyShares", json!(0));
            default_value(e, "lendablePercent", json!(0));
        }
        if let Some(l) = existing(spec, "limited") {
            default_value(l, "nominalConcurrencyShares", json!(30));
            default_value(l, "lendablePercent", json!(0));
            if let Some(r) = existing(l, "limitResponse") {
                default_str(r, "type", "Reject");
                if let Some(q) = existing(r, "queuing") {
                    crate::defaults::json::default_nonzero(q, "queues", 64);
                    crate::defaults::json::default_nonzero(q, "handSize", 8);
                    crate::defaults::json::default_nonzero(q, "queueLengthLimit", 50);
                }
            }
        }
    }

    fn validate(&self, o: &Value, out: &mut Vec<Cause>) {
        let spec = o.get("spec").unwrap_or(&Value::Null);
        let t = st(spec, "type");
        let limited = spec.get("limited").filter(|l| !l.is_null());
        match t {
            "Limited" if limited.is_none() => {
                out.push(Cause::required("spec.limited", "must not be empty when type is Limited"))
            }
            "Exempt" if limited.is_some() => {
                out.push(Cause::forbidden("spec.limited", "must be nil if the type is not Limited"))
            }
            "Limited" | "Exempt" => {}
            "" => out.push(Cause::required("spec.type", "")),
            other => out.push(Cause::not_supported("spec.type", other, &TYPES)),
        }
        let Some(l) = limited else { return };
        if let Some(p) = int(l, "lendablePercent") {
            if !(0..=100).contains(&p) {
                out.push(Cause::invalid("spec.limited.lendablePercent", p, "must be between 0 and 100, inclusive"));
            }
        }
        let Some(r) = l.get("limitResponse").filter(|r| !r.is_null()) else { return };
        match st(r, "type") {
            "Queue" => match r.get("queuing").filter(|q| !q.is_null()) {
                None => out.push(Cause::required(
                    "spec.limited.limitResponse.queuing",
                    "must not be empty if the type is Queue",
                )),
                Some(q) => {
                    let queues = int(q, "queues").unwrap_or(0);
                    let hand = int(q, "handSize").unwrap_or(0);
                    if queues <= 0 {
                        out.push(Cause::invalid(
                            "spec.limited.limitResponse.queuing.queues",
                            queues,
                            "must be positive",
                        ));
                    }
                    if int(q, "queueLengthLimit").unwrap_or(0) <= 0 {
                        let v = int(q, "queueLengthLimit").unwrap_or(0);
                        out.push(Cause::invalid(
                            "spec.limited.limitResponse.queuing.queueLengthLimit",
                            v,
                            "must be positive",
                        ));
                    }
                    if hand <= 0 || hand > queues {
                        out.push(Cause::invalid(
                            "spec.limited.limitResponse.queuing.handSize",
                            hand,
                            &format!("should not be greater than queues ({queues})"),
                        ));
                    }
                }
            },
            "Reject" => {
                if r.get("queuing").is_some_and(|q| !q.is_null()) {
                    out.push(Cause::forbidden(
                        "spec.limited.limitResponse.queuing",
                        "must be nil if limited.limitResponse.type is not Limited",
                    ));
                }
            }
            other => out.push(Cause::not_supported("spec.limited.limitResponse.type", other, &["Queue", "Reject"])),
        }
    }

    fn resets_status_on_create(&self) -> bool {
        true
    }

    fn tracks_generation(&self) -> bool {
        true
    }

    fn columns(&self) -> Vec<Column> {
        vec![
            ("Type", "string", "", 0, "`type` indicates whether this priority level is subject to limitation on request execution.  A value of `\"Exempt\"` means that requests of this priority level are not subject to a limit (and thus are never queued) and do not detract from the capacity made available to other priority levels.  A value of `\"Limited\"` means that (a) requests of this priority level _are_ subject to limits and (b) some of the server's limited capacity is made available exclusively to this priority level. Required."),
            ("NominalConcurrencyShares", "string", "", 0, "`nominalConcurrencyShares` (NCS) contributes to the computation of the NominalConcurrencyLimit (NominalCL) of this level."),
            ("Queues", "string", "", 0, "`queues` is the number of queues for this priority level. The queues exist independently at each apiserver. The value must be positive.  Setting it to 1 effectively precludes shufflesharding and thus makes the distinguisher method of associated flow schemas irrelevant.  This field has a default value of 64."),
            ("HandSize", "string", "", 0, "`handSize` is a small positive number that configures the shuffle sharding of requests into queues.  When enqueuing a request at this priority level the request's flow identifier (a string pair) is hashed and the hash value is used to shuffle the list of queues and deal a hand of the size specified here.  The request is put into one of the shortest queues in that hand. `handSize` must be no larger than `queues`, and should be significantly smaller (so that a few heavy flows do not saturate most of the queues).  See the user-facing documentation for more extensive guidance on setting this field.  This field has a default value of 8."),
            ("QueueLengthLimit", "string", "", 0, "`queueLengthLimit` is the maximum number of requests allowed to be waiting in a given queue of this priority level at a time; excess requests are rejected.  This value must be positive.  If not specified, it will be defaulted to 50."),
            AGE,
        ]
    }

    fn cells(&self, o: Obj<'_>, age: &Value) -> Vec<Value> {
        let none = || json!("<none>");
        let (ncs, queues, hand, limit) = match o.get("spec.limited").filter(|l| l.is_object()) {
            Some(l) => {
                let l = Obj(l);
                let ncs = json!(l.int("nominalConcurrencyShares"));
                match l.get("limitResponse.queuing").filter(|q| q.is_object()) {
                    Some(q) => {
                        let q = Obj(q);
                        (ncs, json!(q.int("queues")), json!(q.int("handSize")), json!(q.int("queueLengthLimit")))
                    }
                    None => (ncs, none(), none(), none()),
                }
            }
            None => (none(), none(), none(), none()),
        };
        vec![json!(o.str("spec.type")), ncs, queues, hand, limit, age.clone()]
    }
}

/// The object at `key`, when the client sent one (nothing is created).
fn existing<'a>(
    m: &'a mut serde_json::Map<String, Value>,
    key: &str,
) -> Option<&'a mut serde_json::Map<String, Value>> {
    m.get_mut(key).and_then(Value::as_object_mut)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kinds::test_support::{cells, create_causes, defaulted, fields};

    #[test]
    fn limited_levels_get_kubernetes_defaults_and_checks() {
        let pl = json!({"metadata": {"name": "pl"}, "spec": {"type": "Limited",
            "limited": {"limitResponse": {"type": "Queue", "queuing": {}}}}});
        let d = defaulted("PriorityLevelConfiguration", pl.clone());
        assert_eq!(d["spec"]["limited"]["nominalConcurrencyShares"], 30);
        assert_eq!(
            d["spec"]["limited"]["limitResponse"]["queuing"],
            json!({"queues": 64, "handSize": 8, "queueLengthLimit": 50})
        );
        assert_eq!(create_causes("PriorityLevelConfiguration", &pl), vec![]);
        assert_eq!(
            cells("PriorityLevelConfiguration", &d)[..6],
            [json!("pl"), json!("Limited"), json!(30), json!(64), json!(8), json!(50)]
        );
        let bare = json!({"metadata": {"name": "pl"}, "spec": {"type": "Limited"}});
        assert_eq!(fields(&create_causes("PriorityLevelConfiguration", &bare)), ["spec.limited"]);
    }
}
