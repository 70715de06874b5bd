"""Poll mode's kept cache: an informer without a thread lists once, then each catch-up reads only what changed since
its version, through a short watch that ends at the API server's bookmark, and lists again when it cannot (410 Gone,
a stream cut before the bookmark). ``KubeCluster.catch_up`` serves the kinds a pass reads from memory until
``hold``."""

from __future__ import annotations

import contextlib
import time
from typing import TYPE_CHECKING, Any

import pytest

from nodesmith.adapters.kube import KubeCluster, build_api_client
from nodesmith.adapters.kube.informer import CATCH_UP_WATCH_SECONDS, Informer, Listing
from nodesmith.adapters.kube.retry import RetryPolicy
from nodesmith.core.errors import KubernetesError
from nodesmith.sim.kube import KubeEmulator, KubeFaults, Store

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator, Mapping


@pytest.fixture
def kube() -> Iterator[KubeEmulator]:
    with KubeEmulator(store=Store(history=50)) as emulator:
        yield emulator


def _cluster(kube: KubeEmulator, *, relist_below: int = 0) -> KubeCluster:
    """A cluster whose kept cache watches to the bookmark however few objects a kind holds (unless told)."""
    api = build_api_client(cluster_endpoint=kube.endpoint, kube_auth="none")
    return KubeCluster(api_client=api, relist_below=relist_below)


def _pod(kube: KubeEmulator, name: str, *, node: str = "") -> None:
    spec: dict[str, Any] = {"containers": [{"name": "c", "resources": {"requests": {"cpu": "1"}}}]}
    if node:
        spec["nodeName"] = node
    kube.store.create("pods", {"metadata": {"name": name, "namespace": "default"}, "spec": spec})


class Parsed:
    """A parse that counts its calls: the name of each object and the node it is bound to."""

    def __init__(self) -> None:
        self.calls = 0

    def __call__(self, item: Mapping[str, Any]) -> tuple[str, str]:
        self.calls += 1
        return str(item["metadata"]["name"]), str((item.get("spec") or {}).get("nodeName") or "")


def _informer(kube: KubeEmulator, parse: Parsed) -> Informer[tuple[str, str]]:
    return Informer(rest=_cluster(kube).rest, url_path="/api/v1/pods", what="pods", parse=parse)


def _three_pods_listed(kube: KubeEmulator, *, relist_below: int) -> Informer[tuple[str, str]]:
    """An informer of pods a, b and c, listed once and held."""
    for name in ("a", "b", "c"):
        _pod(kube, name)
    pods = Informer(
        rest=_cluster(kube).rest,
        url_path="/api/v1/pods",
        what="pods",
        parse=Parsed(),
        listing=Listing(relist_below=relist_below),
    )
    assert pods.catch_up() == "listed"
    pods.hold()
    return pods


@contextlib.contextmanager
def _another_server(pods: Informer[Any]) -> Iterator[KubeEmulator]:
    """The informer's next requests reach another API server, one that has seen only pod a (its watch cache trails,
    or its store was restored from a backup); retries there do not wait."""
    with KubeEmulator(store=Store(history=50)) as other:
        _pod(other, "a")
        api = build_api_client(cluster_endpoint=other.endpoint, kube_auth="none")
        pods.rest = KubeCluster(api_client=api, retry=RetryPolicy(attempts=2, sleep=lambda _: None)).rest
        yield other


def _names(pods: Informer[tuple[str, str]]) -> list[str]:
    return [name for name, _ in sorted(pods.items() or [])]


def test_a_catch_up_reads_the_changes_since_its_version_and_stops_at_the_bookmark(kube: KubeEmulator) -> None:
    for name in ("a", "b", "c"):
        _pod(kube, name)
    parse = Parsed()
    pods = _informer(kube, parse)
    assert pods.catch_up() == "listed" and sorted(pods.items() or []) == [("a", ""), ("b", ""), ("c", "")]
    pods.hold()
    assert pods.items() is None  # held: nothing is served until the next catch-up

    kube.store.bind("a", namespace="default", node_name="n1")
    kube.store.delete("pods", "b", namespace="default")
    _pod(kube, "d")
    calls, began = parse.calls, time.monotonic()
    assert pods.catch_up() == "caught up"
    took = time.monotonic() - began
    assert sorted(pods.items() or []) == [("a", "n1"), ("c", ""), ("d", "")]
    assert parse.calls - calls == 2  # the bound pod and the new one; the others were not read again
    assert kube.operations["list pods"] == 1 and kube.operations["watch pods"] == 1
    assert took < CATCH_UP_WATCH_SECONDS - 0.5, took  # it stopped at the bookmark, not at the watch's end
    assert pods.version == str(kube.store.resource_version)


def test_an_own_write_taken_in_is_not_parsed_again_when_its_event_arrives(kube: KubeEmulator) -> None:
    parse = Parsed()
    pods = _informer(kube, parse)
    pods.catch_up()
    written = kube.store.create(
        "pods", {"metadata": {"name": "mine", "namespace": "default"}, "spec": {"containers": [{"name": "c"}]}}
    )
    pods.observe(written)  # the API server's answer to this process's write
    held = (pods._objects["default/mine"])[1]
    calls = parse.calls
    assert pods.catch_up() == "caught up"
    assert parse.calls == calls and (pods.items() or [None])[0] is held


def test_a_version_the_server_no_longer_holds_is_answered_by_a_list_that_reparses_only_what_changed(
    kube: KubeEmulator,
) -> None:
    for name in ("a", "b"):
        _pod(kube, name)
    parse = Parsed()
    pods = _informer(kube, parse)
    pods.catch_up()
    _pod(kube, "c")
    kube.faults = KubeFaults(rates={"watch pods": {"expired": 1.0}})
    assert pods.catch_up() == "listed"
    assert sorted(pods.items() or []) == [("a", ""), ("b", ""), ("c", "")]
    assert pods.relists == 1 and "410" in pods.failure
    assert parse.calls == 3  # a and b were kept as they were listed before


def test_a_catch_up_whose_watch_is_cut_before_the_bookmark_lists_again(kube: KubeEmulator) -> None:
    _pod(kube, "a")
    pods = _informer(kube, Parsed())
    pods.catch_up()
    for name in ("b", "c", "d"):
        _pod(kube, name)
    kube.faults = KubeFaults(rates={"watch pods": {"cut": 1.0}}, cut_after_events=1)
    assert pods.catch_up() == "listed"
    assert [name for name, _ in sorted(pods.items() or [])] == ["a", "b", "c", "d"]
    assert kube.operations["list pods"] == 2 and pods.failure


def test_a_kind_with_few_objects_is_listed_again_without_waiting_for_a_bookmark(kube: KubeEmulator) -> None:
    for name in ("a", "b", "c"):
        _pod(kube, name)
    parse = Parsed()
    pods = Informer(
        rest=_cluster(kube).rest, url_path="/api/v1/pods", what="pods", parse=parse, listing=Listing(relist_below=4)
    )
    assert pods.catch_up() == "listed" and parse.calls == 3
    pods.hold()
    kube.store.bind("b", namespace="default", node_name="n1")
    began = time.monotonic()
    assert pods.catch_up() == "listed" and pods.failure == ""
    assert time.monotonic() - began < 0.5  # no bookmark waited for
    assert sorted(pods.items() or []) == [("a", ""), ("b", "n1"), ("c", "")]
    assert parse.calls == 4 and kube.operations["watch pods"] == 0  # the list parsed again only the changed pod
    pods.hold()
    _pod(kube, "d")  # four held after this catch-up: the next one watches
    assert pods.catch_up() == "listed"
    assert pods.catch_up() == "caught up" and kube.operations["watch pods"] == 1


def test_a_list_again_answered_by_a_lagging_api_server_never_goes_back_in_time(kube: KubeEmulator) -> None:
    """Behind a load balancer the next request may reach another API server whose watch cache trails: a list again
    asks for no older a version than the informer held, so that server refuses it (504 "Too large resource
    version") instead of answering with pods the informer already saw deleted or never created."""
    pods = _three_pods_listed(kube, relist_below=10)
    assert kube.cache_lists["pods"] == 1  # the first list: the watch cache
    with _another_server(pods) as lagging:
        with pytest.raises(KubernetesError, match="Too large resource version"):
            pods.catch_up()
        assert pods.items() is None and lagging.cache_lists["pods"] == 0
    pods.rest = _cluster(kube).rest
    assert pods.catch_up() == "listed" and _names(pods) == ["a", "b", "c"]
    assert kube.cache_lists["pods"] == 1  # the version refused was forgotten: the latest, not the watch cache's


def test_a_list_again_is_read_unpaged_from_the_watch_cache_not_from_etcd(kube: KubeEmulator) -> None:
    """Kubernetes 1.32 and earlier read a list with a version other than 0 and a limit from etcd (their cacher's
    ``shouldDelegateList``; later versions its pages after the first): a list again asks without a limit, as
    client-go's reflector does, so the watch cache serves it once it holds the version."""
    pods = _three_pods_listed(kube, relist_below=10)
    kube.store.bind("b", namespace="default", node_name="n1")
    assert pods.catch_up() == "listed" and _names(pods) == ["a", "b", "c"]
    assert kube.cache_lists["pods"] == 2 and kube.operations["list pods"] == 2


def test_a_version_the_server_never_reaches_is_forgotten_after_one_refusal(kube: KubeEmulator) -> None:
    """A store that went back (etcd restored from a backup) refuses the version held for ever: after one refusal
    the informer reads the latest version, as client-go's reflector does, instead of being refused pass after
    pass."""
    pods = _three_pods_listed(kube, relist_below=10)
    with _another_server(pods) as restored:
        with pytest.raises(KubernetesError, match="Too large resource version"):
            pods.catch_up()
        assert pods.catch_up() == "listed" and _names(pods) == ["a"]
        assert restored.cache_lists["pods"] == 0  # read at the latest version, not from a watch cache
        pods.hold()
        _pod(restored, "d")
        assert pods.catch_up() == "listed" and _names(pods) == ["a", "d"]


def test_the_kept_cache_lists_nodeclaims_first_at_the_latest_version(kube: KubeEmulator) -> None:
    _pod(kube, "a")
    cluster = _cluster(kube)
    assert cluster.catch_up() == []
    assert kube.cache_lists["pods"] == 1 and kube.cache_lists["nodeclaims"] == 0  # its own writes: read back
    cluster.hold()


def test_an_informer_followed_by_a_thread_cannot_be_caught_up(kube: KubeEmulator) -> None:
    pods = _informer(kube, Parsed())
    try:
        assert pods.start(wait_seconds=10.0)
        with pytest.raises(RuntimeError, match="followed by a thread"):
            pods.catch_up()
    finally:
        pods.stop()


def test_the_cluster_serves_what_it_caught_up_until_it_holds(kube: KubeEmulator) -> None:
    kube.store.create("nodes", {"metadata": {"name": "n1"}})
    _pod(kube, "a", node="n1")
    cluster = _cluster(kube)
    assert cluster.catch_up() == []
    _pod(kube, "late")  # after the catch-up: the pass's snapshot is the catch-up's
    assert [p.name for p in cluster.list_pods()] == ["a"] and [n.name for n in cluster.list_nodes()] == ["n1"]
    assert kube.operations["list pods"] == 1
    cluster.hold()
    assert [p.name for p in cluster.list_pods()] == ["a", "late"]  # held: read from the API
    assert kube.operations["list pods"] == 2
    assert cluster.catch_up() == []
    assert [p.name for p in cluster.list_pods()] == ["a", "late"]
    assert kube.operations["list pods"] == 2 and kube.operations["watch pods"] == 1


def test_a_kind_that_cannot_catch_up_is_listed_from_the_api(kube: KubeEmulator) -> None:
    _pod(kube, "a")
    cluster = _cluster(kube)
    kube.faults = KubeFaults(rates={"list nodeclaims": {"error": 1.0}})
    failures = cluster.catch_up()
    assert len(failures) == 1 and failures[0].startswith("nodeclaims: not caught up, the pass lists it: "), failures
    kube.faults = None
    assert cluster.list_nodeclaims() == [] and kube.operations["list nodeclaims"] > 1  # read from the API
    assert [p.name for p in cluster.list_pods()] == ["a"] and kube.operations["list pods"] == 1
    cluster.hold()


def test_the_cluster_reports_a_kind_listed_again_because_its_watch_failed(kube: KubeEmulator) -> None:
    _pod(kube, "a")
    cluster = _cluster(kube)
    assert cluster.catch_up() == []  # the first lists are no failure
    cluster.hold()
    kube.faults = KubeFaults(rates={"watch nodes": {"expired": 1.0}})
    failures = cluster.catch_up()
    assert len(failures) == 1 and failures[0].startswith("nodes: listed again: ") and "410" in failures[0], failures
    cluster.hold()


def test_a_followed_cluster_is_not_caught_up(kube: KubeEmulator, eventually: Callable[..., bool]) -> None:
    _pod(kube, "a")
    cluster = _cluster(kube)
    try:
        assert cluster.follow(wait_seconds=10.0)
        eventually(lambda: kube.operations["watch pods"] >= 1)  # the follower opens its watch
        assert cluster.catch_up() == []
        assert kube.operations["watch pods"] == 1  # the follower's own watch, no catch-up beside it
    finally:
        cluster.unfollow()


def test_a_stopped_informer_ends_its_thread_and_starts_again_from_what_it_holds(
    kube: KubeEmulator, eventually: Callable[..., bool]
) -> None:
    _pod(kube, "a")
    parse = Parsed()
    pods = _informer(kube, parse)  # its watches last 60 s
    assert pods.start(wait_seconds=10.0)
    time.sleep(0.3)  # its watch is open
    thread, began = pods._thread, time.monotonic()
    pods.stop()
    assert thread is not None and not thread.is_alive() and time.monotonic() - began < 2.0  # not at the watch's end
    assert pods.items() is None
    _pod(kube, "b")  # while nothing follows
    try:
        assert pods.start(wait_seconds=10.0)
        assert [name for name, _ in sorted(pods.items() or [])] == ["a", "b"]
        assert kube.operations["list pods"] == 1 and parse.calls == 2  # caught up from its version: b alone read
        _pod(kube, "c")
        eventually(lambda: len(pods.items() or []) >= 3)
        assert [name for name, _ in sorted(pods.items() or [])] == ["a", "b", "c"]  # and it follows on
    finally:
        pods.stop()


def test_a_clusters_next_follow_and_catch_up_read_what_changed_since_it_unfollowed(kube: KubeEmulator) -> None:
    _pod(kube, "a")
    cluster = _cluster(kube)
    try:
        assert cluster.follow(wait_seconds=10.0)
        assert cluster.catch_up() == []  # followed: nothing to do
    finally:
        cluster.unfollow()
    _pod(kube, "b")
    try:  # a container's next watching invocation: the four kinds catch up at once, each to its bookmark (~1 s)
        began = time.monotonic()
        assert cluster.follow(wait_seconds=10.0)
        assert time.monotonic() - began < CATCH_UP_WATCH_SECONDS  # not one after the other
        assert [p.name for p in cluster.list_pods()] == ["a", "b"]
    finally:
        cluster.unfollow()
    _pod(kube, "c")
    assert cluster.catch_up() == []  # or a scheduled pass
    assert [p.name for p in cluster.list_pods()] == ["a", "b", "c"]
    cluster.hold()
    assert kube.operations["list pods"] == 1 and kube.operations["list nodes"] == 1


def test_following_again_and_again_serves_only_what_was_caught_up(kube: KubeEmulator) -> None:
    """A stop right after a start (the thread between its catch-up and its long watch) still ends the thread at once,
    and never leaves the next start serving before it caught up."""
    cluster = _cluster(kube)
    for i in range(4):
        _pod(kube, f"p{i}")  # while nothing follows
        try:
            assert cluster.follow(wait_seconds=10.0)
            assert [p.name for p in cluster.list_pods()] == [f"p{j}" for j in range(i + 1)]
        finally:
            began = time.monotonic()
            cluster.unfollow()
            assert time.monotonic() - began < 2.0
    assert all(not (i._thread and i._thread.is_alive()) for i in cluster._kept.values())
    assert kube.operations["list pods"] == 1


def test_a_followed_informer_whose_version_the_server_never_reaches_follows_from_the_latest(
    kube: KubeEmulator, eventually: Callable[..., bool]
) -> None:
    """Watch mode's thread: the watch from a version the server never reached (its store restored from a backup) is
    refused, and so is a list not older than it; the informer then lists the latest version and follows on."""
    pods = _three_pods_listed(kube, relist_below=0)
    with _another_server(pods) as restored:
        try:
            assert pods.start(wait_seconds=10.0), pods.failure
            assert _names(pods) == ["a"]
            assert restored.operations["watch pods"] >= 1  # the watch from the version held was tried first
            _pod(restored, "d")
            eventually(lambda: len(pods.items() or []) >= 2)
            assert _names(pods) == ["a", "d"]
        finally:
            pods.stop()
