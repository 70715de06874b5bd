"""Stored drain progress is read only where an earlier attempt can have left some: not on the first
delivery of an original event or its hand-off (attempt 0: nothing ran before it, and in a 1,000-node
burst that read was one strongly consistent GetItem per node), but on every redelivery (an invocation
that crashed or timed out mid-drain) and on every continuation (the attempt before it wrote its counts)."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import interruption_fakes as fakes
import memory_state as memory
from test_interrupt_batch import IDS, DictOnce, Requeue, item, run, world

from nodesmith.core.interruption import parse_message
from nodesmith.core.ports import DrainProgress
from nodesmith.services.interrupt_batch import BatchItem, Continuation, continuation_body


def _stored(state: Any, instance_id: str, *, attempts: int, evicted: int) -> None:
    """Progress an invocation that died mid-drain left (the drain of event ``evt-<id>``)."""
    progress = DrainProgress(instance_id=instance_id, event_id=f"evt-{instance_id}", node_name="node-0",
                             deadline=None, started_at=100.0, updated_at=101.0, attempts=attempts,
                             evicted=evicted)  # fmt: skip
    state.drains[instance_id] = (progress, 1e12)


def test_the_first_delivery_of_an_original_event_drains_without_reading_progress() -> None:
    clock, cluster, cloud = world()
    state = memory.MemoryStateStore()

    run([dataclasses.replace(item(IDS[0]), first_delivery=True)], clock, cluster, cloud, state=state)

    assert state.reads == []
    stored = state.get_drain(instance_id=IDS[0])
    assert (stored.attempts, stored.evicted, stored.done) == (1, 2, True)


def test_a_redelivered_event_resumes_the_counts_and_attempts_of_the_invocation_that_died() -> None:
    clock, cluster, cloud = world()
    state = memory.MemoryStateStore()
    _stored(state, IDS[0], attempts=1, evicted=3)

    run([dataclasses.replace(item(IDS[0]), first_delivery=False)], clock, cluster, cloud, state=state)

    assert state.reads == [f"drain#{IDS[0]}"]
    stored = state.get_drain(instance_id=IDS[0])
    assert (stored.attempts, stored.evicted, stored.started_at) == (2, 5, 100.0)


def test_a_first_delivered_hand_off_reads_nothing_and_its_continuation_reads_the_attempt_before() -> None:
    clock, cluster, cloud = world(pdb_blocks={"default/web-0-1": 4})  # the hand-off's attempt cannot finish
    state, requeue, once = memory.MemoryStateStore(), Requeue(), DictOnce()
    handoff = continuation_body(fakes.event(IDS[0], kind="spot"), attempt=1, instance_ids=[IDS[0]], handoff=True)

    def delivered(body: dict[str, Any], message_id: str) -> BatchItem:
        return BatchItem(item_id=message_id, message=parse_message(json.dumps(body)), event=body,
                         continuation=Continuation.from_event(body), first_delivery=True)  # fmt: skip

    run([delivered(handoff, "handoff")], clock, cluster, cloud, state=state, requeue=requeue, once=once,
        drain_budget_seconds=0.2)  # fmt: skip
    assert state.reads == []
    [(later, _)] = requeue.sent

    run([delivered(later, "later")], clock, cluster, cloud, state=state, requeue=requeue, once=once,
        now=clock.wall())  # fmt: skip

    assert state.reads == [f"drain#{IDS[0]}"]
    stored = state.get_drain(instance_id=IDS[0])
    assert (stored.attempts, stored.evicted, stored.done) == (2, 2, True)
