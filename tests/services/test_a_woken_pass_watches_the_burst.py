"""After a woken pass, the reconcile invocation keeps the lease through the interruption window and
provisions again, without resyncs, for pods the kube-scheduler leaves unschedulable (the watch reports
them) and for nodes cordoned since its last pass (later batches of the burst); it stops at the end of the
window."""

from __future__ import annotations

import threading
import time

from reconcile_fakes import make_pod
from test_pending_pods_follow_the_pod_watch import FeedCluster

from nodesmith.core.ports import PodEvent
from nodesmith.services.reconciler.watching import watch_burst


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


def test_a_node_cordoned_during_the_burst_gets_a_pass_and_nothing_else_runs() -> None:
    cluster = FeedCluster(cordoned={"node-before"})  # cordoned before the woken pass: that pass's
    passes: list[float] = []
    t0 = time.monotonic()

    def cordon() -> None:
        time.sleep(1.0)  # a later interruption batch of the burst cordons another node
        cluster.cordoned.add("node-later")

    threading.Thread(target=cordon, daemon=True).start()
    out = watch_burst(run_pass=lambda: passes.append(time.monotonic() - t0), cluster=cluster,  # type: ignore[arg-type]
                      seconds=3.0)  # fmt: skip

    # at the watch's next listing of the cordoned nodes (once a second) and a poll
    assert len(passes) == 1 and 1.0 <= passes[0] <= 2.5 and out.batches == []


def test_a_window_already_over_runs_nothing_and_starts_no_watch() -> None:
    cluster = FeedCluster()
    out = watch_burst(run_pass=lambda: (_ for _ in ()).throw(AssertionError("no pass")), cluster=cluster,  # type: ignore[arg-type]
                      seconds=-5.0)  # fmt: skip
    assert out.passes == 0 and out.stopped == "deadline"
