"""The replacement pass and the reconcile lease: when the pass holding the lease took it after this
batch's nodes were cordoned, its snapshot already sees them leaving, so this pass is skipped at once
(no queue of interruption invocations behind one lease); a holder that took it earlier is waited
for, and the pass runs once it is free, or is skipped when the wait runs out."""

from __future__ import annotations

from typing import Any

import interruption_fakes as fakes
import memory_state as memory

from nodesmith.services.leases import RECONCILE_LEASE, with_lease
from nodesmith.services.reconcile import ReconcileOutcome
from nodesmith.services.replacement import CLOCK_SKEW_SECONDS, replacement_launcher

WAIT = 10.0


class Handover:
    """A sleep on the fake clock that, once ``at`` seconds have passed, frees the early holder's lease
    and (when ``next_holder`` is set) lets that holder take it at that moment, as another
    interruption invocation whose nodes were cordoned later would."""

    def __init__(self, clock: Any, state: Any, *, at: float, next_holder: str | None) -> None:
        self.clock, self.state, self.at, self.next_holder = clock, state, at, next_holder
        self.start = clock()
        self.done = False

    def __call__(self, seconds: float) -> None:
        self.clock.sleep(seconds)
        if not self.done and self.clock() - self.start >= self.at:
            self.done = True
            assert self.state.release_lease(name=RECONCILE_LEASE, holder="early-pass")
            if self.next_holder is not None:
                assert self.state.acquire_lease(
                    name=RECONCILE_LEASE, holder=self.next_holder, ttl_seconds=60, now=self.clock.wall()
                )


def launcher(clock: Any, state: Any, sleep: Any, provisions: list[float]) -> Any:
    def provision(**kwargs: Any) -> ReconcileOutcome:
        provisions.append(kwargs["now"])
        return ReconcileOutcome(nodeclaims_launched=2, pods_rescheduled=6)

    return replacement_launcher(
        cluster=None,  # type: ignore[arg-type]  # the injected provision never touches the ports
        cloud=None,  # type: ignore[arg-type]
        cluster_name=fakes.CLUSTER,
        state=state,
        holder="interruption-b",
        ttl_seconds=60,
        wait_seconds=WAIT,
        wall=clock.wall,
        clock=clock,
        sleep=sleep,
        provision=provision,
    )


def held_since_before_the_cordon() -> tuple[Any, Any]:
    clock = fakes.FakeClock()
    state = memory.MemoryStateStore()
    assert state.acquire_lease(name=RECONCILE_LEASE, holder="early-pass", ttl_seconds=600, now=clock.wall() - 3)
    return clock, state


def test_a_pass_whose_holder_took_the_lease_after_the_cordon_is_skipped_without_waiting_the_full_wait() -> None:
    clock, state = held_since_before_the_cordon()
    # The early pass lets go 2 s in; interruption-a (cordoned later) takes the lease at once.
    sleep = Handover(clock, state, at=CLOCK_SKEW_SECONDS + 1, next_holder="interruption-a")
    provisions: list[float] = []

    result = launcher(clock, state, sleep, provisions)()

    assert not result.ran and provisions == []
    assert result.skipped == "skipped: lease held by interruption-a (its pass covers this work)"
    assert sum(clock.sleeps) < WAIT  # it stopped waiting as soon as the covering holder was seen
    assert state.lease_holder(name=RECONCILE_LEASE, now=clock.wall()) == "interruption-a"  # untouched


def test_a_pass_started_before_the_cordon_is_waited_for_and_then_the_replacement_runs() -> None:
    clock, state = held_since_before_the_cordon()
    sleep = Handover(clock, state, at=2.0, next_holder=None)
    provisions: list[float] = []

    result = launcher(clock, state, sleep, provisions)()

    assert result.ran and result.nodeclaims_launched == 2 and result.pods_rescheduled == 6
    assert len(provisions) == 1 and sum(clock.sleeps) >= 2.0
    assert state.lease_holder(name=RECONCILE_LEASE, now=clock.wall()) is None  # released after the pass


def test_a_holder_from_before_the_cordon_that_never_lets_go_is_not_taken_as_covering() -> None:
    clock, state = held_since_before_the_cordon()
    provisions: list[float] = []

    result = launcher(clock, state, clock.sleep, provisions)()

    assert not result.ran and provisions == []
    assert result.skipped == "skipped: lease held by early-pass"  # waited out, not "covers this work"
    assert sum(clock.sleeps) >= WAIT


def test_a_holder_within_the_clock_skew_of_the_cordon_is_not_trusted_to_see_the_nodes() -> None:
    clock, state = held_since_before_the_cordon()
    # interruption-a takes the lease half a second after our cordon: its clock may be a second off,
    # so its snapshot might predate our taints; we wait rather than skip.
    sleep = Handover(clock, state, at=CLOCK_SKEW_SECONDS / 2, next_holder="interruption-a")
    provisions: list[float] = []

    result = launcher(clock, state, sleep, provisions)()

    assert not result.ran and not result.skipped.endswith("(its pass covers this work)")
    assert sum(clock.sleeps) >= WAIT


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
