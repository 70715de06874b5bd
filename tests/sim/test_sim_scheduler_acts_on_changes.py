"""The simulated kube-scheduler keeps its view of the pods from the store's events (and reads them all again
every resync), and ends every step in the same state as a scheduler that reads every pod each time: one
history of pods created, bound, started, finished, deleted and left unschedulable, and of Nodes filling up,
cordoned and uncordoned, turning NotReady and vanishing, replayed on two stores with the same seed, leaves the same pods
(node, phase, conditions) after every step."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pytest

from nodesmith.sim.kube import Store
from nodesmith.sim.kube_scheduler import SimScheduler

if TYPE_CHECKING:
    from collections.abc import Callable


def _node(store: Store, name: str, *, cpu: str = "2", pods: str = "10") -> None:
    store.create("nodes", {
        "metadata": {"name": name},
        "spec": {},
        "status": {"allocatable": {"cpu": cpu, "memory": "8Gi", "pods": pods},
                   "conditions": [{"type": "Ready", "status": "True"}]},
    })  # fmt: skip


def _pod(store: Store, name: str, *, cpu: str = "500m", **spec: Any) -> None:
    store.create("pods", {
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"containers": [{"name": "c", "image": "pause", "resources": {"requests": {"cpu": cpu}}}], **spec},
    })  # fmt: skip


def _edit(store: Store, resource: str, name: str, edit: Callable[[dict[str, Any]], None]) -> None:
    store.mutate(resource, name, edit, namespace="default" if resource == "pods" else None)


def _phase(phase: str) -> Callable[[dict[str, Any]], None]:
    return lambda p: p.setdefault("status", {}).update(phase=phase)


def _not_ready(node: dict[str, Any]) -> None:
    node["status"]["conditions"] = [{"type": "Ready", "status": "False"}]


# Each entry changes the cluster as a user, a controller, the kubelet or Nodesmith would; the scheduler steps
# after each one.
HISTORY: list[Callable[[Store], None]] = [
    lambda s: (_pod(s, "a"), _pod(s, "b"), _pod(s, "c", priorityClassName="x", priority=10)),
    lambda s: _node(s, "n1", cpu="1500m"),  # a, b and c fill it
    lambda s: (_pod(s, "d", cpu="1"), _pod(s, "e", cpu="1")),  # unschedulable
    lambda s: _node(s, "n2"),  # d and e go on n2
    lambda s: _edit(s, "pods", "a", _phase("Succeeded")),  # a finished: its 500m on n1 is free
    lambda s: _pod(s, "f"),  # goes where a was
    lambda s: s.delete("pods", "b", namespace="default"),  # gone, or terminating and holding its 500m
    lambda s: _pod(s, "g"),  # where b was, or unschedulable
    lambda s: _edit(s, "nodes", "n1", lambda n: n["spec"].update(unschedulable=True)),
    lambda s: _pod(s, "h"),  # n1 cordoned, n2 full: unschedulable
    lambda s: _pod(s, "other", schedulerName="someone-else"),  # never ours
    lambda s: [_pod(s, f"placed-{n}", cpu="10m", nodeName="n2") for n in (3, 1, 4, 0, 2)],  # started, not bound
    lambda s: (_node(s, "n3", cpu="1"), _edit(s, "nodes", "n2", _not_ready)),
    lambda s: s.delete("pods", "h", namespace="default", grace_period_seconds=0),
    lambda s: (_pod(s, "big", cpu="3"), _pod(s, "i"), _pod(s, "broken", cpu="lots")),  # unparseable: skipped
    lambda s: s.delete("nodes", "n3"),
    lambda s: (_node(s, "n4", cpu="8"), _edit(s, "pods", "d", _phase("Failed"))),
    lambda s: (
        _edit(s, "nodes", "n1", lambda n: n["spec"].update(unschedulable=False)),
        s.delete("pods", "c", namespace="default", grace_period_seconds=0),
    ),
    lambda s: _pod(s, "j"),  # where c was (n1 comes before n4)
    lambda s: None,
]


def _state(store: Store) -> list[tuple[Any, ...]]:
    def conditions(p: dict[str, Any]) -> list[tuple[Any, ...]]:
        found = (p.get("status") or {}).get("conditions") or []
        return sorted((c.get("type"), c.get("status"), c.get("reason"), c.get("message")) for c in found)

    return sorted(
        (
            p["metadata"]["name"],
            p["metadata"]["resourceVersion"],  # the same writes in the same order
            p["spec"].get("nodeName"),
            (p.get("status") or {}).get("phase"),
            conditions(p),
        )
        for p in store.objects("pods")
    )


@pytest.mark.parametrize("graceful", [False, True])
def test_acting_on_changes_ends_every_step_where_reading_every_pod_does(graceful: bool) -> None:
    full_store, store = Store(seed=5, graceful_pod_deletion=graceful), Store(seed=5, graceful_pod_deletion=graceful)
    everything = SimScheduler(store=full_store, resync_seconds=0.0)
    on_changes = SimScheduler(store=store, resync_seconds=3600.0)  # no resync within the history

    for n, change in enumerate(HISTORY):
        change(full_store)
        change(store)
        bound = everything.step(float(n)), on_changes.step(float(n))
        assert bound[1] == bound[0], f"step {n}"
        assert _state(store) == _state(full_store), f"after step {n}"
    nodes = {name: node for name, _, node, *_ in _state(store)}
    # the history did what it says: f and j took a's and c's places, big waited for n4, other and broken were
    # never bound
    assert nodes["f"] == nodes["j"] == "n1" and nodes["big"] == "n4"
    assert nodes["other"] is None and nodes["broken"] is None


def _count_pod_reads(store: Store) -> list[str]:
    reads: list[str] = []
    objects = store.objects

    def counting(resource: str) -> list[dict[str, Any]]:
        if resource == "pods":
            reads.append(resource)
        return objects(resource)

    store.objects = counting  # type: ignore[method-assign]
    return reads


def test_after_the_first_step_pods_are_read_again_only_at_the_resync() -> None:
    store = Store(seed=3)
    _node(store, "n1")
    _pod(store, "a")
    scheduler = SimScheduler(store=store, resync_seconds=10.0)
    reads = _count_pod_reads(store)
    scheduler.step(0.0)
    assert reads == ["pods"]

    _pod(store, "b")  # seen through its event
    assert scheduler.step(1.0) == 1
    scheduler.step(9.0)
    assert reads == ["pods"]
    scheduler.step(10.0)
    assert reads == ["pods", "pods"]
    assert {p["spec"].get("nodeName") for p in store.objects("pods")} == {"n1"}


def _allocatable_cpu(cpu: str) -> Callable[[dict[str, Any]], None]:
    return lambda n: n["status"]["allocatable"].update(cpu=cpu)


def test_a_pod_that_fits_nowhere_waits_its_backoff_unless_a_schedulable_node_appears() -> None:
    store = Store(seed=4)
    _node(store, "n1", cpu="1")
    _pod(store, "big", cpu="2")
    scheduler = SimScheduler(store=store)
    assert scheduler.step(0.0) == 0  # unschedulable: next attempt in 1 s
    _edit(store, "nodes", "n1", _allocatable_cpu("4"))  # room, through no event that requeues it
    assert scheduler.step(0.5) == 0
    assert scheduler.step(1.0) == 1

    _pod(store, "huge", cpu="10")
    assert scheduler.step(2.0) == scheduler.step(3.0) == 0  # waits 1 s, then 2 s
    _edit(store, "nodes", "n1", _allocatable_cpu("20"))
    assert scheduler.step(4.0) == 0
    assert scheduler.step(5.0) == 1

    _pod(store, "late", cpu="30")
    assert scheduler.step(6.0) == 0
    _node(store, "n2", cpu="40")  # a new schedulable Node: tried at once
    assert scheduler.step(6.1) == 1


def _count_fit_checks(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    from nodesmith.sim import kube_scheduler

    checks: list[str] = []
    why_not = kube_scheduler.why_not

    def counting(pod: Any, node: Any, used: Any) -> str | None:
        checks.append(pod.name)
        return why_not(pod, node, used)

    monkeypatch.setattr(kube_scheduler, "why_not", counting)
    return checks


def _message(store: Store, name: str) -> str | None:
    pod = store.get("pods", name, namespace="default")
    found = [c for c in (pod.get("status") or {}).get("conditions") or [] if c.get("type") == "PodScheduled"]
    return found[0].get("message") if found else None


def test_pods_of_one_shape_that_fit_nowhere_try_the_nodes_once_per_step(monkeypatch: pytest.MonkeyPatch) -> None:
    store = Store(seed=2)
    for name in ("n1", "n2", "n3"):
        _node(store, name)
    for n in range(5):
        _pod(store, f"big-{n}", cpu="3")
    checks = _count_fit_checks(monkeypatch)

    assert SimScheduler(store=store).step(0.0) == 0

    assert checks == ["big-0"] * 3  # the four others of its shape were not tried against the nodes again
    assert {_message(store, f"big-{n}") for n in range(5)} == {"0/3 nodes are available: 3 Insufficient cpu."}


def test_a_bind_makes_a_failed_shape_try_the_nodes_again(monkeypatch: pytest.MonkeyPatch) -> None:
    store = Store(seed=2)
    _node(store, "n1")
    _pod(store, "a", cpu="3", priority=30)
    _pod(store, "b", cpu="1", priority=20)  # fits n1: its usage changes
    _pod(store, "c", cpu="3", priority=10)  # a's shape, tried again after b's bind
    checks = _count_fit_checks(monkeypatch)

    assert SimScheduler(store=store).step(0.0) == 1

    assert checks == ["a", "b", "c"]
    assert _message(store, "c") == "0/1 nodes are available: 1 Insufficient cpu."
