"""An informer whose watch ends at its timeout resumes from the last BOOKMARK the API server sent: the bookmark moves
its version past writes of other kinds, and it follows on from there without listing again."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

import pytest

from nodesmith.adapters.kube import KubeCluster, build_api_client
from nodesmith.adapters.kube.informer import Informer
from nodesmith.sim.kube import KubeEmulator, Store

if TYPE_CHECKING:
    from collections.abc import Iterator, Mapping


@pytest.fixture
def kube() -> Iterator[KubeEmulator]:
    with KubeEmulator(store=Store(history=3)) as emulator:
        yield emulator


def _name(item: Mapping[str, Any]) -> str:
    return str(item["metadata"]["name"])


def _pod(kube: KubeEmulator, name: str) -> None:
    kube.store.create(
        "pods", {"metadata": {"name": name, "namespace": "default"}, "spec": {"containers": [{"name": "c"}]}}
    )


def test_a_resumed_watch_follows_on_without_listing_again(kube: KubeEmulator) -> None:
    cluster = KubeCluster(api_client=build_api_client(cluster_endpoint=kube.endpoint, kube_auth="none"))
    _pod(kube, "a")
    pods = Informer(rest=cluster.rest, url_path="/api/v1/pods", what="pods", parse=_name, watch_seconds=3)
    try:
        assert pods.start(wait_seconds=10.0)
        listed = int(pods.version)
        time.sleep(0.5)  # its watch is open
        for i in range(6):  # Nodes written: no pod event moves the pods' version
            kube.store.create("nodes", {"metadata": {"name": f"n{i}"}})
        time.sleep(3.5)  # the pod watch ends at its timeout and is resumed from its bookmark
        assert int(pods.version) == listed + 6  # the bookmark's: the store's version when it was sent
        _pod(kube, "late")
        deadline = time.monotonic() + 10
        while sorted(pods.items() or []) != ["a", "late"] and time.monotonic() < deadline:
            time.sleep(0.05)
        assert sorted(pods.items() or []) == ["a", "late"]
        assert pods.relists == 0 and kube.operations["list pods"] == 1, pods.failure
    finally:
        pods.stop()
