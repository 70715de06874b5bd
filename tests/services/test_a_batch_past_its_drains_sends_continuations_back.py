"""A batch drains nearest deadline first; a continuation whose drain has not begun ``defer_drains_after_seconds``
after the call goes back to the queue as it came (no delay), acknowledged, and drains once when it comes back.
Originals are never sent back, and a continuation the queue refused is drained here after all."""

from __future__ import annotations

import json
from typing import Any

import interruption_fakes as fakes
from test_a_burst_hands_drains_off_after_cordoning import IDS, DictOnce, Requeue, item_of, run, world

from nodesmith.services.interrupt import InstanceStatus

# the warnings came a second apart, not in the order of IDS: IDS[1]'s deadline is the nearest, then IDS[3]
TIMES = {IDS[0]: "2026-11-22T06:00:03Z", IDS[1]: "2026-11-22T06:00:00Z",
         IDS[2]: "2026-11-22T06:00:02Z", IDS[3]: "2026-11-22T06:00:01Z"}  # fmt: skip


class SendBatch:
    def __init__(self, refuse: frozenset[str] = frozenset()) -> None:
        self.sent: list[tuple[dict[str, Any], int]] = []
        self.refuse = refuse  # instance ids whose message SQS refuses

    def __call__(self, messages: Any) -> list[str | None]:
        errors: list[str | None] = []
        for body, delay in messages:
            if body["detail"]["instance-id"] in self.refuse:
                errors.append("Throttled: slow down")
            else:
                self.sent.append((json.loads(json.dumps(body)), delay))
                errors.append(None)
        return errors


class SlowCluster(fakes.FakeCluster):
    """Each eviction takes a second."""

    def evict(self, *, pod: Any, grace_period_seconds: int | None = None) -> str:
        self.clock.sleep(1.0)
        return super().evict(pod=pod, grace_period_seconds=grace_period_seconds)


def slow_world() -> tuple[Any, Any, Any]:
    """The four nodes of :func:`world`, whose evictions take time: a node of two pods drains in 2 s."""
    clock, cluster, cloud = world()
    return clock, SlowCluster(clock=clock, nodes=list(cluster.nodes.values()), pods=list(cluster.pods.values())), cloud


def handoffs(clock: Any, cluster: Any, cloud: Any, once: DictOnce) -> list[dict[str, Any]]:
    """The bodies of the hand-off continuations of a burst of the four warnings."""
    requeue = Requeue()
    burst = [item_of(fakes.event(iid, time=TIMES[iid]), f"msg-{iid}") for iid in IDS]
    run(burst, clock, cluster, cloud, requeue=requeue, once=once, handoff_min_drains=2)
    assert len(requeue.sent) == 4
    return [body for body, _ in requeue.sent]


def test_continuations_not_begun_in_time_go_back_to_the_queue_as_they_came_and_drain_once_later() -> None:
    clock, cluster, cloud = slow_world()
    once = DictOnce()
    bodies = handoffs(clock, cluster, cloud, once)
    send_batch = SendBatch()
    batch = [item_of(b, f"cont-{n}") for n, b in enumerate(bodies)] + [item_of(bodies[0], "cont-dup")]

    # one drain at a time, 2 s each: IDS[1] (nearest deadline) and IDS[3] begin within 3 s, the others do not
    out = run(batch, clock, cluster, cloud, requeue=Requeue(), requeue_batch=send_batch, once=once,
              handoff_min_drains=2, defer_drains_after_seconds=3.0)  # fmt: skip

    statuses = {r.item_id: r.outcome.instances[0].status for r in out.items}
    assert statuses == {"cont-1": InstanceStatus.REMOVED, "cont-3": InstanceStatus.REMOVED,
                        "cont-0": InstanceStatus.DRAIN_DEFERRED, "cont-2": InstanceStatus.DRAIN_DEFERRED,
                        "cont-dup": InstanceStatus.DRAIN_DEFERRED}  # fmt: skip
    assert not any(r.failed for r in out.items)  # acknowledged: the messages sent back carry them on
    assert out.drains_run == 2 and out.drains_deferred == 2
    assert send_batch.sent == [(bodies[2], 0), (bodies[0], 0)]  # unchanged, at once, the nearer deadline first
    assert sorted(cluster.nodes) == ["node-0", "node-2"]  # the drained ones were removed
    assert cluster.count("evict") == 4  # the two drained nodes' pods only

    # They come back and drain, once each, under the original's key.
    back = run([item_of(b, f"back-{n}") for n, (b, _) in enumerate(send_batch.sent)], clock, cluster, cloud,
               requeue=Requeue(), requeue_batch=send_batch, once=once, handoff_min_drains=2,
               defer_drains_after_seconds=3.0)  # fmt: skip
    assert [r.outcome.instances[0].status for r in back.items] == [InstanceStatus.REMOVED] * 2
    assert back.drains_deferred == 0 and len(send_batch.sent) == 2
    assert sorted(once.runs) == sorted(f"evt-{iid}#{iid}#0" for iid in IDS)
    assert cluster.count("evict") == 8 and cluster.lost == []


def test_originals_are_never_sent_back_and_a_continuation_the_queue_refused_drains_here() -> None:
    clock, cluster, cloud = slow_world()
    once = DictOnce()
    bodies = handoffs(clock, cluster, cloud, once)
    send_batch = SendBatch(refuse=frozenset({IDS[0]}))
    # a late original for node-1 (say, its state change) comes in the same batch as three hand-offs; without the
    # burst hand-off (which would hand an original beside continuations off) it drains here
    original = item_of(fakes.event(IDS[1], kind="state", state="stopping", event_id="evt-stop"), "msg-stop")
    batch = [original] + [item_of(b, f"cont-{n}") for n, b in enumerate(bodies) if n != 1]

    out = run(batch, clock, cluster, cloud, requeue=Requeue(), requeue_batch=send_batch, once=once,
              handoff_min_drains=None, defer_drains_after_seconds=1.0)  # fmt: skip

    statuses = [r.outcome.instances[0].status for r in out.items]
    # node-3's hand-off (the nearest deadline) begins at once; the original (no deadline: last) begins late but is
    # never sent back; node-2's hand-off goes back, and node-0's, refused by the queue, drains here after all
    assert statuses == [InstanceStatus.REMOVED, InstanceStatus.REMOVED, InstanceStatus.DRAIN_DEFERRED,
                        InstanceStatus.REMOVED]  # fmt: skip
    assert [b["detail"]["instance-id"] for b, _ in send_batch.sent] == [IDS[2]]
    assert out.drains_deferred == 1 and not any(r.failed for r in out.items)


def test_without_a_deferral_time_or_a_batch_send_every_continuation_drains_here() -> None:
    for kwargs in ({"defer_drains_after_seconds": None}, {"defer_drains_after_seconds": 1.0, "requeue_batch": None}):
        clock, cluster, cloud = slow_world()
        once = DictOnce()
        bodies = handoffs(clock, cluster, cloud, once)
        out = run([item_of(b, f"cont-{n}") for n, b in enumerate(bodies)], clock, cluster, cloud, requeue=Requeue(),
                  once=once, handoff_min_drains=2, **{"requeue_batch": SendBatch(), **kwargs})  # fmt: skip
        assert [r.outcome.instances[0].status for r in out.items] == [InstanceStatus.REMOVED] * 4, kwargs
        assert out.drains_deferred == 0
