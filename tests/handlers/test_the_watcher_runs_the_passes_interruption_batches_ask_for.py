"""Watch mode holds the reconcile lease for most of 15 minutes, so interruption batches cannot take it:
they record a request on it, and the watcher, reading the lease at most once a second, runs one more
provisioning pass for it. Driven through ``run_watch`` with a fake clock and the in-memory lease store."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "services"))

import interruption_fakes as fakes
import memory_state as memory
from reconcile_fakes import FakeCluster, make_nodeclass, make_nodepool

from nodesmith.handlers.watch_mode import LEASE, REQUEST_CHECK_SECONDS, run_watch
from nodesmith.services.provisioning.watch import POLL_SECONDS, RESYNC_SECONDS


def watch_with(*, request_at: float | None) -> tuple[list[float], list[float], memory.MemoryStateStore]:
    """One watch of 60 s (no pods ever pending); when ``request_at`` is set, a batch asks for a pass
    that many seconds in. Returns the clock times of the provisioning passes and the full passes."""
    clock, state = fakes.FakeClock(), memory.MemoryStateStore()
    cluster = FakeCluster(nodepools=[make_nodepool()], nodeclasses=[make_nodeclass()])
    passes: list[float] = []
    full: list[float] = []
    start = clock()

    def sleep(seconds: float) -> None:
        before = clock() - start
        clock.sleep(seconds)
        if request_at is not None and before < request_at <= clock() - start:
            assert state.request_pass(name=LEASE, after=clock.wall(), now=clock.wall())  # the lease is held

    run = run_watch(
        run_pass=lambda: passes.append(clock()),
        run_full=lambda: full.append(clock()),
        cluster=cluster,
        remaining_seconds=100.0,  # 100 - 30 s exit margin - 10 s drain budget: 60 s of watching
        drain_budget_seconds=10.0,
        request_id="watcher",
        state=state,
        wall=clock.wall,
        clock=clock,
        sleep=sleep,
        watch_pods=False,
    )
    assert not run.skipped
    assert state.lease_holder(name=LEASE, now=clock.wall()) is None  # released at the end
    return [t - start for t in passes], [t - start for t in full], state


def test_a_pass_requested_of_the_watcher_runs_within_about_a_second() -> None:
    # between two of the watcher's full passes (every RESYNC_SECONDS: 20 s and 30 s in)
    passes, full, _ = watch_with(request_at=24.5)

    assert len(passes) == 1
    assert 24.5 <= passes[0] <= 24.5 + REQUEST_CHECK_SECONDS + POLL_SECONDS  # at the next read of the lease
    assert not any(24.5 <= t <= passes[0] for t in full)  # not a resync that happened to come


def test_a_request_the_watcher_s_next_full_pass_already_covers_adds_no_pass() -> None:
    passes, full, _ = watch_with(request_at=RESYNC_SECONDS * 2)  # the moment the full pass begins

    assert passes == [] and any(t == RESYNC_SECONDS * 2 for t in full)


def test_without_a_request_an_idle_watcher_runs_no_provisioning_pass() -> None:
    passes, full, _ = watch_with(request_at=None)

    assert passes == [] and len(full) >= 1  # only the start-of-invocation full pass
