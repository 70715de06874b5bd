"""The emulator's fault layer: seeded draws, per-operation and per-kind rates, counts, and each fault as the
official client's HTTP sees it (429 + Retry-After, 500, 409 on guarded writes, cut and expired watches)."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import pytest
import urllib3

from nodesmith.sim.kube import KubeEmulator, KubeFaults
from nodesmith.sim.kube.faults import Request, request_of

if TYPE_CHECKING:
    from collections.abc import Iterator

PATCH_NODES = Request(verb="patch", resource="nodes", guarded=True)
LIST_PODS = Request(verb="list", resource="pods")


@pytest.fixture
def kube() -> Iterator[KubeEmulator]:
    with KubeEmulator() as emulator:
        emulator.store.create("nodes", {"metadata": {"name": "n1"}})
        yield emulator


@pytest.fixture
def http() -> urllib3.PoolManager:
    return urllib3.PoolManager(retries=False)


def kinds_drawn(faults: KubeFaults, request: Request, n: int) -> list[str | None]:
    return [f.kind if (f := faults.draw(request)) else None for _ in range(n)]


def test_the_same_seed_draws_the_same_faults_and_another_seed_others() -> None:
    def run(seed: int) -> list[str | None]:
        return kinds_drawn(KubeFaults(seed=seed, rates={"*": 0.5}), PATCH_NODES, 200)

    assert run(7) == run(7)
    assert run(7) != run(8)
    assert {k for k in run(7) if k} == {
        "throttle",
        "error",
        "slow",
        "lost",
        "conflict",
    }  # what a guarded patch can meet


def test_the_most_specific_operation_rate_wins() -> None:
    faults = KubeFaults(seed=1, rates={"patch nodes": 1.0, "patch *": 0.0, "* pods": 0.0, "*": 1.0})
    assert all(kinds_drawn(faults, PATCH_NODES, 50))
    assert not any(kinds_drawn(faults, Request(verb="patch", resource="pods"), 50))  # "patch *" before "* pods"
    assert not any(kinds_drawn(faults, LIST_PODS, 50))  # "* pods"
    assert all(kinds_drawn(faults, Request(verb="get", resource="nodes"), 50))  # "*"
    assert not any(kinds_drawn(KubeFaults(seed=1, rates={"patch nodes": 1.0}), LIST_PODS, 50))  # no rate: none


def test_a_rate_of_kinds_gives_each_its_own_chance_and_counts_follow() -> None:
    faults = KubeFaults(seed=3, rates={"patch nodes": {"conflict": 0.3, "throttle": 0.2}})
    drawn = kinds_drawn(faults, PATCH_NODES, 2000)
    assert 450 < drawn.count("conflict") < 750 and 280 < drawn.count("throttle") < 520
    assert set(drawn) == {"conflict", "throttle", None}
    counts = faults.counts()
    assert counts["conflict"] == drawn.count("conflict") and counts["throttle"] == drawn.count("throttle")
    assert counts["error"] == 0 and faults.total == drawn.count("conflict") + drawn.count("throttle")
    assert faults.by_operation() == {"patch nodes": faults.total}


def test_kinds_weights_choose_among_the_kinds_a_request_can_meet() -> None:
    only_conflicts = KubeFaults(seed=1, rates={"*": 1.0}, kinds={"conflict": 1.0})
    assert set(kinds_drawn(only_conflicts, PATCH_NODES, 50)) == {"conflict"}
    unguarded = Request(verb="patch", resource="nodes")  # an unconditional write never conflicts
    assert set(kinds_drawn(only_conflicts, unguarded, 50)) == {None}
    watches = KubeFaults(seed=1, rates={"*": 1.0}, kinds={"expired": 1.0, "cut": 1.0})
    assert set(kinds_drawn(watches, Request(verb="watch", resource="pods"), 50)) == {"cut"}  # not resuming
    assert set(kinds_drawn(watches, Request(verb="watch", resource="pods", resumes=True), 100)) == {"cut", "expired"}


@pytest.mark.parametrize(
    ("rates", "kinds"),
    [({"*": 1.5}, None), ({"*": {"conflict": 0.7, "error": 0.7}}, None), ({"*": {"boom": 0.1}}, None), ({}, {"x": 1})],
)
def test_bad_rates_and_kinds_are_refused(rates: dict[str, Any], kinds: dict[str, float] | None) -> None:
    with pytest.raises(ValueError):
        KubeFaults(rates=rates, kinds=kinds)


def test_requests_are_described_by_kubernetes_verb_and_resource() -> None:
    def of(method: str, name: str | None = None, sub: str | None = None, **query: str) -> str:
        return request_of(method, plural="pods", name=name, sub=sub, query=query, body=None).operation

    assert of("GET") == "list pods" and of("GET", watch="true") == "watch pods" and of("GET", "p") == "get pods"
    assert of("POST") == "create pods" and of("POST", "p", "eviction") == "create pods/eviction"
    assert of("PUT", "p", "status") == "update pods/status" and of("PATCH", "p") == "patch pods"
    assert of("DELETE", "p") == "delete pods" and of("DELETE") == "deletecollection pods"
    guarded = request_of(
        "PATCH", plural="nodes", name="n", sub=None, query={}, body={"metadata": {"resourceVersion": "3"}}
    )
    assert guarded.guarded
    resumed = request_of(
        "GET", plural="pods", name=None, sub=None, query={"watch": "1", "resourceVersion": "9"}, body=None
    )
    assert resumed.resumes


def test_faults_are_off_by_default_and_settable_on_a_running_emulator(
    kube: KubeEmulator, http: urllib3.PoolManager
) -> None:
    assert kube.faults is None
    assert http.request("GET", kube.endpoint + "/api/v1/nodes").status == 200
    kube.faults = KubeFaults(seed=1, rates={"list nodes": {"error": 1.0}})
    answer = http.request("GET", kube.endpoint + "/api/v1/nodes")
    assert answer.status == 500 and json.loads(answer.data)["reason"] == "InternalError"
    assert http.request("GET", kube.endpoint + "/api/v1/nodes/n1").status == 200  # "get nodes" has no rate
    kube.faults = None
    assert http.request("GET", kube.endpoint + "/api/v1/nodes").status == 200


def test_a_throttled_request_is_a_429_status_with_retry_after_as_priority_and_fairness_answers(
    kube: KubeEmulator, http: urllib3.PoolManager
) -> None:
    kube.faults = KubeFaults(seed=1, rates={"*": {"throttle": 1.0}}, retry_after_seconds=3)
    answer = http.request("GET", kube.endpoint + "/api/v1/nodes")
    status = json.loads(answer.data)
    assert answer.status == 429 and answer.headers["Retry-After"] == "3"
    assert (status["kind"], status["reason"], status["details"]["retryAfterSeconds"]) == (
        "Status",
        "TooManyRequests",
        3,
    )
    assert kube.faults.counts()["throttle"] == 1


def test_a_conflict_refuses_a_guarded_patch_and_writes_nothing(kube: KubeEmulator, http: urllib3.PoolManager) -> None:
    version = kube.store.get("nodes", "n1")["metadata"]["resourceVersion"]
    kube.faults = KubeFaults(seed=1, rates={"patch nodes": {"conflict": 1.0}})
    patch = {"metadata": {"resourceVersion": version, "labels": {"a": "b"}}}
    headers = {"Content-Type": "application/merge-patch+json"}
    answer = http.request("PATCH", kube.endpoint + "/api/v1/nodes/n1", body=json.dumps(patch), headers=headers)
    assert answer.status == 409 and json.loads(answer.data)["reason"] == "Conflict"
    assert "labels" not in kube.store.get("nodes", "n1")["metadata"]
    unguarded = json.dumps({"metadata": {"labels": {"a": "b"}}})
    assert http.request("PATCH", kube.endpoint + "/api/v1/nodes/n1", body=unguarded, headers=headers).status == 200
    assert kube.faults.counts()["conflict"] == 1


def test_a_slow_answer_is_still_served(kube: KubeEmulator, http: urllib3.PoolManager) -> None:
    kube.faults = KubeFaults(seed=1, rates={"*": {"slow": 1.0}}, delay_seconds=0.01)
    answer = http.request("GET", kube.endpoint + "/api/v1/nodes/n1")
    assert answer.status == 200 and json.loads(answer.data)["metadata"]["name"] == "n1"
    assert kube.faults.counts()["slow"] == 1


def test_a_lost_answer_was_served_but_never_answered(kube: KubeEmulator, http: urllib3.PoolManager) -> None:
    kube.faults = KubeFaults(seed=1, rates={"patch nodes": {"lost": 1.0}})
    headers = {"Content-Type": "application/merge-patch+json"}
    patch = json.dumps({"metadata": {"labels": {"a": "b"}}})
    with pytest.raises(urllib3.exceptions.ProtocolError):
        http.request("PATCH", kube.endpoint + "/api/v1/nodes/n1", body=patch, headers=headers)
    assert kube.store.get("nodes", "n1")["metadata"]["labels"] == {"a": "b"}
    assert http.request("GET", kube.endpoint + "/api/v1/nodes/n1").status == 200  # a new connection is served
    assert kube.faults.counts()["lost"] == 1


def test_a_cut_watch_ends_without_its_terminator_after_some_events(
    kube: KubeEmulator, http: urllib3.PoolManager
) -> None:
    for i in range(5):
        kube.store.create("pods", {"metadata": {"name": f"p{i}", "namespace": "default"}, "spec": {"containers": []}})
    kube.faults = KubeFaults(seed=1, rates={"watch pods": {"cut": 1.0}}, cut_after_events=2)
    answer = http.request("GET", kube.endpoint + "/api/v1/pods?watch=1&timeoutSeconds=5", preload_content=False)
    lines: list[bytes] = []
    with pytest.raises(urllib3.exceptions.ProtocolError):
        for chunk in answer.stream(None):
            lines.extend(line for line in chunk.splitlines() if line)
    assert 1 <= len(lines) <= 2 and all(json.loads(line)["type"] == "ADDED" for line in lines)
    assert kube.faults.counts()["cut"] == 1


def test_a_resumed_watch_can_be_expired_with_a_410_error_event(kube: KubeEmulator, http: urllib3.PoolManager) -> None:
    version = kube.store.get("nodes", "n1")["metadata"]["resourceVersion"]
    kube.faults = KubeFaults(seed=1, rates={"watch nodes": {"expired": 1.0}})
    url = f"{kube.endpoint}/api/v1/nodes?watch=1&timeoutSeconds=1&resourceVersion={version}"
    event = json.loads(http.request("GET", url).data.splitlines()[0])
    assert event["type"] == "ERROR"
    assert (event["object"]["code"], event["object"]["reason"]) == (410, "Expired")
    assert "too old resource version" in event["object"]["message"]
    fresh = http.request("GET", f"{kube.endpoint}/api/v1/nodes?watch=1&timeoutSeconds=1")  # a list-watch never is
    assert json.loads(fresh.data.splitlines()[0])["type"] == "ADDED"
    assert kube.faults.counts()["expired"] == 1
