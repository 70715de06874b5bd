"""A drain misses its interruption deadline when pods are still on the node once the deadline has
passed -- finished late, or unfinished when the invocation reports -- and is counted once: a
continuation counts only if the deadline passed during its own invocation; replays never count."""

from __future__ import annotations

from nodesmith.core.interruption import Action, InterruptionMessage, MessageKind
from nodesmith.services.drain import DrainResult
from nodesmith.services.drain_deadlines import missed_deadlines
from nodesmith.services.interrupt import InstanceOutcome, InstanceStatus, InterruptionOutcome
from nodesmith.services.interrupt_batch import BatchItem, Continuation, ItemResult

START = 1_000_000.0


def item(deadline: float | None, *, attempt: int = 0) -> BatchItem:
    message = InterruptionMessage(
        kind=MessageKind.SPOT_INTERRUPTED,
        event_id="evt-1",
        instance_ids=("i-1",),
        event_time=(deadline or START) - 120,
        deadline=deadline,
    )
    continuation = Continuation(attempt=attempt, instance_ids=("i-1",)) if attempt else None
    return BatchItem(item_id="m-1", message=message, event={}, continuation=continuation)


def result(*, complete: bool, seconds: float, replayed: bool = False) -> ItemResult:
    drain = DrainResult(node_name="node-a", complete=complete, duration_seconds=seconds)
    status = InstanceStatus.REMOVED if complete else InstanceStatus.DRAIN_INCOMPLETE
    instance = InstanceOutcome("i-1", status, node_name="node-a", nodeclaim_name="nc-1", drain=drain, replayed=replayed)
    outcome = InterruptionOutcome(
        event_id="evt-1", kind=MessageKind.SPOT_INTERRUPTED, action=Action.CORDON_AND_DRAIN, instances=(instance,)
    )
    return ItemResult(item_id="m-1", outcome=outcome)


def missed(batch_item: BatchItem, batch_result: ItemResult, *, reported_at: float) -> list[float]:
    found = missed_deadlines(
        items=[batch_item],
        results=[batch_result],
        started_at=START,
        drain_started_at=START + 1,
        reported_at=reported_at,
    )
    return [round(m.late_seconds, 3) for m in found]


def test_a_drain_that_finishes_before_the_deadline_is_on_time() -> None:
    assert missed(item(START + 120), result(complete=True, seconds=30), reported_at=START + 40) == []


def test_a_drain_that_finishes_after_the_deadline_missed_it_by_the_difference() -> None:
    assert missed(item(START + 20), result(complete=True, seconds=30), reported_at=START + 40) == [11.0]


def test_an_unfinished_drain_misses_only_once_the_deadline_has_passed() -> None:
    assert missed(item(START + 120), result(complete=False, seconds=8), reported_at=START + 10) == []
    assert missed(item(START + 5), result(complete=False, seconds=8), reported_at=START + 10) == [5.0]


def test_a_continuation_does_not_count_a_deadline_an_earlier_invocation_saw_pass() -> None:
    late_before = item(START - 30, attempt=2)
    assert missed(late_before, result(complete=True, seconds=3), reported_at=START + 5) == []
    passes_now = item(START + 2, attempt=2)
    assert missed(passes_now, result(complete=True, seconds=3), reported_at=START + 5) == [2.0]


def test_replays_and_messages_without_a_deadline_never_count() -> None:
    assert missed(item(START - 30), result(complete=True, seconds=3, replayed=True), reported_at=START + 5) == []
    assert missed(item(None), result(complete=False, seconds=3), reported_at=START + 500) == []
