"""The Kubernetes API emulator as the official ``kubernetes`` client sees it (no adapter in between)."""

from __future__ import annotations

import threading
import time

import pytest
from kube_objects import KARPENTER, names, nodeclaim, pod
from kubernetes import client, watch
from kubernetes.client.exceptions import ApiException

from nodesmith.sim.kube import KubeEmulator, Store


def test_create_assigns_identity_and_lists_filter_by_label_and_field_selectors(v1: client.CoreV1Api) -> None:
    created = v1.create_namespaced_pod("default", pod("web-1", labels={"app": "web", "tier": "a"}, node="n1"))
    v1.create_namespaced_pod("default", pod("web-2", labels={"app": "web", "tier": "b", "canary": "y"}, node="n2"))
    v1.create_namespaced_pod("default", pod("db-1", labels={"app": "db", "env": "prod"}, node="n1"))
    v1.create_namespace({"metadata": {"name": "other"}})
    v1.create_namespaced_pod("other", pod("web-3", labels={"app": "web"}))

    assert created.metadata.uid and created.metadata.creation_timestamp is not None
    assert int(created.metadata.resource_version) > 0 and created.metadata.generation == 1
    assert names(v1.list_pod_for_all_namespaces(label_selector="app=web").items) == ["web-1", "web-2", "web-3"]
    assert names(v1.list_namespaced_pod("default", label_selector="app==web").items) == ["web-1", "web-2"]
    assert names(v1.list_pod_for_all_namespaces(label_selector="tier in (a,b),!canary").items) == ["web-1"]
    assert names(v1.list_pod_for_all_namespaces(label_selector="tier notin (a),app=web").items) == ["web-2", "web-3"]
    assert names(v1.list_pod_for_all_namespaces(label_selector="env!=prod,canary").items) == ["web-2"]
    assert names(v1.list_pod_for_all_namespaces(field_selector="spec.nodeName=n1").items) == ["db-1", "web-1"]
    assert names(v1.list_pod_for_all_namespaces(field_selector="spec.nodeName=").items) == ["web-3"]
    assert names(v1.list_pod_for_all_namespaces(field_selector="metadata.name=web-2").items) == ["web-2"]
    listed = v1.list_pod_for_all_namespaces()
    assert int(listed.metadata.resource_version) >= int(created.metadata.resource_version)


def test_generate_name_and_duplicate_name(v1: client.CoreV1Api) -> None:
    spec = {"containers": [{"name": "c"}]}
    made = v1.create_namespaced_pod("default", {"metadata": {"generateName": "worker-"}, "spec": spec})
    assert made.metadata.name.startswith("worker-") and len(made.metadata.name) == len("worker-") + 5
    with pytest.raises(ApiException) as err:
        v1.create_namespaced_pod("default", {"metadata": {"name": made.metadata.name}, "spec": spec})
    assert err.value.status == 409 and "AlreadyExists" in err.value.body


def test_update_bumps_resource_version_and_stale_update_conflicts(v1: client.CoreV1Api) -> None:
    v1.create_node({"metadata": {"name": "n1"}})
    first = v1.read_node("n1")
    first.metadata.labels = {"zone": "a"}
    second = v1.replace_node("n1", first)
    assert second.metadata.uid == first.metadata.uid
    assert int(second.metadata.resource_version) > int(first.metadata.resource_version)

    first.metadata.labels = {"zone": "b"}  # still carries the old resourceVersion
    with pytest.raises(ApiException) as err:
        v1.replace_node("n1", first)
    assert err.value.status == 409 and "Conflict" in err.value.body
    assert v1.read_node("n1").metadata.labels == {"zone": "a"}


def test_generation_counts_spec_changes_only(api: client.ApiClient) -> None:
    apps = client.AppsV1Api(api)
    body = {
        "metadata": {"name": "inflate"},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": {"a": "b"}},
            "template": {"metadata": {"labels": {"a": "b"}}},
        },
    }
    apps.create_namespaced_deployment("default", body)
    apps.patch_namespaced_deployment("inflate", "default", {"metadata": {"labels": {"x": "y"}}})
    assert apps.read_namespaced_deployment("inflate", "default").metadata.generation == 1
    apps.patch_namespaced_deployment("inflate", "default", {"spec": {"replicas": 3}})
    scaled = apps.read_namespaced_deployment("inflate", "default")
    assert scaled.metadata.generation == 2 and scaled.spec.replicas == 3


def test_node_field_selector_on_provider_id_is_refused_like_the_api_server(v1: client.CoreV1Api) -> None:
    v1.create_node({"metadata": {"name": "n1"}, "spec": {"providerID": "aws:///us-east-1a/i-1", "unschedulable": True}})
    with pytest.raises(ApiException) as err:
        v1.list_node(field_selector="spec.providerID=aws:///us-east-1a/i-1")
    assert err.value.status == 400
    assert names(v1.list_node(field_selector="spec.unschedulable=true").items) == ["n1"]


def test_watch_streams_added_modified_deleted(v1: client.CoreV1Api) -> None:
    start = v1.list_namespaced_pod("default").metadata.resource_version
    seen: list[tuple[str, str, str]] = []
    w = watch.Watch()

    def consume() -> None:
        for event in w.stream(v1.list_namespaced_pod, "default", resource_version=start, timeout_seconds=10):
            seen.append((event["type"], event["object"].metadata.name, event["object"].metadata.resource_version))
            if len(seen) == 3:
                w.stop()

    thread = threading.Thread(target=consume)
    thread.start()
    v1.create_namespaced_pod("default", pod("p1"))
    v1.patch_namespaced_pod("p1", "default", {"metadata": {"labels": {"x": "y"}}})
    v1.delete_namespaced_pod("p1", "default")
    thread.join(timeout=10)
    assert [(t, n) for t, n, _ in seen] == [("ADDED", "p1"), ("MODIFIED", "p1"), ("DELETED", "p1")]
    versions = [int(rv) for _, _, rv in seen]
    assert versions == sorted(versions) and len(set(versions)) == 3


def test_watch_replays_from_a_version_and_maps_selector_exits_to_deleted(v1: client.CoreV1Api) -> None:
    v1.create_namespaced_pod("default", pod("a", labels={"app": "web"}))
    rv = v1.list_namespaced_pod("default").metadata.resource_version
    v1.create_namespaced_pod("default", pod("b", labels={"app": "web"}))
    v1.patch_namespaced_pod("a", "default", {"metadata": {"labels": {"app": None}}})
    events = [
        (e["type"], e["object"].metadata.name)
        for e in watch.Watch().stream(
            v1.list_namespaced_pod, "default", label_selector="app=web", resource_version=rv, timeout_seconds=1
        )
    ]
    assert events == [("ADDED", "b"), ("DELETED", "a")]


def test_watch_from_an_expired_version_is_410() -> None:
    with KubeEmulator(store=Store(history=3)) as kube:
        v1 = client.CoreV1Api(client.ApiClient(client.Configuration(host=kube.endpoint)))
        for i in range(6):
            v1.create_namespaced_pod("default", pod(f"p{i}"))
        with pytest.raises(ApiException) as err:
            list(watch.Watch().stream(v1.list_namespaced_pod, "default", resource_version="1", timeout_seconds=1))
        assert err.value.status == 410


def test_the_watch_history_is_kept_per_resource() -> None:
    """As the API server's watch cache per resource: writes of other kinds never expire a version."""
    with KubeEmulator(store=Store(history=3)) as kube:
        v1 = client.CoreV1Api(client.ApiClient(client.Configuration(host=kube.endpoint)))
        v1.create_namespaced_pod("default", pod("a"))
        start = v1.list_namespaced_pod("default").metadata.resource_version
        for i in range(6):
            kube.store.create("nodes", {"metadata": {"name": f"n{i}"}})
        v1.create_namespaced_pod("default", pod("b"))
        events = watch.Watch().stream(v1.list_namespaced_pod, "default", resource_version=start, timeout_seconds=1)
        assert [(e["type"], e["object"].metadata.name) for e in events] == [("ADDED", "b")]


def test_a_watch_allowing_bookmarks_gets_one_before_its_timeout_a_resume_can_start_from() -> None:
    with KubeEmulator(store=Store(history=3)) as kube:
        v1 = client.CoreV1Api(client.ApiClient(client.Configuration(host=kube.endpoint)))
        start = v1.list_namespaced_pod("default").metadata.resource_version
        events: list[tuple[str, str]] = []

        def follow() -> None:
            stream = watch.Watch().stream(
                v1.list_namespaced_pod, "default", resource_version=start, allow_watch_bookmarks=True, timeout_seconds=4
            )
            events.extend((e["type"], e["raw_object"]["metadata"]["resourceVersion"]) for e in stream)

        thread = threading.Thread(target=follow)
        thread.start()
        time.sleep(0.5)
        for i in range(6):  # writes this watch does not select, more than the history holds
            v1.create_namespaced_pod("kube-system", pod(f"p{i}"))
        thread.join(timeout=10)
        current = v1.list_namespaced_pod("default").metadata.resource_version
        assert events == [("BOOKMARK", current)]
        with pytest.raises(ApiException) as err:  # the version the watch started from is gone by now
            list(watch.Watch().stream(v1.list_namespaced_pod, "default", resource_version=start, timeout_seconds=1))
        assert err.value.status == 410
        resumed = watch.Watch().stream(v1.list_namespaced_pod, "default", resource_version=current, timeout_seconds=1)
        assert list(resumed) == []


@pytest.mark.parametrize(("timeout", "bookmarked"), [(2, False), (3, True)])
def test_the_last_bookmark_comes_two_seconds_before_the_timeout(timeout: int, bookmarked: bool) -> None:
    """As the API server's watch cache: 2 s before the deadline, so a watch of 2 s or less gets none."""
    with KubeEmulator() as kube:
        v1 = client.CoreV1Api(client.ApiClient(client.Configuration(host=kube.endpoint)))
        start = v1.list_namespaced_pod("default").metadata.resource_version
        began = time.monotonic()
        seen: list[float] = []
        stream = watch.Watch().stream(
            v1.list_namespaced_pod,
            "default",
            resource_version=start,
            allow_watch_bookmarks=True,
            timeout_seconds=timeout,
        )
        seen.extend(time.monotonic() - began for e in stream if e["type"] == "BOOKMARK")
        ended = time.monotonic() - began
        assert len(seen) == (1 if bookmarked else 0)
        if bookmarked:
            assert timeout - 2 - 0.2 <= seen[0] < timeout - 1, seen
        assert ended >= timeout - 0.1


def test_custom_resource_status_is_only_written_through_the_status_subresource(custom: client.CustomObjectsApi) -> None:
    created = custom.create_cluster_custom_object(*KARPENTER, "nodeclaims", nodeclaim("nc"))
    assert "status" not in created  # dropped on create, as for a CRD with the status subresource
    custom.patch_cluster_custom_object(*KARPENTER, "nodeclaims", "nc", {"status": {"nodeName": "ignored"}})
    assert "status" not in custom.get_cluster_custom_object(*KARPENTER, "nodeclaims", "nc")

    current = custom.get_cluster_custom_object(*KARPENTER, "nodeclaims", "nc")
    current["status"] = {"nodeName": "n1", "providerID": "aws:///us-east-1a/i-1"}
    current["spec"]["expireAfter"] = "1h"  # ignored by a status write
    written = custom.replace_cluster_custom_object_status(*KARPENTER, "nodeclaims", "nc", current)
    assert written["status"]["nodeName"] == "n1"
    assert "expireAfter" not in written["spec"] and written["metadata"]["generation"] == 1
    with pytest.raises(ApiException) as err:
        custom.replace_cluster_custom_object_status(*KARPENTER, "nodeclaims", "nc", current)  # stale version
    assert err.value.status == 409
    with pytest.raises(ApiException) as smp:
        custom.patch_cluster_custom_object(
            *KARPENTER, "nodeclaims", "nc", {"spec": {}}, _content_type="application/strategic-merge-patch+json"
        )
    assert smp.value.status == 415


def test_binding_assigns_a_node_once(v1: client.CoreV1Api) -> None:
    v1.create_namespaced_pod("default", pod("p", phase="Pending"))
    body = {"apiVersion": "v1", "kind": "Binding", "metadata": {"name": "p"}, "target": {"kind": "Node", "name": "n1"}}
    v1.create_namespaced_pod_binding("p", "default", body)
    bound = v1.read_namespaced_pod("p", "default")
    assert bound.spec.node_name == "n1"
    assert [(c.type, c.status) for c in bound.status.conditions] == [("PodScheduled", "True")]
    with pytest.raises(ApiException) as err:
        v1.create_namespaced_pod_binding("p", "default", body)
    assert err.value.status == 409


def test_strategic_merge_merges_conditions_by_type_and_replaces_taints(v1: client.CoreV1Api) -> None:
    v1.create_node(
        {
            "metadata": {"name": "n1"},
            "spec": {"taints": [{"key": "a", "effect": "NoSchedule"}]},
            "status": {
                "conditions": [{"type": "Ready", "status": "False"}, {"type": "MemoryPressure", "status": "False"}]
            },
        }
    )
    v1.patch_node_status("n1", {"status": {"conditions": [{"type": "Ready", "status": "True"}]}})
    v1.patch_node("n1", {"spec": {"taints": [{"key": "b", "effect": "NoExecute"}]}})
    node = v1.read_node("n1")
    assert sorted((c.type, c.status) for c in node.status.conditions) == [
        ("MemoryPressure", "False"),
        ("Ready", "True"),
    ]
    assert [(t.key, t.effect) for t in node.spec.taints] == [("b", "NoExecute")]


def test_json_patch_and_failed_test_operation(v1: client.CoreV1Api) -> None:
    v1.create_node({"metadata": {"name": "n1", "labels": {"a": "1"}}})
    v1.patch_node(
        "n1",
        [{"op": "add", "path": "/metadata/labels/b", "value": "2"}, {"op": "remove", "path": "/metadata/labels/a"}],
    )
    assert v1.read_node("n1").metadata.labels == {"b": "2"}
    with pytest.raises(ApiException) as err:
        v1.patch_node("n1", [{"op": "test", "path": "/metadata/labels/b", "value": "3"}])
    assert err.value.status == 422


def test_delete_with_a_stale_uid_precondition_conflicts(v1: client.CoreV1Api) -> None:
    v1.create_namespaced_pod("default", pod("p"))
    with pytest.raises(ApiException) as err:
        v1.delete_namespaced_pod("p", "default", body={"preconditions": {"uid": "someone-else"}})
    assert err.value.status == 409
    v1.delete_namespaced_pod("p", "default", grace_period_seconds=0)
    assert v1.list_namespaced_pod("default").items == []


def test_list_pages_with_limit_and_continue(v1: client.CoreV1Api) -> None:
    for i in range(5):
        v1.create_namespaced_pod("default", pod(f"p{i}"))
    first = v1.list_namespaced_pod("default", limit=2)
    second = v1.list_namespaced_pod("default", limit=2, _continue=first.metadata._continue)
    third = v1.list_namespaced_pod("default", limit=2, _continue=second.metadata._continue)
    assert [names(x.items) for x in (first, second, third)] == [["p0", "p1"], ["p2", "p3"], ["p4"]]
    assert not third.metadata._continue


def test_discovery_documents(api: client.ApiClient) -> None:
    core = client.CoreV1Api(api).get_api_resources()
    assert {"pods", "pods/eviction", "pods/binding", "nodes/status", "events"} <= {r.name for r in core.resources}
    groups = {g.name for g in client.ApisApi(api).get_api_versions().groups}
    assert {"apps", "policy", "coordination.k8s.io", "karpenter.sh", "karpenter.k8s.aws"} <= groups
    assert client.VersionApi(api).get_code().major == "1"


def test_leases_and_events_round_trip(api: client.ApiClient, v1: client.CoreV1Api) -> None:
    coordination = client.CoordinationV1Api(api)
    coordination.create_namespaced_lease(
        "kube-node-lease", {"metadata": {"name": "n1"}, "spec": {"holderIdentity": "n1"}}
    )
    assert coordination.read_namespaced_lease("n1", "kube-node-lease").spec.holder_identity == "n1"
    v1.create_namespaced_event(
        "default", {"metadata": {"name": "e1"}, "involvedObject": {"kind": "Node", "name": "n1"}, "reason": "Tainted"}
    )
    assert names(v1.list_event_for_all_namespaces(field_selector="involvedObject.name=n1").items) == ["e1"]


def test_in_process_subscribers_see_http_writes(kube: KubeEmulator, v1: client.CoreV1Api) -> None:
    with kube.store.subscribe(resources=["pods"]) as sub:
        v1.create_namespaced_pod("default", pod("p"))
        event = sub.get(timeout=5)
    assert event is not None and (event.type, event.object["metadata"]["name"]) == ("ADDED", "p")


def test_token_is_required_when_configured() -> None:
    with KubeEmulator(token="s3cret") as kube:
        anonymous = client.CoreV1Api(client.ApiClient(client.Configuration(host=kube.endpoint)))
        with pytest.raises(ApiException) as err:
            anonymous.list_node()
        assert err.value.status == 401
        config = client.Configuration(
            host=kube.endpoint, api_key={"BearerToken": "s3cret"}, api_key_prefix={"BearerToken": "Bearer"}
        )
        assert client.CoreV1Api(client.ApiClient(config)).list_node().items == []


def test_scale_subresource_sets_replicas_only(api: client.ApiClient) -> None:
    apps = client.AppsV1Api(api)
    body = {
        "metadata": {"name": "inflate", "labels": {"keep": "me"}},
        "spec": {"replicas": 0, "selector": {"matchLabels": {"app": "inflate"}}, "template": {}},
    }
    apps.create_namespaced_deployment("default", body)
    apps.patch_namespaced_deployment_scale("inflate", "default", {"spec": {"replicas": 5}})
    scale = apps.read_namespaced_deployment_scale("inflate", "default")
    assert (scale.spec.replicas, scale.status.selector) == (5, "app=inflate")
    deployment = apps.read_namespaced_deployment("inflate", "default")
    assert deployment.spec.replicas == 5 and deployment.metadata.labels == {"keep": "me"}
    scale.metadata.resource_version = "1"  # stale
    with pytest.raises(ApiException) as err:
        apps.replace_namespaced_deployment_scale("inflate", "default", scale)
    assert err.value.status == 409


def test_pages_cover_every_namespace_in_order(v1: client.CoreV1Api) -> None:
    for ns in ("a", "a-b", "b"):
        if ns != "default":
            v1.create_namespace({"metadata": {"name": ns}})
        for i in range(2):
            v1.create_namespaced_pod(ns, pod(f"p{i}"))
    seen: list[tuple[str, str]] = []
    token = None
    while True:
        page = v1.list_pod_for_all_namespaces(limit=1, _continue=token)
        seen += [(p.metadata.namespace, p.metadata.name) for p in page.items]
        token = page.metadata._continue
        if not token:
            break
    assert seen == sorted(seen) and len(seen) == 6


def test_lists_stay_in_order_across_creates_and_deletes_after_the_first_list() -> None:
    """The sorted keys a list walks are kept in order by each create and delete, not resorted."""
    store = Store()
    order = ["m", "c", "x", "a", "q"]
    for name in order:
        store.create("pods", pod(name))
    assert [p["metadata"]["name"] for p in store.list("pods", namespace="default").items] == sorted(order)
    store.create("pods", pod("b"))
    store.delete("pods", "m", namespace="default")
    store.create("pods", pod("z"))
    store.delete("pods", "a", namespace="default")
    expected = sorted({*order, "b", "z"} - {"m", "a"})
    assert [p["metadata"]["name"] for p in store.list("pods", namespace="default").items] == expected


def test_snapshot_is_the_stored_object_itself_and_none_when_absent() -> None:
    store = Store()
    store.create("pods", pod("web", node="n1"))
    shared = store.snapshot("pods", "web", namespace="default")
    assert shared is not None and shared is store.objects("pods")[0]  # no copy, unlike get
    assert store.get("pods", "web", namespace="default") is not shared
    assert store.snapshot("pods", "web", namespace="other") is None
    assert store.snapshot("nodes", "n1") is None
    store.mutate("pods", "web", lambda p: p["metadata"].setdefault("labels", {}).update(app="web"), namespace="default")
    assert store.snapshot("pods", "web", namespace="default") is not shared  # a write replaces the snapshot
    assert "app" not in shared["metadata"].get("labels", {})


def test_a_nodepool_update_never_adds_or_removes_replicas(custom: client.CustomObjectsApi) -> None:
    template = {
        "spec": {
            "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
            "requirements": [],
        }
    }
    for name, spec in (("static", {"replicas": 2, "template": template}), ("dynamic", {"template": template})):
        custom.create_cluster_custom_object(
            *KARPENTER, "nodepools", {"apiVersion": "karpenter.sh/v1", "kind": "NodePool", "metadata": {"name": name},
                                      "spec": spec}
        )  # fmt: skip
    custom.patch_cluster_custom_object(*KARPENTER, "nodepools", "static", {"spec": {"replicas": 0}})  # a scale
    for name, patch in (("static", {"spec": {"replicas": None}}), ("dynamic", {"spec": {"replicas": 3}})):
        with pytest.raises(ApiException) as err:
            custom.patch_cluster_custom_object(*KARPENTER, "nodepools", name, patch)
        assert err.value.status == 422 and "spec.replicas cannot be added to or removed from" in str(err.value.body)
    assert custom.get_cluster_custom_object(*KARPENTER, "nodepools", "static")["spec"]["replicas"] == 0
