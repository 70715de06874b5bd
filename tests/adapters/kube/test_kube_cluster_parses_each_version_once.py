"""KubeCluster parses a pod or Node once per resourceVersion: listed again unchanged, the parse is reused;
changed, deleted or recreated under the same name, it is read afresh."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pytest

from nodesmith.adapters.kube.parsed import ParsedObjects
from nodesmith.core.model import Taint

if TYPE_CHECKING:
    from collections.abc import Mapping

    from nodesmith.adapters.kube import KubeCluster
    from nodesmith.sim.kube import KubeEmulator, Store


def _pod(store: Store, name: str, *, node: str = "n1", cpu: str = "250m") -> None:
    store.create("pods", {
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"nodeName": node, "containers": [{"name": "c", "resources": {"requests": {"cpu": cpu}}}]},
    })  # fmt: skip


def _node(store: Store, name: str) -> None:
    store.create("nodes", {
        "metadata": {"name": name},
        "spec": {"providerID": "aws:///us-east-1a/i-1"},
        "status": {"conditions": [{"type": "Ready", "status": "True"}], "allocatable": {"cpu": "2"}},
    })  # fmt: skip


def test_an_unchanged_pod_is_not_parsed_again_and_a_changed_one_is(cluster: KubeCluster, kube: KubeEmulator) -> None:
    store = kube.store
    _pod(store, "a")
    _pod(store, "b", node="n2")
    first = {p.name: p for p in cluster.list_pods()}
    parsed = cluster._pods.parsed
    assert parsed == 2

    again = {p.name: p for p in cluster.list_pods()}
    assert cluster._pods.parsed == parsed and again["a"] is first["a"]  # the same version: the same parse
    assert cluster.list_pods(node_name="n1")[0] is first["a"]  # a node's list reuses it too

    store.mutate("pods", "a", lambda p: p["metadata"].setdefault("labels", {}).update(app="web"), namespace="default")
    changed = {p.name: p for p in cluster.list_pods()}
    assert cluster._pods.parsed == parsed + 1
    assert changed["a"].labels == {"app": "web"} and changed["b"] is first["b"]

    store.delete("pods", "a", namespace="default")
    _pod(store, "a", cpu="1")  # the same name, a new uid
    recreated = {p.name: p for p in cluster.list_pods()}
    assert recreated["a"].requests["cpu"] == 1000
    assert len(cluster._pods) == 2  # the deleted one's parse was dropped by the full list


def test_nodes_are_parsed_once_per_version_by_list_and_get(cluster: KubeCluster, kube: KubeEmulator) -> None:
    _node(kube.store, "n1")
    listed = cluster.list_nodes()[0]
    assert cluster.get_node(name="n1") is listed
    assert cluster.taint_and_cordon(node_name="n1", taint=Taint(key="karpenter.sh/disrupted", effect="NoSchedule"))
    cordoned = cluster.list_nodes()[0]
    assert cordoned is not listed and cordoned.unschedulable and not listed.unschedulable


def test_an_item_without_uid_or_version_is_parsed_every_time_and_failures_are_not_cached() -> None:
    calls: list[str] = []

    def parse(item: Mapping[str, Any]) -> str:
        calls.append(item["metadata"]["name"])
        if item["metadata"]["name"] == "bad":
            raise ValueError("unreadable")
        return str(item["metadata"]["name"])

    parsed = ParsedObjects(parse, limit=2)
    bare = {"metadata": {"name": "bare"}}
    assert parsed(bare) == parsed(bare) == "bare" and calls == ["bare", "bare"]
    bad = {"metadata": {"name": "bad", "uid": "u0", "resourceVersion": "1"}}
    for _ in range(2):
        with pytest.raises(ValueError, match="unreadable"):
            parsed(bad)
    assert calls.count("bad") == 2

    for n in range(3):  # past the limit the cache keeps what it holds and stops growing
        parsed({"metadata": {"name": f"p{n}", "uid": f"u{n + 1}", "resourceVersion": "1"}})
    assert len(parsed) <= 2
    first = {"metadata": {"name": "p0", "uid": "u1", "resourceVersion": "1"}}
    parsed(first)
    assert calls.count("p0") == 1, "a parse held before the limit was reached is still reused"
