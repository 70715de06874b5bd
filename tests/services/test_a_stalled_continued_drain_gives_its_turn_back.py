"""A continuation's drain (a burst's hand-off, or a drain blocked before) that makes no progress for
``continuation_stall_seconds`` (only pods a PodDisruptionBudget blocks are left) continues in a new
message after the continuation delay instead of sleeping through the rest of the drain budget in its
invocation. In a 1,000-node burst the PDB-blocked drains, retried again and again, held most of the
function's concurrency while other nodes' first evictions waited. An original message still drains
in place for the budget, and a drain that progresses is not cut short."""

from __future__ import annotations

from typing import Any

import memory_state as memory
from test_interrupt_batch import IDS, DictOnce, Requeue, item, run, world

from nodesmith.services.interrupt import InstanceStatus
from nodesmith.services.interrupt_batch import CONTINUATION_DELAY_SECONDS, BatchItem, Continuation, continuation_body
from nodesmith.services.replacement import Replacement


def continuation_of(original: BatchItem) -> BatchItem:
    body = continuation_body(original.event, attempt=1, instance_ids=[IDS[0]], handoff=True)
    return BatchItem(
        item_id="handoff", message=original.message, event=body, continuation=Continuation.from_event(body)
    )


def drain_once(entry: BatchItem, *, blocks: int = -1, **kwargs: Any) -> tuple[Any, float, Requeue, Any]:
    clock, cluster, cloud = world(pods_per_node=2, pdb_blocks={"default/web-0-1": blocks})
    requeue = Requeue()
    started = clock()
    out = run([entry], clock, cluster, cloud, state=memory.MemoryStateStore(), requeue=requeue, once=DictOnce(),
              drain_budget_seconds=60.0, **kwargs)  # fmt: skip
    [inst] = out.items[0].outcome.instances
    return inst, clock() - started, requeue, cluster


def test_a_blocked_hand_off_drain_continues_after_the_stall_instead_of_the_whole_budget() -> None:
    inst, took, requeue, cluster = drain_once(continuation_of(item(IDS[0])), continuation_stall_seconds=3.0)

    assert inst.status is InstanceStatus.DRAIN_INCOMPLETE and inst.continued
    assert 3.0 <= took < 10.0  # not the 60 s budget
    assert "default/web-0-0" not in cluster.pods  # what could be evicted was
    [(body, delay)] = requeue.sent
    assert delay == CONTINUATION_DELAY_SECONDS and body["nodesmith-continuation"]["instance-ids"] == [IDS[0]]


def test_an_original_message_still_drains_in_place_for_the_whole_budget() -> None:
    inst, took, _, _ = drain_once(item(IDS[0]), continuation_stall_seconds=3.0)

    assert inst.status is InstanceStatus.DRAIN_INCOMPLETE and inst.continued
    assert took >= 60.0


def test_without_a_stall_limit_a_continuation_waits_out_the_budget() -> None:
    _, took, _, _ = drain_once(continuation_of(item(IDS[0])))

    assert took >= 60.0


def test_a_budget_that_lets_go_within_the_stall_limit_finishes_in_place() -> None:
    # blocked for two answers only (kubectl-like retries ~5 s apart would exceed a 3 s stall; give it 20 s)
    inst, _, requeue, _ = drain_once(continuation_of(item(IDS[0])), blocks=2, continuation_stall_seconds=20.0)

    assert inst.status is InstanceStatus.REMOVED and requeue.sent == []


def test_the_stall_is_counted_from_the_drain_not_the_batch() -> None:
    """A hand-off whose invocation first spent 30 s on the replacement pass still evicts, then yields."""
    clock, cluster, cloud = world(pods_per_node=2, pdb_blocks={"default/web-0-1": -1})

    def slow_replacement(ready_at: float) -> Replacement:
        clock.sleep(30.0)
        return Replacement(ran=True)

    started = clock()
    out = run([continuation_of(item(IDS[0]))], clock, cluster, cloud, state=memory.MemoryStateStore(),
              requeue=Requeue(), once=DictOnce(), drain_budget_seconds=60.0, continuation_stall_seconds=3.0,
              replace_capacity=slow_replacement)  # fmt: skip

    [inst] = out.items[0].outcome.instances
    assert inst.status is InstanceStatus.DRAIN_INCOMPLETE and 33.0 <= clock() - started < 40.0
    evictions = [t for call, _, t in cluster.timeline if call == "evict"]
    assert evictions and evictions[0] >= clock.wall_at_start + 30.0
