"""After a woken pass, the reconcile invocation keeps the lease through the interruption window and
provisions again, without resyncs, for pods the kube-scheduler leaves unschedulable (the watch reports
them) and for batches that ask for a pass; it stops at the end of the window."""

from __future__ import annotations

import threading
import time

from reconcile_fakes import make_pod
from test_pending_pods_follow_the_pod_watch import FeedCluster

from nodesmith.core.ports import PodEvent
from nodesmith.handlers.watch_mode import watch_burst


def test_a_pod_left_unschedulable_during_the_burst_gets_a_pass_within_the_batch_window() -> None:
    cluster = FeedCluster()
    passes: list[float] = []
    t0 = time.monotonic()

    def straggler() -> None:
        time.sleep(0.5)  # the kube-scheduler placed the others elsewhere than planned: one pod is left over
        cluster.feed.put(PodEvent(type="ADDED", pods=(make_pod("straggler"),), resource_version="2"))

    threading.Thread(target=straggler, daemon=True).start()
    out = watch_burst(run_pass=lambda: passes.append(time.monotonic() - t0), cluster=cluster, seconds=3.0)  # type: ignore[arg-type]

    assert out.batches == [1] and out.passes == 1 and out.stopped == "deadline"
    assert 1.4 <= passes[0] <= 2.5  # the batch closed one idle second after the pod turned unschedulable
    assert time.monotonic() - t0 >= 3.0
    assert cluster.listed == 0  # pods come from the watch, not from listing


def test_a_batch_that_asks_during_the_burst_gets_a_pass_and_nothing_else_runs() -> None:
    cluster = FeedCluster()
    passes: list[float] = []
    t0 = time.monotonic()

    def requested(since: float) -> bool:  # a batch cordoned at t0 + 1 s and asked the holder for a pass
        return time.monotonic() - t0 >= 1.0 and since < t0 + 1.0

    out = watch_burst(run_pass=lambda: passes.append(time.monotonic() - t0), cluster=cluster,  # type: ignore[arg-type]
                      seconds=2.5, requested=requested)  # fmt: skip

    assert len(passes) == 1 and 1.0 <= passes[0] <= 1.8 and out.batches == []


def test_a_window_already_over_runs_nothing_and_starts_no_watch() -> None:
    cluster = FeedCluster()
    out = watch_burst(run_pass=lambda: (_ for _ in ()).throw(AssertionError("no pass")), cluster=cluster,  # type: ignore[arg-type]
                      seconds=-5.0)  # fmt: skip
    assert out.passes == 0 and out.stopped == "deadline"
