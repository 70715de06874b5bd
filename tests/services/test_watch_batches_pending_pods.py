"""Watch mode batches new pending pods like Karpenter (1 s idle, 10 s at most), stops before its
deadline or when the lease is lost, runs a provisioning pass when nodes are newly cordoned (resting after a
long pass), and a scheduled invocation waits only for a watcher about to leave."""

from __future__ import annotations

import itertools
from typing import Any

from nodesmith.services.provisioning.watch import (
    CordonWatch,
    PendingSource,
    WatchOutcome,
    WatchTiming,
    handover_wait,
    holder_name,
    watch,
)


class FakeTime:
    """A clock that only moves when the code sleeps; ``arrivals`` maps a time to pods appearing then."""

    def __init__(self, arrivals: dict[float, set[str]]) -> None:
        self.t = 0.0
        self.arrivals = arrivals
        self.pending: set[str] = set()
        self.passes: list[float] = []

    def clock(self) -> float:
        return self.t

    def sleep(self, seconds: float) -> None:
        self.t = round(self.t + seconds, 6)

    def pods(self) -> set[str]:
        for at, pods in self.arrivals.items():
            if at <= self.t:
                self.pending |= pods
        return set(self.pending)

    def run_pass(self) -> None:
        self.passes.append(self.t)
        self.arrivals = {at: pods for at, pods in self.arrivals.items() if at > self.t}


class CordoningCluster:
    """The one call :class:`CordonWatch` makes: node ``node-<i>`` is cordoned from ``at[i]`` on (``ft`` time);
    every listing is recorded."""

    def __init__(self, ft: FakeTime, at: list[float]) -> None:
        self.ft, self.at = ft, at
        self.listings: list[float] = []

    def cordoned_node_names(self) -> set[str]:
        self.listings.append(self.ft.t)
        return {f"node-{i}" for i, t in enumerate(self.at) if t <= self.ft.t}


def run(
    ft: FakeTime, *, stop_at: float, run_pass: Any = None, resync_seconds: float = 10.0, **kwargs: Any
) -> WatchOutcome:
    """``watch`` on ``ft``'s clock and pending pods."""
    return watch(
        run_pass=run_pass or ft.run_pass,
        source=PendingSource(pending=ft.pods, sleep=ft.sleep),
        stop_at=stop_at,
        timing=WatchTiming(clock=ft.clock, resync_seconds=resync_seconds),
        **kwargs,
    )


def test_a_burst_is_provisioned_one_idle_second_after_its_last_pod() -> None:
    ft = FakeTime({2.0: {"a"}, 2.4: {"b"}, 2.8: {"c"}})
    out = run(ft, stop_at=6.0)
    assert out.batches == [3]  # one batch for the whole burst
    assert ft.passes[0] == 0.0  # the catch-up pass at start
    assert 3.8 <= ft.passes[1] <= 4.0  # ~1 s after the last pod (polled every 0.2 s)
    assert out.stopped == "deadline"


def test_a_steady_trickle_is_cut_into_batches_of_at_most_ten_seconds() -> None:
    ft = FakeTime({round(1.0 + 0.5 * i, 1): {f"p{i}"} for i in range(40)})
    run(ft, stop_at=25.0, resync_seconds=99)
    assert 10.8 <= ft.passes[1] <= 11.2  # opened at 1.0, closed at the 10 s maximum


def test_losing_the_lease_stops_the_watch_before_the_next_pass() -> None:
    ft = FakeTime({1.0: {"a"}})
    answers = iter([True, False])
    out = run(ft, stop_at=60.0, renew=lambda: next(answers))
    assert out.stopped == "lease lost" and len(ft.passes) == 1


def test_only_a_watcher_about_to_leave_is_waited_for() -> None:
    leaving_soon = holder_name(request_id="req-1", leave_at=1_000_050.0)
    leaving_late = holder_name(request_id="req-1", leave_at=1_000_500.0)
    assert handover_wait(holder=leaving_soon, now=1_000_000.0) == 51.0
    assert handover_wait(holder=leaving_late, now=1_000_000.0) == 0.0
    assert handover_wait(holder="a-poll-pass", now=1_000_000.0) == 0.0
    assert handover_wait(holder=None, now=1_000_000.0) == 0.0


def test_a_pod_that_arrived_during_a_long_pass_is_batched_from_its_arrival_not_the_pass_end() -> None:
    t = [0.0]
    passes: list[float] = []
    arrivals = {"a": 1.0}  # became pending 1 s into the 3 s catch-up pass

    def run_pass() -> None:
        passes.append(t[0])
        if len(passes) == 1:
            t[0] += 3.0

    def sleep(seconds: float) -> None:
        t[0] = round(t[0] + seconds, 6)

    def arrived_at(keys: set[str]) -> tuple[float, float]:
        times = [arrivals[k] for k in keys]
        return min(times), max(times)

    out = watch(
        run_pass=run_pass,
        source=PendingSource(
            pending=lambda: {k for k, at in arrivals.items() if at <= t[0]}, sleep=sleep, arrived_at=arrived_at
        ),
        stop_at=6.0,
        timing=WatchTiming(clock=lambda: t[0], resync_seconds=99),
    )
    assert out.batches == [1]
    assert passes == [0.0, 3.0]  # its idle second had passed when the pass ended: no extra wait


def test_a_newly_cordoned_node_gets_a_pass_at_once_without_pending_pods() -> None:
    """The interruption function cordoned a node at 3.0: its pods need replacement capacity before they are
    evicted, so a provisioning pass runs within the watch's next listing of the cordoned nodes (every second)."""
    ft = FakeTime({})
    cluster = CordoningCluster(ft, at=[3.0])

    run(ft, stop_at=8.0, resync_seconds=99, cordons=CordonWatch(cluster=cluster, clock=ft.clock))

    assert ft.passes[0] == 0.0 and len(ft.passes) == 2  # the start, then one for the cordon (not repeated)
    assert 3.0 <= ft.passes[1] <= 3.0 + 1.0 + 0.2  # at the next listing (at most a second apart, one poll)
    # listed as a pass begins and at most once a second between passes
    assert all(b - a >= 1.0 for a, b in itertools.pairwise(t for t in cluster.listings if t not in ft.passes))


def test_nodes_already_cordoned_when_a_pass_begins_owe_no_pass() -> None:
    """A node cordoned before the catch-up pass (or, without it, before the caller's pass) is that pass's; one
    cordoned later still gets its own, and only one."""

    def brief_pass(ft: FakeTime) -> Any:
        def run_pass() -> None:
            ft.run_pass()
            ft.t += 0.01  # a pass takes a moment

        return run_pass

    ft = FakeTime({})
    cluster = CordoningCluster(ft, at=[0.0, 0.0])
    run(
        ft,
        stop_at=8.0,
        run_pass=brief_pass(ft),
        resync_seconds=99,
        cordons=CordonWatch(cluster=cluster, clock=ft.clock),
    )
    assert ft.passes == [0.0]

    ft = FakeTime({})
    cluster = CordoningCluster(ft, at=[0.0, 3.0])
    out = run(
        ft,
        stop_at=8.0,
        run_pass=brief_pass(ft),
        resync_seconds=99,
        catch_up=False,
        cordons=CordonWatch(cluster=cluster, clock=ft.clock),
    )
    assert out.passes == 1 and 3.0 <= ft.passes[0] <= 3.0 + 1.0 + 0.2


def test_after_a_long_pass_a_pass_owed_for_cordons_waits_as_long_as_that_pass_took() -> None:
    """A 1,000-node burst: interruption batches cordon nodes over ten seconds, and each pass takes 2 s. Back to
    back, the passes would list the whole cluster all the time; resting as long as the last pass took halves
    that, and no cordon waits more than one pass's duration and a listing."""
    ft = FakeTime({})
    cordons = [1.0 + 0.25 * i for i in range(40)]  # one every 0.25 s from 1.0 to 10.75
    cluster = CordoningCluster(ft, at=cordons)

    def slow_pass() -> None:
        ft.run_pass()
        ft.t += 2.0  # a pass takes 2 s

    run(ft, stop_at=30.0, run_pass=slow_pass, resync_seconds=99, cordons=CordonWatch(cluster=cluster, clock=ft.clock))

    starts = ft.passes
    assert starts[0] == 0.0  # the catch-up pass, ending at 2.0
    assert 4.0 <= starts[1] <= 4.2  # the cordons since 1.0 waited out the 2 s rest after it
    gaps = [b - a for a, b in itertools.pairwise(starts)]
    assert all(gap >= 4.0 for gap in gaps)  # 2 s of pass, then 2 s of rest
    assert starts[-1] >= 10.75 - 4.0 - 0.2  # the last cordon was served...
    assert starts[-1] <= 10.75 + 2.0 + 1.0 + 0.2  # ...within one pass's duration and a listing of being possible
    assert len(starts) <= 5  # back to back it would have been 7 passes up to the last cordon


def test_a_cordon_after_a_quick_pass_gets_its_pass_at_the_next_listing() -> None:
    ft = FakeTime({})
    cluster = CordoningCluster(ft, at=[0.3])

    def quick_pass() -> None:
        ft.run_pass()
        ft.t += 0.05

    run(ft, stop_at=3.0, run_pass=quick_pass, resync_seconds=99, cordons=CordonWatch(cluster=cluster, clock=ft.clock))

    assert len(ft.passes) == 2 and 0.3 <= ft.passes[1] <= 0.05 + 1.0 + 0.2  # no rest to wait out


def test_without_the_catch_up_pass_the_pods_already_pending_open_the_first_batch() -> None:
    """A woken reconcile has just run its pass when it starts watching the burst: no pass at once, but the
    pods pending by then may have turned unschedulable after that pass began, so they are a batch."""
    ft = FakeTime({0.0: {"a", "b"}, 30.0: {"c"}})
    out = run(ft, stop_at=40.0, resync_seconds=float("inf"), catch_up=False)

    assert out.batches == [2, 1] and out.passes == 2
    assert 1.0 <= ft.passes[0] <= 1.2  # one idle second after the start, not at 0
    assert 31.0 <= ft.passes[1] <= 31.2  # and no resync in between
