"""In a burst (a batch leaving at least ``handoff_min_drains`` nodes to drain, or any beside a continuation) the
invocation cordons every node, hands each message's drain to a hand-off continuation and returns without
replacing or draining, so it is free for the next batch at once; the continuations then run the one replacement
pass and the drains like originals, post the drain's Event once, and a duplicated hand-off still drains once."""

from __future__ import annotations

import json
import threading
from typing import TYPE_CHECKING, Any

import interruption_fakes as fakes
import memory_state as memory
import pytest

from nodesmith.core.errors import InProgressElsewhereError
from nodesmith.core.interruption import parse_message
from nodesmith.services.interrupt import InstanceStatus
from nodesmith.services.interrupt_batch import CONTINUATION_KEY, BatchItem, Continuation, handle_batch
from nodesmith.services.replacement import Replacement

if TYPE_CHECKING:
    from collections.abc import Callable

IDS = [f"i-00000000000000{n:02d}" for n in range(4)]


def world(**cluster_kwargs: Any) -> tuple[Any, Any, Any]:
    clock = fakes.FakeClock()
    nodes = [fakes.make_node(f"node-{n}", iid) for n, iid in enumerate(IDS)]
    pods = [fakes.make_pod(f"web-{n}-{j}", node=f"node-{n}", grace=0) for n in range(len(IDS)) for j in range(2)]
    cluster = fakes.FakeCluster(clock=clock, nodes=nodes, pods=pods, **cluster_kwargs)
    cloud = fakes.FakeCloud([fakes.make_instance(iid, nodeclaim=f"nc-{n}") for n, iid in enumerate(IDS)])
    return clock, cluster, cloud


def item_of(body: dict[str, Any], message_id: str) -> BatchItem:
    return BatchItem(item_id=message_id, message=parse_message(json.dumps(body)), event=body,
                     continuation=Continuation.from_event(body))  # fmt: skip


class Requeue:
    def __init__(self) -> None:
        self.sent: list[tuple[dict[str, Any], int]] = []

    def __call__(self, body: Any, delay: int) -> None:
        self.sent.append((json.loads(json.dumps(body)), delay))


class DictOnce:
    def __init__(self) -> None:
        self.results: dict[str, dict[str, Any]] = {}
        self.runs: list[str] = []

    def __call__(self, key: str, work: Callable[[], dict[str, Any]]) -> dict[str, Any]:
        if key in self.results:
            return self.results[key]
        if key in self.runs:
            raise InProgressElsewhereError("busy", key=key)
        self.runs.append(key)
        self.results[key] = work()
        return self.results[key]


def run(items: list[BatchItem], clock: Any, cluster: Any, cloud: Any, **kwargs: Any) -> Any:
    params: dict[str, Any] = {"drain_budget_seconds": 60.0, "drain_workers": 1, "eviction_workers": 1, **kwargs}
    return handle_batch(items=items, cluster=cluster, cloud=cloud, cluster_name=fakes.CLUSTER,
                        rebalance_action="cordon", now=clock.wall(), sleep=clock.sleep, clock=clock, wall=clock.wall,
                        **params)  # fmt: skip


def test_a_burst_is_cordoned_and_handed_off_then_the_continuations_replace_and_drain_once() -> None:
    clock, cluster, cloud = world()
    requeue, once, state = Requeue(), DictOnce(), memory.MemoryStateStore()
    passes: list[tuple[int, float]] = []

    def replace_capacity(ready_at: float) -> Replacement:
        passes.append((sum(1 for n in cluster.nodes.values() if n.unschedulable), ready_at))
        return Replacement(ran=True, nodeclaims_launched=2)

    originals = [item_of(fakes.event(iid), f"msg-{iid}") for iid in IDS]
    first = run(originals, clock, cluster, cloud, requeue=requeue, once=once, state=state,
                replace_capacity=replace_capacity, handoff_min_drains=3)  # fmt: skip
    cordoned_at = clock.wall()

    assert cluster.count("taint_and_cordon") == 4 and cluster.count("evict") == 0
    assert passes == [] and first.replacement is None and first.drains_run == 0
    assert first.drains_handed_off == 4 and first.offerings_marked == 1
    statuses = [r.outcome.instances[0].status for r in first.items]
    assert statuses == [InstanceStatus.DRAIN_HANDED_OFF] * 4
    assert not any(r.failed for r in first.items)  # acknowledged: the continuations carry the drains on
    markers = [({k: v for k, v in b[CONTINUATION_KEY].items() if k != "instances"}, d) for b, d in requeue.sent]
    assert markers == [
        ({"attempt": 1, "instance-ids": [iid], "handoff": True, "cordoned-at": round(cordoned_at, 3)}, 0) for iid in IDS
    ]
    assert [list(b[CONTINUATION_KEY]["instances"]) for b, _ in requeue.sent] == [[iid] for iid in IDS]
    node_events = lambda: sorted(e for e in cluster.events if e[0] == "Node" and e[2] != "TerminatingOnInterruption")  # noqa: E731
    cordon_events = node_events()
    assert len(cordon_events) == 4

    # A minute later the hand-offs arrive (one of them twice) and drain; the replacement pass runs once, for all
    # four nodes, told they were cordoned a minute ago (a lease holder begun since then already covers them).
    clock.sleep(60.0)
    bodies = [b for b, _ in requeue.sent]
    continuations = [item_of(b, f"cont-{n}") for n, b in enumerate(bodies)] + [item_of(bodies[0], "cont-dup")]
    before = len(cloud.calls)
    second = run(continuations, clock, cluster, cloud, requeue=requeue, once=once, state=state,
                 replace_capacity=replace_capacity, handoff_min_drains=3)  # fmt: skip

    assert passes == [(4, pytest.approx(cordoned_at, abs=0.001))]
    assert [c[0] for c in cloud.calls[before:]] == ["terminate"] * 4  # the hand-offs carried their instances
    assert second.drains_handed_off == 0 and len(requeue.sent) == 4  # a hand-off is never handed off again
    assert sorted(once.runs) == sorted(f"evt-{iid}#{iid}#0" for iid in IDS)  # each drained once, as the original
    assert cluster.count("evict") == 8 and cluster.lost == []
    assert [r.outcome.instances[0].status for r in second.items[:4]] == [InstanceStatus.REMOVED] * 4
    assert node_events() == cordon_events  # the interruption Events are not posted again
    terminating = [e[1] for e in cluster.events if e[2] == "TerminatingOnInterruption"]
    assert sorted(terminating) == [f"node-{n}" for n in range(4)]  # the drain's Event, once per node
    assert state.get_drain(instance_id=IDS[0]).done


def test_a_batch_below_the_threshold_drains_in_the_same_invocation() -> None:
    clock, cluster, cloud = world()
    requeue = Requeue()
    out = run([item_of(fakes.event(iid), f"msg-{iid}") for iid in IDS[:2]], clock, cluster, cloud,
              requeue=requeue, handoff_min_drains=3)  # fmt: skip

    assert requeue.sent == [] and out.drains_handed_off == 0
    assert [r.outcome.instances[0].status for r in out.items] == [InstanceStatus.REMOVED] * 2


def test_one_original_beside_a_continuation_is_handed_off_while_the_continuation_drains() -> None:
    clock, cluster, cloud = world()
    requeue = Requeue()
    run([item_of(fakes.event(iid), f"msg-{iid}") for iid in IDS[:3]], clock, cluster, cloud, requeue=requeue,
        handoff_min_drains=3)  # fmt: skip
    handoff = item_of(requeue.sent[0][0], "cont-0")  # node-0's drain, handed off by the burst's first batch
    clock.sleep(3.0)

    # the next batch: node-0's hand-off and one more warning of the burst, node-3's (one node: below the threshold)
    out = run([handoff, item_of(fakes.event(IDS[3]), f"msg-{IDS[3]}")], clock, cluster, cloud, requeue=requeue,
              handoff_min_drains=3)  # fmt: skip

    assert [r.outcome.instances[0].status for r in out.items] == [InstanceStatus.REMOVED,
                                                                  InstanceStatus.DRAIN_HANDED_OFF]  # fmt: skip
    assert out.drains_handed_off == 1 and cluster.nodes["node-3"].unschedulable
    assert requeue.sent[-1][0][CONTINUATION_KEY]["instance-ids"] == [IDS[3]]
    assert requeue.sent[-1][0][CONTINUATION_KEY]["handoff"] is True
    assert cluster.count("evict") == 2  # node-0's two pods; node-3's wait for its hand-off


def test_without_a_queue_a_burst_drains_in_the_same_invocation() -> None:
    clock, cluster, cloud = world()
    out = run([item_of(fakes.event(iid), f"msg-{iid}") for iid in IDS], clock, cluster, cloud, handoff_min_drains=1)
    assert [r.outcome.instances[0].status for r in out.items] == [InstanceStatus.REMOVED] * 4


def test_a_hand_off_that_cannot_be_sent_fails_its_record_and_leaves_the_node_cordoned() -> None:
    clock, cluster, cloud = world()

    def broken(body: Any, delay: int) -> None:
        raise RuntimeError("SendMessage throttled")

    out = run([item_of(fakes.event(iid), f"msg-{iid}") for iid in IDS], clock, cluster, cloud, requeue=broken,
              handoff_min_drains=2)  # fmt: skip
    assert all(r.failed and "throttled" in r.error for r in out.items)  # SQS delivers them again
    assert cluster.count("evict") == 0 and all(n.unschedulable for n in cluster.nodes.values())


def test_a_duplicate_drained_in_place_and_its_hand_off_are_one_drain() -> None:
    clock, cluster, cloud = world(pdb_blocks={"default/web-0-1": -1})  # node-0's drain never finishes
    requeue, once = Requeue(), DictOnce()
    burst = [item_of(fakes.event(iid), f"msg-{iid}") for iid in IDS]
    run(burst, clock, cluster, cloud, requeue=requeue, once=once, handoff_min_drains=3)  # hands all four off
    handoff = item_of(requeue.sent[0][0], "cont-0")
    # SQS delivers the first event again, alone in a small batch: it is drained in place (and continued).
    alone = run([item_of(fakes.event(IDS[0]), "msg-dup")], clock, cluster, cloud, requeue=requeue, once=once,
                handoff_min_drains=3, drain_budget_seconds=2.0)  # fmt: skip
    assert alone.drains_run == 1 and alone.items[0].outcome.instances[0].continued
    evictions = cluster.count("evict")
    # Then the hand-off arrives: the same drain, already done (and continued) under the original's key.
    later = run([handoff], clock, cluster, cloud, requeue=requeue, once=once, handoff_min_drains=3,
                drain_budget_seconds=2.0)  # fmt: skip
    assert later.drains_run == 0 and cluster.count("evict") == evictions
    assert once.runs.count(f"evt-{IDS[0]}#{IDS[0]}#0") == 1


def test_a_burst_hands_off_in_one_batch_send_and_only_unsent_messages_fail() -> None:
    clock, cluster, cloud = world()
    calls: list[list[tuple[dict[str, Any], int]]] = []

    def send_batch(messages: Any) -> list[str | None]:
        calls.append([(json.loads(json.dumps(b)), d) for b, d in messages])
        return [None, "Throttled: slow down", None, None]  # SQS refused the second entry only

    out = run([item_of(fakes.event(iid), f"msg-{iid}") for iid in IDS], clock, cluster, cloud, requeue=Requeue(),
              requeue_batch=send_batch, handoff_min_drains=2, handoff_delay_seconds=3)  # fmt: skip

    assert len(calls) == 1 and [b[CONTINUATION_KEY]["instance-ids"] for b, _ in calls[0]] == [[i] for i in IDS]
    assert [delay for _, delay in calls[0]] == [3] * len(IDS)  # each hand-off waits behind the burst's originals
    assert [r.failed for r in out.items] == [False, True, False, False]
    assert "Throttled" in out.items[1].error and out.drains_handed_off == 3
    assert cluster.count("evict") == 0 and all(n.unschedulable for n in cluster.nodes.values())


def test_asked_to_replace_at_hand_off_a_burst_asks_for_the_pass_at_its_cordon_and_still_drains_nothing() -> None:
    clock, cluster, cloud = world()
    requeue = Requeue()
    passes: list[tuple[int, float]] = []

    def replace_capacity(ready_at: float) -> Replacement:  # as the reconcile function's waker: returns at once
        passes.append((sum(1 for n in cluster.nodes.values() if n.unschedulable), ready_at))
        return Replacement(ran=False, woke=True)

    originals = [item_of(fakes.event(iid), f"msg-{iid}") for iid in IDS]
    out = run(originals, clock, cluster, cloud, requeue=requeue, replace_capacity=replace_capacity,
              handoff_min_drains=3, replace_at_handoff=True)  # fmt: skip

    assert passes == [(4, pytest.approx(clock.wall(), abs=0.001))]  # once, for every node it cordoned
    assert out.replacement is not None and out.replacement.woke
    assert out.drains_handed_off == 4 and cluster.count("evict") == 0 and len(requeue.sent) == 4


def test_a_burst_asks_for_its_pass_while_the_hand_offs_are_sent_even_if_none_is() -> None:
    clock, cluster, cloud = world()
    passes: list[float] = []
    asking = threading.Event()
    asked_while_sending: list[bool] = []

    def broken(body: Any, delay: int) -> None:
        # side by side with the request for the pass, not before it: it is being asked for while this is sent
        asked_while_sending.append(asking.wait(timeout=2.0))
        raise RuntimeError("SendMessage throttled")

    def replace_capacity(ready_at: float) -> Replacement:
        asking.set()
        passes.append(ready_at)
        return Replacement(ran=False, woke=True)

    out = run([item_of(fakes.event(iid), f"msg-{iid}") for iid in IDS], clock, cluster, cloud, requeue=broken,
              replace_capacity=replace_capacity, handoff_min_drains=2, replace_at_handoff=True)  # fmt: skip

    # every record comes back (no hand-off was sent), and its nodes, cordoned, already have their pass asked for
    assert all(r.failed for r in out.items) and all(n.unschedulable for n in cluster.nodes.values())
    assert passes == [clock.wall()] and out.replacement is not None and out.replacement.woke
    assert asked_while_sending == [True] * len(IDS)


def test_hand_offs_of_a_burst_that_asked_for_the_pass_itself_drain_without_asking_again() -> None:
    clock, cluster, cloud = world()
    requeue, state = Requeue(), memory.MemoryStateStore()
    passes: list[float] = []

    def replace_capacity(ready_at: float) -> Replacement:
        passes.append(ready_at)
        return Replacement(ran=False, woke=True)

    originals = [item_of(fakes.event(iid), f"msg-{iid}") for iid in IDS]
    run(originals, clock, cluster, cloud, requeue=requeue, state=state, replace_capacity=replace_capacity,
        handoff_min_drains=3, replace_at_handoff=True)  # fmt: skip
    assert len(passes) == 1 and all(b[CONTINUATION_KEY]["replacement-asked"] is True for b, _ in requeue.sent)

    clock.sleep(30.0)
    handoffs = [item_of(b, f"cont-{n}") for n, b in enumerate(b for b, _ in requeue.sent)]
    assert all(h.continuation is not None and h.continuation.replacement_asked for h in handoffs)
    out = run(handoffs, clock, cluster, cloud, requeue=requeue, state=state, replace_capacity=replace_capacity,
              handoff_min_drains=3, replace_at_handoff=True)  # fmt: skip

    assert len(passes) == 1 and out.replacement is None  # asked for once, by the burst's own invocation
    assert cluster.count("evict") == 8 and cluster.lost == []


def test_a_hand_off_without_the_mark_still_asks_for_the_pass_at_its_cordon_time() -> None:
    clock, cluster, cloud = world()
    requeue = Requeue()
    passes: list[float] = []
    originals = [item_of(fakes.event(iid), f"msg-{iid}") for iid in IDS]
    run(originals, clock, cluster, cloud, requeue=requeue, handoff_min_drains=3)  # no at-once pass: no mark
    cordoned_at = clock.wall()
    assert not any("replacement-asked" in b[CONTINUATION_KEY] for b, _ in requeue.sent)
    marked = json.loads(json.dumps(requeue.sent[0][0]))
    marked[CONTINUATION_KEY]["replacement-asked"] = True

    clock.sleep(30.0)
    items = [item_of(marked, "cont-0"), item_of(requeue.sent[1][0], "cont-1")]
    run(items, clock, cluster, cloud, requeue=requeue, handoff_min_drains=3,
        replace_capacity=lambda at: passes.append(at) or Replacement(ran=True))  # fmt: skip

    assert passes == [pytest.approx(cordoned_at, abs=0.001)]  # one pass, for the unmarked hand-off's nodes


def test_the_mark_counts_only_on_a_hand_off() -> None:
    body = json.loads(json.dumps(fakes.event(IDS[0])))
    body[CONTINUATION_KEY] = {"attempt": 2, "instance-ids": [IDS[0]], "replacement-asked": True}

    continuation = Continuation.from_event(body)

    assert continuation is not None and not continuation.handoff and not continuation.replacement_asked
