"""KubeCluster.watch_pods follows unbound pods through the Kubernetes watch API (against the emulator):
a list first, then changes from its resourceVersion; binding is a DELETED (selector exit); a
resumed watch sees only later changes; a too-old version is a KubernetesError with status 410.
KubeCluster.untaint_and_uncordon undoes taint_and_cordon, lifting only the cordon taint_and_cordon added."""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any

import pytest

from nodesmith.core.drain import CORDONED_ANNOTATION
from nodesmith.core.errors import KubernetesError
from nodesmith.core.model import Taint
from nodesmith.sim.kube import KubeEmulator, Store

if TYPE_CHECKING:
    from collections.abc import Iterator

    from nodesmith.adapters.kube import KubeCluster

DISRUPTED = Taint(key="karpenter.sh/disrupted", effect="NoSchedule")


@pytest.fixture
def kube() -> Iterator[KubeEmulator]:
    with KubeEmulator(store=Store(history=50)) as emulator:
        yield emulator


def add_pod(store: Store, name: str, *, node: str | None = None) -> None:
    spec: dict[str, Any] = {"containers": [{"name": "c", "resources": {"requests": {"cpu": "1"}}}]}
    if node:
        spec["nodeName"] = node
    store.create("pods", {"metadata": {"name": name, "namespace": "default"}, "spec": spec})


def mark_unschedulable(store: Store, name: str) -> None:
    cond = {"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}
    store.mutate("pods", name, lambda p: p.setdefault("status", {}).update(conditions=[cond]), namespace="default")


def bind(store: Store, name: str) -> None:
    store.mutate("pods", name, lambda p: p["spec"].update(nodeName="n1"), namespace="default")


def test_the_stream_lists_unbound_pods_then_reports_them_becoming_unschedulable_and_bound(
    kube: KubeEmulator, cluster: KubeCluster
) -> None:
    store = kube.store
    add_pod(store, "waiting")
    add_pod(store, "running", node="n0")
    seen: list[tuple[str, list[tuple[str, bool, str | None]]]] = []
    changed = threading.Event()

    def writer() -> None:
        changed.wait(10)
        mark_unschedulable(store, "waiting")
        bind(store, "waiting")

    threading.Thread(target=writer, daemon=True).start()
    for event in cluster.watch_pods(timeout_seconds=5):
        seen.append((event.type, [(p.key, p.unschedulable, p.node_name) for p in event.pods]))
        changed.set()
        if len(seen) == 3:
            break
    assert seen == [
        ("SYNCED", [("default/waiting", False, None)]),  # the bound pod is not selected
        ("MODIFIED", [("default/waiting", True, None)]),
        ("DELETED", [("default/waiting", True, "n1")]),  # bound: it left spec.nodeName=
    ]


def test_a_watch_resumed_from_a_version_sees_only_later_changes(kube: KubeEmulator, cluster: KubeCluster) -> None:
    store = kube.store
    add_pod(store, "old")
    first = next(iter(cluster.watch_pods(timeout_seconds=1)))
    assert first.type == "SYNCED" and first.resource_version
    add_pod(store, "new")
    events = list(cluster.watch_pods(resource_version=first.resource_version, timeout_seconds=1))
    assert [(e.type, e.pods[0].name) for e in events] == [("ADDED", "new")]  # no list, nothing before the version
    assert int(events[0].resource_version) > int(first.resource_version)


def test_a_version_older_than_the_watch_history_is_410(kube: KubeEmulator, cluster: KubeCluster) -> None:
    first = next(iter(cluster.watch_pods(timeout_seconds=1)))
    for i in range(60):  # more writes than the emulator's 50 retained events
        add_pod(kube.store, f"p{i}")
    with pytest.raises(KubernetesError) as err:
        list(cluster.watch_pods(resource_version=first.resource_version, timeout_seconds=1))
    assert err.value.status == 410


def test_untaint_and_uncordon_removes_only_the_disruption_taint(kube: KubeEmulator, cluster: KubeCluster) -> None:
    other = {"key": "dedicated", "value": "gpu", "effect": "NoSchedule"}
    kube.store.create("nodes", {"metadata": {"name": "n1"}, "spec": {"taints": [other]}})
    assert cluster.taint_and_cordon(node_name="n1", taint=DISRUPTED)
    assert cluster.untaint_and_uncordon(node_name="n1", taint_key=DISRUPTED.key)
    spec = kube.store.get("nodes", "n1")["spec"]
    assert spec.get("taints") == [other]
    assert not spec.get("unschedulable")
    assert cluster.untaint_and_uncordon(node_name="n1", taint_key=DISRUPTED.key)  # nothing left to undo
    assert not cluster.untaint_and_uncordon(node_name="gone", taint_key=DISRUPTED.key)


def test_untaint_lifts_only_the_cordon_nodesmith_added(kube: KubeEmulator, cluster: KubeCluster) -> None:
    kube.store.create("nodes", {"metadata": {"name": "ours"}})
    kube.store.create("nodes", {"metadata": {"name": "operators"}, "spec": {"unschedulable": True}})  # kubectl cordon
    for name in ("ours", "operators"):
        assert cluster.taint_and_cordon(node_name=name, taint=DISRUPTED)
    assert kube.store.get("nodes", "ours")["metadata"]["annotations"] == {CORDONED_ANNOTATION: "true"}
    assert CORDONED_ANNOTATION not in (kube.store.get("nodes", "operators")["metadata"].get("annotations") or {})
    for name in ("ours", "operators"):
        assert cluster.untaint_and_uncordon(node_name=name, taint_key=DISRUPTED.key)
        assert not kube.store.get("nodes", name)["spec"].get("taints")
    ours = kube.store.get("nodes", "ours")
    assert not ours["spec"].get("unschedulable")
    assert CORDONED_ANNOTATION not in (ours["metadata"].get("annotations") or {})
    assert kube.store.get("nodes", "operators")["spec"]["unschedulable"] is True  # the operator's cordon stays
