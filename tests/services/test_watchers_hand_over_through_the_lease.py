"""Watch mode hands over through the reconcile lease: the next invocation, started while the watcher
still runs, waits for it to leave and then watches; their passes never overlap (never two active)."""

from __future__ import annotations

import threading
import time
from typing import Any

from memory_state import MemoryStateStore
from test_pending_pods_follow_the_pod_watch import FeedCluster

from nodesmith.services.reconciler.watching import LEASE, WatchPasses, run_watch


def test_the_next_invocation_takes_over_when_the_watcher_leaves_and_never_runs_beside_it() -> None:
    state = MemoryStateStore()
    lock = threading.Lock()
    active = [0]
    overlapped = [False]
    passes: list[tuple[str, float]] = []

    def pass_of(who: str) -> Any:
        def run() -> str:
            with lock:
                active[0] += 1
                overlapped[0] = overlapped[0] or active[0] > 1
                passes.append((who, time.monotonic()))
            time.sleep(0.05)
            with lock:
                active[0] -= 1
            return who

        return run

    box: dict[str, Any] = {}
    first = threading.Thread(
        target=lambda: box.update(
            out=run_watch(
                passes=WatchPasses(provision=pass_of("old"), full=pass_of("old")),
                cluster=FeedCluster(),  # type: ignore[arg-type]
                remaining_seconds=31.5,  # watches ~1.5 s: the rest is the exit margin
                request_id="old",
                state=state,
            )
        ),
        daemon=True,
    )
    first.start()
    deadline = time.monotonic() + 30
    while (state.lease_holder(name=LEASE, now=time.time()) or "").split("@")[0] != "old":
        assert time.monotonic() < deadline, "the first watcher never took the lease"
        time.sleep(0.01)

    new = run_watch(
        passes=WatchPasses(provision=pass_of("new"), full=pass_of("new")),
        cluster=FeedCluster(),  # type: ignore[arg-type]
        remaining_seconds=33.0,
        request_id="new",
        state=state,
    )
    first.join(30)
    assert not new.skipped and new.passes >= 1  # it waited for the leaving watcher instead of returning
    assert not box["out"].skipped
    assert not overlapped[0]
    assert max(t for who, t in passes if who == "old") < min(t for who, t in passes if who == "new")
    assert state.lease_holder(name=LEASE, now=time.time()) is None  # released on the way out
