//! pods/proxy and services/proxy against the real binary, from the side of someone with fewer
//! rights: the proxy subresource takes its own RBAC grant, and neither a pod's reported address
//! nor an EndpointSlice written by hand can point the apiserver at loopback, link-local addresses
//! or anything that is not a pod. (Proxying to real pods is exercised by the conformance subset in
//! a lab: `Proxy version v1 ...`, the DNS specs.)

mod common;

use common::tokens::TokenApi;
use common::{eventually, send_json as send, started};
use serde_json::json;

#[test]
fn addresses_that_are_not_a_pods_are_never_proxied() {
    let (_dir, s) = started();
    let pods = "/api/v1/namespaces/default/pods";
    let pod = json!({"metadata": {"name": "evil"}, "spec": {"containers": [{"name": "c", "image": "i"}]}});
    assert_eq!(send(&s, "POST", pods, Some(&pod), "application/json").0, 201);
    let (code, body) = send(&s, "GET", &format!("{pods}/evil/proxy/"), None, "application/json");
    assert_eq!(code, 503, "no IP yet: {body}");
    for (ip, what) in [("127.0.0.1", "loopback"), ("169.254.169.254", "metadata service")] {
        let status = json!({"status": {"podIP": ip, "podIPs": [{"ip": ip}]}});
        let (code, _) =
            send(&s, "PATCH", &format!("{pods}/evil/status"), Some(&status), "application/merge-patch+json");
        assert_eq!(code, 200);
        let (code, body) = send(&s, "GET", &format!("{pods}/evil:80/proxy/latest/meta-data"), None, "application/json");
        assert_eq!((code, &body["message"]), (400, &json!("address not allowed")), "{what}: {body}");
    }
    // A Service whose hand-written EndpointSlice names an address no pod has.
    let svc = json!({"metadata": {"name": "web"}, "spec": {"ports": [{"name": "http", "port": 80}], "selector": {"app": "none"}}});
    assert_eq!(send(&s, "POST", "/api/v1/namespaces/default/services", Some(&svc), "application/json").0, 201);
    let slice = json!({"metadata": {"name": "web-forged", "labels": {"kubernetes.io/service-name": "web"}}, "addressType": "IPv4",
        "ports": [{"name": "http", "port": 10250}],
        "endpoints": [{"addresses": ["10.0.0.1"], "targetRef": {"kind": "Pod", "namespace": "default", "name": "evil"}},
                      {"addresses": ["10.0.0.2"]}]});
    let (code, body) = send(
        &s,
        "POST",
        "/apis/discovery.k8s.io/v1/namespaces/default/endpointslices",
        Some(&slice),
        "application/json",
    );
    assert_eq!(code, 201, "{body}");
    // Lists are served from the watch cache the proxy reads: once the slice is listed, a 503 is
    // its endpoints refused, not a slice the proxy has not seen yet.
    eventually("the forged slice in the watch cache", || {
        let (_, list) =
            send(&s, "GET", "/apis/discovery.k8s.io/v1/namespaces/default/endpointslices", None, "application/json");
        list["items"].as_array().is_some_and(|i| i.iter().any(|x| x["metadata"]["name"] == "web-forged")).then_some(())
    });
    let (code, body) = send(&s, "GET", "/api/v1/namespaces/default/services/web:http/proxy/", None, "application/json");
    assert_eq!((code, &body["message"]), (503, &json!("no endpoints available for service \"web\"")), "{body}");
    let (code, body) = send(&s, "GET", "/api/v1/namespaces/default/services/web:81/proxy/", None, "application/json");
    assert_eq!((code, &body["message"]), (503, &json!("no service port 81 found for service \"web\"")), "{body}");
    let (code, _) = send(&s, "GET", "/api/v1/namespaces/default/services/ftp:web:80/proxy/", None, "application/json");
    assert_eq!(code, 400);
}

#[test]
fn the_proxy_subresource_needs_its_own_grant() {
    let api = TokenApi::start(&["viewer"], &[], &[]);
    api.grant(
        "default",
        "read-pods",
        "viewer",
        json!([{"apiGroups": [""], "resources": ["pods", "services"], "verbs": ["get", "list"]}]),
    );
    let pod = json!({"metadata": {"name": "p"}, "spec": {"containers": [{"name": "c", "image": "i"}]}});
    api.ok("root", "POST", "/api/v1/namespaces/default/pods", pod);
    let (code, body) = api.call("viewer", "GET", "/api/v1/namespaces/default/pods/p/proxy/", None);
    assert_eq!(code, 403, "{body}");
    assert_eq!(
        body["message"],
        "pods \"p\" is forbidden: User \"viewer\" cannot get resource \"pods/proxy\" in API group \"\" in the namespace \"default\""
    );
    let (code, _) = api.call("viewer", "GET", "/api/v1/namespaces/default/pods/p", None);
    assert_eq!(code, 200);
}
