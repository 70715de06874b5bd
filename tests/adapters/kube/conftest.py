"""Fixtures of the KubeCluster tests: a Kubernetes API emulator and a KubeCluster talking to it (a module
overrides either when it needs another store or page size), and ``eventually`` for what a watch brings in later."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

import pytest

from nodesmith.adapters.kube import KubeCluster, build_api_client
from nodesmith.sim.kube import KubeEmulator

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator


@pytest.fixture
def kube() -> Iterator[KubeEmulator]:
    with KubeEmulator() as emulator:
        yield emulator


@pytest.fixture
def cluster(kube: KubeEmulator) -> KubeCluster:
    return KubeCluster(api_client=build_api_client(cluster_endpoint=kube.endpoint, kube_auth="none"))


def _eventually(check: Callable[[], bool], seconds: float = 10.0) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if check():
            return True
        time.sleep(0.02)
    return check()


@pytest.fixture
def eventually() -> Callable[..., bool]:
    """``eventually(check, seconds=10.0)``: whether ``check()`` became true within ``seconds`` (polled)."""
    return _eventually
