"""Watch mode holds the reconcile lease for most of 15 minutes, so the reconcile function a cordoning
interruption wakes cannot run beside it; instead the watcher lists the cordoned nodes (at most once a second)
and runs one more provisioning pass when a node was cordoned since its last pass, so that node's pods get
their replacement capacity while it drains. Driven through ``run_watch`` with a fake clock and the in-memory
lease store."""

from __future__ import annotations

import sys
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "services"))

import memory_state as memory
from reconcile_fakes import FakeCluster, make_nodeclass, make_nodepool

from nodesmith.core.model import Node
from nodesmith.services.provisioning.watch import POLL_SECONDS, RESYNC_SECONDS
from nodesmith.services.reconciler.watching import LEASE, Clock, WatchPasses, run_watch

LISTING_SECONDS = 1.0  # how often the watcher lists the cordoned nodes (CordonWatch's default)


class FakeClock:
    """Monotonic and wall time that only move when the watcher sleeps."""

    def __init__(self) -> None:
        self.t = 0.0

    def monotonic(self) -> float:
        return self.t

    def wall(self) -> float:
        return 1_700_000_000.0 + self.t

    def sleep(self, seconds: float) -> None:
        self.t = round(self.t + seconds, 6)


def watch_with(cordons: dict[str, float]) -> tuple[list[float], list[float], list[str]]:
    """One watch of 60 s (no pods ever pending) over nodes ``node-a`` and ``node-b``; the interruption function
    cordons each node of ``cordons`` that many seconds in. Returns the clock times of the provisioning passes
    and of the full passes, and the lease holders seen by the provisioning passes."""
    clock, state = FakeClock(), memory.MemoryStateStore()
    cluster = FakeCluster(nodepools=[make_nodepool()], nodeclasses=[make_nodeclass()])
    cluster.nodes = [Node(name="node-a", ready=True), Node(name="node-b", ready=True)]
    passes: list[float] = []
    full: list[float] = []
    holders: list[str] = []

    def sleep(seconds: float) -> None:
        before = clock.t
        clock.sleep(seconds)
        cluster.nodes = [
            replace(n, unschedulable=True) if before < cordons.get(n.name, -1.0) <= clock.t else n
            for n in cluster.nodes
        ]

    def provision() -> None:
        passes.append(clock.t)
        holders.append(state.lease_holder(name=LEASE, now=clock.wall()) or "")
        clock.sleep(0.01)  # a pass takes a moment

    def resync() -> None:
        full.append(clock.t)
        clock.sleep(0.01)

    run = run_watch(
        passes=WatchPasses(provision=provision, full=resync),
        cluster=cluster,
        remaining_seconds=90.0,  # 90 - 30 s exit margin: 60 s of watching
        request_id="watcher",
        state=state,
        clock=Clock(wall=clock.wall, monotonic=clock.monotonic, sleep=sleep),
        watch_pods=False,
    )
    assert not run.skipped
    assert state.lease_holder(name=LEASE, now=clock.wall()) is None  # released at the end
    return passes, full, holders


def test_a_node_cordoned_under_the_watcher_gets_a_pass_within_about_a_second() -> None:
    # between two of the watcher's full passes (every RESYNC_SECONDS: 20 s and 30 s in)
    passes, full, holders = watch_with({"node-a": 24.5})

    assert len(passes) == 1
    assert 24.5 <= passes[0] <= 24.5 + LISTING_SECONDS + POLL_SECONDS  # at the next listing of the cordons
    assert not any(24.5 <= t <= passes[0] for t in full)  # not a resync that happened to come
    assert holders[0].startswith("watcher@")  # run under the watcher's lease


def test_each_later_cordon_owes_its_own_pass_and_a_cordoned_node_only_one() -> None:
    passes, _, _ = watch_with({"node-a": RESYNC_SECONDS * 2 + 4.5, "node-b": RESYNC_SECONDS * 3 + 4.5})

    # node-a stays cordoned at every later listing, but the pass after its cordon saw it
    assert len(passes) == 2
    assert RESYNC_SECONDS * 3 + 4.5 <= passes[1] <= RESYNC_SECONDS * 3 + 4.5 + LISTING_SECONDS + POLL_SECONDS


def test_without_a_new_cordon_an_idle_watcher_runs_no_provisioning_pass() -> None:
    passes, full, _ = watch_with({})

    assert passes == [] and len(full) >= 1  # only the start-of-invocation and resync full passes
