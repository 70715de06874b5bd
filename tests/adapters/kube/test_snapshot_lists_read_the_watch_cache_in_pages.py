"""A snapshot's lists ask the API server's watch cache (``resourceVersion=0``) for their first page and page on
with the ``continue`` token alone (the API server refuses a version beside it); NodeClaims, which a pass creates
and must read back, and a node's own pods are read at the latest version."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest
import yaml

from nodesmith.adapters.kube import KubeCluster, build_api_client

if TYPE_CHECKING:
    from pathlib import Path

    from nodesmith.sim.kube import KubeEmulator

MANIFESTS_DIR = "lambdas/nodesmith/sim/manifests/nodepool.yaml"


@pytest.fixture
def paged(kube: KubeEmulator) -> KubeCluster:
    return KubeCluster(api_client=build_api_client(cluster_endpoint=kube.endpoint, kube_auth="none"), page_size=2)


def _fill(kube: KubeEmulator, root: Path) -> None:
    for n in range(5):
        kube.store.create("pods", {
            "metadata": {"name": f"p{n}", "namespace": "default"},
            "spec": {"nodeName": "n1" if n < 3 else "n2", "containers": [{"name": "c"}]},
        })  # fmt: skip
        kube.store.create("nodes", {"metadata": {"name": f"n{n}"}, "spec": {"providerID": f"aws:///us-east-1a/i-{n}"}})
    for doc in yaml.safe_load_all((root / MANIFESTS_DIR).read_text()):
        if doc:
            kube.store.apply(doc)


def test_the_snapshot_lists_read_the_watch_cache_and_page_without_a_version(
    paged: KubeCluster, kube: KubeEmulator, pytestconfig: pytest.Config
) -> None:
    _fill(kube, pytestconfig.rootpath)
    assert {p.name for p in paged.list_pods()} == {f"p{n}" for n in range(5)}
    assert {n.name for n in paged.list_nodes()} == {f"n{n}" for n in range(5)}
    assert [p.name for p in paged.list_nodepools()] == ["default"]
    assert kube.operations["list pods"] == 3 and kube.operations["list nodes"] == 3  # pages of 2
    assert kube.cache_lists == {"pods": 1, "nodes": 1, "nodepools": 1}

    paged.list_nodeclaims()
    assert {p.name for p in paged.list_pods(node_name="n1")} == {"p0", "p1", "p2"}
    assert kube.cache_lists == {"pods": 1, "nodes": 1, "nodepools": 1}, "NodeClaims and a node's pods: latest"


def test_without_the_watch_cache_every_list_is_a_latest_read(kube: KubeEmulator, pytestconfig: pytest.Config) -> None:
    _fill(kube, pytestconfig.rootpath)
    latest = KubeCluster(
        api_client=build_api_client(cluster_endpoint=kube.endpoint, kube_auth="none"), list_from_watch_cache=False
    )
    assert len(latest.list_pods()) == 5 and len(latest.list_nodes()) == 5
    assert not kube.cache_lists
