"""The simulated workload controllers reconcile only what changed since their last step (and everything every
resync), and end every step in the same state as controllers that reconcile everything each time: the same
history of scaling, rollouts, evictions, binds, vanished Nodes and deleted owners, replayed on two stores
with the same seed, leaves the same ReplicaSets, pods and statuses after every step."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pytest

from nodesmith.sim.controllers import SimControllers
from nodesmith.sim.kube import Store
from nodesmith.sim.kube_scheduler import SimScheduler
from nodesmith.sim.kubelet import MANAGED_ANNOTATION

if TYPE_CHECKING:
    from collections.abc import Callable

DEPLOYMENTS = "deployments.apps"
REPLICASETS = "replicasets.apps"


def _deployment(store: Store, name: str, replicas: int, *, image: str = "pause") -> None:
    labels = {"app": name}
    store.create(DEPLOYMENTS, {
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"replicas": replicas, "selector": {"matchLabels": labels}, "template": {
            "metadata": {"labels": labels},
            "spec": {"containers": [{"name": "c", "image": image, "resources": {"requests": {"cpu": "500m"}}}]},
        }},
    })  # fmt: skip


def _node(store: Store, name: str) -> None:
    store.create("nodes", {
        "metadata": {"name": name, "annotations": {MANAGED_ANNOTATION: "true"}},
        "spec": {},
        "status": {"allocatable": {"cpu": "4", "memory": "8Gi", "pods": "20"},
                   "conditions": [{"type": "Ready", "status": "True"}]},
    })  # fmt: skip


def _pods_of(store: Store, app: str) -> list[str]:
    return sorted(p["metadata"]["name"] for p in store.objects("pods") if p["metadata"]["labels"].get("app") == app)


def _replicaset_of(store: Store, app: str) -> str:
    return next(
        r["metadata"]["name"] for r in store.objects(REPLICASETS) if r["metadata"]["name"].startswith(f"{app}-")
    )


def _edit_deployment(store: Store, name: str, edit: Callable[[dict[str, Any]], None]) -> None:
    store.mutate(DEPLOYMENTS, name, edit, namespace="default")


# Each entry changes the cluster as a user, the scheduler, Nodesmith or a vanishing instance would; the
# controllers step after each one.
CLOCK = 1_800_000_000.0
"""Epoch seconds both stores read."""

HISTORY: list[Callable[[Store], None]] = [
    lambda s: (_deployment(s, "web", 3), _deployment(s, "api", 2), _deployment(s, "batch", 1)),
    lambda s: None,  # the step after creating the ReplicaSets creates nothing new
    lambda s: (_node(s, "n1"), _node(s, "n2")),
    lambda s: SimScheduler(store=s).step(10.0),  # bound and Running: statuses count them ready
    lambda s: _edit_deployment(s, "web", lambda d: d["spec"].update(replicas=5)),
    lambda s: s.evict(_pods_of(s, "api")[0], namespace="default"),
    lambda s: SimScheduler(store=s).step(11.0),
    lambda s: s.delete("nodes", "n1"),  # its pods are collected and replaced
    lambda s: _edit_deployment(s, "api", lambda d: d["spec"]["template"]["spec"]["containers"][0].update(image="v2")),
    lambda s: s.delete(REPLICASETS, _replicaset_of(s, "batch"), namespace="default"),  # made again, pods collected
    lambda s: s.delete(DEPLOYMENTS, "web", namespace="default"),  # its ReplicaSet, then its pods, are collected
    lambda s: None,
    lambda s: _edit_deployment(s, "batch", lambda d: d["spec"].update(replicas=3)),
    lambda s: SimScheduler(store=s).step(12.0),
    lambda s: s.delete("pods", _pods_of(s, "batch")[0], namespace="default", grace_period_seconds=0),
    lambda s: None,
]


def _state(store: Store) -> dict[str, Any]:
    """What the controllers decide: every ReplicaSet's replicas and status, every Deployment's status, and
    every pod (name, owner, node, phase, terminating)."""

    def status(obj: dict[str, Any]) -> list[tuple[str, Any]]:
        return sorted((obj.get("status") or {}).items())

    def pod(p: dict[str, Any]) -> tuple[Any, ...]:
        meta = p["metadata"]
        owner = meta["ownerReferences"][0]["name"]
        phase = (p.get("status") or {}).get("phase")
        return meta["name"], owner, p["spec"].get("nodeName"), phase, bool(meta.get("deletionTimestamp"))

    return {
        "replicasets": sorted(
            (r["metadata"]["name"], r["spec"]["replicas"], status(r)) for r in store.objects(REPLICASETS)
        ),
        "deployments": sorted((d["metadata"]["name"], status(d)) for d in store.objects(DEPLOYMENTS)),
        "pods": sorted(pod(p) for p in store.objects("pods")),
    }


@pytest.mark.parametrize("graceful", [False, True])
def test_acting_on_changes_ends_every_step_where_reconciling_everything_does(graceful: bool) -> None:
    # One fixed clock for both stores: pods are ranked by creationTimestamp (whole seconds), and two wall-clock
    # stores could stamp the same pod on either side of a second.
    full_store, store = (
        Store(seed=11, graceful_pod_deletion=graceful, clock=lambda: CLOCK),
        Store(seed=11, graceful_pod_deletion=graceful, clock=lambda: CLOCK),
    )
    everything = SimControllers(store=full_store, resync_seconds=0.0)
    on_changes = SimControllers(store=store, resync_seconds=3600.0)  # no resync within the history

    for n, change in enumerate(HISTORY):
        change(full_store)
        change(store)
        everything.step(float(n))
        on_changes.step(float(n))
        assert _state(store) == _state(full_store), f"after step {n}"
    assert _pods_of(store, "batch") and not _pods_of(store, "web")  # the history did what it says


def test_a_step_after_nothing_changed_reconciles_nothing() -> None:
    store = Store(seed=3)
    _deployment(store, "web", 2)
    controllers = SimControllers(store=store, resync_seconds=3600.0)
    controllers.step(0.0)
    controllers.step(1.0)  # the ReplicaSet's and pods' own events
    controllers.step(2.0)
    version = store.resource_version

    reconciled: list[str] = []
    replicaset = controllers._replicaset
    controllers._replicaset = lambda rs: (reconciled.append(rs["metadata"]["name"]), replicaset(rs))[1]  # type: ignore[method-assign]
    controllers.step(3.0)

    assert reconciled == [] and store.resource_version == version


def test_every_replicaset_is_reconciled_again_once_the_resync_period_has_passed() -> None:
    store = Store(seed=3)
    _deployment(store, "web", 2)
    controllers = SimControllers(store=store, resync_seconds=10.0)
    for t in (0.0, 1.0, 2.0):
        controllers.step(t)

    reconciled: list[str] = []
    replicaset = controllers._replicaset
    controllers._replicaset = lambda rs: (reconciled.append(rs["metadata"]["name"]), replicaset(rs))[1]  # type: ignore[method-assign]
    controllers.step(9.0)
    assert reconciled == []
    controllers.step(10.0)
    assert len(reconciled) == 1
