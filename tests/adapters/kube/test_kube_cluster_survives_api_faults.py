"""KubeCluster against an API server that fails now and then (the emulator's injected faults): throttling and
server errors are retried within bounds, honouring Retry-After; answers (403, 404, a budget's 429, 409 on a create)
are not; guarded writes are read again; lost creates are found; cut watches resume and expired ones relist.

Waits go through the retry policy's injected ``sleep`` (recorded, never slept), with no jitter."""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any

import pytest

from nodesmith.adapters.kube import KubeCluster, build_api_client
from nodesmith.adapters.kube.retry import RetryPolicy
from nodesmith.core.api.nodeclaim import NodeClaim
from nodesmith.core.errors import ConflictError, KubernetesError
from nodesmith.core.model import Taint
from nodesmith.core.ports import ObjectRef
from nodesmith.sim.kube import KubeEmulator, KubeFaults, Store

if TYPE_CHECKING:
    from collections.abc import Iterator

DISRUPTED = Taint(key="karpenter.sh/disrupted", effect="NoSchedule")


@pytest.fixture
def kube() -> Iterator[KubeEmulator]:
    with KubeEmulator(store=Store(history=50)) as emulator:
        yield emulator


@pytest.fixture
def waits() -> list[float]:
    return []


def make_cluster(kube: KubeEmulator, waits: list[float], **policy: Any) -> KubeCluster:
    retry = RetryPolicy(sleep=waits.append, jitter=lambda: 0.0, **policy)
    return KubeCluster(
        api_client=build_api_client(cluster_endpoint=kube.endpoint, kube_auth="none"), retry=retry, page_size=2
    )


@pytest.fixture
def cluster(kube: KubeEmulator, waits: list[float]) -> KubeCluster:
    return make_cluster(kube, waits, attempts=8)


def add_node(store: Store, name: str) -> None:
    store.create("nodes", {"metadata": {"name": name}, "spec": {"providerID": f"aws:///us-east-1a/i-{name}"}})


def add_pod(store: Store, name: str, *, node: str | None = None, labels: dict[str, str] | None = None) -> None:
    spec: dict[str, Any] = {"containers": [{"name": "c", "resources": {"requests": {"cpu": "1"}}}]}
    if node:
        spec["nodeName"] = node
    meta = {"name": name, "namespace": "default", "labels": labels or {}}
    store.create("pods", {"metadata": meta, "spec": spec, "status": {"phase": "Running"}})


def nodeclaim(name: str) -> NodeClaim:
    return NodeClaim.model_validate(
        {
            "metadata": {"name": name, "labels": {"karpenter.sh/nodepool": "default"}},
            "spec": {
                "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
                "requirements": [{"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["spot"]}],
            },
        }
    )


def test_throttled_lists_patches_and_evictions_go_through_and_each_429_was_retried(
    kube: KubeEmulator, cluster: KubeCluster, waits: list[float]
) -> None:
    for i in range(6):
        add_node(kube.store, f"n{i}")
        add_pod(kube.store, f"p{i}", node=f"n{i}")
    kube.faults = faults = KubeFaults(seed=11, rates={"*": {"throttle": 0.5}})
    assert len(cluster.list_nodes()) == 6
    for i in range(6):
        cluster.label_node(node_name=f"n{i}", labels={"seen": "yes"})
    pods = cluster.list_pods()
    assert [cluster.evict(pod=p) for p in pods] == ["evicted"] * 6  # an APF 429 is not a budget's "blocked"
    kube.faults = None
    assert all(n.labels.get("seen") == "yes" for n in cluster.list_nodes())
    assert cluster.list_pods() == []
    assert faults.counts()["throttle"] >= 5
    assert cluster.rest.retries == faults.counts()["throttle"] == len(waits)


def test_retry_after_is_waited_capped_and_bounded_in_total(kube: KubeEmulator, waits: list[float]) -> None:
    add_node(kube.store, "n1")
    kube.faults = KubeFaults(seed=1, rates={"list nodes": {"throttle": 1.0}}, retry_after_seconds=3)
    cluster = make_cluster(kube, waits, attempts=4, base_seconds=0.5, budget_seconds=30.0)
    with pytest.raises(KubernetesError) as err:
        cluster.list_nodes()
    assert err.value.status == 429
    assert waits == [3.0, 3.0, 3.0]  # Retry-After over the backoff (0.5, 1, 2), 4 tries

    waits.clear()
    kube.faults = KubeFaults(seed=1, rates={"list nodes": {"throttle": 1.0}}, retry_after_seconds=60)
    cluster = make_cluster(kube, waits, attempts=10, retry_after_cap_seconds=10.0, budget_seconds=25.0)
    with pytest.raises(KubernetesError):
        cluster.list_nodes()
    assert waits == [10.0, 10.0]  # capped, and a third wait would pass the 25 s budget
    assert kube.faults.counts()["throttle"] == 3


def test_server_errors_and_lost_answers_are_retried_for_requests_safe_to_repeat(
    kube: KubeEmulator, cluster: KubeCluster
) -> None:
    for i in range(6):
        add_node(kube.store, f"n{i}")
    kube.faults = faults = KubeFaults(seed=5, rates={"*": {"error": 0.2, "lost": 0.2}})
    for i in range(6):
        assert cluster.get_node(name=f"n{i}") is not None
        cluster.label_node(node_name=f"n{i}", labels={"a": "b"})
        cluster.delete_node(name=f"n{i}")
    assert faults.counts()["error"] >= 2 and faults.counts()["lost"] >= 2
    assert kube.store.list("nodes").items == []


def test_answers_are_not_retried(kube: KubeEmulator, waits: list[float]) -> None:
    with KubeEmulator(token="secret") as guarded:  # 401 without the token
        cluster = make_cluster(guarded, waits)
        with pytest.raises(KubernetesError) as err:
            cluster.list_nodes()
        assert err.value.status == 401 and guarded.requests == 1
    cluster = make_cluster(kube, waits)
    before = kube.requests
    assert cluster.get_node(name="missing") is None  # 404
    cluster.create_nodeclaim(nodeclaim=nodeclaim("default-a"))
    with pytest.raises(ConflictError):  # 409 AlreadyExists on a first try: someone else's object
        cluster.create_nodeclaim(nodeclaim=nodeclaim("default-a"))
    add_pod(kube.store, "only", node="n1", labels={"app": "x"})
    kube.store.create(
        "poddisruptionbudgets.policy",
        {
            "metadata": {"name": "x", "namespace": "default"},
            "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "x"}}},
        },
    )
    [pod] = cluster.list_pods()
    assert cluster.evict(pod=pod) == "blocked"  # the budget's 429 is an answer
    assert kube.requests - before == 5 and waits == [] and cluster.rest.retries == 0


def test_a_guarded_patch_refused_or_failed_is_read_again_and_lands(kube: KubeEmulator, cluster: KubeCluster) -> None:
    for i in range(6):
        add_node(kube.store, f"n{i}")
    kube.faults = faults = KubeFaults(seed=2, rates={"patch nodes": {"conflict": 0.3, "error": 0.2, "lost": 0.2}})
    for i in range(6):
        assert cluster.taint_and_cordon(node_name=f"n{i}", taint=DISRUPTED)
    counts = faults.counts()
    assert counts["conflict"] >= 1 and counts["error"] >= 1 and counts["lost"] >= 1
    for i in range(6):
        spec = kube.store.get("nodes", f"n{i}")["spec"]
        assert spec["unschedulable"] is True and spec["taints"] == [{"key": DISRUPTED.key, "effect": "NoSchedule"}]


def test_a_guarded_annotation_that_may_have_landed_is_not_sent_again(kube: KubeEmulator, cluster: KubeCluster) -> None:
    created = cluster.create_nodeclaim(nodeclaim=nodeclaim("default-a"))
    kube.faults = KubeFaults(seed=1, rates={"patch nodeclaims": {"lost": 1.0}})
    before = kube.requests
    with pytest.raises(KubernetesError) as err:  # the interruption service relies on its 409 meaning "not ours"
        cluster.annotate_nodeclaim(
            name="default-a", annotations={"a": "b"}, resource_version=created.metadata.resource_version
        )
    assert err.value.status == 0 and kube.requests - before == 1
    before = kube.requests
    with pytest.raises(KubernetesError):  # unguarded: a merge patch lands the same however often it is sent
        cluster.annotate_nodeclaim(name="default-a", annotations={"c": "d"})
    assert kube.requests - before == 8 == kube.faults.counts()["lost"] - 1  # every try lost, all 8 sent
    assert kube.store.get("nodeclaims.karpenter.sh", "default-a")["metadata"]["annotations"] == {"a": "b", "c": "d"}


def test_a_create_whose_answer_was_lost_returns_the_object_it_created(kube: KubeEmulator, cluster: KubeCluster) -> None:
    kube.faults = faults = KubeFaults(seed=3, rates={"create *": {"lost": 0.4, "error": 0.2}})
    names = [f"default-{i}" for i in range(8)]
    created = [cluster.create_nodeclaim(nodeclaim=nodeclaim(name)) for name in names]
    for i in range(4):
        cluster.record_event(ref=ObjectRef(kind="NodeClaim", name=names[i]), reason="Launched", message="m")
    assert [c.name for c in created] == names and all(c.metadata.uid for c in created)
    assert faults.counts()["lost"] >= 2
    kube.faults = None
    assert sorted(c.name for c in cluster.list_nodeclaims()) == names  # one each, no duplicate
    assert len(kube.store.list("events", namespace="default").items) == 4


def test_a_cut_watch_resumes_from_the_last_version_without_losing_or_repeating_changes(
    kube: KubeEmulator, cluster: KubeCluster
) -> None:
    kube.faults = faults = KubeFaults(seed=4, rates={"watch pods": {"cut": 1.0}}, cut_after_events=2)
    started = threading.Event()

    def writer() -> None:
        started.wait(10)
        for i in range(10):
            add_pod(kube.store, f"p{i}")

    threading.Thread(target=writer, daemon=True).start()
    seen: list[str] = []
    for event in cluster.watch_pods(timeout_seconds=20):
        started.set()
        seen.extend(f"{event.type} {p.name}" for p in event.pods)
        if len(seen) == 10:
            break
    assert seen == [f"ADDED p{i}" for i in range(10)]
    assert faults.counts()["cut"] >= 4


def test_a_resumed_watch_answered_410_lists_again(kube: KubeEmulator, cluster: KubeCluster) -> None:
    add_pod(kube.store, "before")
    kube.faults = faults = KubeFaults(seed=4, rates={"watch pods": {"expired": 1.0}})
    events = cluster.watch_pods(timeout_seconds=20)
    first = next(events)
    assert (first.type, [p.name for p in first.pods]) == ("SYNCED", ["before"])
    add_pod(kube.store, "during")  # written while the watch is refused
    second = next(events)
    assert second.type == "SYNCED" and sorted(p.name for p in second.pods) == ["before", "during"]
    kube.faults = None
    add_pod(kube.store, "after")
    while (event := next(events)).type == "SYNCED":  # the relists before the faults were cleared
        pass
    assert (event.type, event.pods[0].name) == ("ADDED", "after")
    assert faults.counts()["expired"] >= 1


def test_a_410_for_the_callers_own_version_still_raises(kube: KubeEmulator, cluster: KubeCluster) -> None:
    kube.faults = KubeFaults(seed=4, rates={"watch pods": {"expired": 1.0}})
    with pytest.raises(KubernetesError) as err:
        list(cluster.watch_pods(resource_version="1", timeout_seconds=5))
    assert err.value.status == 410


def test_a_slow_answer_past_the_read_timeout_is_sent_again(kube: KubeEmulator, waits: list[float]) -> None:
    add_node(kube.store, "n1")
    retry = RetryPolicy(sleep=waits.append, jitter=lambda: 0.0, attempts=8)
    api = build_api_client(cluster_endpoint=kube.endpoint, kube_auth="none")
    cluster = KubeCluster(api_client=api, retry=retry, request_timeout=(5.0, 0.2))
    kube.faults = faults = KubeFaults(seed=6, rates={"patch nodes": {"slow": 0.5}}, delay_seconds=0.6)
    for i in range(4):
        cluster.label_node(node_name="n1", labels={f"k{i}": "v"})
    assert faults.counts()["slow"] >= 1 and len(waits) == faults.counts()["slow"]
    assert kube.store.get("nodes", "n1")["metadata"]["labels"] == {f"k{i}": "v" for i in range(4)}


def test_a_watch_that_keeps_failing_gives_up_after_the_policys_attempts(kube: KubeEmulator, waits: list[float]) -> None:
    cluster = make_cluster(kube, waits, attempts=3)
    kube.faults = KubeFaults(seed=1, rates={"watch pods": {"error": 1.0}})
    events = cluster.watch_pods(timeout_seconds=20)
    assert next(events).type == "SYNCED"
    with pytest.raises(KubernetesError) as err:
        next(events)
    assert err.value.status == 500 and len(waits) == 2 and kube.faults.counts()["error"] == 3


def test_a_throttled_watch_waits_its_retry_after_and_goes_on(kube: KubeEmulator, waits: list[float]) -> None:
    faults = KubeFaults(seed=1, rates={"watch pods": {"throttle": 1.0}}, retry_after_seconds=4)

    def sleep(seconds: float) -> None:
        waits.append(seconds)
        kube.faults = None  # APF lets the next one through

    retry = RetryPolicy(sleep=sleep, jitter=lambda: 0.0)
    cluster = KubeCluster(api_client=build_api_client(cluster_endpoint=kube.endpoint, kube_auth="none"), retry=retry)
    kube.faults = faults
    events = cluster.watch_pods(timeout_seconds=20)
    assert next(events).type == "SYNCED"
    add_pod(kube.store, "new")
    assert next(events).pods[0].name == "new"
    assert faults.counts()["throttle"] == 1 and waits == [4.0]
