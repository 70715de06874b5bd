"""A continuation's drain whose evictions all went through, so that only terminating pods are left, is
continued once their grace periods have run out (their latest ``deletionTimestamp`` + 1 s, at most 60 s),
not every 5 s: in a 1,000-node burst, continuations looking again every 5 s at pods taking their 30 s to go
took the function's concurrency from nodes whose drain had not begun. A pod still blocked by a
PodDisruptionBudget keeps the 5 s retry. A burst's hand-off does not poll its terminating pods in place
first; a later continuation still waits in place up to the stall limit (pods often go before their
grace period ends)."""

from __future__ import annotations

from typing import Any

import memory_state as memory
from test_interrupt_batch import IDS, DictOnce, Requeue, item, run, world

from nodesmith.services.interrupt import InstanceStatus
from nodesmith.services.interrupt_batch import CONTINUATION_DELAY_SECONDS, BatchItem, Continuation, continuation_body
from nodesmith.services.interrupt_batch_run import TERMINATING_WAIT_MAX_SECONDS


def hand_off() -> BatchItem:
    original = item(IDS[0])
    body = continuation_body(original.event, attempt=1, instance_ids=[IDS[0]], handoff=True)
    continuation = Continuation.from_event(body)
    return BatchItem(item_id="handoff", message=original.message, event=body, continuation=continuation)


def continued(*, grace: int, blocks: dict[str, int] | None = None) -> tuple[Any, int, float, Any]:
    """Drain one node's two pods (each with ``grace`` seconds) in a hand-off that yields after a 3 s stall;
    returns (instance outcome, continuation delay, wall time of the requeue, cluster)."""
    clock, cluster, cloud = world(pods_per_node=2, grace=grace, pdb_blocks=blocks or {})
    requeue = Requeue()
    out = run([hand_off()], clock, cluster, cloud, state=memory.MemoryStateStore(), requeue=requeue, once=DictOnce(),
              continuation_stall_seconds=3.0)  # fmt: skip
    [inst] = out.items[0].outcome.instances
    [(_, delay)] = requeue.sent
    return inst, delay, clock.wall(), cluster


def test_only_terminating_pods_left_continue_after_their_grace_period() -> None:
    inst, delay, requeued_at, cluster = continued(grace=30)

    assert inst.status is InstanceStatus.DRAIN_INCOMPLETE and inst.continued
    assert inst.drain.remaining == 2 and inst.drain.terminating_until is not None
    gone_by = max(p.deletion_timestamp for p in cluster.pods.values() if p.node_name == "node-0")
    assert inst.drain.terminating_until == gone_by
    assert delay > CONTINUATION_DELAY_SECONDS
    assert requeued_at + delay >= gone_by + 1 > requeued_at + delay - 1  # the next look finds them gone


def test_a_pod_blocked_by_a_budget_keeps_the_short_retry() -> None:
    inst, delay, _, _ = continued(grace=30, blocks={"default/web-0-1": -1})

    assert inst.drain.blocked == 1 and inst.drain.terminating_until is None
    assert delay == CONTINUATION_DELAY_SECONDS


def test_a_long_grace_period_is_looked_at_again_within_a_minute() -> None:
    inst, delay, _, _ = continued(grace=600)

    assert inst.drain.terminating_until is not None
    assert delay == TERMINATING_WAIT_MAX_SECONDS


def _waited(entry: BatchItem) -> tuple[float, int, Any]:
    """Seconds the batch took and node-0's pod lists, for ``entry`` on a node whose two pods take 30 s to go."""
    clock, cluster, cloud = world(pods_per_node=2, grace=30)
    started = clock()
    out = run([entry], clock, cluster, cloud, state=memory.MemoryStateStore(), requeue=Requeue(), once=DictOnce(),
              continuation_stall_seconds=3.0)  # fmt: skip
    [inst] = out.items[0].outcome.instances
    return clock() - started, cluster.args("list_pods").count("node-0"), inst


def test_a_hand_off_continues_at_once_instead_of_polling_its_terminating_pods() -> None:
    took, lists, inst = _waited(hand_off())

    assert inst.status is InstanceStatus.DRAIN_INCOMPLETE and inst.continued and inst.drain.evicted == 2
    assert took < 1.0 and lists == 2  # the round that evicted, and the one that found them terminating
    assert "terminating" in inst.drain.reason


def test_a_later_continuation_still_waits_in_place_for_pods_that_may_go_early() -> None:
    original = item(IDS[0])
    body = continuation_body(original.event, attempt=2, instance_ids=[IDS[0]])
    later = BatchItem(item_id="later", message=original.message, event=body, continuation=Continuation.from_event(body))

    took, lists, inst = _waited(later)

    assert inst.continued and took >= 3.0 and lists > 2
