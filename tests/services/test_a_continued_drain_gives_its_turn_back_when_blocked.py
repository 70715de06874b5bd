"""A continuation's drain (a burst's hand-off, or a drain blocked before) runs at most
``continuation_drain_seconds`` in one invocation: still blocked by a PodDisruptionBudget, it continues
in a new message after the continuation delay instead of holding the invocation for the whole drain
budget. At 1,000 nodes, hand-offs held their invocations for a minute each and the burst's last
drains started after the two minutes had run out. An original message still drains for the budget."""

from __future__ import annotations

from typing import Any

import memory_state as memory
from test_interrupt_batch import IDS, DictOnce, Requeue, item, run, world

from nodesmith.services.interrupt import InstanceStatus
from nodesmith.services.interrupt_batch import CONTINUATION_DELAY_SECONDS, BatchItem, Continuation, continuation_body


def continuation_of(original: BatchItem) -> BatchItem:
    body = continuation_body(original.event, attempt=1, instance_ids=[IDS[0]], handoff=True)
    return BatchItem(
        item_id="handoff", message=original.message, event=body, continuation=Continuation.from_event(body)
    )


def drain_once(entry: BatchItem, **kwargs: Any) -> tuple[Any, float, Requeue]:
    clock, cluster, cloud = world(pods_per_node=2, pdb_blocks={"default/web-0-1": -1})
    requeue = Requeue()
    started = clock()
    out = run([entry], clock, cluster, cloud, state=memory.MemoryStateStore(), requeue=requeue, once=DictOnce(),
              drain_budget_seconds=60.0, **kwargs)  # fmt: skip
    [inst] = out.items[0].outcome.instances
    return inst, clock() - started, requeue


def test_a_blocked_hand_off_drain_continues_after_its_share_instead_of_the_whole_budget() -> None:
    inst, took, requeue = drain_once(continuation_of(item(IDS[0])), continuation_drain_seconds=10.0)

    assert inst.status is InstanceStatus.DRAIN_INCOMPLETE and inst.continued
    assert 10.0 <= took < 20.0  # not the 60 s budget
    [(body, delay)] = requeue.sent
    assert delay == CONTINUATION_DELAY_SECONDS and body["nodesmith-continuation"]["instance-ids"] == [IDS[0]]


def test_an_original_message_still_drains_for_the_whole_budget() -> None:
    inst, took, _ = drain_once(item(IDS[0]), continuation_drain_seconds=10.0)

    assert inst.status is InstanceStatus.DRAIN_INCOMPLETE and inst.continued
    assert took >= 60.0


def test_without_a_cap_a_continuation_keeps_the_budget() -> None:
    _, took, _ = drain_once(continuation_of(item(IDS[0])))

    assert took >= 60.0


def test_the_cap_is_counted_from_the_drain_not_the_batch() -> None:
    """A hand-off whose invocation first spent 30 s on the replacement pass still gets its 10 s."""
    clock_box: list[Any] = []

    def slow_replacement() -> Any:
        from nodesmith.services.replacement import Replacement

        clock_box[0].sleep(30.0)
        return Replacement(ran=True)

    clock, cluster, cloud = world(pods_per_node=2, pdb_blocks={"default/web-0-1": -1})
    clock_box.append(clock)
    started = clock()
    out = run([continuation_of(item(IDS[0]))], clock, cluster, cloud, state=memory.MemoryStateStore(),
              requeue=Requeue(), once=DictOnce(), drain_budget_seconds=60.0, continuation_drain_seconds=10.0,
              replace_capacity=slow_replacement)  # fmt: skip
    [inst] = out.items[0].outcome.instances
    assert inst.status is InstanceStatus.DRAIN_INCOMPLETE
    assert 40.0 <= clock() - started < 50.0
    evictions = [t for call, _, t in cluster.timeline if call == "evict"]
    assert evictions and evictions[0] >= clock.wall_at_start + 30.0  # it evicted, after the replacement pass
