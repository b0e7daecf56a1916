//! meta.k8s.io/v1 Table conversion: the columns and cells `kubectl get` prints, computed
//! server-side the way Kubernetes' `pkg/printers/internalversion` printers do (always "wide").

use std::time::Duration;

use jiff::Timestamp;
use serde_json::{json, Map, Value};

use crate::selector::LabelSelector;

const NAME_DOC: &str = "Name must be unique within a namespace. Is required when creating resources, although some resources may allow a client to request the generation of an appropriate name automatically. Name is primarily intended for creation idempotence and configuration definition. Cannot be updated. More info: https://kubernetes.io/docs/concepts/overview/working-with-objects/names#names";
const AGE_DOC: &str = "CreationTimestamp is a timestamp representing the server time when this object was created. It is not guaranteed to be set in happens-before order across separate operations. Clients may not set this value. It is represented in RFC3339 form and is in UTC.\n\nPopulated by the system. Read-only. Null for lists. More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#metadata";
const CONTAINERS_DOC: &str = "Names of each container in the template.";
const IMAGES_DOC: &str = "Images referenced by each container in the template.";
const NODE_ADDRESSES_DOC: &str = "List of addresses reachable to the node. Queried from cloud provider, if available. More info: https://kubernetes.io/docs/reference/node/node-status/#addresses Note: This field is declared as mergeable, but the merge key is not sufficiently unique, which can cause data corruption when it is merged. Callers should instead use a full-replacement patch. See https://pr.k8s.io/79391 for an example. Consumers should assume that addresses can change during the lifetime of a Node. However, there are some exceptions where this may not be possible, such as Pods that inherit a Node's address in its own status or consumers of the downward API (status.hostIP).";

/// (name, type, format, priority, description)
type Column = (&'static str, &'static str, &'static str, u8, &'static str);

const NAME: Column = ("Name", "string", "name", 0, NAME_DOC);
const AGE: Column = ("Age", "string", "", 0, AGE_DOC);

fn column_specs(kind: &str) -> Vec<Column> {
    match kind {
        "Pod" => vec![
            NAME,
            ("Ready", "string", "", 0, "The aggregate readiness state of this pod for accepting traffic."),
            ("Status", "string", "", 0, "The aggregate status of the containers in this pod."),
            ("Restarts", "string", "", 0, "The number of times the containers in this pod have been restarted and when the last container in this pod has restarted."),
            AGE,
            ("IP", "string", "", 1, "podIP address allocated to the pod. Routable at least within the cluster. Empty if not yet allocated."),
            ("Node", "string", "", 1, "NodeName indicates in which node this pod is scheduled. If empty, this pod is a candidate for scheduling by the scheduler defined in schedulerName. Once this field is set, the kubelet for this node becomes responsible for the lifecycle of this pod. This field should not be used to express a desire for the pod to be scheduled on a specific node. https://kubernetes.io/docs/concepts/scheduling-eviction/assign-pod-node/#nodename"),
            ("Nominated Node", "string", "", 1, "nominatedNodeName is set only when this pod preempts other pods on the node, but it cannot be scheduled right away as preemption victims receive their graceful termination periods. This field does not guarantee that the pod will be scheduled on this node. Scheduler may decide to place the pod elsewhere if other nodes become available sooner. Scheduler may also decide to give the resources on this node to a higher priority pod that is created after preemption. As a result, this field may be different than PodSpec.nodeName when the pod is scheduled."),
            ("Readiness Gates", "string", "", 1, "If specified, all readiness gates will be evaluated for pod readiness. A pod is ready when all its containers are ready AND all conditions specified in the readiness gates have status equal to \"True\" More info: https://git.k8s.io/enhancements/keps/sig-network/580-pod-readiness-gates"),
        ],
        "Node" => vec![
            NAME,
            ("Status", "string", "", 0, "The status of the node"),
            ("Roles", "string", "", 0, "The roles of the node"),
            AGE,
            ("Version", "string", "", 0, "Kubelet Version reported by the node."),
            ("Internal-IP", "string", "", 1, NODE_ADDRESSES_DOC),
            ("External-IP", "string", "", 1, NODE_ADDRESSES_DOC),
            ("OS-Image", "string", "", 1, "OS Image reported by the node from /etc/os-release (e.g. Debian GNU/Linux 7 (wheezy))."),
            ("Kernel-Version", "string", "", 1, "Kernel Version reported by the node from 'uname -r' (e.g. 3.16.0-0.bpo.4-amd64)."),
            ("Container-Runtime", "string", "", 1, "ContainerRuntime Version reported by the node through runtime remote API (e.g. containerd://1.4.2)."),
        ],
        "Service" => vec![
            NAME,
            ("Type", "string", "", 0, "type determines how the Service is exposed. Defaults to ClusterIP. Valid options are ExternalName, ClusterIP, NodePort, and LoadBalancer. \"ClusterIP\" allocates a cluster-internal IP address for load-balancing to endpoints. Endpoints are determined by the selector or if that is not specified, by manual construction of an Endpoints object or EndpointSlice objects. If clusterIP is \"None\", no virtual IP is allocated and the endpoints are published as a set of endpoints rather than a virtual IP. \"NodePort\" builds on ClusterIP and allocates a port on every node which routes to the same endpoints as the clusterIP. \"LoadBalancer\" builds on NodePort and creates an external load-balancer (if supported in the current cloud) which routes to the same endpoints as the clusterIP. \"ExternalName\" aliases this service to the specified externalName. Several other fields do not apply to ExternalName services. More info: https://kubernetes.io/docs/concepts/services-networking/service/#publishing-services-service-types"),
            ("Cluster-IP", "string", "", 0, "clusterIP is the IP address of the service and is usually assigned randomly. If an address is specified manually, is in-range (as per system configuration), and is not in use, it will be allocated to the service; otherwise creation of the service will fail. This field may not be changed through updates unless the type field is also being changed to ExternalName (which requires this field to be blank) or the type field is being changed from ExternalName (in which case this field may optionally be specified, as describe above).  Valid values are \"None\", empty string (\"\"), or a valid IP address. Setting this to \"None\" makes a \"headless service\" (no virtual IP), which is useful when direct endpoint connections are preferred and proxying is not required.  Only applies to types ClusterIP, NodePort, and LoadBalancer. If this field is specified when creating a Service of type ExternalName, creation will fail. This field will be wiped when updating a Service to type ExternalName. More info: https://kubernetes.io/docs/concepts/services-networking/service/#virtual-ips-and-service-proxies"),
            ("External-IP", "string", "", 0, "externalIPs is a list of IP addresses for which nodes in the cluster will also accept traffic for this service.  These IPs are not managed by Kubernetes.  The user is responsible for ensuring that traffic arrives at a node with this IP.  A common example is external load-balancers that are not part of the Kubernetes system."),
            ("Port(s)", "string", "", 0, "The list of ports that are exposed by this service. More info: https://kubernetes.io/docs/concepts/services-networking/service/#virtual-ips-and-service-proxies"),
            AGE,
            ("Selector", "string", "", 1, "Route service traffic to pods with label keys and values matching this selector. If empty or not present, the service is assumed to have an external process managing its endpoints, which Kubernetes will not modify. Only applies to types ClusterIP, NodePort, and LoadBalancer. Ignored if type is ExternalName. More info: https://kubernetes.io/docs/concepts/services-networking/service/"),
        ],
        "Endpoints" => vec![
            NAME,
            ("Endpoints", "string", "", 0, "The set of all endpoints is the union of all subsets. Addresses are placed into subsets according to the IPs they share. A single address with multiple ports, some of which are ready and some of which are not (because they come from different containers) will result in the address being displayed in different subsets for the different ports. No address will appear in both Addresses and NotReadyAddresses in the same subset. Sets of addresses and ports that comprise a service."),
            AGE,
        ],
        "Event" => vec![
            ("Last Seen", "string", "", 0, "The time at which the most recent occurrence of this event was recorded."),
            ("Type", "string", "", 0, "Type of this event (Normal, Warning), new types could be added in the future"),
            ("Reason", "string", "", 0, "This should be a short, machine understandable string that gives the reason for the transition into the object's current status."),
            ("Object", "string", "", 0, "The object that this event is about."),
            ("Subobject", "string", "", 1, "If referring to a piece of an object instead of an entire object, this string should contain a valid JSON/Go field access statement, such as desiredState.manifest.containers[2]. For example, if the object reference is to a container within a pod, this would take on a value like: \"spec.containers{name}\" (where \"name\" refers to the name of the container that triggered the event) or if no container name is specified \"spec.containers[2]\" (container with index 2 in this pod). This syntax is chosen only to have some well-defined way of referencing a part of an object."),
            ("Source", "string", "", 1, "The component reporting this event. Should be a short machine understandable string."),
            ("Message", "string", "", 0, "A human-readable description of the status of this operation."),
            ("First Seen", "string", "", 1, "The time at which the event was first recorded. (Time of server receipt is in TypeMeta.)"),
            ("Count", "string", "", 1, "The number of times this event has occurred."),
            ("Name", "string", "name", 1, NAME_DOC),
        ],
        "Namespace" => vec![NAME, ("Status", "string", "", 0, "The status of the namespace"), AGE],
        "ConfigMap" => vec![
            NAME,
            ("Data", "string", "", 0, "Data contains the configuration data. Each key must consist of alphanumeric characters, '-', '_' or '.'. Values with non-UTF-8 byte sequences must use the BinaryData field. The keys stored in Data must not overlap with the keys in the BinaryData field, this is enforced during validation process."),
            AGE,
        ],
        "Secret" => vec![
            NAME,
            ("Type", "string", "", 0, "Used to facilitate programmatic handling of secret data. More info: https://kubernetes.io/docs/concepts/configuration/secret/#secret-types"),
            ("Data", "string", "", 0, "Data contains the secret data. Each key must consist of alphanumeric characters, '-', '_' or '.'. The serialized form of the secret data is a base64 encoded string, representing the arbitrary (possibly non-string) data value here. Described in https://tools.ietf.org/html/rfc4648#section-4"),
            AGE,
        ],
        // The Secrets column is gone upstream (kubernetes#117160).
        "ServiceAccount" => vec![NAME, AGE],
        "Lease" => vec![
            NAME,
            ("Holder", "string", "", 0, "holderIdentity contains the identity of the holder of a current lease. If Coordinated Leader Election is used, the holder identity must be equal to the elected LeaseCandidate.metadata.name field."),
            AGE,
        ],
        "Deployment" => vec![
            NAME,
            ("Ready", "string", "", 0, "Number of the pod with ready state"),
            ("Up-to-date", "string", "", 0, "Total number of non-terminating pods targeted by this deployment that have the desired template spec."),
            ("Available", "string", "", 0, "Total number of available non-terminating pods (ready for at least minReadySeconds) targeted by this deployment."),
            AGE,
            ("Containers", "string", "", 1, CONTAINERS_DOC),
            ("Images", "string", "", 1, IMAGES_DOC),
            ("Selector", "string", "", 1, "Label selector for pods. Existing ReplicaSets whose pods are selected by this will be the ones affected by this deployment. It must match the pod template's labels."),
        ],
        "ReplicaSet" => vec![
            NAME,
            ("Desired", "integer", "", 0, "Replicas is the number of desired pods. This is a pointer to distinguish between explicit zero and unspecified. Defaults to 1. More info: https://kubernetes.io/docs/concepts/workloads/controllers/replicaset"),
            ("Current", "integer", "", 0, "Replicas is the most recently observed number of non-terminating pods. More info: https://kubernetes.io/docs/concepts/workloads/controllers/replicaset"),
            ("Ready", "integer", "", 0, "The number of non-terminating pods targeted by this ReplicaSet with a Ready Condition."),
            AGE,
            ("Containers", "string", "", 1, CONTAINERS_DOC),
            ("Images", "string", "", 1, IMAGES_DOC),
            ("Selector", "string", "", 1, "Selector is a label query over pods that should match the replica count. Label keys and values that must match in order to be controlled by this replica set. It must match the pod template's labels. More info: https://kubernetes.io/docs/concepts/overview/working-with-objects/labels/#label-selectors"),
        ],
        "EndpointSlice" => vec![
            NAME,
            ("AddressType", "string", "", 0, "addressType specifies the type of address carried by this EndpointSlice. All addresses in this slice must be the same type. This field is immutable after creation. The following address types are currently supported: * IPv4: Represents an IPv4 Address. * IPv6: Represents an IPv6 Address. * FQDN: Represents a Fully Qualified Domain Name. (Deprecated) The EndpointSlice controller only generates, and kube-proxy only processes, slices of addressType \"IPv4\" and \"IPv6\". No semantics are defined for the \"FQDN\" type."),
            ("Ports", "string", "", 0, "ports specifies the list of network ports exposed by each endpoint in this slice. Each port must have a unique name. Each slice may include a maximum of 100 ports. Services always have at least 1 port, so EndpointSlices generated by the EndpointSlice controller will likewise always have at least 1 port. EndpointSlices used for other purposes may have an empty ports list."),
            ("Endpoints", "string", "", 0, "endpoints is a list of unique endpoints in this slice. Each slice may include a maximum of 1000 endpoints."),
            AGE,
        ],
        // The apiserver's default table convertor.
        _ => vec![NAME, ("Created At", "date", "", 0, AGE_DOC)],
    }
}

/// `columnDefinitions` for a kind, as the Kubernetes printers declare them.
pub fn columns(kind: &str) -> Vec<Value> {
    column_specs(kind)
        .into_iter()
        .map(|(name, ty, format, priority, description)| {
            json!({"name": name, "type": ty, "format": format, "description": description, "priority": priority})
        })
        .collect()
}

/// One row's cells for `obj`, in the order of `columns(kind)`.
pub fn cells(kind: &str, obj: &Value, now: Timestamp) -> Vec<Value> {
    let o = Obj(obj);
    let name = json!(o.str("metadata.name"));
    let age = json!(since(o.time("metadata.creationTimestamp"), now));
    match kind {
        "Pod" => pod_cells(o, now),
        "Node" => node_cells(o, name, age),
        "Service" => service_cells(o, name, age),
        "Endpoints" => vec![name, json!(format_endpoints(o)), age],
        "Event" => event_cells(o, now),
        "Namespace" => vec![name, json!(o.str("status.phase")), age],
        "ConfigMap" => vec![name, json!(o.map_len("data") + o.map_len("binaryData")), age],
        "Secret" => {
            // stringData is merged into data on write; count the union.
            let mut keys: Vec<&String> = o.map("data").keys().chain(o.map("stringData").keys()).collect();
            keys.sort();
            keys.dedup();
            vec![name, json!(o.str("type")), json!(keys.len()), age]
        }
        "ServiceAccount" => vec![name, age],
        "Lease" => vec![name, json!(o.str("spec.holderIdentity")), age],
        "Deployment" => {
            let (containers, images) = container_cells(o.list("spec.template.spec.containers"));
            let selector = LabelSelector::from_json(o.get("spec.selector").unwrap_or(&Value::Null))
                .map_or_else(|_| "<invalid>".to_owned(), |s| s.to_string());
            vec![
                name,
                json!(format!("{}/{}", o.int("status.readyReplicas"), o.int_or("spec.replicas", 1))),
                json!(o.int("status.updatedReplicas")),
                json!(o.int("status.availableReplicas")),
                age,
                json!(containers),
                json!(images),
                json!(selector),
            ]
        }
        "ReplicaSet" => {
            let (containers, images) = container_cells(o.list("spec.template.spec.containers"));
            let selector = match LabelSelector::from_json(o.get("spec.selector").unwrap_or(&Value::Null)) {
                Err(_) => "<error>".to_owned(),
                Ok(s) if s.is_empty() => "<none>".to_owned(),
                Ok(s) => s.to_string(),
            };
            vec![
                name,
                json!(o.int_or("spec.replicas", 1)),
                json!(o.int("status.replicas")),
                json!(o.int("status.readyReplicas")),
                age,
                json!(containers),
                json!(images),
                json!(selector),
            ]
        }
        "EndpointSlice" => {
            let ports = o.list("ports").iter().map(|p| {
                let p = Obj(p);
                p.get("port")
                    .and_then(Value::as_i64)
                    .map(|n| n.to_string())
                    .or_else(|| p.get("name").and_then(Value::as_str).map(str::to_owned))
                    .unwrap_or_else(|| "*".to_owned())
            });
            let addresses = o
                .list("endpoints")
                .iter()
                .flat_map(|e| Obj(e).list("addresses"))
                .map(|a| a.as_str().unwrap_or("").to_owned());
            vec![
                name,
                json!(o.str("addressType")),
                json!(list_with_more(ports, "<unset>")),
                json!(list_with_more(addresses, "<unset>")),
                age,
            ]
        }
        _ => {
            let created = o.time("metadata.creationTimestamp").unwrap_or(Timestamp::MIN);
            let created = Timestamp::from_second(created.as_second()).unwrap_or(created);
            let created =
                if created == Timestamp::MIN { "0001-01-01T00:00:00Z".to_owned() } else { created.to_string() };
            vec![name, json!(created)]
        }
    }
}

/// apimachinery's `duration.HumanDuration`: about two significant figures.
pub fn human_duration(d: Duration) -> String {
    let secs = d.as_secs();
    if secs < 60 * 2 {
        return format!("{secs}s");
    }
    let minutes = secs / 60;
    if minutes < 10 {
        return match secs % 60 {
            0 => format!("{minutes}m"),
            s => format!("{minutes}m{s}s"),
        };
    }
    if minutes < 60 * 3 {
        return format!("{minutes}m");
    }
    let hours = secs / 3600;
    let days = hours / 24;
    if hours < 8 {
        match minutes % 60 {
            0 => format!("{hours}h"),
            m => format!("{hours}h{m}m"),
        }
    } else if hours < 48 {
        format!("{hours}h")
    } else if hours < 24 * 8 {
        match hours % 24 {
            0 => format!("{days}d"),
            h => format!("{days}d{h}h"),
        }
    } else if hours < 24 * 365 * 2 {
        format!("{days}d")
    } else if hours < 24 * 365 * 8 {
        match days % 365 {
            0 => format!("{}y", days / 365),
            dy => format!("{}y{dy}d", days / 365),
        }
    } else {
        format!("{}y", days / 365)
    }
}

/// `translateTimestampSince`: `<unknown>` without a timestamp, tolerating 1s of clock skew.
fn since(t: Option<Timestamp>, now: Timestamp) -> String {
    let Some(t) = t else {
        return "<unknown>".to_owned();
    };
    let elapsed = now.duration_since(t);
    match elapsed.as_secs() {
        s if s < -1 => "<invalid>".to_owned(),
        s if s < 0 => "0s".to_owned(),
        _ => human_duration(elapsed.unsigned_abs()),
    }
}

/// Read-only path access into a JSON object; absent or mistyped fields read as empty.
#[derive(Clone, Copy)]
struct Obj<'a>(&'a Value);

static EMPTY_MAP: std::sync::LazyLock<Map<String, Value>> = std::sync::LazyLock::new(Map::new);

impl<'a> Obj<'a> {
    fn get(self, path: &str) -> Option<&'a Value> {
        path.split('.').try_fold(self.0, |v, key| v.get(key))
    }

    fn str(self, path: &str) -> &'a str {
        self.get(path).and_then(Value::as_str).unwrap_or("")
    }

    fn int(self, path: &str) -> i64 {
        self.int_or(path, 0)
    }

    fn int_or(self, path: &str, default: i64) -> i64 {
        self.get(path).and_then(Value::as_i64).unwrap_or(default)
    }

    fn bool(self, path: &str) -> bool {
        self.get(path).and_then(Value::as_bool).unwrap_or(false)
    }

    fn list(self, path: &str) -> &'a [Value] {
        self.get(path).and_then(Value::as_array).map_or(&[], Vec::as_slice)
    }

    fn map(self, path: &str) -> &'a Map<String, Value> {
        self.get(path).and_then(Value::as_object).unwrap_or(&EMPTY_MAP)
    }

    fn map_len(self, path: &str) -> usize {
        self.map(path).len()
    }

    fn time(self, path: &str) -> Option<Timestamp> {
        self.get(path).and_then(Value::as_str).and_then(|s| s.parse().ok())
    }

    /// The `status` of the first condition of `type_` in the list at `path`.
    fn condition(self, path: &str, type_: &str) -> Option<&'a str> {
        self.list(path).iter().find(|c| Obj(c).str("type") == type_).map(|c| Obj(c).str("status"))
    }
}

fn none_if_empty(s: &str) -> &str {
    if s.is_empty() {
        "<none>"
    } else {
        s
    }
}

/// kubectl's `printPod`: ready/total, the status reason, restarts with the last restart time.
fn pod_cells(pod: Obj<'_>, now: Timestamp) -> Vec<Value> {
    let phase = pod.str("status.phase");
    let mut reason = match pod.str("status.reason") {
        "" => phase.to_owned(),
        r => r.to_owned(),
    };
    let scheduling_gated = pod
        .list("status.conditions")
        .iter()
        .any(|c| Obj(c).str("type") == "PodScheduled" && Obj(c).str("reason") == "SchedulingGated");
    if scheduling_gated {
        reason = "SchedulingGated".to_owned();
    }

    let init_specs = pod.list("spec.initContainers");
    let sidecar =
        |name: &str| init_specs.iter().any(|c| Obj(c).str("name") == name && Obj(c).str("restartPolicy") == "Always");
    let total = pod.list("spec.containers").len()
        + init_specs.iter().filter(|c| Obj(c).str("restartPolicy") == "Always").count();
    let mut ready = 0;
    let (mut restarts, mut sidecar_restarts) = (0, 0);
    let (mut last_restart, mut last_sidecar_restart): (Option<Timestamp>, Option<Timestamp>) = (None, None);

    let mut initializing = false;
    for (i, c) in pod.list("status.initContainerStatuses").iter().enumerate() {
        let c = Obj(c);
        let finished = c.time("lastState.terminated.finishedAt");
        restarts += c.int("restartCount");
        last_restart = last_restart.max(finished);
        let is_sidecar = sidecar(c.str("name"));
        if is_sidecar {
            sidecar_restarts += c.int("restartCount");
            last_sidecar_restart = last_sidecar_restart.max(finished);
        }
        let terminated = c.get("state.terminated").filter(|t| t.is_object()).map(Obj);
        let waiting_reason = c.str("state.waiting.reason");
        if terminated.is_some_and(|t| t.int("exitCode") == 0) {
            continue;
        }
        if is_sidecar && c.bool("started") {
            if c.bool("ready") {
                ready += 1;
            }
            continue;
        }
        reason = match terminated {
            Some(t) => match t.str("reason") {
                "" if t.int("signal") != 0 => format!("Init:Signal:{}", t.int("signal")),
                "" => format!("Init:ExitCode:{}", t.int("exitCode")),
                r => format!("Init:{r}"),
            },
            None if !waiting_reason.is_empty() && waiting_reason != "PodInitializing" => {
                format!("Init:{waiting_reason}")
            }
            None => format!("Init:{i}/{}", init_specs.len()),
        };
        initializing = true;
        break;
    }

    let initialized = pod.condition("status.conditions", "Initialized") == Some("True");
    if !initializing || initialized {
        restarts = sidecar_restarts;
        last_restart = last_sidecar_restart;
        let mut has_running = false;
        for c in pod.list("status.containerStatuses").iter().rev() {
            let c = Obj(c);
            restarts += c.int("restartCount");
            last_restart = last_restart.max(c.time("lastState.terminated.finishedAt"));
            let terminated = c.get("state.terminated").filter(|t| t.is_object()).map(Obj);
            let waiting_reason = c.str("state.waiting.reason");
            if !waiting_reason.is_empty() {
                reason = waiting_reason.to_owned();
            } else if let Some(t) = terminated {
                reason = match t.str("reason") {
                    "" if t.int("signal") != 0 => format!("Signal:{}", t.int("signal")),
                    "" => format!("ExitCode:{}", t.int("exitCode")),
                    r => r.to_owned(),
                };
            } else if c.bool("ready") && c.get("state.running").is_some_and(Value::is_object) {
                has_running = true;
                ready += 1;
            }
        }
        if reason == "Completed" && has_running {
            let pod_ready = pod.condition("status.conditions", "Ready") == Some("True");
            reason = if pod_ready { "Running" } else { "NotReady" }.to_owned();
        }
    }

    if pod.get("metadata.deletionTimestamp").is_some_and(|t| !t.is_null()) {
        if pod.str("status.reason") == "NodeLost" {
            reason = "Unknown".to_owned();
        } else if phase != "Succeeded" && phase != "Failed" {
            reason = "Terminating".to_owned();
        }
    }

    let restarts = match last_restart {
        Some(t) if restarts != 0 => format!("{restarts} ({} ago)", since(Some(t), now)),
        _ => restarts.to_string(),
    };

    let ip = match pod.list("status.podIPs").first() {
        Some(ip) => Obj(ip).str("ip"),
        None => pod.str("status.podIP"),
    };
    let gates = pod.list("spec.readinessGates");
    let readiness_gates = if gates.is_empty() {
        "<none>".to_owned()
    } else {
        let satisfied = gates
            .iter()
            .filter(|g| pod.condition("status.conditions", Obj(g).str("conditionType")) == Some("True"))
            .count();
        format!("{satisfied}/{}", gates.len())
    };

    vec![
        json!(pod.str("metadata.name")),
        json!(format!("{ready}/{total}")),
        json!(reason),
        json!(restarts),
        json!(since(pod.time("metadata.creationTimestamp"), now)),
        json!(none_if_empty(ip)),
        json!(none_if_empty(pod.str("spec.nodeName"))),
        json!(none_if_empty(pod.str("status.nominatedNodeName"))),
        json!(readiness_gates),
    ]
}

fn node_cells(node: Obj<'_>, name: Value, age: Value) -> Vec<Value> {
    let mut status = vec![match node.condition("status.conditions", "Ready") {
        Some("True") => "Ready",
        Some(_) => "NotReady",
        None => "Unknown",
    }];
    if node.bool("spec.unschedulable") {
        status.push("SchedulingDisabled");
    }
    let mut roles: Vec<&str> = node
        .map("metadata.labels")
        .iter()
        .filter_map(|(k, v)| match k.strip_prefix("node-role.kubernetes.io/") {
            Some(role) if !role.is_empty() => Some(role),
            Some(_) => None,
            None if k == "kubernetes.io/role" => v.as_str().filter(|v| !v.is_empty()),
            None => None,
        })
        .collect();
    roles.sort_unstable();
    roles.dedup();
    let address = |type_: &str| {
        node.list("status.addresses")
            .iter()
            .find(|a| Obj(a).str("type") == type_)
            .map_or("<none>", |a| Obj(a).str("address"))
    };
    let info = |field: &str| match node.str(&format!("status.nodeInfo.{field}")) {
        "" => "<unknown>".to_owned(),
        v => v.to_owned(),
    };
    vec![
        name,
        json!(status.join(",")),
        json!(none_if_empty(&roles.join(","))),
        age,
        json!(node.str("status.nodeInfo.kubeletVersion")),
        json!(address("InternalIP")),
        json!(address("ExternalIP")),
        json!(info("osImage")),
        json!(info("kernelVersion")),
        json!(info("containerRuntimeVersion")),
    ]
}

fn service_cells(svc: Obj<'_>, name: Value, age: Value) -> Vec<Value> {
    // Defaulting fills these in; read them the same way for objects stored without it.
    let type_ = match svc.str("spec.type") {
        "" => "ClusterIP",
        t => t,
    };
    let cluster_ip =
        svc.list("spec.clusterIPs").first().and_then(Value::as_str).unwrap_or_else(|| svc.str("spec.clusterIP"));
    let external: Vec<&str> = svc.list("spec.externalIPs").iter().filter_map(Value::as_str).collect();
    let external_ip = match type_ {
        "ClusterIP" | "NodePort" if external.is_empty() => "<none>".to_owned(),
        "ClusterIP" | "NodePort" => external.join(","),
        "LoadBalancer" => {
            let mut ingress: Vec<&str> = svc
                .list("status.loadBalancer.ingress")
                .iter()
                .map(|i| match Obj(i).str("ip") {
                    "" => Obj(i).str("hostname"),
                    ip => ip,
                })
                .filter(|s| !s.is_empty())
                .collect();
            ingress.sort_unstable();
            ingress.dedup();
            ingress.extend(external);
            if ingress.is_empty() {
                "<pending>".to_owned()
            } else {
                ingress.join(",")
            }
        }
        "ExternalName" => svc.str("spec.externalName").to_owned(),
        _ => "<unknown>".to_owned(),
    };
    let ports: Vec<String> = svc
        .list("spec.ports")
        .iter()
        .map(|p| {
            let p = Obj(p);
            let protocol = match p.str("protocol") {
                "" => "TCP",
                proto => proto,
            };
            match p.int("nodePort") {
                n if n > 0 => format!("{}:{n}/{protocol}", p.int("port")),
                _ => format!("{}/{protocol}", p.int("port")),
            }
        })
        .collect();
    vec![
        name,
        json!(type_),
        json!(none_if_empty(cluster_ip)),
        json!(external_ip),
        json!(none_if_empty(&ports.join(","))),
        age,
        json!(format_labels(svc.map("spec.selector"))),
    ]
}

/// `labels.FormatLabels`: sorted `k=v` pairs, or `<none>`.
fn format_labels(labels: &Map<String, Value>) -> String {
    let mut pairs: Vec<String> = labels.iter().map(|(k, v)| format!("{k}={}", v.as_str().unwrap_or(""))).collect();
    pairs.sort();
    none_if_empty(&pairs.join(",")).to_owned()
}

/// `formatEndpoints`: up to three `ip:port` pairs, then ` + N more...`.
fn format_endpoints(ep: Obj<'_>) -> String {
    let subsets = ep.list("subsets");
    if subsets.is_empty() {
        return "<none>".to_owned();
    }
    let mut all = Vec::new();
    for ss in subsets {
        let ss = Obj(ss);
        let ips = ss.list("addresses").iter().map(|a| Obj(a).str("ip"));
        let ports = ss.list("ports");
        if ports.is_empty() {
            all.extend(ips.map(str::to_owned));
        } else {
            for port in ports {
                let port = Obj(port).int("port");
                all.extend(ips.clone().map(|ip| {
                    if ip.contains(':') {
                        format!("[{ip}]:{port}")
                    } else {
                        format!("{ip}:{port}")
                    }
                }));
            }
        }
    }
    list_with_more(all.into_iter(), "")
}

/// Joins the first three items and appends ` + N more...` for the rest; `empty` when none.
fn list_with_more(items: impl Iterator<Item = String>, empty: &str) -> String {
    const MAX: usize = 3;
    let items: Vec<String> = items.collect();
    let shown = items[..items.len().min(MAX)].join(",");
    if items.len() > MAX {
        format!("{shown} + {} more...", items.len() - MAX)
    } else if shown.is_empty() {
        empty.to_owned()
    } else {
        shown
    }
}

fn event_cells(ev: Obj<'_>, now: Timestamp) -> Vec<Value> {
    let first_seen = match ev.time("firstTimestamp") {
        Some(t) => since(Some(t), now),
        None => since(ev.time("eventTime"), now),
    };
    let mut last_seen = match ev.time("lastTimestamp") {
        Some(t) => since(Some(t), now),
        None => first_seen.clone(),
    };
    let mut count = ev.int("count");
    if ev.get("series").is_some_and(Value::is_object) {
        last_seen = since(ev.time("series.lastObservedTime"), now);
        count = ev.int("series.count");
    } else if count == 0 {
        count = 1;
    }
    let kind = ev.str("involvedObject.kind").to_lowercase();
    let object = match ev.str("involvedObject.name") {
        "" => kind,
        name => format!("{kind}/{name}"),
    };
    let non_empty = |a: &'static str, b: &'static str| match ev.str(a) {
        "" => ev.str(b),
        v => v,
    };
    let component = non_empty("source.component", "reportingComponent");
    let source = match non_empty("source.host", "reportingInstance") {
        "" => component.to_owned(),
        host => format!("{component}, {host}"),
    };
    vec![
        json!(last_seen),
        json!(ev.str("type")),
        json!(ev.str("reason")),
        json!(object),
        json!(ev.str("involvedObject.fieldPath")),
        json!(source),
        json!(ev.str("message").trim()),
        json!(first_seen),
        json!(count),
        json!(ev.str("metadata.name")),
    ]
}

/// `layoutContainerCells`: names and images, comma separated.
fn container_cells(containers: &[Value]) -> (String, String) {
    let names: Vec<&str> = containers.iter().map(|c| Obj(c).str("name")).collect();
    let images: Vec<&str> = containers.iter().map(|c| Obj(c).str("image")).collect();
    (names.join(","), images.join(","))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn now() -> Timestamp {
        "2025-01-01T12:00:00Z".parse().expect("valid timestamp")
    }

    fn cell_strings(kind: &str, obj: &Value) -> Vec<String> {
        cells(kind, obj, now())
            .into_iter()
            .map(|c| match c {
                Value::String(s) => s,
                other => other.to_string(),
            })
            .collect()
    }

    #[test]
    fn human_duration_matches_apimachinery() {
        let cases = [
            (0, "0s"),
            (59, "59s"),
            (119, "119s"),
            (120, "2m"),
            (310, "5m10s"),
            (599, "9m59s"),
            (600, "10m"),
            (179 * 60 + 59, "179m"),
            (3 * 3600, "3h"),
            (3 * 3600 + 25 * 60, "3h25m"),
            (8 * 3600, "8h"),
            (47 * 3600 + 59 * 60, "47h"),
            (2 * 86400, "2d"),
            (2 * 86400 + 3 * 3600, "2d3h"),
            (8 * 86400 + 5 * 3600, "8d"),
            (729 * 86400, "729d"),
            (730 * 86400, "2y"),
            (3 * 365 * 86400 + 10 * 86400, "3y10d"),
            (5 * 365 * 86400, "5y"),
            (9 * 365 * 86400 + 100 * 86400, "9y"),
        ];
        for (secs, want) in cases {
            assert_eq!(human_duration(Duration::from_secs(secs)), want, "{secs}s");
        }
    }

    #[test]
    fn age_tolerates_one_second_of_skew_and_flags_more() {
        let t = |s: &str| s.parse::<Timestamp>().ok();
        assert_eq!(since(t("2025-01-01T12:00:01Z"), now()), "0s");
        assert_eq!(since(t("2025-01-01T12:00:05Z"), now()), "<invalid>");
        assert_eq!(since(None, now()), "<unknown>");
        assert_eq!(since(t("2025-01-01T11:00:00Z"), now()), "60m");
    }

    #[test]
    fn every_kind_has_one_cell_per_column() {
        let obj = json!({"metadata": {"name": "x", "creationTimestamp": "2025-01-01T11:00:00Z"}});
        for kind in [
            "Pod",
            "Node",
            "Service",
            "Endpoints",
            "Event",
            "Namespace",
            "ConfigMap",
            "Secret",
            "ServiceAccount",
            "Lease",
            "Deployment",
            "ReplicaSet",
            "EndpointSlice",
            "Widget",
        ] {
            assert_eq!(cells(kind, &obj, now()).len(), columns(kind).len(), "{kind}");
        }
    }

    #[test]
    fn columns_carry_the_kubernetes_definition_fields() {
        let pod = columns("Pod");
        assert_eq!(pod[0]["name"], "Name");
        assert_eq!(pod[0]["format"], "name");
        assert_eq!(pod[5]["name"], "IP");
        assert_eq!(pod[5]["priority"], 1);
        assert_eq!(columns("Event")[0]["name"], "Last Seen");
        assert_eq!(columns("Event")[9]["format"], "name");
        let unknown = columns("Widget");
        assert_eq!(unknown[1]["name"], "Created At");
        assert_eq!(unknown[1]["type"], "date");
        assert_eq!(columns("ReplicaSet")[1]["type"], "integer");
    }

    #[test]
    fn unknown_kinds_print_the_creation_time() {
        let obj = json!({"metadata": {"name": "w1", "creationTimestamp": "2025-01-01T11:00:00.5Z"}});
        assert_eq!(cell_strings("Widget", &obj), ["w1", "2025-01-01T11:00:00Z"]);
    }

    fn running_pod() -> Value {
        json!({
            "metadata": {"name": "nginx", "creationTimestamp": "2025-01-01T11:00:00Z"},
            "spec": {"nodeName": "node1", "containers": [{"name": "nginx"}]},
            "status": {
                "phase": "Running",
                "podIP": "10.244.0.5",
                "podIPs": [{"ip": "10.244.0.5"}],
                "conditions": [{"type": "Ready", "status": "True"}],
                "containerStatuses": [{
                    "name": "nginx", "ready": true, "restartCount": 0,
                    "state": {"running": {"startedAt": "2025-01-01T11:00:02Z"}}
                }]
            }
        })
    }

    #[test]
    fn running_pod_prints_like_kubectl() {
        assert_eq!(
            cell_strings("Pod", &running_pod()),
            ["nginx", "1/1", "Running", "0", "60m", "10.244.0.5", "node1", "<none>", "<none>"]
        );
    }

    #[test]
    fn crash_looping_pod_shows_waiting_reason_and_last_restart() {
        let pod = json!({
            "metadata": {"name": "crash", "creationTimestamp": "2025-01-01T10:00:00Z"},
            "spec": {"containers": [{"name": "app"}, {"name": "side"}]},
            "status": {
                "phase": "Running",
                "containerStatuses": [
                    {"name": "app", "ready": false, "restartCount": 5,
                     "state": {"waiting": {"reason": "CrashLoopBackOff"}},
                     "lastState": {"terminated": {"exitCode": 1, "reason": "Error",
                                                  "finishedAt": "2025-01-01T11:55:00Z"}}},
                    {"name": "side", "ready": true, "restartCount": 1,
                     "state": {"running": {}},
                     "lastState": {"terminated": {"exitCode": 0, "finishedAt": "2025-01-01T10:30:00Z"}}}
                ]
            }
        });
        let c = cell_strings("Pod", &pod);
        assert_eq!(c[1..5], ["1/2", "CrashLoopBackOff", "6 (5m ago)", "120m"]);
        assert_eq!(c[5..8], ["<none>", "<none>", "<none>"]);
    }

    #[test]
    fn terminated_containers_report_reason_signal_or_exit_code() {
        let with_state = |terminated: Value| {
            json!({"status": {"phase": "Running", "containerStatuses": [
                {"name": "a", "restartCount": 0, "state": {"terminated": terminated}}
            ]}, "spec": {"containers": [{"name": "a"}]}})
        };
        let status = |t| cell_strings("Pod", &with_state(t))[2].clone();
        assert_eq!(status(json!({"exitCode": 0, "reason": "Completed"})), "Completed");
        assert_eq!(status(json!({"exitCode": 137, "signal": 9})), "Signal:9");
        assert_eq!(status(json!({"exitCode": 2})), "ExitCode:2");
    }

    #[test]
    fn completed_container_beside_a_running_one_reads_running_or_not_ready() {
        let mut pod = running_pod();
        pod["spec"]["containers"] = json!([{"name": "job"}, {"name": "nginx"}]);
        let statuses = pod["status"]["containerStatuses"].clone();
        pod["status"]["containerStatuses"] = json!([statuses[0].clone(),
            {"name": "job", "restartCount": 0, "state": {"terminated": {"exitCode": 0, "reason": "Completed"}}}]);
        assert_eq!(cell_strings("Pod", &pod)[2], "Running");
        pod["status"]["conditions"] = json!([{"type": "Ready", "status": "False"}]);
        assert_eq!(cell_strings("Pod", &pod)[2], "NotReady");
    }

    #[test]
    fn terminating_pod_shows_terminating_unless_finished() {
        let mut pod = running_pod();
        pod["metadata"]["deletionTimestamp"] = json!("2025-01-01T11:59:00Z");
        assert_eq!(cell_strings("Pod", &pod)[2], "Terminating");
        pod["status"]["phase"] = json!("Succeeded");
        pod["status"]["containerStatuses"] = json!([]);
        assert_eq!(cell_strings("Pod", &pod)[2], "Succeeded");
        pod["status"]["reason"] = json!("NodeLost");
        assert_eq!(cell_strings("Pod", &pod)[2], "Unknown");
    }

    fn init_pod(init_statuses: Value) -> Value {
        json!({
            "metadata": {"name": "init", "creationTimestamp": "2025-01-01T11:59:00Z"},
            "spec": {
                "initContainers": [{"name": "setup"}, {"name": "migrate"}],
                "containers": [{"name": "app"}]
            },
            "status": {
                "phase": "Pending",
                "initContainerStatuses": init_statuses,
                "containerStatuses": [{"name": "app", "restartCount": 0,
                                       "state": {"waiting": {"reason": "PodInitializing"}}}]
            }
        })
    }

    #[test]
    fn init_containers_report_progress_and_failures() {
        let done = json!({"name": "setup", "restartCount": 0, "state": {"terminated": {"exitCode": 0}}});
        let running = json!({"name": "migrate", "restartCount": 0, "state": {"running": {}}});
        let c = cell_strings("Pod", &init_pod(json!([done.clone(), running])));
        assert_eq!(c[1..5], ["0/1", "Init:1/2", "0", "60s"]);

        let failed = json!({"name": "migrate", "restartCount": 3,
                            "state": {"terminated": {"exitCode": 1, "reason": "Error"}}});
        assert_eq!(cell_strings("Pod", &init_pod(json!([done.clone(), failed])))[2..4], ["Init:Error", "3"]);

        let backoff = json!({"name": "migrate", "restartCount": 4,
                             "state": {"waiting": {"reason": "CrashLoopBackOff"}}});
        assert_eq!(cell_strings("Pod", &init_pod(json!([done.clone(), backoff])))[2], "Init:CrashLoopBackOff");

        let killed =
            json!({"name": "migrate", "restartCount": 0, "state": {"terminated": {"exitCode": 137, "signal": 9}}});
        assert_eq!(cell_strings("Pod", &init_pod(json!([done, killed])))[2], "Init:Signal:9");
    }

    #[test]
    fn started_sidecar_counts_toward_ready_and_total() {
        let mut pod = running_pod();
        pod["spec"]["initContainers"] = json!([{"name": "proxy", "restartPolicy": "Always"}]);
        pod["status"]["initContainerStatuses"] = json!([
            {"name": "proxy", "started": true, "ready": true, "restartCount": 2, "state": {"running": {}}}
        ]);
        assert_eq!(cell_strings("Pod", &pod)[1..4], ["2/2", "Running", "2"]);
    }

    #[test]
    fn readiness_gates_count_true_conditions() {
        let mut pod = running_pod();
        pod["spec"]["readinessGates"] = json!([{"conditionType": "a/lb"}, {"conditionType": "b/x"}]);
        pod["status"]["conditions"] = json!([{"type": "Ready", "status": "True"}, {"type": "a/lb", "status": "True"}]);
        assert_eq!(cell_strings("Pod", &pod)[8], "1/2");
    }

    #[test]
    fn node_with_roles_prints_status_roles_and_wide_columns() {
        let node = json!({
            "metadata": {
                "name": "cp1", "creationTimestamp": "2024-12-30T12:00:00Z",
                "labels": {"node-role.kubernetes.io/control-plane": "", "node-role.kubernetes.io/etcd": "",
                           "kubernetes.io/role": "master", "kubernetes.io/hostname": "cp1"}
            },
            "spec": {"unschedulable": true},
            "status": {
                "conditions": [{"type": "MemoryPressure", "status": "False"}, {"type": "Ready", "status": "True"}],
                "addresses": [{"type": "Hostname", "address": "cp1"}, {"type": "InternalIP", "address": "10.0.0.1"}],
                "nodeInfo": {"kubeletVersion": "v1.32.0", "osImage": "Debian GNU/Linux 12 (bookworm)",
                             "kernelVersion": "6.1.0", "containerRuntimeVersion": "kaji://0.1.0"}
            }
        });
        assert_eq!(
            cell_strings("Node", &node),
            [
                "cp1",
                "Ready,SchedulingDisabled",
                "control-plane,etcd,master",
                "2d",
                "v1.32.0",
                "10.0.0.1",
                "<none>",
                "Debian GNU/Linux 12 (bookworm)",
                "6.1.0",
                "kaji://0.1.0"
            ]
        );
    }

    #[test]
    fn node_status_reflects_the_ready_condition() {
        let node = |conditions: Value| json!({"status": {"conditions": conditions}});
        let status = |n: &Value| cell_strings("Node", n)[1].clone();
        assert_eq!(status(&node(json!([{"type": "Ready", "status": "False"}]))), "NotReady");
        assert_eq!(status(&node(json!([{"type": "Ready", "status": "Unknown"}]))), "NotReady");
        assert_eq!(status(&node(json!([]))), "Unknown");
        let bare = cell_strings("Node", &json!({}));
        assert_eq!(bare[2], "<none>");
        assert_eq!(bare[7..], ["<unknown>", "<unknown>", "<unknown>"]);
    }

    #[test]
    fn node_port_service_prints_ports_and_selector() {
        let svc = json!({
            "metadata": {"name": "web", "creationTimestamp": "2025-01-01T11:58:00Z"},
            "spec": {
                "type": "NodePort", "clusterIP": "10.96.0.10", "clusterIPs": ["10.96.0.10"],
                "selector": {"tier": "front", "app": "web"},
                "ports": [{"port": 80, "protocol": "TCP", "nodePort": 30080},
                          {"port": 53, "protocol": "UDP", "nodePort": 30053}]
            }
        });
        assert_eq!(
            cell_strings("Service", &svc),
            ["web", "NodePort", "10.96.0.10", "<none>", "80:30080/TCP,53:30053/UDP", "2m", "app=web,tier=front"]
        );
    }

    #[test]
    fn service_external_ips_depend_on_type() {
        let external =
            |spec: Value, status: Value| cell_strings("Service", &json!({"spec": spec, "status": status}))[3].clone();
        assert_eq!(external(json!({"externalIPs": ["1.2.3.4"]}), json!({})), "1.2.3.4");
        assert_eq!(external(json!({"type": "LoadBalancer"}), json!({})), "<pending>");
        assert_eq!(
            external(
                json!({"type": "LoadBalancer", "externalIPs": ["9.9.9.9"]}),
                json!({"loadBalancer": {"ingress": [{"ip": "5.6.7.8"}, {"hostname": "lb.example"}]}})
            ),
            "5.6.7.8,lb.example,9.9.9.9"
        );
        assert_eq!(external(json!({"type": "ExternalName", "externalName": "db.example"}), json!({})), "db.example");
        let headless = cell_strings("Service", &json!({"spec": {"clusterIP": "None", "ports": []}}));
        assert_eq!(headless[1..5], ["ClusterIP", "None", "<none>", "<none>"]);
        assert_eq!(headless[6], "<none>");
    }

    #[test]
    fn endpoints_list_three_addresses_then_a_count() {
        let ep = json!({"subsets": [{
            "addresses": [{"ip": "10.0.0.1"}, {"ip": "10.0.0.2"}, {"ip": "10.0.0.3"}, {"ip": "fd00::4"}],
            "ports": [{"port": 80}]
        }]});
        assert_eq!(cell_strings("Endpoints", &ep)[1], "10.0.0.1:80,10.0.0.2:80,10.0.0.3:80 + 1 more...");
        let two = json!({"subsets": [{"addresses": [{"ip": "fd00::1"}], "ports": [{"port": 80}, {"port": 443}]}]});
        assert_eq!(cell_strings("Endpoints", &two)[1], "[fd00::1]:80,[fd00::1]:443");
        assert_eq!(cell_strings("Endpoints", &json!({}))[1], "<none>");
    }

    #[test]
    fn endpoint_slices_print_ports_and_addresses() {
        let slice = json!({
            "metadata": {"name": "web-abc"}, "addressType": "IPv4",
            "ports": [{"port": 80}, {"name": "metrics"}, {}],
            "endpoints": [{"addresses": ["10.0.0.1"]}, {"addresses": ["10.0.0.2"]}]
        });
        assert_eq!(
            cell_strings("EndpointSlice", &slice)[..4],
            ["web-abc", "IPv4", "80,metrics,*", "10.0.0.1,10.0.0.2"]
        );
        assert_eq!(cell_strings("EndpointSlice", &json!({}))[2..4], ["<unset>", "<unset>"]);
    }

    #[test]
    fn events_print_object_source_and_count() {
        let ev = json!({
            "metadata": {"name": "nginx.17a"},
            "involvedObject": {"kind": "Pod", "name": "nginx", "fieldPath": "spec.containers{nginx}"},
            "type": "Normal", "reason": "Pulled", "message": " pulled image \n",
            "source": {"component": "kubelet", "host": "node1"},
            "firstTimestamp": "2025-01-01T11:00:00Z", "lastTimestamp": "2025-01-01T11:50:00Z", "count": 3
        });
        assert_eq!(
            cell_strings("Event", &ev),
            [
                "10m",
                "Normal",
                "Pulled",
                "pod/nginx",
                "spec.containers{nginx}",
                "kubelet, node1",
                "pulled image",
                "60m",
                "3",
                "nginx.17a"
            ]
        );
        let new_api = json!({
            "involvedObject": {"kind": "Node"}, "reportingComponent": "kaji-controllers",
            "eventTime": "2025-01-01T11:59:00.000000Z"
        });
        let c = cell_strings("Event", &new_api);
        assert_eq!([&c[0], &c[3], &c[5], &c[7], &c[8]], ["60s", "node", "kaji-controllers", "60s", "1"]);
    }

    #[test]
    fn workloads_print_replica_counts_containers_and_selectors() {
        let template =
            json!({"spec": {"containers": [{"name": "web", "image": "nginx:1"}, {"name": "log", "image": "busybox"}]}});
        let deploy = json!({
            "metadata": {"name": "web"},
            "spec": {"replicas": 3, "selector": {"matchLabels": {"app": "web"}}, "template": template},
            "status": {"readyReplicas": 2, "updatedReplicas": 3, "availableReplicas": 2}
        });
        assert_eq!(
            cells("Deployment", &deploy, now()),
            [
                json!("web"),
                json!("2/3"),
                json!(3),
                json!(2),
                json!("<unknown>"),
                json!("web,log"),
                json!("nginx:1,busybox"),
                json!("app=web")
            ]
        );
        let rs = json!({"metadata": {"name": "web-1"}, "spec": {"replicas": 3, "template": template},
                        "status": {"replicas": 3, "readyReplicas": 1}});
        assert_eq!(
            cells("ReplicaSet", &rs, now()),
            [
                json!("web-1"),
                json!(3),
                json!(3),
                json!(1),
                json!("<unknown>"),
                json!("web,log"),
                json!("nginx:1,busybox"),
                json!("<none>")
            ]
        );
    }

    #[test]
    fn config_objects_count_their_data() {
        let cm = json!({"metadata": {"name": "cfg"}, "data": {"a": "1", "b": "2"}, "binaryData": {"c": "AA=="}});
        assert_eq!(cells("ConfigMap", &cm, now())[1], json!(3));
        let secret = json!({"metadata": {"name": "s"}, "type": "Opaque", "data": {"a": "MQ=="}, "stringData": {"a": "1", "b": "2"}});
        assert_eq!(cells("Secret", &secret, now())[1..3], [json!("Opaque"), json!(2)]);
        let lease = json!({"metadata": {"name": "kaji-scheduler"}, "spec": {"holderIdentity": "cp1_abc"}});
        assert_eq!(cell_strings("Lease", &lease)[1], "cp1_abc");
        let ns = json!({"metadata": {"name": "default"}, "status": {"phase": "Active"}});
        assert_eq!(cell_strings("Namespace", &ns)[1], "Active");
    }
}
