"""A continued drain held up only by a PodDisruptionBudget stalls once no drain of its invocation has
made progress for the stall limit, not once it has made none itself: while the others evict, the
invocation runs anyway, and the budget may let the next eviction through. A drain waiting only for
terminating pods still stalls on its own progress, and the drains of one batch share one record."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from test_interrupt_batch import IDS, item, run, world
from test_interrupt_service import fakes

from nodesmith.services import interrupt
from nodesmith.services.drain import DrainActivity, DrainResult, drain_node

if TYPE_CHECKING:
    import pytest

STALL = 3.0
OTHERS_UNTIL = 6.0  # the other drains of the invocation evict until t0 + 6 s


def _drain(pod: Any, *, activity: DrainActivity | None, blocks: int) -> tuple[DrainResult, float]:
    """The drain's result, and when (seconds from its start) another drain last progressed."""
    clock = fakes.FakeClock()
    cluster = fakes.FakeCluster(clock=clock, nodes=[fakes.make_node()], pods=[pod], pdb_blocks={pod.key: blocks})
    last = 0.0

    def sleep(seconds: float) -> None:
        nonlocal last
        clock.sleep(seconds)
        if activity is not None and clock() - clock.t0 <= OTHERS_UNTIL:
            activity.note(clock())  # another drain of the batch evicted meanwhile
            last = clock() - clock.t0

    result = drain_node(cluster=cluster, node=cluster.nodes["node-a"], now=clock.wall(), deadline=None,
                        budget_seconds=60.0, sleep=sleep, clock=clock, stall_seconds=STALL,
                        activity=activity)  # fmt: skip
    return result, last


def test_a_budget_blocked_drain_stalls_only_after_the_others_stop_progressing() -> None:
    result, others_last = _drain(fakes.make_pod("web-1"), activity=DrainActivity(), blocks=-1)

    assert not result.complete and "no progress" in result.reason
    assert others_last > STALL  # the others went on past its own stall limit
    assert others_last + STALL <= result.duration_seconds <= others_last + STALL + 1.0  # polled every second


def test_alone_it_stalls_after_its_own_limit() -> None:
    result, _ = _drain(fakes.make_pod("web-1"), activity=None, blocks=-1)

    assert STALL <= result.duration_seconds < OTHERS_UNTIL


def test_a_drain_waiting_only_for_terminating_pods_stalls_on_its_own_progress() -> None:
    result, others_last = _drain(fakes.make_pod("web-1", grace=30), activity=DrainActivity(), blocks=0)

    assert result.evicted == 1 and result.terminating_until is not None
    assert STALL <= result.duration_seconds < others_last + STALL


def test_the_drains_of_one_batch_share_one_activity(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[DrainActivity | None] = []
    real = interrupt.drain_node

    def recording(**kwargs: Any) -> DrainResult:
        seen.append(kwargs.get("activity"))
        return real(**kwargs)

    monkeypatch.setattr(interrupt, "drain_node", recording)
    clock, cluster, cloud = world(pods_per_node=1)

    run([item(IDS[0]), item(IDS[1])], clock, cluster, cloud)

    assert len(seen) == 2 and seen[0] is not None and seen[0] is seen[1]
