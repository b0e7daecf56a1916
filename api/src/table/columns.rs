//! The column definitions each kind prints, with the OpenAPI descriptions Kubernetes sends.

use serde_json::{json, Value};

const NAME_DOC: &str = "Name must be unique within a namespace. Is required when creating resources, although some resources may allow a client to request the generation of an appropriate name automatically. Name is primarily intended for creation idempotence and configuration definition. Cannot be updated. More info: https://kubernetes.io/docs/concepts/overview/working-with-objects/names#names";

const AGE_DOC: &str = "CreationTimestamp is a timestamp representing the server time when this object was created. It is not guaranteed to be set in happens-before order across separate operations. Clients may not set this value. It is represented in RFC3339 form and is in UTC.\n\nPopulated by the system. Read-only. Null for lists. More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#metadata";

pub(super) const CONTAINERS_DOC: &str = "Names of each container in the template.";

pub(super) const IMAGES_DOC: &str = "Images referenced by each container in the template.";

const NODE_ADDRESSES_DOC: &str = "List of addresses reachable to the node. Queried from cloud provider, if available. More info: https://kubernetes.io/docs/reference/node/node-status/#addresses Note: This field is declared as mergeable, but the merge key is not sufficiently unique, which can cause data corruption when it is merged. Callers should instead use a full-replacement patch. See https://pr.k8s.io/79391 for an example. Consumers should assume that addresses can change during the lifetime of a Node. However, there are some exceptions where this may not be possible, such as Pods that inherit a Node's address in its own status or consumers of the downward API (status.hostIP).";

const ROLE_REF_DOC: &str = "RoleRef can reference a Role in the current namespace or a ClusterRole in the global namespace. If the RoleRef cannot be resolved, the Authorizer must return an error.";

const CLUSTER_ROLE_REF_DOC: &str = "RoleRef can only reference a ClusterRole in the global namespace. If the RoleRef cannot be resolved, the Authorizer must return an error.";

/// (name, type, format, priority, description)
pub(crate) type Column = (&'static str, &'static str, &'static str, u8, &'static str);

pub(crate) const NAME: Column = ("Name", "string", "name", 0, NAME_DOC);

pub(crate) const AGE: Column = ("Age", "string", "", 0, AGE_DOC);

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
        "RoleBinding" => vec![
            NAME,
            ("Role", "string", "", 0, ROLE_REF_DOC),
            AGE,
            ("Users", "string", "", 1, "Users in the roleBinding"),
            ("Groups", "string", "", 1, "Groups in the roleBinding"),
            ("ServiceAccounts", "string", "", 1, "ServiceAccounts in the roleBinding"),
        ],
        "ClusterRoleBinding" => vec![
            NAME,
            ("Role", "string", "", 0, CLUSTER_ROLE_REF_DOC),
            AGE,
            ("Users", "string", "", 1, "Users in the clusterRoleBinding"),
            ("Groups", "string", "", 1, "Groups in the clusterRoleBinding"),
            ("ServiceAccounts", "string", "", 1, "ServiceAccounts in the clusterRoleBinding"),
        ],
        other => super::workloads::columns(other)
            .or_else(|| super::storage::columns(other))
            .or_else(|| super::certificates::columns(other))
            .or_else(|| super::quota::columns(other))
            // The apiserver's default table convertor (Roles and ClusterRoles print this way too).
            .unwrap_or_else(|| vec![NAME, ("Created At", "date", "", 0, AGE_DOC)]),
    }
}

/// `columnDefinitions` for a kind, as the Kubernetes printers declare them.
pub fn columns(kind: &str) -> Vec<Value> {
    let specs = match crate::kinds::strategy(kind).map(|(_, s)| s.columns()) {
        Some(c) if !c.is_empty() => std::iter::once(NAME).chain(c).collect(),
        _ => column_specs(kind),
    };
    specs
        .into_iter()
        .map(|(name, ty, format, priority, description)| {
            json!({"name": name, "type": ty, "format": format, "description": description, "priority": priority})
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

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
}
