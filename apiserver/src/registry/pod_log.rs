//! Pod logs as Kubernetes' `LogLocation`: PodLogOptions from the query and their validation,
//! the container to read, the node agent's address, and the agent's errors as Statuses.

use super::Registry;
use crate::http::errors::{ApiError, ApiResult};
use kaji_api::resources::ResourceInfo;
use kaji_api::validation::Cause;
use serde_json::{json, Value};
use std::net::{IpAddr, SocketAddr};

/// The most of an agent's error body kept for the Status (Kubernetes' maxReadLength).
pub const MAX_ERROR_BODY: usize = 50_000;

/// `PodLogOptions`, as the query of `GET pods/{name}/log` carries them.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct LogOptions {
    pub container: Option<String>,
    pub follow: bool,
    pub previous: bool,
    pub timestamps: bool,
    pub since_seconds: Option<i64>,
    pub since_time: Option<jiff::Timestamp>,
    pub tail_lines: Option<i64>,
    pub limit_bytes: Option<i64>,
}

/// A query boolean as Go's parameter codec reads it: anything but `0` or `false` is true.
fn go_bool(v: Option<&str>) -> bool {
    v.is_some_and(|s| s != "0" && !s.eq_ignore_ascii_case("false"))
}

fn int(key: &str, v: Option<&str>) -> ApiResult<Option<i64>> {
    match v.filter(|s| !s.is_empty()) {
        None => Ok(None),
        Some(s) => s
            .parse()
            .map(Some)
            .map_err(|_| ApiError::bad_request(format!("invalid value for {key}: {s:?} is not an integer"))),
    }
}

impl LogOptions {
    /// Decode the query; a value of the wrong type is a 400, as in Kubernetes. Unknown
    /// parameters (and `insecureSkipTLSVerifyBackend`, agents speak plain HTTP) are ignored.
    pub fn parse<'a>(get: impl Fn(&str) -> Option<&'a str>) -> ApiResult<Self> {
        let since_time = match get("sinceTime").filter(|s| !s.is_empty() && *s != "null") {
            None => None,
            Some(s) => Some(s.parse::<jiff::Timestamp>().map_err(|e| {
                ApiError::bad_request(format!("invalid value for sinceTime: {s:?} is not an RFC3339 time: {e}"))
            })?),
        };
        Ok(Self {
            container: get("container").filter(|s| !s.is_empty()).map(str::to_string),
            follow: go_bool(get("follow")),
            previous: go_bool(get("previous")),
            timestamps: go_bool(get("timestamps")),
            since_seconds: int("sinceSeconds", get("sinceSeconds"))?,
            since_time,
            tail_lines: int("tailLines", get("tailLines"))?,
            limit_bytes: int("limitBytes", get("limitBytes"))?,
        })
    }

    /// Kubernetes' `ValidatePodLogOptions`: a 422 `PodLogOptions "<pod>" is invalid`.
    pub fn validate(&self, pod: &str) -> ApiResult<()> {
        let mut causes = Vec::new();
        if let Some(n) = self.tail_lines.filter(|n| *n < 0) {
            causes.push(Cause::invalid("tailLines", n, "must be greater than or equal to 0"));
        }
        if let Some(n) = self.limit_bytes.filter(|n| *n < 1) {
            causes.push(Cause::invalid("limitBytes", n, "must be greater than 0"));
        }
        match (self.since_seconds, self.since_time) {
            (Some(_), Some(_)) => {
                causes.push(Cause::forbidden("", "at most one of `sinceTime` or `sinceSeconds` may be specified"))
            }
            (Some(n), None) if n < 1 => causes.push(Cause::invalid("sinceSeconds", n, "must be greater than 0")),
            _ => {}
        }
        if causes.is_empty() {
            Ok(())
        } else {
            Err(ApiError::invalid("", "PodLogOptions", pod, &causes))
        }
    }

    /// The agent's query string: the options that are set, keys sorted (Go's `url.Values.Encode`),
    /// `sinceTime` as RFC3339 to the second.
    pub fn agent_query(&self) -> String {
        let mut params: Vec<(&str, String)> = Vec::new();
        if self.follow {
            params.push(("follow", "true".into()));
        }
        if let Some(n) = self.limit_bytes {
            params.push(("limitBytes", n.to_string()));
        }
        if self.previous {
            params.push(("previous", "true".into()));
        }
        if let Some(n) = self.since_seconds {
            params.push(("sinceSeconds", n.to_string()));
        }
        if let Some(t) = self.since_time {
            let secs = jiff::Timestamp::from_second(t.as_second()).unwrap_or(t);
            params.push(("sinceTime", secs.to_string()));
        }
        if let Some(n) = self.tail_lines {
            params.push(("tailLines", n.to_string()));
        }
        if self.timestamps {
            params.push(("timestamps", "true".into()));
        }
        serde_urlencoded::to_string(&params).unwrap_or_default()
    }
}

/// Every container name of the pod: init containers, containers, then ephemeral containers
/// (Kubernetes' `VisitContainers` order).
fn container_names(pod: &Value) -> Vec<&str> {
    ["initContainers", "containers", "ephemeralContainers"]
        .iter()
        .filter_map(|list| pod.pointer(&format!("/spec/{list}")).and_then(Value::as_array))
        .flatten()
        .filter_map(|c| c.get("name").and_then(Value::as_str))
        .collect()
}

/// The container whose log is read: the one asked for, which must exist in the pod, or the
/// pod's only container. Errors are 400s worded as Kubernetes' `validateContainer`.
pub fn choose_container(pod: &Value, requested: Option<&str>) -> ApiResult<String> {
    let name = super::meta::name(pod);
    if let Some(c) = requested {
        if container_names(pod).contains(&c) {
            return Ok(c.to_string());
        }
        return Err(ApiError::bad_request(format!("container {c} is not valid for pod {name}")));
    }
    let regular: Vec<&str> = pod
        .pointer("/spec/containers")
        .and_then(Value::as_array)
        .map(|cs| cs.iter().filter_map(|c| c.get("name").and_then(Value::as_str)).collect())
        .unwrap_or_default();
    match regular.as_slice() {
        [only] => Ok(only.to_string()),
        [] => Err(ApiError::bad_request(format!("a container name must be specified for pod {name}"))),
        _ => Err(ApiError::bad_request(format!(
            "a container name must be specified for pod {name}, choose one of: [{}]",
            container_names(pod).join(" ")
        ))),
    }
}

/// Where a node's agent serves: its `InternalIP` and `status.daemonEndpoints.kubeletEndpoint.Port`.
pub fn agent_endpoint(node: &Value) -> ApiResult<SocketAddr> {
    let name = super::meta::name(node);
    let addresses = node.pointer("/status/addresses").and_then(Value::as_array).cloned().unwrap_or_default();
    let ip = addresses
        .iter()
        .find(|a| a.get("type").and_then(Value::as_str) == Some("InternalIP"))
        .and_then(|a| a.get("address").and_then(Value::as_str));
    let Some(ip) = ip else {
        let known: Vec<String> = addresses
            .iter()
            .map(|a| format!("{}={}", a["type"].as_str().unwrap_or("?"), a["address"].as_str().unwrap_or("?")))
            .collect();
        return Err(ApiError::internal(format!(
            "node {name:?} reports no InternalIP address, so its agent cannot be reached (known addresses: [{}])",
            known.join(" ")
        )));
    };
    let ip: IpAddr = ip.parse().map_err(|_| {
        ApiError::internal(format!("node {name:?} reports an InternalIP that is not an IP address: {ip:?}"))
    })?;
    let port = node
        .pointer("/status/daemonEndpoints/kubeletEndpoint/Port")
        .and_then(Value::as_u64)
        .and_then(|p| u16::try_from(p).ok())
        .filter(|p| *p > 0)
        .ok_or_else(|| {
            ApiError::internal(format!(
                "node {name:?} reports no agent port in status.daemonEndpoints.kubeletEndpoint.Port"
            ))
        })?;
    Ok(SocketAddr::new(ip, port))
}

/// An agent's error answer as the Status Kubernetes makes of a kubelet's
/// (`GenericHttpResponseChecker`): 400 and 500 keep the agent's message as theirs; other codes
/// keep their code, with the agent's message and the raw body as the cause.
pub fn agent_error(code: u16, body: &str, pod: &str) -> ApiError {
    let text = body.trim_end();
    match code {
        400 => return ApiError::bad_request(text),
        500 => return ApiError::internal(text),
        _ => {}
    }
    let (reason, generic) = match code {
        401 => ("Unauthorized", "the server has asked for the client to provide credentials"),
        403 => ("Forbidden", "forbidden"),
        404 => ("NotFound", "the server could not find the requested resource"),
        405 => ("MethodNotAllowed", "the server does not allow this method on the requested resource"),
        409 => ("Conflict", "the server reported a conflict"),
        422 => ("Invalid", "the server rejected our request due to an error in our request"),
        429 => ("TooManyRequests", "the server has received too many requests and has asked us to try again later"),
        503 => ("ServiceUnavailable", "the server is currently unable to handle the request"),
        504 => ("Timeout", "the server was unable to return a response in the time allotted"),
        c if c >= 500 => ("InternalError", "an error on the server has prevented the request from succeeding"),
        _ => ("", "the server responded with an unexpected status"),
    };
    let message = if text.is_empty() { format!("{generic} ( pods/log {pod})") } else { text.to_string() };
    let mut err = ApiError::new(code, reason, message);
    err.details = Some(json!({"name": pod, "group": "", "kind": "pods/log",
        "causes": [{"reason": "UnexpectedServerResponse", "message": text}]}));
    err
}

/// Where one container's log is read from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogLocation {
    pub node: String,
    pub addr: SocketAddr,
    /// `/containerLogs/{ns}/{pod}/{container}?...`
    pub path_and_query: String,
}

impl Registry {
    /// The agent URL for a pod's log; `None` while the pod has no node (Kubernetes then
    /// answers 204 No Content). A missing pod or node is a 404.
    pub fn log_location(&self, ns: &str, name: &str, opts: &LogOptions) -> ApiResult<Option<LogLocation>> {
        let pods = by_kind("Pod");
        let pod = self.get(pods, Some(ns), name)?;
        let container = choose_container(&pod, opts.container.as_deref())?;
        let Some(node) = pod.pointer("/spec/nodeName").and_then(Value::as_str).filter(|n| !n.is_empty()) else {
            return Ok(None);
        };
        let addr = agent_endpoint(&self.get(by_kind("Node"), None, node)?)?;
        let mut path_and_query = format!("/containerLogs/{ns}/{name}/{container}");
        let query = opts.agent_query();
        if !query.is_empty() {
            path_and_query.push('?');
            path_and_query.push_str(&query);
        }
        Ok(Some(LogLocation { node: node.to_string(), addr, path_and_query }))
    }
}

fn by_kind(kind: &str) -> &'static ResourceInfo {
    kaji_api::resources::by_kind(kind).expect("pods and nodes are served")
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn opts(q: &[(&str, &str)]) -> ApiResult<LogOptions> {
        let m: HashMap<&str, &str> = q.iter().copied().collect();
        LogOptions::parse(|k| m.get(k).copied())
    }

    fn pod(init: &[&str], containers: &[&str]) -> Value {
        let list = |names: &[&str]| names.iter().map(|n| json!({"name": n, "image": "busybox"})).collect::<Vec<_>>();
        json!({"metadata": {"name": "web"}, "spec": {"initContainers": list(init), "containers": list(containers)}})
    }

    #[test]
    fn reads_the_query_kubectl_sends() {
        let o = opts(&[("container", "web"), ("follow", "true"), ("tailLines", "2"), ("timestamps", "true")])
            .expect("valid query");
        assert_eq!(
            o,
            LogOptions {
                container: Some("web".into()),
                follow: true,
                timestamps: true,
                tail_lines: Some(2),
                ..Default::default()
            }
        );
        assert_eq!(opts(&[]).expect("empty query"), LogOptions::default());
    }

    #[test]
    fn booleans_are_true_unless_zero_or_false_as_in_go() {
        for (v, want) in [("true", true), ("1", true), ("yes", true), ("", true), ("0", false), ("False", false)] {
            assert_eq!(opts(&[("previous", v)]).expect("valid").previous, want, "{v:?}");
        }
    }

    #[test]
    fn a_value_of_the_wrong_type_is_a_bad_request() {
        for q in [("tailLines", "ten"), ("sinceSeconds", "1h"), ("limitBytes", "1.5"), ("sinceTime", "yesterday")] {
            let err = opts(&[q]).expect_err("rejected");
            assert_eq!((err.code, err.reason), (400, "BadRequest"), "{q:?}");
            assert!(err.message.contains(q.0), "{}", err.message);
        }
    }

    #[test]
    fn invalid_options_are_rejected_as_kubernetes_validates_them() {
        let cases = [
            (vec![("tailLines", "-1")], "tailLines: Invalid value: -1: must be greater than or equal to 0"),
            (vec![("limitBytes", "0")], "limitBytes: Invalid value: 0: must be greater than 0"),
            (vec![("sinceSeconds", "0")], "sinceSeconds: Invalid value: 0: must be greater than 0"),
            (
                vec![("sinceSeconds", "10"), ("sinceTime", "2024-05-01T10:00:00Z")],
                ": Forbidden: at most one of `sinceTime` or `sinceSeconds` may be specified",
            ),
        ];
        for (q, want) in cases {
            let err = opts(&q).expect("parses").validate("web").expect_err("invalid");
            assert_eq!((err.code, err.reason), (422, "Invalid"));
            assert_eq!(err.message, format!("PodLogOptions \"web\" is invalid: {want}"));
            assert_eq!(err.details.as_ref().expect("details")["kind"], "PodLogOptions");
        }
        let fine = opts(&[("tailLines", "0"), ("limitBytes", "1"), ("sinceSeconds", "1")]).expect("parses");
        assert!(fine.validate("web").is_ok());
    }

    #[test]
    fn the_agent_query_has_the_set_options_sorted_with_since_time_to_the_second() {
        let o = opts(&[
            ("container", "web"),
            ("timestamps", "true"),
            ("tailLines", "5"),
            ("sinceTime", "2024-05-01T12:00:00.75+02:00"),
            ("follow", "true"),
            ("previous", "false"),
            ("limitBytes", "100"),
            ("insecureSkipTLSVerifyBackend", "true"),
        ])
        .expect("valid");
        assert_eq!(
            o.agent_query(),
            "follow=true&limitBytes=100&sinceTime=2024-05-01T10%3A00%3A00Z&tailLines=5&timestamps=true"
        );
        assert_eq!(LogOptions::default().agent_query(), "");
    }

    #[test]
    fn the_only_container_is_chosen_when_none_is_named() {
        assert_eq!(choose_container(&pod(&["setup"], &["web"]), None).expect("one container"), "web");
    }

    #[test]
    fn a_pod_with_several_containers_needs_a_name_and_lists_init_containers_first() {
        let err = choose_container(&pod(&["setup"], &["a", "b"]), None).expect_err("ambiguous");
        assert_eq!((err.code, err.reason), (400, "BadRequest"));
        assert_eq!(err.message, "a container name must be specified for pod web, choose one of: [setup a b]");
        let err = choose_container(&pod(&[], &[]), None).expect_err("no containers");
        assert_eq!(err.message, "a container name must be specified for pod web");
    }

    #[test]
    fn a_named_container_must_be_in_the_pod_and_may_be_an_init_container() {
        let p = pod(&["setup"], &["a", "b"]);
        assert_eq!(choose_container(&p, Some("b")).expect("exists"), "b");
        assert_eq!(choose_container(&p, Some("setup")).expect("init container"), "setup");
        let err = choose_container(&p, Some("c")).expect_err("unknown");
        assert_eq!((err.code, err.message.as_str()), (400, "container c is not valid for pod web"));
    }

    fn node(addresses: Value, port: Value) -> Value {
        json!({"metadata": {"name": "n1"},
               "status": {"addresses": addresses, "daemonEndpoints": {"kubeletEndpoint": {"Port": port}}}})
    }

    #[test]
    fn the_agent_listens_on_the_internal_ip_at_the_kubelet_port() {
        let n = node(
            json!([{"type": "Hostname", "address": "n1"}, {"type": "InternalIP", "address": "10.0.0.7"}]),
            json!(10250),
        );
        assert_eq!(agent_endpoint(&n).expect("reachable"), "10.0.0.7:10250".parse().expect("addr"));
        let v6 = node(json!([{"type": "InternalIP", "address": "fd00::7"}]), json!(10250));
        assert_eq!(agent_endpoint(&v6).expect("reachable").to_string(), "[fd00::7]:10250");
    }

    #[test]
    fn a_node_without_internal_ip_or_port_is_an_error_that_says_so() {
        let err =
            agent_endpoint(&node(json!([{"type": "Hostname", "address": "n1"}]), json!(10250))).expect_err("no ip");
        assert_eq!(err.code, 500);
        assert!(err.message.contains("node \"n1\" reports no InternalIP") && err.message.contains("Hostname=n1"));
        let err = agent_endpoint(&node(json!([{"type": "InternalIP", "address": "10.0.0.7"}]), json!(0)))
            .expect_err("no port");
        assert!(err.message.contains("no agent port"), "{}", err.message);
    }

    #[test]
    fn agent_errors_become_statuses_with_the_agents_message() {
        let err = agent_error(400, "container \"c\" in pod \"p\" is waiting to start\n", "p");
        assert_eq!((err.code, err.reason), (400, "BadRequest"));
        assert_eq!(err.message, "container \"c\" in pod \"p\" is waiting to start");
        let err = agent_error(404, "pod default/p is not running on this node", "p");
        assert_eq!(
            (err.code, err.reason, err.message.as_str()),
            (404, "NotFound", "pod default/p is not running on this node")
        );
        assert_eq!(err.details.as_ref().expect("details")["kind"], "pods/log");
        let err = agent_error(404, "", "p");
        assert_eq!(err.message, "the server could not find the requested resource ( pods/log p)");
        assert_eq!(agent_error(500, "boom", "p").message, "Internal error occurred: boom");
        assert_eq!(agent_error(502, "bad gateway", "p").reason, "InternalError");
    }
}
