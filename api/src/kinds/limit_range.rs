//! core/v1 LimitRange: per-namespace bounds on what containers, pods and claims may request,
//! and the defaults containers get (the LimitRanger admission plugin applies both; its pure
//! part is here).

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1 as core;
use serde_json::{json, Map, Value};

use super::{roundtrip, Strategy};
use crate::resources::ResourceInfo;
use crate::schema::SchemaError;
use crate::validation::json::{arr, obj, st};
use crate::validation::names::{qualified_name_errors, QUANTITY_MSG};
use crate::validation::quantity::{quantity_of, quantity_text};
use crate::validation::Cause;

pub struct LimitRange;

pub const INFO: ResourceInfo =
    crate::kind_info!("", "LimitRange", "limitranges", "limitrange", true, &["limits"], &[], &LimitRange);

const BOUNDS: [&str; 5] = ["max", "min", "default", "defaultRequest", "maxLimitRequestRatio"];

impl Strategy for LimitRange {
    fn normalize(&self, obj: &Value) -> Result<Value, SchemaError> {
        roundtrip::<core::LimitRange>(obj)
    }

    /// `SetDefaults_LimitRangeItem`: a container's default limit is its max, its default request
    /// the default limit, else the min.
    fn defaults(&self, obj: &mut Value) {
        let limits = obj.pointer_mut("/spec/limits").and_then(Value::as_array_mut);
        for item in limits.into_iter().flatten() {
            let Some(m) = item.as_object_mut() else { continue };
            if m.get("type").and_then(Value::as_str) != Some("Container") {
                continue;
            }
            let map =
                |m: &Map<String, Value>, k: &str| m.get(k).and_then(Value::as_object).cloned().unwrap_or_default();
            let (max, min) = (map(m, "max"), map(m, "min"));
            let mut default = map(m, "default");
            let mut request = map(m, "defaultRequest");
            for (k, v) in &max {
                default.entry(k.clone()).or_insert_with(|| v.clone());
            }
            for (k, v) in default.iter().chain(&min) {
                request.entry(k.clone()).or_insert_with(|| v.clone());
            }
            m.insert("default".into(), Value::Object(default));
            m.insert("defaultRequest".into(), Value::Object(request));
        }
    }

    fn validate(&self, o: &Value, out: &mut Vec<Cause>) {
        for (i, item) in arr(o.get("spec").unwrap_or(&Value::Null), "limits").iter().enumerate() {
            validate_item(item, &format!("spec.limits[{i}]"), out);
        }
    }
}

fn validate_item(item: &Value, p: &str, out: &mut Vec<Cause>) {
    let kind = st(item, "type");
    out.extend(qualified_name_errors(kind).iter().map(|m| Cause::invalid(format!("{p}.type"), kind, m)));
    let mut parsed: BTreeMap<&str, BTreeMap<&str, (i128, String)>> = BTreeMap::new();
    for bound in BOUNDS {
        for (name, q) in obj(item, bound).into_iter().flatten() {
            let fp = format!("{p}.{bound}[{name}]");
            out.extend(qualified_name_errors(name).iter().map(|m| Cause::invalid(fp.as_str(), name.as_str(), m)));
            match quantity_of(q) {
                Some(v) => {
                    parsed.entry(bound).or_default().insert(name, (v, quantity_text(q)));
                }
                None => out.push(Cause::invalid(fp, quantity_text(q), QUANTITY_MSG)),
            }
        }
    }
    if kind == "Pod" {
        for bound in ["default", "defaultRequest"] {
            if obj(item, bound).is_some_and(|m| !m.is_empty()) {
                out.push(Cause::forbidden(format!("{p}.{bound}"), "may not be specified when `type` is 'Pod'"));
            }
        }
    }
    if kind == "PersistentVolumeClaim" {
        let has = |b: &str| parsed.get(b).is_some_and(|m| m.contains_key("storage"));
        if !has("min") && !has("max") {
            out.push(Cause::required(
                format!("{p}.limits"),
                "either minimum or maximum storage value is required, but neither was provided",
            ));
        }
    }
    let get = |b: &str, k: &str| parsed.get(b).and_then(|m| m.get(k)).cloned();
    let keys: std::collections::BTreeSet<&str> = parsed.values().flat_map(|m| m.keys().copied()).collect();
    for k in keys {
        let (min, max) = (get("min", k), get("max", k));
        let (def, req, ratio) = (get("default", k), get("defaultRequest", k), get("maxLimitRequestRatio", k));
        let path = |b: &str| format!("{p}.{b}[{k}]");
        if let (Some(lo), Some(hi)) = (&min, &max) {
            if lo.0 > hi.0 {
                out.push(Cause::invalid(
                    path("min"),
                    lo.1.as_str(),
                    &format!("min value {} is greater than max value {}", lo.1, hi.1),
                ));
            }
        }
        if let Some(r) = &req {
            if let Some(lo) = min.as_ref().filter(|lo| lo.0 > r.0) {
                out.push(Cause::invalid(
                    path("defaultRequest"),
                    r.1.as_str(),
                    &format!("min value {} is greater than default request value {}", lo.1, r.1),
                ));
            }
            if let Some(hi) = max.as_ref().filter(|hi| r.0 > hi.0) {
                out.push(Cause::invalid(
                    path("defaultRequest"),
                    r.1.as_str(),
                    &format!("default request value {} is greater than max value {}", r.1, hi.1),
                ));
            }
            if let Some(d) = def.as_ref().filter(|d| r.0 > d.0) {
                out.push(Cause::invalid(
                    path("defaultRequest"),
                    r.1.as_str(),
                    &format!("default request value {} is greater than default limit value {}", r.1, d.1),
                ));
            }
        }
        if let Some(d) = &def {
            if let Some(lo) = min.as_ref().filter(|lo| lo.0 > d.0) {
                out.push(Cause::invalid(
                    path("default"),
                    d.1.as_str(),
                    &format!("min value {} is greater than default value {}", lo.1, d.1),
                ));
            }
            if let Some(hi) = max.as_ref().filter(|hi| d.0 > hi.0) {
                out.push(Cause::invalid(
                    path("default"),
                    d.1.as_str(),
                    &format!("default value {} is greater than max value {}", d.1, hi.1),
                ));
            }
        }
        if let Some(r) = &ratio {
            if r.0 < 1_000_000_000 {
                out.push(Cause::invalid(
                    path("maxLimitRequestRatio"),
                    r.1.as_str(),
                    &format!("ratio {} is less than 1", r.1),
                ));
            }
            if let (Some(lo), Some(hi)) = (&min, &max) {
                if lo.0 > 0 && r.0 > hi.0 * 1_000_000_000 / lo.0 {
                    let max_ratio = hi.0 as f64 / lo.0 as f64;
                    out.push(Cause::invalid(
                        path("maxLimitRequestRatio"),
                        r.1.as_str(),
                        &format!("ratio {} is greater than max/min = {max_ratio:.6}", r.1),
                    ));
                }
            }
        }
    }
}

/// LimitRanger's mutation of a pod (`defaultContainerResourceRequirements` and
/// `mergeContainerResources`): every container and init container gets the Container defaults
/// of each range for the resources it does not set.
pub fn default_pod(ranges: &[Value], pod: &mut Value) {
    let mut limits = Map::new();
    let mut requests = Map::new();
    for item in ranges.iter().flat_map(|r| arr(r.get("spec").unwrap_or(&Value::Null), "limits")) {
        if st(item, "type") != "Container" {
            continue;
        }
        for (k, v) in obj(item, "defaultRequest").into_iter().flatten() {
            requests.insert(k.clone(), v.clone());
        }
        for (k, v) in obj(item, "default").into_iter().flatten() {
            limits.insert(k.clone(), v.clone());
        }
    }
    if limits.is_empty() && requests.is_empty() {
        return;
    }
    for list in ["containers", "initContainers"] {
        let containers = pod.pointer_mut(&format!("/spec/{list}")).and_then(Value::as_array_mut);
        for c in containers.into_iter().flatten() {
            let Some(c) = c.as_object_mut() else { continue };
            let res = c.entry("resources").or_insert_with(|| json!({}));
            if res.is_null() {
                *res = json!({});
            }
            let Some(res) = res.as_object_mut() else { continue };
            for (field, defaults) in [("limits", &limits), ("requests", &requests)] {
                if defaults.is_empty() {
                    continue;
                }
                let slot = res.entry(field).or_insert_with(|| json!({}));
                if slot.is_null() {
                    *slot = json!({});
                }
                let Some(m) = slot.as_object_mut() else { continue };
                for (k, v) in defaults {
                    m.entry(k.clone()).or_insert_with(|| v.clone());
                }
            }
        }
    }
}

/// LimitRanger's validation of a pod (`PodValidateLimitFunc`): the Container bounds against
/// each container, the Pod bounds against the pod's sum. Kubernetes' messages, in order.
pub fn check_pod(ranges: &[Value], pod: &Value) -> Vec<String> {
    let mut errs = Vec::new();
    let spec = pod.get("spec").unwrap_or(&Value::Null);
    for item in ranges.iter().flat_map(|r| arr(r.get("spec").unwrap_or(&Value::Null), "limits")) {
        match st(item, "type") {
            "Container" => {
                for c in arr(spec, "containers").iter().chain(arr(spec, "initContainers")) {
                    let res = c.get("resources").unwrap_or(&Value::Null);
                    check_bounds(item, "Container", &resources(res, "requests"), &resources(res, "limits"), &mut errs);
                }
            }
            "Pod" => {
                let (req, lim) = pod_totals(spec);
                check_bounds(item, "Pod", &req, &lim, &mut errs);
            }
            _ => {}
        }
    }
    errs
}

/// LimitRanger's validation of a claim: its storage request within the PersistentVolumeClaim bounds.
pub fn check_claim(ranges: &[Value], claim: &Value) -> Vec<String> {
    let mut errs = Vec::new();
    let res = claim.pointer("/spec/resources").unwrap_or(&Value::Null);
    for item in ranges.iter().flat_map(|r| arr(r.get("spec").unwrap_or(&Value::Null), "limits")) {
        if st(item, "type") != "PersistentVolumeClaim" {
            continue;
        }
        let req = resources(res, "requests");
        for (k, (lo, lo_text)) in resources(item, "min") {
            match req.get(&k) {
                None => errs.push(format!(
                    "minimum {k} usage per PersistentVolumeClaim is {lo_text}.  No request is specified"
                )),
                Some((v, text)) if *v < lo => errs
                    .push(format!("minimum {k} usage per PersistentVolumeClaim is {lo_text}, but request is {text}")),
                Some(_) => {}
            }
        }
        for (k, (hi, hi_text)) in resources(item, "max") {
            if let Some((_, text)) = req.get(&k).filter(|(v, _)| *v > hi) {
                errs.push(format!("maximum {k} usage per PersistentVolumeClaim is {hi_text}, but request is {text}"));
            }
        }
    }
    errs
}

type Amounts = BTreeMap<String, (i128, String)>;

fn resources(v: &Value, key: &str) -> Amounts {
    obj(v, key)
        .into_iter()
        .flatten()
        .filter_map(|(k, q)| Some((k.clone(), (quantity_of(q)?, quantity_text(q)))))
        .collect()
}

/// `minConstraint`, `maxConstraint` and `limitRequestRatioConstraint` for one item.
fn check_bounds(item: &Value, kind: &str, req: &Amounts, lim: &Amounts, errs: &mut Vec<String>) {
    for (k, (lo, lo_text)) in resources(item, "min") {
        match req.get(&k) {
            None => errs.push(format!("minimum {k} usage per {kind} is {lo_text}.  No request is specified")),
            Some((v, text)) if *v < lo => {
                errs.push(format!("minimum {k} usage per {kind} is {lo_text}, but request is {text}"))
            }
            _ => {}
        }
        if let Some((_, text)) = lim.get(&k).filter(|(v, _)| *v < lo) {
            errs.push(format!("minimum {k} usage per {kind} is {lo_text}, but limit is {text}"));
        }
    }
    for (k, (hi, hi_text)) in resources(item, "max") {
        match lim.get(&k) {
            None => errs.push(format!("maximum {k} usage per {kind} is {hi_text}.  No limit is specified")),
            Some((v, text)) if *v > hi => {
                errs.push(format!("maximum {k} usage per {kind} is {hi_text}, but limit is {text}"))
            }
            _ => {}
        }
        if let Some((_, text)) = req.get(&k).filter(|(v, _)| *v > hi) {
            errs.push(format!("maximum {k} usage per {kind} is {hi_text}, but request is {text}"));
        }
    }
    for (k, (ratio, ratio_text)) in resources(item, "maxLimitRequestRatio") {
        let (Some((l, _)), Some((r, _))) = (lim.get(&k), req.get(&k)) else {
            if lim.contains_key(&k) || req.contains_key(&k) {
                errs.push(format!("{k} max limit to request ratio per {kind} is {ratio_text}, but no request is specified or request is 0"));
            }
            continue;
        };
        if *r == 0 || *l * 1_000_000_000 > ratio * *r {
            let provided = if *r == 0 { f64::INFINITY } else { *l as f64 / *r as f64 };
            errs.push(format!(
                "{k} max limit to request ratio per {kind} is {ratio_text}, but provided ratio is {provided:.6}"
            ));
        }
    }
}

/// A pod's requests and limits as the Pod bounds see them: the sum over its containers, or the
/// largest init container's when that is more.
fn pod_totals(spec: &Value) -> (Amounts, Amounts) {
    let mut out = (Amounts::new(), Amounts::new());
    for (field, slot) in [("requests", &mut out.0), ("limits", &mut out.1)] {
        let mut sums: BTreeMap<String, i128> = BTreeMap::new();
        for c in arr(spec, "containers") {
            for (k, (v, _)) in resources(c.get("resources").unwrap_or(&Value::Null), field) {
                *sums.entry(k).or_default() += v;
            }
        }
        for c in arr(spec, "initContainers") {
            for (k, (v, _)) in resources(c.get("resources").unwrap_or(&Value::Null), field) {
                let e = sums.entry(k).or_default();
                *e = (*e).max(v);
            }
        }
        for (k, v) in sums {
            let text = format_quantity(v, k == "memory" || k.ends_with("storage"));
            slot.insert(k, (v, text));
        }
    }
    out
}

/// A nano-unit amount in Kubernetes' canonical form (binary suffixes for byte amounts).
pub fn format_quantity(nanos: i128, binary: bool) -> String {
    const NANO: i128 = 1_000_000_000;
    if nanos % NANO == 0 {
        let n = nanos / NANO;
        if binary && n != 0 {
            for (shift, suffix) in [(60, "Ei"), (50, "Pi"), (40, "Ti"), (30, "Gi"), (20, "Mi"), (10, "Ki")] {
                if n % (1i128 << shift) == 0 {
                    return format!("{}{suffix}", n >> shift);
                }
            }
        }
        if !binary && n != 0 {
            for (exp, suffix) in [(18, "E"), (15, "P"), (12, "T"), (9, "G"), (6, "M"), (3, "k")] {
                let d = 10i128.pow(exp);
                if n % d == 0 {
                    return format!("{}{suffix}", n / d);
                }
            }
        }
        return n.to_string();
    }
    if nanos % 1_000_000 == 0 {
        return format!("{}m", nanos / 1_000_000);
    }
    if nanos % 1000 == 0 {
        return format!("{}u", nanos / 1000);
    }
    format!("{nanos}n")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kinds::test_support::{create_causes, defaulted, fields};

    fn range(limits: Value) -> Value {
        json!({"metadata": {"name": "lr", "namespace": "d"}, "spec": {"limits": limits}})
    }

    #[test]
    fn container_defaults_come_from_max_default_and_min() {
        let lr = defaulted(
            "LimitRange",
            range(json!([{"type": "Container",
            "max": {"cpu": "500m", "memory": "500Mi"}, "min": {"cpu": "100m", "memory": "100Mi", "ephemeral-storage": "1Gi"},
            "default": {"memory": "200Mi"}}])),
        );
        let item = &lr["spec"]["limits"][0];
        assert_eq!(item["default"], json!({"cpu": "500m", "memory": "200Mi"}));
        assert_eq!(item["defaultRequest"], json!({"cpu": "500m", "memory": "200Mi", "ephemeral-storage": "1Gi"}));
        assert_eq!(create_causes("LimitRange", &lr), vec![]);
    }

    #[test]
    fn bounds_must_be_ordered_as_kubernetes_says() {
        let lr = range(json!([{"type": "Container", "min": {"cpu": "1"}, "max": {"cpu": "500m"}},
            {"type": "Pod", "default": {"cpu": "1"}}, {"type": "PersistentVolumeClaim"}]));
        let causes = create_causes("LimitRange", &lr);
        assert_eq!(
            causes[0].error_string(),
            "spec.limits[0].min[cpu]: Invalid value: \"1\": min value 1 is greater than max value 500m"
        );
        assert_eq!(
            fields(&causes)[1..],
            [
                "spec.limits[0].defaultRequest[cpu]",
                "spec.limits[0].default[cpu]",
                "spec.limits[1].default",
                "spec.limits[2].limits"
            ]
        );
    }

    #[test]
    fn pods_get_defaults_and_are_held_to_the_bounds() {
        let lr = defaulted(
            "LimitRange",
            range(json!([{"type": "Container",
            "max": {"cpu": "500m"}, "min": {"cpu": "100m"}, "default": {"cpu": "300m"}}])),
        );
        let mut pod =
            json!({"spec": {"containers": [{"name": "a"}, {"name": "b", "resources": {"requests": {"cpu": "200m"}}}]}});
        default_pod(std::slice::from_ref(&lr), &mut pod);
        assert_eq!(
            pod["spec"]["containers"][0]["resources"],
            json!({"limits": {"cpu": "300m"}, "requests": {"cpu": "300m"}})
        );
        assert_eq!(
            pod["spec"]["containers"][1]["resources"],
            json!({"limits": {"cpu": "300m"}, "requests": {"cpu": "200m"}})
        );
        assert_eq!(check_pod(std::slice::from_ref(&lr), &pod), Vec::<String>::new());
        let big = json!({"spec": {"containers": [{"name": "a", "resources": {"requests": {"cpu": "50m"}, "limits": {"cpu": "600m"}}}]}});
        assert_eq!(
            check_pod(std::slice::from_ref(&lr), &big),
            [
                "minimum cpu usage per Container is 100m, but request is 50m",
                "maximum cpu usage per Container is 500m, but limit is 600m"
            ]
        );
    }

    #[test]
    fn pod_bounds_see_the_sum_and_claims_their_storage() {
        let lr = range(
            json!([{"type": "Pod", "max": {"memory": "1Gi"}}, {"type": "PersistentVolumeClaim", "max": {"storage": "2Gi"}}]),
        );
        let pod = json!({"spec": {"containers": [
            {"resources": {"limits": {"memory": "768Mi"}}}, {"resources": {"limits": {"memory": "512Mi"}}}]}});
        assert_eq!(
            check_pod(std::slice::from_ref(&lr), &pod),
            ["maximum memory usage per Pod is 1Gi, but limit is 1280Mi"]
        );
        let claim = json!({"spec": {"resources": {"requests": {"storage": "5Gi"}}}});
        assert_eq!(
            check_claim(std::slice::from_ref(&lr), &claim),
            ["maximum storage usage per PersistentVolumeClaim is 2Gi, but request is 5Gi"]
        );
        assert_eq!(format_quantity(1_500_000_000, false), "1500m");
        assert_eq!(format_quantity(3_000_000_000_000, false), "3k");
    }
}
