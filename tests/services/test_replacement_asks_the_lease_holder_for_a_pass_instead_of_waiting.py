"""The replacement pass and the reconcile lease.

When the pass holding the lease took it after this batch's nodes were cordoned, its snapshot already
sees them leaving: this pass is skipped at once. When the holder started earlier, it is asked for one
more pass (``request_pass``) and this one is skipped at once too, instead of waiting for the lease
and holding an invocation (in a burst, hundreds of them queued behind one lease and starved the
next messages' cordons); the holder runs again before it lets go. A free lease is simply taken.
"""

from __future__ import annotations

from typing import Any

import interruption_fakes as fakes
import memory_state as memory

from nodesmith.services.leases import RECONCILE_LEASE, with_lease
from nodesmith.services.reconcile import ReconcileOutcome
from nodesmith.services.replacement import CLOCK_SKEW_SECONDS, WOKEN, replacement_launcher

WAIT = 10.0


def launcher(
    clock: Any,
    state: Any,
    provisions: list[float],
    *,
    holder: str = "interruption-b",
    provision: Any = None,
    wake: Any = None,
) -> Any:
    def timed_pass(**kwargs: Any) -> ReconcileOutcome:
        provisions.append(kwargs["now"])
        clock.sleep(2.0)  # a pass takes time
        return ReconcileOutcome(nodeclaims_launched=2, pods_rescheduled=6, launched=[f"nc-{len(provisions)}"])

    return replacement_launcher(
        cluster=None,  # type: ignore[arg-type]  # the injected provision never touches the ports
        cloud=None,  # type: ignore[arg-type]
        cluster_name=fakes.CLUSTER,
        state=state,
        holder=holder,
        ttl_seconds=60,
        wait_seconds=WAIT,
        wall=clock.wall,
        clock=clock,
        sleep=clock.sleep,
        provision=provision or timed_pass,
        wake=wake,
    )


def held(clock: Any, state: Any, *, since: float, holder: str = "early-pass") -> None:
    assert state.acquire_lease(name=RECONCILE_LEASE, holder=holder, ttl_seconds=600, now=clock.wall() + since)


def test_a_holder_that_took_the_lease_after_the_cordon_covers_the_batch_and_is_not_asked_for_more() -> None:
    clock, state = fakes.FakeClock(), memory.MemoryStateStore()
    held(clock, state, since=CLOCK_SKEW_SECONDS + 0.5, holder="interruption-a")  # a later batch's pass
    provisions: list[float] = []

    result = launcher(clock, state, provisions)()

    assert not result.ran and provisions == [] and not result.requested
    assert result.skipped == "skipped: lease held by interruption-a (its pass covers this work)"
    assert clock.sleeps == []  # no waiting
    assert state.lease_info(name=RECONCILE_LEASE, now=clock.wall()).requested_at is None


def test_a_holder_from_before_the_cordon_is_asked_for_another_pass_and_nobody_waits() -> None:
    clock, state = fakes.FakeClock(), memory.MemoryStateStore()
    held(clock, state, since=-3.0)
    provisions: list[float] = []

    result = launcher(clock, state, provisions)()

    assert not result.ran and provisions == [] and result.requested
    assert result.skipped == "skipped: lease held by early-pass (asked it for another pass)"
    assert clock.sleeps == []
    info = state.lease_info(name=RECONCILE_LEASE, now=clock.wall())
    assert info.holder == "early-pass" and info.requested_at == clock.wall() + CLOCK_SKEW_SECONDS


def test_a_hand_off_s_earlier_cordon_is_what_the_holder_is_compared_with() -> None:
    # a burst's hand-off runs a minute after its original cordoned the nodes; the holder began in between
    clock, state = fakes.FakeClock(), memory.MemoryStateStore()
    held(clock, state, since=-30.0)
    provisions: list[float] = []

    result = launcher(clock, state, provisions)(clock.wall() - 60.0)

    assert not result.ran and not result.requested and provisions == []
    assert result.skipped == "skipped: lease held by early-pass (its pass covers this work)"
    assert state.lease_info(name=RECONCILE_LEASE, now=clock.wall()).requested_at is None


def test_a_holder_within_the_clock_skew_of_the_cordon_is_not_trusted_to_see_the_nodes() -> None:
    clock, state = fakes.FakeClock(), memory.MemoryStateStore()
    # interruption-a took the lease half a second after our cordon: its clock may be a second off,
    # so its snapshot might predate our taints; it is asked for another pass rather than trusted.
    held(clock, state, since=CLOCK_SKEW_SECONDS / 2, holder="interruption-a")

    result = launcher(clock, state, [])()

    assert result.requested and not result.skipped.endswith("(its pass covers this work)")


def test_a_free_lease_is_taken_and_the_pass_runs_and_releases_it() -> None:
    clock, state = fakes.FakeClock(), memory.MemoryStateStore()
    provisions: list[float] = []

    result = launcher(clock, state, provisions)()

    assert result.ran and result.nodeclaims_launched == 2 and result.pods_rescheduled == 6
    assert result.reruns == 0 and len(provisions) == 1
    assert state.lease_holder(name=RECONCILE_LEASE, now=clock.wall()) is None


def test_the_holder_runs_again_for_a_batch_cordoned_during_its_pass_and_reports_both_passes() -> None:
    clock, state = fakes.FakeClock(), memory.MemoryStateStore()
    provisions: list[float] = []
    asked: list[Any] = []
    asked_at: list[float] = []
    second = launcher(clock, state, provisions, holder="interruption-b")

    def provision_then_a_later_batch_cordons(**kwargs: Any) -> ReconcileOutcome:
        provisions.append(kwargs["now"])
        if len(provisions) == 1:
            clock.sleep(CLOCK_SKEW_SECONDS + 0.5)
            asked_at.append(clock.wall())
            asked.append(second())  # interruption-b cordoned during a's pass, and finds a holding the lease
        clock.sleep(1.0)
        return ReconcileOutcome(nodeclaims_launched=1, launched=[f"nc-{len(provisions)}"])

    first = launcher(clock, state, provisions, holder="interruption-a", provision=provision_then_a_later_batch_cordons)

    result = first()

    assert [r.requested for r in asked] == [True] and not asked[0].ran
    assert result.ran and result.reruns == 1 and len(provisions) == 2
    assert provisions[1] >= asked_at[0] + CLOCK_SKEW_SECONDS  # the second pass started after b's cordon (+ skew)
    assert result.nodeclaims_launched == 2 and result.launched == ("nc-1", "nc-2")
    assert state.lease_holder(name=RECONCILE_LEASE, now=clock.wall()) is None  # released after the rerun


def test_requests_that_keep_coming_past_the_window_are_left_to_the_next_holder() -> None:
    clock, state = fakes.FakeClock(), memory.MemoryStateStore()
    runs: list[float] = []

    def work() -> int:
        runs.append(clock.wall())
        clock.sleep(2.0)
        assert state.request_pass(name="l", after=clock.wall(), now=clock.wall())  # someone always asks
        return len(runs)

    out = with_lease(state=state, name="l", holder="me", ttl_seconds=60, work=work, again=work,
                     again_within_seconds=5.0, wall=clock.wall, clock=clock, sleep=clock.sleep)  # fmt: skip

    assert out.acquired and out.value == 1
    assert out.reruns == 3 and len(runs) == 4  # reruns start within 5 s of the first run's end
    assert state.lease_holder(name="l", now=clock.wall()) is None  # let go all the same


def test_a_holder_with_a_deadline_runs_again_only_while_another_run_as_long_as_the_last_ends_by_then() -> None:
    clock, state = fakes.FakeClock(), memory.MemoryStateStore()
    deadline = clock() + 7.0  # e.g. the invocation's timeout less a margin
    ends: list[float] = []

    def work() -> int:
        clock.sleep(2.0)
        ends.append(clock())
        assert state.request_pass(name="l", after=clock.wall(), now=clock.wall())  # someone always asks
        return len(ends)

    out = with_lease(state=state, name="l", holder="me", ttl_seconds=60, work=work, again=work,
                     again_within_seconds=5.0, again_until=deadline,
                     wall=clock.wall, clock=clock, sleep=clock.sleep)  # fmt: skip

    # runs end at 2, 4 and 6; a fourth would end at 8, past the deadline (the 5 s window alone would start it)
    assert out.acquired and out.reruns == 2 and max(ends) <= deadline
    assert state.lease_holder(name="l", now=clock.wall()) is None


def test_the_replacement_holder_s_reruns_stop_before_its_deadline() -> None:
    clock, state = fakes.FakeClock(), memory.MemoryStateStore()
    passes: list[float] = []

    def slow_pass(**kwargs: Any) -> ReconcileOutcome:
        clock.sleep(4.0)  # a pass under load
        passes.append(clock())
        assert state.request_pass(name=RECONCILE_LEASE, after=clock.wall(), now=clock.wall())
        return ReconcileOutcome(nodeclaims_launched=1)

    deadline = clock() + 10.0
    result = replacement_launcher(
        cluster=None,  # type: ignore[arg-type]  # the injected provision never touches the ports
        cloud=None,  # type: ignore[arg-type]
        cluster_name=fakes.CLUSTER,
        state=state,
        holder="interruption-a",
        ttl_seconds=60,
        wait_seconds=WAIT,
        again_until=deadline,
        wall=clock.wall,
        clock=clock,
        sleep=clock.sleep,
        provision=slow_pass,
    )()

    assert result.ran and result.reruns == 1 and len(passes) == 2
    assert max(passes) <= deadline  # a third pass would have ended at 12 s


def test_a_holder_without_again_releases_as_before_and_a_request_on_a_free_lease_is_refused() -> None:
    clock, state = fakes.FakeClock(), memory.MemoryStateStore()

    def work() -> str:
        assert state.request_pass(name="l", after=clock.wall(), now=clock.wall())
        return "done"

    out = with_lease(state=state, name="l", holder="me", ttl_seconds=60, work=work,
                     wall=clock.wall, clock=clock, sleep=clock.sleep)  # fmt: skip

    assert out.acquired and out.reruns == 0
    assert state.lease_holder(name="l", now=clock.wall()) is None
    assert not state.request_pass(name="l", after=clock.wall(), now=clock.wall())  # free: take it instead


def test_a_rerun_that_fails_keeps_the_first_result_and_releases_the_lease() -> None:
    clock, state = fakes.FakeClock(), memory.MemoryStateStore()

    def work() -> int:
        clock.sleep(1.0)
        assert state.request_pass(name="l", after=clock.wall(), now=clock.wall())
        return 7

    def again() -> None:
        raise RuntimeError("kube-apiserver 503")

    out = with_lease(state=state, name="l", holder="me", ttl_seconds=60, work=work, again=again,
                     again_within_seconds=30.0, wall=clock.wall, clock=clock, sleep=clock.sleep)  # fmt: skip

    assert out.acquired and out.value == 7 and out.reruns == 0
    assert state.lease_holder(name="l", now=clock.wall()) is None


def test_with_lease_asks_covered_only_about_the_current_holder_and_runs_the_work_once_free() -> None:
    clock = fakes.FakeClock()
    state = memory.MemoryStateStore()
    assert state.acquire_lease(name="l", holder="other", ttl_seconds=600, now=clock.wall())
    asked: list[str] = []

    def covered(info: Any) -> bool:
        asked.append(info.holder)
        return False

    def sleep(seconds: float) -> None:
        clock.sleep(seconds)
        state.release_lease(name="l", holder="other")

    out = with_lease(state=state, name="l", holder="me", ttl_seconds=60, work=lambda: 42, wait_seconds=5,
                     covered=covered, wall=clock.wall, clock=clock, sleep=sleep)  # fmt: skip

    assert out.acquired and out.value == 42 and not out.covered
    assert asked == ["other"]


def test_with_a_reconcile_function_a_free_lease_s_pass_is_woken_there_not_run_here() -> None:
    clock, state = fakes.FakeClock(), memory.MemoryStateStore()
    provisions: list[float] = []
    woken: list[float] = []

    result = launcher(clock, state, provisions, wake=woken.append)()

    assert not result.ran and result.woke and result.requested and result.skipped == WOKEN
    assert provisions == [] and woken == [clock.wall()]  # the cordon time: the woken pass must start after it
    assert state.lease_holder(name=RECONCILE_LEASE, now=clock.wall()) is None  # nothing taken here


def test_a_held_lease_is_still_asked_for_a_pass_rather_than_waking_another() -> None:
    clock, state = fakes.FakeClock(), memory.MemoryStateStore()
    held(clock, state, since=-3.0)
    woken: list[float] = []

    result = launcher(clock, state, [], wake=woken.append)()

    assert result.requested and not result.woke and woken == []


def test_with_a_reconcile_function_a_held_lease_costs_one_request_and_no_read() -> None:
    """Every batch of a burst after the first finds the lease held: it asks the holder for the pass in one
    conditional write, without reading the lease or trying to take it. A holder that took the lease after the
    cordon finds the request no later than its pass began, so it lets go without running another; one from
    before the cordon runs another."""
    for since, reruns in ((-3.0, 1), (CLOCK_SKEW_SECONDS + 0.5, 0)):
        clock, state = fakes.FakeClock(), memory.MemoryStateStore()
        held(clock, state, since=since)
        calls: list[str] = []
        for name in ("lease_info", "request_pass", "acquire_lease", "release_lease"):
            method = getattr(state, name)
            setattr(state, name, lambda *a, _m=method, _n=name, _c=calls, **k: _c.append(_n) or _m(*a, **k))

        result = launcher(clock, state, [], wake=lambda after: None)()

        assert not result.ran and not result.woke and result.requested and calls == ["request_pass"]
        pass_began = clock.wall() + since
        assert state.release_unless_requested(name=RECONCILE_LEASE, holder="early-pass", since=pass_began) is (
            reruns == 0
        )


def test_a_wake_that_fails_runs_the_pass_here() -> None:
    clock, state = fakes.FakeClock(), memory.MemoryStateStore()
    provisions: list[float] = []

    def refused(after: float) -> None:
        raise RuntimeError("TooManyRequestsException")

    result = launcher(clock, state, provisions, wake=refused)()

    assert result.ran and not result.woke and len(provisions) == 1


def test_a_request_served_by_a_later_pass_of_the_work_is_not_run_again() -> None:
    """A woken reconcile runs several passes inside one ``work`` (it watches the burst): a request made
    before its last pass began was served by that pass, so the holder lets go instead of running again;
    one made after it still gets its pass."""
    clock, state = fakes.FakeClock(), memory.MemoryStateStore()
    began: list[float] = []
    reruns: list[float] = []

    def work(ask_after_last: bool) -> str:
        began.append(clock.wall())
        clock.sleep(2.0)
        assert state.request_pass(name="l", after=clock.wall(), now=clock.wall())  # a batch cordons meanwhile
        clock.sleep(1.0)
        began.append(clock.wall())  # the work's next pass (the watch's) sees that batch's nodes
        clock.sleep(2.0)
        if ask_after_last:
            assert state.request_pass(name="l", after=clock.wall(), now=clock.wall())
        return "watched"

    for ask_after_last, expected in ((False, 0), (True, 1)):
        out = with_lease(state=state, name="l", holder="me", ttl_seconds=60, work=lambda a=ask_after_last: work(a),
                         again=lambda: reruns.append(clock.wall()), again_within_seconds=30.0,
                         work_began=lambda: began[-1], wall=clock.wall, clock=clock, sleep=clock.sleep)  # fmt: skip

        assert out.acquired and out.value == "watched" and out.reruns == expected
        assert state.lease_holder(name="l", now=clock.wall()) is None
    assert len(reruns) == 1
