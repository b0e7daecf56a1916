#!/usr/bin/env python3
"""Smoke test of a kaji apiserver with the official Kubernetes Python client.

Usage: smoke.py http://HOST:PORT

The client decodes every response into its typed models, so a missing required field or an
unexpected shape in what the server returns fails here as a decoding error naming the field.
Every check runs even if an earlier one failed; the exit status is non-zero if any failed.
"""

import json
import sys
import threading
import time
import uuid

import checks
import kubernetes
from kubernetes import client, watch
from kubernetes.client.rest import ApiException

NAMESPACE = "default"
IMAGE = "registry.example/app:1"
# The client sends strategic merge patch for a dict by default; kaji serves JSON merge patch.
MERGE_PATCH = "application/merge-patch+json"


def unique(prefix):
    return f"{prefix}-{uuid.uuid4().hex[:6]}"


def pod(name, labels=None, image=IMAGE):
    return client.V1Pod(
        metadata=client.V1ObjectMeta(name=name, labels=labels),
        spec=client.V1PodSpec(containers=[client.V1Container(name="app", image=image)]),
    )


def config_map(name, value):
    return client.V1ConfigMap(metadata=client.V1ObjectMeta(name=name), data={"key": value})


def deployment(name, replicas):
    labels = {"app": name}
    return client.V1Deployment(
        metadata=client.V1ObjectMeta(name=name),
        spec=client.V1DeploymentSpec(
            replicas=replicas,
            selector=client.V1LabelSelector(match_labels=labels),
            template=client.V1PodTemplateSpec(
                metadata=client.V1ObjectMeta(labels=labels),
                spec=client.V1PodSpec(containers=[client.V1Container(name="app", image=IMAGE)]),
            ),
        ),
    )


def expect_api_error(status, call):
    """Run `call`, which must fail with HTTP `status`; return the decoded Status body."""
    try:
        result = call()
    except ApiException as e:
        assert e.status == status, f"expected HTTP {status}, got {e.status}: {e.body}"
        return json.loads(e.body)
    raise AssertionError(f"expected HTTP {status}, the call succeeded and returned {result!r}")


def creates_and_reads_back_a_pod_and_a_config_map(core, apps):
    name = unique("web")
    created = core.create_namespaced_pod(NAMESPACE, pod(name, {"app": "web"}))
    assert created.metadata.uid, "a created pod has a uid"
    assert created.metadata.resource_version, "a created pod has a resourceVersion"
    got = core.read_namespaced_pod(name, NAMESPACE)
    assert got.metadata.uid == created.metadata.uid
    assert got.spec.containers[0].image == IMAGE
    assert got.metadata.creation_timestamp is not None

    cm_name = unique("settings")
    core.create_namespaced_config_map(NAMESPACE, config_map(cm_name, "on"))
    got = core.read_namespaced_config_map(cm_name, NAMESPACE)
    assert got.data == {"key": "on"}, f"config map data came back as {got.data}"


def lists_only_pods_matching_the_label_selector(core, apps):
    run = uuid.uuid4().hex[:6]
    wanted, other = unique("match"), unique("other")
    core.create_namespaced_pod(NAMESPACE, pod(wanted, {"run": run, "role": "wanted"}))
    core.create_namespaced_pod(NAMESPACE, pod(other, {"run": run, "role": "other"}))
    listed = core.list_namespaced_pod(NAMESPACE, label_selector=f"run={run},role=wanted")
    names = [p.metadata.name for p in listed.items]
    assert names == [wanted], f"expected only {wanted}, listed {names}"
    assert listed.metadata.resource_version, "a list carries a resourceVersion"
    everything = core.list_namespaced_pod(NAMESPACE, label_selector=f"run={run}")
    assert sorted(p.metadata.name for p in everything.items) == sorted([wanted, other])


def watch_sees_a_change_made_while_watching(core, apps):
    name = unique("watched")
    core.create_namespaced_pod(NAMESPACE, pod(name, {"app": "watched"}))
    since = core.list_namespaced_pod(NAMESPACE).metadata.resource_version

    errors = []

    def relabel():
        time.sleep(0.5)
        try:
            patch = {"metadata": {"labels": {"touched": "yes"}}}
            core.patch_namespaced_pod(name, NAMESPACE, patch, _content_type=MERGE_PATCH)
        except Exception as e:  # noqa: BLE001 - re-raised by the watching thread below
            errors.append(e)

    changer = threading.Thread(target=relabel)
    changer.start()
    seen = []
    w = watch.Watch()
    try:
        for event in w.stream(core.list_namespaced_pod, NAMESPACE, resource_version=since, timeout_seconds=5):
            obj = event["object"]
            seen.append((event["type"], obj.metadata.name))
            if event["type"] == "MODIFIED" and obj.metadata.name == name:
                assert obj.metadata.labels.get("touched") == "yes", f"the event carries the new labels: {obj.metadata.labels}"
                w.stop()
                break
    finally:
        changer.join()
    if errors:
        raise errors[0]
    assert ("MODIFIED", name) in seen, f"no MODIFIED event for {name} within 5s; saw {seen}"
    assert ("ADDED", name) not in seen, f"the watch replayed the creation from before it started: {seen}"


def replace_with_a_stale_resource_version_is_a_conflict(core, apps):
    name = unique("settings")
    original = core.create_namespaced_config_map(NAMESPACE, config_map(name, "v1"))
    core.replace_namespaced_config_map(name, NAMESPACE, config_map_with(original, "v2"))
    status = expect_api_error(409, lambda: core.replace_namespaced_config_map(name, NAMESPACE, config_map_with(original, "lost")))
    assert status.get("reason") == "Conflict", f"409 body: {status}"
    assert core.read_namespaced_config_map(name, NAMESPACE).data == {"key": "v2"}, "a conflict writes nothing"


def config_map_with(cm, value):
    return client.V1ConfigMap(
        metadata=client.V1ObjectMeta(name=cm.metadata.name, resource_version=cm.metadata.resource_version),
        data={"key": value},
    )


def an_invalid_pod_is_rejected_as_invalid(core, apps):
    name = unique("broken")
    status = expect_api_error(422, lambda: core.create_namespaced_pod(NAMESPACE, pod(name, image=None)))
    assert status.get("kind") == "Status" and status.get("reason") == "Invalid", f"422 body: {status}"
    fields = [c.get("field") for c in status.get("details", {}).get("causes", [])]
    assert "spec.containers[0].image" in fields, f"the causes name the missing image: {fields}"
    expect_api_error(404, lambda: core.read_namespaced_pod(name, NAMESPACE))


def reads_the_scale_of_a_deployment(core, apps):
    name = unique("api")
    apps.create_namespaced_deployment(NAMESPACE, deployment(name, 3))
    scale = apps.read_namespaced_deployment_scale(name, NAMESPACE)
    assert scale.metadata.name == name
    assert scale.spec.replicas == 3, f"scale spec: {scale.spec}"
    apps.patch_namespaced_deployment_scale(name, NAMESPACE, {"spec": {"replicas": 1}}, _content_type=MERGE_PATCH)
    assert apps.read_namespaced_deployment(name, NAMESPACE).spec.replicas == 1, "patching the scale changes the deployment"


def deletes_a_pod_and_a_config_map(core, apps):
    name = unique("doomed")
    core.create_namespaced_pod(NAMESPACE, pod(name))
    core.delete_namespaced_pod(name, NAMESPACE)
    expect_api_error(404, lambda: core.read_namespaced_pod(name, NAMESPACE))
    cm_name = unique("doomed")
    core.create_namespaced_config_map(NAMESPACE, config_map(cm_name, "x"))
    core.delete_namespaced_config_map(cm_name, NAMESPACE)
    expect_api_error(404, lambda: core.read_namespaced_config_map(cm_name, NAMESPACE))


def every_served_list_decodes_into_typed_models(core, apps):
    """What the server bootstraps (namespaces, the kubernetes Service and its endpoints) decodes too."""
    api_client = core.api_client
    discovery, coordination = client.DiscoveryV1Api(api_client), client.CoordinationV1Api(api_client)
    namespaces = [n.metadata.name for n in core.list_namespace().items]
    assert "default" in namespaces and "kube-system" in namespaces, f"namespaces: {namespaces}"
    for list_call in [
        core.list_node,
        core.list_pod_for_all_namespaces,
        core.list_service_for_all_namespaces,
        core.list_endpoints_for_all_namespaces,
        core.list_event_for_all_namespaces,
        core.list_config_map_for_all_namespaces,
        core.list_secret_for_all_namespaces,
        core.list_service_account_for_all_namespaces,
        apps.list_deployment_for_all_namespaces,
        apps.list_replica_set_for_all_namespaces,
        discovery.list_endpoint_slice_for_all_namespaces,
        coordination.list_lease_for_all_namespaces,
    ]:
        try:
            list_call()
        except Exception as e:
            raise AssertionError(f"{list_call.__name__} failed: {e}") from e
    kubernetes_service = core.read_namespaced_service("kubernetes", "default")
    assert kubernetes_service.spec.cluster_ip, "the kubernetes Service has a cluster IP"


def objects_carry_their_status_in_every_verbs_response(core, apps):
    """Kubernetes always writes a kind's status struct (`"status": {}`), so typed clients read
    `obj.status.x` at once: on create, get, list, watch, replace, patch, apply and delete."""
    name = unique("fresh")
    created = apps.create_namespaced_deployment(NAMESPACE, deployment(name, 0))
    seen = {"create": created, "get": apps.read_namespaced_deployment(name, NAMESPACE)}
    listed = apps.list_namespaced_deployment(NAMESPACE, field_selector=f"metadata.name={name}")
    seen["list"] = listed.items[0]
    seen["replace"] = apps.replace_namespaced_deployment(name, NAMESPACE, seen["get"])
    seen["patch"] = apps.patch_namespaced_deployment(
        name, NAMESPACE, {"metadata": {"labels": {"patched": "yes"}}}, _content_type=MERGE_PATCH)
    applied = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name, "labels": {"applied": "yes"}}}
    seen["apply"] = apps.patch_namespaced_deployment(
        name, NAMESPACE, applied, field_manager="smoke", _content_type="application/apply-patch+yaml")
    w = watch.Watch()
    for event in w.stream(apps.list_namespaced_deployment, NAMESPACE, field_selector=f"metadata.name={name}",
                          resource_version="0", timeout_seconds=5):
        seen["watch"] = event["object"]
        w.stop()
        break
    for verb, obj in seen.items():
        assert obj.status is not None, f"{verb} answered without status"
        # The controller has not run here: the struct is there, its fields are not.
        assert obj.status.observed_generation is None, f"{verb}: {obj.status}"
    assert apps.read_namespaced_deployment_status(name, NAMESPACE).status is not None

    rs = apps.create_namespaced_replica_set(NAMESPACE, client.V1ReplicaSet(
        metadata=client.V1ObjectMeta(name=unique("rs")),
        spec=client.V1ReplicaSetSpec(replicas=0, selector=deployment(name, 0).spec.selector,
                                     template=deployment(name, 0).spec.template)))
    assert rs.status is not None and rs.status.replicas == 0, f"a ReplicaSet's status has replicas 0: {rs.status}"

    pod_name = unique("short")
    core.create_namespaced_pod(NAMESPACE, pod(pod_name))
    deleted = core.delete_namespaced_pod(pod_name, NAMESPACE, grace_period_seconds=0)
    assert deleted.status is not None and deleted.status.phase == "Pending", f"delete answered {deleted.status}"

    namespace = core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=unique("ns"))))
    assert namespace.spec is not None and namespace.status is not None, f"namespace: {namespace}"
    node = core.create_node(client.V1Node(metadata=client.V1ObjectMeta(name=unique("node"))))
    assert node.spec is not None and node.status is not None, f"a Node has spec and status: {node}"
    assert node.spec.unschedulable is None
    core.delete_node(node.metadata.name)
    config = core.create_namespaced_config_map(NAMESPACE, config_map(unique("plain"), "x"))
    assert "status" not in core.api_client.sanitize_for_serialization(config), "a ConfigMap has no status"


def reads_the_server_version(core, apps):
    """VersionApi asks for /version/ (with the slash), as the real apiserver serves it."""
    info = client.VersionApi(core.api_client).get_code()
    assert info.major == "1" and info.minor == "37", f"version: {info}"
    assert info.git_version.startswith("v1.37."), f"gitVersion: {info.git_version}"


CHECKS = [
    reads_the_server_version,
    objects_carry_their_status_in_every_verbs_response,
    creates_and_reads_back_a_pod_and_a_config_map,
    lists_only_pods_matching_the_label_selector,
    watch_sees_a_change_made_while_watching,
    replace_with_a_stale_resource_version_is_a_conflict,
    an_invalid_pod_is_rejected_as_invalid,
    reads_the_scale_of_a_deployment,
    deletes_a_pod_and_a_config_map,
    every_served_list_decodes_into_typed_models,
]


def main():
    if len(sys.argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    configuration = client.Configuration(host=sys.argv[1])
    api_client = client.ApiClient(configuration)
    core, apps = client.CoreV1Api(api_client), client.AppsV1Api(api_client)
    print(f"kubernetes python client {kubernetes.__version__} against {sys.argv[1]}")
    return checks.run(CHECKS, core, apps)


if __name__ == "__main__":
    sys.exit(main())
