"""Watch mode's cache: while a KubeCluster follows pods, Nodes, NodeClaims and NodePools, it lists each once and
its lists read memory kept current by watches; a watch answered 410 Gone (its version too old) lists again;
after unfollow the lists read the API again."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from nodesmith.sim.kube.faults import KubeFaults

if TYPE_CHECKING:
    from collections.abc import Callable

    import pytest

    from nodesmith.adapters.kube import KubeCluster
    from nodesmith.sim.kube import KubeEmulator


def _pod(kube: KubeEmulator, name: str) -> None:
    kube.store.create(
        "pods", {"metadata": {"name": name, "namespace": "default"}, "spec": {"containers": [{"name": "c"}]}}
    )


def test_a_followed_cluster_lists_once_then_reads_what_its_watches_bring(
    cluster: KubeCluster, kube: KubeEmulator, eventually: Callable[..., bool]
) -> None:
    _pod(kube, "a")
    kube.store.create("nodes", {"metadata": {"name": "n1"}, "spec": {"providerID": "aws:///us-east-1a/i-1"}})
    try:
        assert cluster.follow(wait_seconds=10.0)
        for _ in range(3):
            assert [p.name for p in cluster.list_pods()] == ["a"]
            assert [n.name for n in cluster.list_nodes()] == ["n1"]
            assert cluster.list_nodeclaims() == [] and cluster.list_nodepools() == []
        assert kube.operations["list pods"] == 1 and kube.operations["list nodes"] == 1
        assert kube.operations["list nodeclaims"] == 1 and kube.operations["list nodepools"] == 1

        _pod(kube, "b")
        kube.store.delete("pods", "a", namespace="default")
        assert eventually(lambda: [p.name for p in cluster.list_pods()] == ["b"])
        assert kube.operations["list pods"] == 1, "the change came by the watch, not by listing"
    finally:
        cluster.unfollow()
    cluster.list_pods()
    assert kube.operations["list pods"] == 2, "unfollowed: the list reads the API"


def test_a_watch_answered_410_gone_lists_again_and_follows_on(
    cluster: KubeCluster, kube: KubeEmulator, eventually: Callable[..., bool]
) -> None:
    _pod(kube, "a")
    kube.faults = KubeFaults(rates={"watch pods": {"expired": 1.0}})  # every resumed pod watch: 410 Gone
    try:
        assert cluster.follow(wait_seconds=10.0)
        pods = cluster._informers["pods"]
        assert eventually(lambda: pods.relists >= 1), pods.failure
        assert kube.operations["list pods"] >= 2 and "410" in pods.failure
        kube.faults = None
        _pod(kube, "late")
        assert eventually(lambda: {p.name for p in cluster.list_pods()} == {"a", "late"})
    finally:
        cluster.unfollow()


def test_a_watch_the_server_refuses_stops_the_cache_serving_until_a_bookmark(
    cluster: KubeCluster, kube: KubeEmulator, monkeypatch: pytest.MonkeyPatch, eventually: Callable[..., bool]
) -> None:
    """A 403 (a role without ``watch``) is no passing failure: the cache would go stale, so it serves nothing (the
    lists read the API) until a watch resumes and its bookmark shows every change applied."""
    from nodesmith.adapters.kube.informer import Informer
    from nodesmith.core.errors import KubernetesError

    _pod(kube, "a")
    opened = Informer._open
    refused = {"on": True}

    def refusing(self: Informer[Any], seconds: int, stopping: Any = None) -> Any:
        if refused["on"]:
            raise KubernetesError("watch pods: HTTP 403: Forbidden", status=403)
        return opened(self, seconds, stopping)

    monkeypatch.setattr(Informer, "_open", refusing)
    pods = Informer(rest=cluster.rest, url_path="/api/v1/pods", what="pods", parse=lambda i: i["metadata"]["name"],
                    watch_seconds=3)  # fmt: skip
    try:
        pods.start(wait_seconds=10.0)  # it lists, then its watch is refused
        assert eventually(lambda: pods.items() is None), pods.failure
        assert "403" in pods.failure
        _pod(kube, "b")  # a change the refused watch cannot bring
        refused["on"] = False
        assert eventually(lambda: pods.items() is not None)
        assert sorted(pods.items() or []) == ["a", "b"] and kube.operations["list pods"] == 1
    finally:
        pods.stop()
