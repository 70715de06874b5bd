"""The simulated node lifecycle controller (taints by the ``Ready`` condition, taint-based evictions) and the API
server's ``DefaultTolerationSeconds`` admission, on the emulator's store (Kubernetes docs, "Taints and
Tolerations": "Taint based evictions")."""

from __future__ import annotations

from typing import Any

import pytest

from nodesmith.sim.kube.admission import NOT_READY_TAINT, UNREACHABLE_TAINT
from nodesmith.sim.kube.store import Store
from nodesmith.sim.node_lifecycle import NodeLifecycle, eviction_delay

T0 = 1_800_000_000.0
DAEMON_TOLERATIONS = [
    {"key": NOT_READY_TAINT, "operator": "Exists", "effect": "NoExecute"},
    {"key": UNREACHABLE_TAINT, "operator": "Exists", "effect": "NoExecute"},
]


def _store(now: list[float], *, seconds: int = 300) -> Store:
    store = Store(clock=lambda: now[0], graceful_pod_deletion=True)
    store.not_ready_toleration_seconds = store.unreachable_toleration_seconds = seconds
    return store


def _node(store: Store, name: str, ready: str) -> None:
    store.create("nodes", {"metadata": {"name": name}, "spec": {},
                           "status": {"conditions": [{"type": "Ready", "status": ready}]}})  # fmt: skip


def _set_ready(store: Store, name: str, ready: str) -> None:
    store.mutate("nodes", name, lambda n: n["status"].update(conditions=[{"type": "Ready", "status": ready}]))


def _pod(store: Store, name: str, node: str, tolerations: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"containers": [{"name": "c", "image": "pause"}], "nodeName": node,
                            "terminationGracePeriodSeconds": 5}  # fmt: skip
    if tolerations is not None:
        spec["tolerations"] = tolerations
    return store.create("pods", {"metadata": {"name": name, "namespace": "default"}, "spec": spec,
                                 "status": {"phase": "Running"}})  # fmt: skip


def _condition_taints(store: Store, name: str) -> set[tuple[str, str]]:
    node = store.get("nodes", name)
    return {(t["key"], t["effect"]) for t in node["spec"].get("taints") or []
            if t["key"] in (NOT_READY_TAINT, UNREACHABLE_TAINT)}  # fmt: skip


def _terminating(store: Store, name: str) -> bool:
    return bool(store.get("pods", name, namespace="default")["metadata"].get("deletionTimestamp"))


def test_a_created_pod_gets_the_default_not_ready_and_unreachable_tolerations() -> None:
    store = _store([T0], seconds=20)
    pod = _pod(store, "web", "n1")
    assert [t for t in pod["spec"]["tolerations"] if t["effect"] == "NoExecute"] == [
        {"key": NOT_READY_TAINT, "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 20},
        {"key": UNREACHABLE_TAINT, "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 20},
    ]


@pytest.mark.parametrize(
    "own",
    [DAEMON_TOLERATIONS, [{"operator": "Exists"}],
     [{"key": NOT_READY_TAINT, "operator": "Exists", "tolerationSeconds": 7},
      {"key": UNREACHABLE_TAINT, "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 9}]],
)  # fmt: skip
def test_a_pod_that_already_tolerates_both_taints_gets_nothing_added(own: list[dict[str, Any]]) -> None:
    pod = _pod(_store([T0]), "ds", "n1", tolerations=own)
    assert pod["spec"]["tolerations"] == own


def test_a_pod_tolerating_one_taint_gets_the_other_only() -> None:
    own = [{"key": UNREACHABLE_TAINT, "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 5}]
    pod = _pod(_store([T0]), "web", "n1", tolerations=own)
    assert pod["spec"]["tolerations"] == [
        *own,
        {"key": NOT_READY_TAINT, "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300},
    ]


def test_nodes_are_tainted_by_their_ready_condition_and_untainted_when_ready_again() -> None:
    now = [T0]
    store = _store(now)
    _node(store, "down", "False")
    _node(store, "silent", "Unknown")
    _node(store, "fine", "True")
    store.create("nodes", {"metadata": {"name": "new"}, "spec": {}})  # no Ready condition yet: left alone
    NodeLifecycle(store=store).step(now[0])
    assert _condition_taints(store, "down") == {(NOT_READY_TAINT, "NoSchedule"), (NOT_READY_TAINT, "NoExecute")}
    assert _condition_taints(store, "silent") == {(UNREACHABLE_TAINT, "NoSchedule"),
                                                  (UNREACHABLE_TAINT, "NoExecute")}  # fmt: skip
    assert _condition_taints(store, "fine") == set() and _condition_taints(store, "new") == set()
    (no_execute,) = [t for t in store.get("nodes", "down")["spec"]["taints"] if t["effect"] == "NoExecute"]
    assert no_execute["timeAdded"] == "2027-01-15T08:00:00Z"

    _set_ready(store, "down", "True")
    _set_ready(store, "silent", "False")  # its kubelet reports again, NotReady
    NodeLifecycle(store=store).step(now[0])
    assert _condition_taints(store, "down") == set()
    assert _condition_taints(store, "silent") == {(NOT_READY_TAINT, "NoSchedule"), (NOT_READY_TAINT, "NoExecute")}


def test_pods_are_evicted_when_their_toleration_runs_out_and_daemon_pods_stay() -> None:
    now = [T0]
    store = _store(now, seconds=20)
    _node(store, "n1", "True")
    _pod(store, "web", "n1")
    _pod(store, "quick", "n1", tolerations=[{"key": UNREACHABLE_TAINT, "operator": "Exists",
                                              "effect": "NoExecute", "tolerationSeconds": 5}])  # fmt: skip
    _pod(store, "daemon", "n1", tolerations=DAEMON_TOLERATIONS)
    lifecycle = NodeLifecycle(store=store)
    _set_ready(store, "n1", "Unknown")
    lifecycle.step(now[0])
    assert not any(_terminating(store, p) for p in ("web", "quick", "daemon"))
    lifecycle.step(now[0] + 5)
    assert _terminating(store, "quick") and not _terminating(store, "web")
    lifecycle.step(now[0] + 19)
    assert not _terminating(store, "web")
    lifecycle.step(now[0] + 20)
    assert _terminating(store, "web") and not _terminating(store, "daemon")
    lifecycle.step(now[0] + 3600)
    assert not _terminating(store, "daemon")
    assert lifecycle.evicted == 2


def test_an_untolerated_no_execute_taint_evicts_at_once() -> None:
    now = [T0]
    store = _store(now)
    _node(store, "n1", "True")
    _pod(store, "web", "n1")
    store.mutate("nodes", "n1", lambda n: n["spec"].update(taints=[{"key": "maintenance", "effect": "NoExecute"}]))
    NodeLifecycle(store=store).step(now[0])
    assert _terminating(store, "web")


def test_a_node_ready_again_before_the_toleration_ends_keeps_its_pods_and_the_wait_starts_over() -> None:
    now = [T0]
    store = _store(now, seconds=20)
    _node(store, "n1", "True")
    _pod(store, "web", "n1")
    lifecycle = NodeLifecycle(store=store)
    _set_ready(store, "n1", "False")
    lifecycle.step(now[0])
    _set_ready(store, "n1", "True")
    lifecycle.step(now[0] + 15)
    _set_ready(store, "n1", "False")
    lifecycle.step(now[0] + 16)
    lifecycle.step(now[0] + 30)  # 14 s into the second outage
    assert not _terminating(store, "web")
    lifecycle.step(now[0] + 36)
    assert _terminating(store, "web")


def test_eviction_delay_takes_the_least_toleration_seconds_of_the_tolerations_used() -> None:
    taints = [{"key": NOT_READY_TAINT, "effect": "NoExecute"}, {"key": NOT_READY_TAINT, "effect": "NoSchedule"}]
    pod = {"spec": {"tolerations": [
        {"key": NOT_READY_TAINT, "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 30},
        {"operator": "Exists", "tolerationSeconds": 12},
        {"key": UNREACHABLE_TAINT, "operator": "Exists", "tolerationSeconds": 1},  # another taint's: not used
    ]}}  # fmt: skip
    assert eviction_delay(pod, taints) == 12.0
    assert eviction_delay({"spec": {"tolerations": DAEMON_TOLERATIONS}}, taints) is None
    assert eviction_delay({"spec": {}}, taints) == 0.0
    assert eviction_delay({"spec": {}}, taints[1:]) is None
    equal = {"key": "k", "operator": "Equal", "value": "a", "effect": "NoExecute", "tolerationSeconds": 3}
    assert eviction_delay({"spec": {"tolerations": [equal]}}, [{"key": "k", "value": "a", "effect": "NoExecute"}]) == 3
    assert eviction_delay({"spec": {"tolerations": [equal]}}, [{"key": "k", "value": "b", "effect": "NoExecute"}]) == 0
