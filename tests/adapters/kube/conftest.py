"""Fixtures of the KubeCluster tests: a Kubernetes API emulator and a KubeCluster talking to it (a module
overrides either when it needs another store or page size)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from nodesmith.adapters.kube import KubeCluster, build_api_client
from nodesmith.sim.kube import KubeEmulator

if TYPE_CHECKING:
    from collections.abc import Iterator


@pytest.fixture
def kube() -> Iterator[KubeEmulator]:
    with KubeEmulator() as emulator:
        yield emulator


@pytest.fixture
def cluster(kube: KubeEmulator) -> KubeCluster:
    return KubeCluster(api_client=build_api_client(cluster_endpoint=kube.endpoint, kube_auth="none"))
