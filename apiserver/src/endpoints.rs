//! A Service's ready endpoints as the watch cache holds its EndpointSlices — what the apiserver
//! dials for `services/proxy` and for webhooks given by Service (kube-apiserver's endpoint
//! routing, `proxy.RandomEndpoint`).

use crate::cache::Cache;
use kaji_api::selector::{FieldSelector, LabelSelector};
use serde_json::Value;
use std::net::{IpAddr, SocketAddr};

/// The name of the Service port numbered `number`, if the Service has one.
pub fn port_name(service: &Value, number: u64) -> Option<String> {
    service
        .pointer("/spec/ports")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .find(|p| p.get("port").and_then(Value::as_u64) == Some(number))
        .map(|p| p.get("name").and_then(Value::as_str).unwrap_or("").to_string())
}

/// Every ready endpoint of the Service's port `port_name` (its first address, the slice's port
/// of that name), with the endpoint object for callers that check its `targetRef`.
pub fn ready(cache: &Cache, ns: &str, service: &str, port_name: &str) -> Result<Vec<(SocketAddr, Value)>, String> {
    let slices = cache.resource("EndpointSlice").ok_or("endpointslices are not cached")?;
    let selector = LabelSelector::parse(&format!("kubernetes.io/service-name={service}")).map_err(|e| e.to_string())?;
    let listed = slices.list(Some(ns), &selector, &FieldSelector::default(), None, None, 0);
    let mut out = Vec::new();
    for slice in listed.items.iter().map(|o| o.value()) {
        let Some(port) = slice
            .get("ports")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .find(|p| p.get("name").and_then(Value::as_str).unwrap_or("") == port_name)
            .and_then(|p| p.get("port").and_then(Value::as_u64))
            .and_then(|p| u16::try_from(p).ok())
        else {
            continue;
        };
        for ep in slice.get("endpoints").and_then(Value::as_array).into_iter().flatten() {
            if ep.pointer("/conditions/ready").and_then(Value::as_bool) == Some(false) {
                continue;
            }
            if let Some(ip) = ep.pointer("/addresses/0").and_then(Value::as_str).and_then(|a| a.parse::<IpAddr>().ok())
            {
                out.push((SocketAddr::new(ip, port), ep.clone()));
            }
        }
    }
    Ok(out)
}
