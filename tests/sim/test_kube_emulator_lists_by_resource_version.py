"""The API emulator answers a list's ``resourceVersion`` as the API server does: ``0`` is served (from the watch
cache, which is the store), a version beside a ``continue`` token is refused (400), one newer than the store's
times out (504 "Too large resource version"), an ``Exact`` match of an older one is gone (410)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pytest
import urllib3

from nodesmith.sim.kube import KubeEmulator

if TYPE_CHECKING:
    from collections.abc import Iterator


@pytest.fixture
def kube() -> Iterator[KubeEmulator]:
    with KubeEmulator() as emulator:
        for n in range(3):
            emulator.store.create("nodes", {"metadata": {"name": f"n{n}"}})
        yield emulator


def _get(kube: KubeEmulator, **query: str) -> tuple[int, Any]:
    url = f"{kube.endpoint}/api/v1/nodes"
    answer = urllib3.request("GET", url, fields=query)
    return answer.status, answer.json()


def test_a_list_at_version_zero_is_served_in_pages_and_counted_as_a_cache_list(kube: KubeEmulator) -> None:
    status, first = _get(kube, resourceVersion="0", limit="2")
    assert status == 200 and len(first["items"]) == 2 and kube.cache_lists["nodes"] == 1
    status, rest = _get(kube, limit="2", **{"continue": first["metadata"]["continue"]})
    assert status == 200 and [i["metadata"]["name"] for i in rest["items"]] == ["n2"]


def test_a_version_beside_a_continue_token_is_refused(kube: KubeEmulator) -> None:
    _, first = _get(kube, limit="2")
    status, body = _get(kube, resourceVersion="0", limit="2", **{"continue": first["metadata"]["continue"]})
    assert status == 400 and "continue" in body["message"]


def test_a_version_newer_than_the_store_times_out_and_an_old_exact_one_is_gone(kube: KubeEmulator) -> None:
    current = kube.store.resource_version
    status, body = _get(kube, resourceVersion=str(current + 100))
    assert status == 504 and "Too large resource version" in body["message"]
    assert _get(kube, resourceVersion=str(current))[0] == 200
    assert _get(kube, resourceVersion=str(current - 1))[0] == 200  # not older than: the latest serves
    assert _get(kube, resourceVersion=str(current - 1), resourceVersionMatch="Exact")[0] == 410
    assert _get(kube, resourceVersion="abc")[0] == 400


def test_a_list_at_a_version_is_served_from_the_watch_cache_only_without_a_limit(kube: KubeEmulator) -> None:
    """The cacher of Kubernetes 1.32 and earlier hands to etcd a list with a version other than 0 and a limit, and an
    Exact match."""
    current = str(kube.store.resource_version)
    assert _get(kube, resourceVersion=current, resourceVersionMatch="NotOlderThan")[0] == 200
    assert _get(kube, resourceVersion=current)[0] == 200
    assert kube.cache_lists["nodes"] == 2
    assert _get(kube, resourceVersion=current, resourceVersionMatch="NotOlderThan", limit="2")[0] == 200
    assert _get(kube, resourceVersion=current, resourceVersionMatch="Exact")[0] == 200
    assert kube.cache_lists["nodes"] == 2
