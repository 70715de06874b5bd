"""The Kubernetes API emulator's deletion and eviction, as the official ``kubernetes`` client sees it: the Eviction
API honours PodDisruptionBudgets (controller replicas count, pending and unready pods are evictable when the budget
is met), finalizers and grace periods delay deletion, and the store's pods-by-node index and budget counts follow
every create, bind, relabel and delete."""

from __future__ import annotations

import pytest
from kube_objects import KARPENTER, names, nodeclaim, pod
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from nodesmith.sim.kube import Store
from nodesmith.sim.kube.errors import ApiError


def _evict(v1: client.CoreV1Api, name: str) -> int:
    body = {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": name, "namespace": "default"}}
    try:
        v1.create_namespaced_pod_eviction(name, "default", body)
    except ApiException as exc:
        return int(exc.status)
    return 201


def test_eviction_honours_pod_disruption_budgets(api: client.ApiClient, v1: client.CoreV1Api) -> None:
    for i in range(3):
        v1.create_namespaced_pod("default", pod(f"web-{i}", labels={"app": "web"}, node="n1"))
    v1.create_namespaced_pod("default", pod("lonely", node="n1"))
    client.PolicyV1Api(api).create_namespaced_pod_disruption_budget(
        "default",
        {"metadata": {"name": "web"}, "spec": {"minAvailable": 2, "selector": {"matchLabels": {"app": "web"}}}},
    )
    assert _evict(v1, "lonely") == 201  # no budget selects it
    assert _evict(v1, "web-0") == 201  # 3 healthy, 2 needed
    assert _evict(v1, "web-1") == 429  # 2 healthy, 2 needed
    assert _evict(v1, "web-0") == 404  # already gone
    assert names(v1.list_namespaced_pod("default").items) == ["web-1", "web-2"]
    pdb = client.PolicyV1Api(api).read_namespaced_pod_disruption_budget("web", "default")
    assert (pdb.status.current_healthy, pdb.status.desired_healthy, pdb.status.disruptions_allowed) == (2, 2, 0)


def test_eviction_counts_controller_replicas_for_max_unavailable(api: client.ApiClient, v1: client.CoreV1Api) -> None:
    client.AppsV1Api(api).create_namespaced_replica_set(
        "default", {"metadata": {"name": "rs"}, "spec": {"replicas": 4, "selector": {"matchLabels": {"app": "w"}}}}
    )
    for i in range(4):
        v1.create_namespaced_pod("default", pod(f"w-{i}", labels={"app": "w"}, owner=("ReplicaSet", "rs")))
    client.PolicyV1Api(api).create_namespaced_pod_disruption_budget(
        "default",
        {"metadata": {"name": "w"}, "spec": {"maxUnavailable": "25%", "selector": {"matchLabels": {"app": "w"}}}},
    )
    assert _evict(v1, "w-0") == 201
    # Three pods remain but the ReplicaSet still wants four: one is already unavailable.
    assert _evict(v1, "w-1") == 429


def test_pending_and_unready_pods_are_evictable_when_the_budget_is_met(
    api: client.ApiClient, v1: client.CoreV1Api
) -> None:
    v1.create_namespaced_pod("default", pod("ok-0", labels={"app": "x"}))
    v1.create_namespaced_pod("default", pod("pending", labels={"app": "x"}, phase="Pending"))
    unready = pod("unready", labels={"app": "x"})
    unready["status"]["conditions"] = [{"type": "Ready", "status": "False"}]
    v1.create_namespaced_pod("default", unready)
    client.PolicyV1Api(api).create_namespaced_pod_disruption_budget(
        "default", {"metadata": {"name": "x"}, "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "x"}}}}
    )
    assert _evict(v1, "ok-0") == 429
    assert _evict(v1, "pending") == 201
    assert _evict(v1, "unready") == 201


def test_finalizers_delay_deletion_until_removed(custom: client.CustomObjectsApi) -> None:
    custom.create_cluster_custom_object(
        *KARPENTER, "nodeclaims", nodeclaim("nc", finalizers=["karpenter.sh/termination"])
    )
    custom.delete_cluster_custom_object(*KARPENTER, "nodeclaims", "nc")
    marked = custom.get_cluster_custom_object(*KARPENTER, "nodeclaims", "nc")
    assert marked["metadata"]["deletionTimestamp"]
    with pytest.raises(ApiException) as err:
        custom.patch_cluster_custom_object(
            *KARPENTER, "nodeclaims", "nc", {"metadata": {"finalizers": ["karpenter.sh/termination", "other"]}}
        )
    assert err.value.status == 422
    custom.patch_cluster_custom_object(*KARPENTER, "nodeclaims", "nc", {"metadata": {"finalizers": None}})
    with pytest.raises(ApiException) as gone:
        custom.get_cluster_custom_object(*KARPENTER, "nodeclaims", "nc")
    assert gone.value.status == 404


def test_graceful_pod_deletion_waits_for_the_grace_period() -> None:
    now = [1_000.0]
    store = Store(clock=lambda: now[0], graceful_pod_deletion=True)
    store.create("pods", pod("bound", node="n1"))
    store.create("pods", pod("quick", node="n1"))
    store.create("pods", pod("staying", node="n1"))
    store.delete("pods", "bound", namespace="default", grace_period_seconds=30)
    store.delete("pods", "quick", namespace="default", grace_period_seconds=10)
    assert store.get("pods", "bound", namespace="default")["metadata"]["deletionGracePeriodSeconds"] == 30
    assert store.finish_graceful_deletions() == 0
    now[0] += 11
    assert store.finish_graceful_deletions() == 1
    assert store.find("pods", "quick", namespace="default") is None
    now[0] += 20
    assert store.finish_graceful_deletions() == 1
    assert store.find("pods", "bound", namespace="default") is None
    now[0] += 3600
    assert store.finish_graceful_deletions() == 0
    assert store.find("pods", "staying", namespace="default") is not None


def test_the_pods_by_node_index_follows_creates_binds_graceful_and_final_deletes() -> None:
    """``spec.nodeName=X`` lists come from an index by node (as the apiserver's watch cache keeps one):
    it must follow every write, or a drain would see pods that left or miss ones that arrived."""
    now = [1_000.0]
    store = Store(clock=lambda: now[0], graceful_pod_deletion=True)

    def on(node: str) -> list[str]:
        return sorted(o["metadata"]["name"] for o in store.list("pods", field_selector=f"spec.nodeName={node}").items)

    store.create("pods", pod("a", node="n1"))
    store.create("pods", pod("b"))
    store.create("pods", pod("c", node="n2"))
    assert (on("n1"), on(""), on("n2")) == (["a"], ["b"], ["c"])

    store.bind("b", namespace="default", node_name="n1")
    assert (on("n1"), on("")) == (["a", "b"], [])

    store.delete("pods", "a", namespace="default", grace_period_seconds=30)  # terminating: still on n1
    assert on("n1") == ["a", "b"]
    now[0] += 31
    store.finish_graceful_deletions()
    assert on("n1") == ["b"]

    store.delete("pods", "c", namespace="default", grace_period_seconds=0)
    assert on("n2") == [] and on("n3") == []
    store.create("pods", pod("c", node="n3"))  # the same name again, elsewhere
    assert (on("n2"), on("n3")) == ([], ["c"])
    # selectors the index does not serve still scan
    assert sorted(o["metadata"]["name"] for o in store.list("pods", field_selector="spec.nodeName!=n1").items) == ["c"]


def test_the_budget_counts_follow_relabels_deletes_and_namespaces() -> None:
    """An eviction's budget check reads the pods its selector matches from an index by label: the
    index must follow every write, or a budget would count pods it no longer selects (and allow an
    eviction it must refuse) or miss new ones."""
    store = Store()
    store.create("namespaces", {"metadata": {"name": "other"}})
    for i in range(3):
        store.create("pods", pod(f"web-{i}", labels={"app": "web", "tier": "front"}, node="n1"))
    store.create("pods", pod("twin", labels={"app": "web", "tier": "front"}, node="n1"), namespace="other")
    budget = {"minAvailable": 2, "selector": {"matchLabels": {"app": "web", "tier": "front"}}}
    store.create("poddisruptionbudgets.policy", {"metadata": {"name": "web", "namespace": "default"}, "spec": budget})

    def healthy() -> int:
        pdb = store.get("poddisruptionbudgets.policy", "web", namespace="default")
        return int(pdb["status"]["currentHealthy"])

    assert healthy() == 3  # the pod of the same labels in "other" is not counted
    relabelled = store.get("pods", "web-2", namespace="default")
    relabelled["metadata"]["labels"] = {"app": "web", "tier": "back"}
    store.replace("pods", relabelled, namespace="default")
    assert healthy() == 2
    with pytest.raises(ApiError) as refused:
        store.evict("web-0", namespace="default")
    assert refused.value.code == 429
    store.create("pods", pod("web-3", labels={"tier": "front", "app": "web"}, node="n2"))
    assert healthy() == 3
    store.evict("web-0", namespace="default")
    store.delete("pods", "web-1", namespace="default")
    assert healthy() == 1
    # a selector with only matchExpressions is not served by the index and still matches
    expressions = {"matchExpressions": [{"key": "tier", "operator": "In", "values": ["back"]}]}
    backs = store.pdb_status_of({"metadata": {"namespace": "default"}, "spec": {"selector": expressions}})
    assert backs["currentHealthy"] == 1
