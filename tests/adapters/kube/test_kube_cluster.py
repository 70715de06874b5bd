"""KubeCluster (the Cluster port) end to end against the Kubernetes API emulator."""

from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
import yaml

from nodesmith.adapters.kube import KubeCluster, KubeConnection, KubeCredentials, build_api_client
from nodesmith.adapters.kube.retry import RetryPolicy
from nodesmith.core.api.nodeclaim import NodeClaim
from nodesmith.core.errors import ConflictError, KubernetesError, NotFoundError
from nodesmith.core.model import Taint
from nodesmith.core.ports import ObjectRef
from nodesmith.sim.kube import KubeEmulator, Store

DISRUPTED = Taint(key="karpenter.sh/disrupted", effect="NoSchedule")
MANIFESTS = Path(__file__).resolve().parents[3] / "lambdas" / "nodesmith" / "sim" / "manifests"


@pytest.fixture
def store(kube: KubeEmulator) -> Store:
    return kube.store


@pytest.fixture
def cluster(kube: KubeEmulator) -> KubeCluster:
    api = build_api_client(cluster_endpoint=kube.endpoint, kube_auth="none")
    return KubeCluster(api_client=api, page_size=2, retry=RetryPolicy(sleep=lambda _: None))  # retries never wait


def add_node(store: Store, name: str, *, instance: str = "i-1", taints: list[dict[str, str]] | None = None) -> None:
    store.create(
        "nodes",
        {
            "metadata": {"name": name},
            "spec": {"providerID": f"aws:///us-east-1a/{instance}", "taints": taints or []},
            "status": {
                "conditions": [{"type": "Ready", "status": "True"}],
                "allocatable": {"cpu": "2", "memory": "4Gi", "pods": "110"},
            },
        },
    )


def add_pod(
    store: Store, name: str, *, node: str | None = None, labels: dict[str, str] | None = None, cpu: str = "250m"
) -> dict[str, Any]:
    spec: dict[str, Any] = {"containers": [{"name": "c", "resources": {"requests": {"cpu": cpu}}}]}
    if node:
        spec["nodeName"] = node
    return store.create(
        "pods",
        {
            "metadata": {"name": name, "namespace": "default", "labels": labels or {}},
            "spec": spec,
            "status": {"phase": "Running"},
        },
    )


def nodeclaim(name: str) -> NodeClaim:
    return NodeClaim.model_validate(
        {
            "metadata": {
                "name": name,
                "labels": {"karpenter.sh/nodepool": "default"},
                "finalizers": ["karpenter.sh/termination"],
            },
            "spec": {
                "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
                "requirements": [{"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["spot"]}],
            },
        }
    )


def test_snapshot_reads_parse_into_core_types_across_pages(cluster: KubeCluster, store: Store) -> None:
    add_node(store, "n1")
    add_node(store, "n2", instance="i-2")
    for i in range(3):
        add_pod(store, f"on-n1-{i}", node="n1")
    add_pod(store, "on-n2", node="n2", cpu="1")
    add_pod(store, "pending")
    store.create(
        "daemonsets.apps",
        {
            "metadata": {"name": "agent", "namespace": "kube-system"},
            "spec": {
                "selector": {"matchLabels": {"a": "b"}},
                "template": {
                    "metadata": {"labels": {"a": "b"}},
                    "spec": {"containers": [{"name": "c", "resources": {"requests": {"memory": "64Mi"}}}]},
                },
            },
        },
    )
    store.create(
        "poddisruptionbudgets.policy",
        {
            "metadata": {"name": "web", "namespace": "default"},
            "spec": {"maxUnavailable": "50%", "selector": {"matchLabels": {}}},
        },
    )

    assert len(cluster.list_pods()) == 5  # page_size=2: three pages
    on_n1 = cluster.list_pods(node_name="n1")
    assert sorted(p.name for p in on_n1) == ["on-n1-0", "on-n1-1", "on-n1-2"]
    assert on_n1[0].requests["cpu"] == 250 and on_n1[0].uid
    nodes = {n.name: n for n in cluster.list_nodes()}
    assert nodes["n2"].instance_id == "i-2" and nodes["n2"].allocatable["memory"] == 4 * 2**30 and nodes["n2"].ready
    [daemonset] = cluster.list_daemonsets()
    assert daemonset.pod.requests["memory"] == 64 * 2**20
    [pdb] = cluster.list_pdbs()
    assert pdb.max_unavailable == "50%" and pdb.disruptions_allowed is not None


def test_karpenter_resources_from_the_demo_manifests(cluster: KubeCluster, store: Store) -> None:
    for doc in yaml.safe_load_all((MANIFESTS / "nodepool.yaml").read_text()):
        store.apply(doc)
    broken = {
        "apiVersion": "karpenter.sh/v1",
        "kind": "NodePool",
        "metadata": {"name": "broken"},
        "spec": {"template": {"spec": {"requirments": []}}},
    }
    store.apply(broken)
    assert [p.name for p in cluster.list_nodepools()] == ["default"]  # the invalid one is skipped
    assert [c.name for c in cluster.list_ec2nodeclasses()] == ["default"]


def test_update_nodepool_status_writes_the_status_subresource_only(cluster: KubeCluster, store: Store) -> None:
    for doc in yaml.safe_load_all((MANIFESTS / "nodepool.yaml").read_text()):
        store.apply(doc)
    spec_before = store.get("nodepools.karpenter.sh", "default")["spec"]
    ready = {"type": "Ready", "status": "True", "reason": "Ready", "lastTransitionTime": "2026-01-01T00:00:00Z"}

    cluster.update_nodepool_status(name="default", status={"nodes": 2, "conditions": [ready]})

    stored = store.get("nodepools.karpenter.sh", "default")
    assert stored["status"] == {"nodes": 2, "conditions": [ready]}
    assert stored["spec"] == spec_before
    (pool,) = cluster.list_nodepools()
    assert pool.status is not None
    assert pool.status.nodes == 2
    with pytest.raises(NotFoundError):
        cluster.update_nodepool_status(name="gone", status={"nodes": 0})


def test_ec2nodeclass_status_is_merged_and_its_spec_kept(cluster: KubeCluster, store: Store) -> None:
    for doc in yaml.safe_load_all((MANIFESTS / "nodepool.yaml").read_text()):
        store.apply(doc)
    entry = {"availabilityZone": "us-east-1a", "id": "cr-0a1", "instanceType": "m5.large", "ownerID": "123456789012",
             "instanceMatchCriteria": "targeted", "reservationType": "default", "interruptible": False,
             "state": "active"}  # fmt: skip

    written = cluster.patch_ec2nodeclass_status(name="default", status={"capacityReservations": [entry]})

    (nodeclass,) = cluster.list_ec2nodeclasses()
    assert written == nodeclass  # as written, resourceVersion included
    assert nodeclass.status is not None
    assert [r.id for r in nodeclass.status.capacity_reservations] == ["cr-0a1"]
    assert nodeclass.spec.role == "KarpenterNodeRole-demo"
    with pytest.raises(NotFoundError):
        cluster.patch_ec2nodeclass_status(name="absent", status={"capacityReservations": []})


def test_get_node(cluster: KubeCluster, kube: KubeEmulator) -> None:
    add_node(kube.store, "n1", instance="i-abc")
    node = cluster.get_node(name="n1")
    assert node is not None and node.provider_id == "aws:///us-east-1a/i-abc"
    assert cluster.get_node(name="missing") is None


def test_taint_and_cordon_is_idempotent_and_keeps_other_taints(cluster: KubeCluster, store: Store) -> None:
    add_node(store, "n1", taints=[{"key": "dedicated", "value": "gpu", "effect": "NoSchedule"}])
    assert cluster.taint_and_cordon(node_name="n1", taint=DISRUPTED) is True
    version = store.get("nodes", "n1")["metadata"]["resourceVersion"]
    assert cluster.taint_and_cordon(node_name="n1", taint=DISRUPTED) is True
    node = store.get("nodes", "n1")
    assert node["metadata"]["resourceVersion"] == version  # nothing written the second time
    assert node["spec"]["unschedulable"] is True
    assert [(t["key"], t["effect"]) for t in node["spec"]["taints"]] == [
        ("dedicated", "NoSchedule"),
        ("karpenter.sh/disrupted", "NoSchedule"),
    ]
    assert cluster.taint_and_cordon(node_name="gone", taint=DISRUPTED) is False


def test_a_plain_cordon_adds_no_taint(cluster: KubeCluster, store: Store) -> None:
    add_node(store, "n1", taints=[{"key": "dedicated", "value": "gpu", "effect": "NoSchedule"}])
    assert cluster.taint_and_cordon(node_name="n1", taint=None) is True
    node = store.get("nodes", "n1")
    assert node["spec"]["unschedulable"] is True
    assert [t["key"] for t in node["spec"]["taints"]] == ["dedicated"]


def test_taint_and_cordon_retries_instead_of_overwriting_a_concurrent_taint(cluster: KubeCluster, store: Store) -> None:
    add_node(store, "n1")
    real_request = cluster.rest.request
    raced = []

    def racing_request(method: str, url_path: str, **kwargs: Any) -> Any:
        if method == "PATCH" and not raced:
            raced.append(True)
            store.mutate("nodes", "n1", lambda n: n["spec"]["taints"].append({"key": "other", "effect": "NoExecute"}))
        return real_request(method, url_path, **kwargs)

    cluster.rest.request = racing_request  # type: ignore[method-assign]
    assert cluster.taint_and_cordon(node_name="n1", taint=DISRUPTED) is True
    keys = sorted(t["key"] for t in store.get("nodes", "n1")["spec"]["taints"])
    assert keys == ["karpenter.sh/disrupted", "other"]


def test_cordon_right_after_get_node_patches_the_read_document_without_a_second_get(
    cluster: KubeCluster, kube: KubeEmulator, store: Store
) -> None:
    add_node(store, "n1")
    assert cluster.get_node(name="n1") is not None
    before = kube.requests
    assert cluster.taint_and_cordon(node_name="n1", taint=DISRUPTED) is True
    assert kube.requests - before == 1  # the PATCH alone: the read of get_node stood in for the GET
    assert store.get("nodes", "n1")["spec"]["unschedulable"] is True


def test_a_node_changed_since_get_node_is_reread_not_overwritten(cluster: KubeCluster, store: Store) -> None:
    add_node(store, "n1")
    assert cluster.get_node(name="n1") is not None
    store.mutate("nodes", "n1", lambda n: n["spec"]["taints"].append({"key": "other", "effect": "NoExecute"}))
    assert cluster.taint_and_cordon(node_name="n1", taint=DISRUPTED) is True
    keys = sorted(t["key"] for t in store.get("nodes", "n1")["spec"]["taints"])
    assert keys == ["karpenter.sh/disrupted", "other"]  # the stale read's patch was refused (409) and retried


def test_label_node_merges_and_reports_a_missing_node(cluster: KubeCluster, store: Store) -> None:
    store.create("nodes", {"metadata": {"name": "n1", "labels": {"keep": "me"}}})
    cluster.label_node(node_name="n1", labels={"karpenter.sh/registered": "true"})
    assert store.get("nodes", "n1")["metadata"]["labels"] == {"keep": "me", "karpenter.sh/registered": "true"}
    with pytest.raises(NotFoundError):
        cluster.label_node(node_name="missing", labels={"a": "b"})


def test_evict_reports_evicted_blocked_and_gone(cluster: KubeCluster, store: Store) -> None:
    for i in range(2):
        add_pod(store, f"web-{i}", node="n1", labels={"app": "web"})
    store.create(
        "poddisruptionbudgets.policy",
        {
            "metadata": {"name": "web", "namespace": "default"},
            "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "web"}}},
        },
    )
    pods = {p.name: p for p in cluster.list_pods(node_name="n1")}
    assert cluster.evict(pod=pods["web-0"]) == "evicted"
    assert cluster.evict(pod=pods["web-1"]) == "blocked"
    assert cluster.evict(pod=pods["web-0"]) == "gone"


def test_evict_and_delete_leave_a_same_named_replacement_alone(cluster: KubeCluster, store: Store) -> None:
    add_pod(store, "db-0", node="n1")
    old = cluster.list_pods()[0]
    store.delete("pods", "db-0", namespace="default")
    add_pod(store, "db-0", node="n2")  # a StatefulSet recreated it
    assert cluster.evict(pod=old) == "gone"
    cluster.delete_pod(pod=old, grace_period_seconds=0)
    assert store.get("pods", "db-0", namespace="default")["spec"]["nodeName"] == "n2"


def test_delete_pod_bypasses_budgets_and_deletes_are_idempotent(cluster: KubeCluster, store: Store) -> None:
    add_pod(store, "only", node="n1", labels={"app": "x"})
    store.create(
        "poddisruptionbudgets.policy",
        {
            "metadata": {"name": "x", "namespace": "default"},
            "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "x"}}},
        },
    )
    [pod] = cluster.list_pods()
    assert cluster.evict(pod=pod) == "blocked"
    cluster.delete_pod(pod=pod, grace_period_seconds=0)
    cluster.delete_pod(pod=pod)
    assert cluster.list_pods() == []
    add_node(store, "n1")
    cluster.delete_node(name="n1")
    cluster.delete_node(name="n1")
    assert cluster.list_nodes() == []


def test_nodeclaim_lifecycle(cluster: KubeCluster, store: Store) -> None:
    created = cluster.create_nodeclaim(nodeclaim=nodeclaim("default-abcde"))
    assert created.metadata.uid and created.metadata.resource_version
    with pytest.raises(ConflictError):
        cluster.create_nodeclaim(nodeclaim=nodeclaim("default-abcde"))

    created.status.provider_id = "aws:///us-east-1a/i-1"
    created.status.node_name = "n1"
    updated = cluster.update_nodeclaim_status(nodeclaim=created)
    assert updated.status.provider_id == "aws:///us-east-1a/i-1"
    assert [c.status.node_name for c in cluster.list_nodeclaims()] == ["n1"]
    got = cluster.get_nodeclaim(name="default-abcde")
    assert got is not None and got.status.node_name == "n1" and got.name == "default-abcde"
    assert cluster.get_nodeclaim(name="default-other") is None
    with pytest.raises(ConflictError):
        cluster.update_nodeclaim_status(nodeclaim=created)  # read before the last write

    cluster.delete_nodeclaim(name="default-abcde")  # has our finalizer: it stays, deleting
    (deleting,) = cluster.list_nodeclaims()
    assert deleting.metadata.deletion_timestamp is not None
    assert deleting.metadata.finalizers == ["karpenter.sh/termination"]
    cluster.delete_nodeclaim(name="default-abcde")  # deleting already: no error
    cluster.remove_nodeclaim_finalizer(name="default-abcde", finalizer="karpenter.sh/termination")  # then it goes
    assert cluster.list_nodeclaims() == []
    assert cluster.get_nodeclaim(name="default-abcde") is None
    cluster.delete_nodeclaim(name="default-abcde")  # gone: no error
    with pytest.raises(NotFoundError):
        cluster.update_nodeclaim_status(nodeclaim=created)


def test_nodeclaim_labels_are_merged_in(cluster: KubeCluster) -> None:
    cluster.create_nodeclaim(nodeclaim=nodeclaim("default-aaaaa"))

    cluster.label_nodeclaim(name="default-aaaaa", labels={"node.kubernetes.io/instance-type": "m5.large"})
    cluster.label_nodeclaim(name="default-aaaaa", labels={"team": "a"})

    got = cluster.get_nodeclaim(name="default-aaaaa")
    assert got is not None
    assert got.metadata.labels == {
        "karpenter.sh/nodepool": "default",
        "node.kubernetes.io/instance-type": "m5.large",
        "team": "a",
    }
    with pytest.raises(NotFoundError):
        cluster.label_nodeclaim(name="default-zzzzz", labels={"team": "a"})


def test_record_event_posts_and_never_raises(cluster: KubeCluster, kube: KubeEmulator) -> None:
    ref = ObjectRef(kind="NodeClaim", name="default-abcde", uid="u-1", api_version="karpenter.sh/v1")
    cluster.record_event(ref=ref, reason="Launched", message="x" * 5000, type_="Normal")
    [event] = kube.store.list("events", namespace="default").items
    assert event["involvedObject"] == {
        "kind": "NodeClaim",
        "name": "default-abcde",
        "uid": "u-1",
        "apiVersion": "karpenter.sh/v1",
    }
    assert event["reason"] == "Launched" and len(event["message"]) == 1024
    kube.stop()
    cluster.record_event(ref=ref, reason="Launched", message="after stop")  # logged, not raised


def test_unreachable_api_server_is_a_kubernetes_error_with_status_zero() -> None:
    with KubeEmulator() as kube:
        endpoint = kube.endpoint
    cluster = KubeCluster(
        api_client=build_api_client(cluster_endpoint=endpoint, kube_auth="none", connection=KubeConnection(retries=0)),
        request_timeout=(1.0, 1.0),
        retry=RetryPolicy(sleep=lambda _: None),
    )
    with pytest.raises(KubernetesError) as err:
        cluster.list_nodes()
    assert err.value.status == 0 and cluster.rest.retries == RetryPolicy().attempts - 1


def test_a_success_whose_body_is_not_json_is_a_kubernetes_error_naming_the_call() -> None:
    """A proxy or load balancer in front of the API server can answer 200 with an HTML page."""

    class Html(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = b"<html>signed out</html>"
            self.send_response(200)
            self.send_header("Content-Type", "text/html")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Html)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        endpoint = f"http://127.0.0.1:{server.server_address[1]}"
        cluster = KubeCluster(
            api_client=build_api_client(
                cluster_endpoint=endpoint, kube_auth="none", connection=KubeConnection(retries=0)
            )
        )
        with pytest.raises(KubernetesError, match="list nodes: the API server's answer is not JSON") as err:
            cluster.list_nodes()
        assert err.value.status == 200
    finally:
        server.shutdown()
        server.server_close()


def test_bearer_token_auth(kube: KubeEmulator) -> None:
    kube.token = "s3cret"
    good = KubeCluster(
        api_client=build_api_client(
            cluster_endpoint=kube.endpoint, kube_auth="token", credentials=KubeCredentials(kube_token="s3cret")
        )
    )
    assert good.list_nodes() == []
    bad = KubeCluster(
        api_client=build_api_client(
            cluster_endpoint=kube.endpoint, kube_auth="token", credentials=KubeCredentials(kube_token="nope")
        )
    )
    with pytest.raises(KubernetesError) as err:
        bad.list_nodes()
    assert err.value.status == 401
