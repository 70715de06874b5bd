"""handle_batch on fake ports: every node of a batch is cordoned before any pod is evicted, replacements
are launched in between, interrupted spot offerings are shared, evictions run in parallel, unfinished
drains continue through a re-enqueued message with stored progress, duplicates drain once, and one
failing node fails only its own record."""

from __future__ import annotations

import threading
import time
from typing import TYPE_CHECKING, Any

import interruption_fakes as fakes
import memory_state as memory
import pytest

from nodesmith.core.errors import InProgressElsewhereError
from nodesmith.core.interruption import parse_message
from nodesmith.services.interrupt import InstanceStatus
from nodesmith.services.interrupt_batch import (
    CONTINUATION_KEY,
    SPOT_UNAVAILABLE_SECONDS,
    BatchItem,
    Continuation,
    continuation_body,
    handle_batch,
)
from nodesmith.services.replacement import Replacement

if TYPE_CHECKING:
    from collections.abc import Callable

IDS = ["i-0000000000000000a", "i-0000000000000000b", "i-0000000000000000c"]


def world(*, pods_per_node: int = 2, grace: int = 0, **cluster_kwargs: Any) -> tuple[Any, Any, Any]:
    clock = fakes.FakeClock()
    nodes = [fakes.make_node(f"node-{i}", iid) for i, iid in enumerate(IDS)]
    pods = [  # one Deployment's replicas per node: the labels that decide their PodDisruptionBudgets differ by node
        fakes.make_pod(f"web-{i}-{j}", node=f"node-{i}", grace=grace, labels={"app": f"web-{i}"})
        for i in range(len(IDS))
        for j in range(pods_per_node)
    ]
    cluster = fakes.FakeCluster(clock=clock, nodes=nodes, pods=pods, **cluster_kwargs)
    cloud = fakes.FakeCloud([fakes.make_instance(iid, nodeclaim=f"nc-{i}") for i, iid in enumerate(IDS)])
    return clock, cluster, cloud


def item(instance_id: str, *, kind: str = "spot", message_id: str | None = None, **event_kw: Any) -> BatchItem:
    event = fakes.event(instance_id, kind=kind, **event_kw)
    return BatchItem(
        item_id=message_id or f"msg-{instance_id}",
        message=parse_message(__import__("json").dumps(event)),
        event=event,
        continuation=Continuation.from_event(event),
    )


def run(items: list[BatchItem], fake_clock: Any, cluster: Any, cloud: Any, **kwargs: Any) -> Any:
    params: dict[str, Any] = {
        "cluster_name": fakes.CLUSTER,
        "rebalance_action": "cordon",
        "now": fake_clock.wall(),
        "drain_budget_seconds": 60.0,
        "drain_workers": 1,
        "eviction_workers": 1,
        "sleep": fake_clock.sleep,
        "clock": fake_clock,
        "wall": fake_clock.wall,
    }
    params.update(kwargs)
    return handle_batch(items=items, cluster=cluster, cloud=cloud, **params)


class Requeue:
    def __init__(self) -> None:
        self.sent: list[tuple[dict[str, Any], int]] = []

    def __call__(self, body: Any, delay: int) -> None:
        self.sent.append((dict(body), delay))


class DictOnce:
    """``once`` with Powertools' semantics over a dict: stored results answer repeats."""

    def __init__(self) -> None:
        self.results: dict[str, dict[str, Any]] = {}
        self.in_progress: set[str] = set()
        self.runs: list[str] = []

    def __call__(self, key: str, work: Callable[[], dict[str, Any]]) -> dict[str, Any]:
        if key in self.results:
            return self.results[key]
        if key in self.in_progress:
            raise InProgressElsewhereError("busy", key=key)
        self.in_progress.add(key)
        try:
            self.runs.append(key)
            result = work()
        finally:
            self.in_progress.discard(key)
        self.results[key] = result
        return result


def test_every_node_is_cordoned_and_replacements_launched_before_any_eviction() -> None:
    clock, cluster, cloud = world()
    seen_at_replace: list[int] = []

    def replace_capacity(ready_at: float) -> Replacement:
        seen_at_replace.append(sum(1 for n in cluster.nodes.values() if n.unschedulable))
        assert cluster.count("evict") == 0
        return Replacement(ran=True, nodeclaims_launched=2)

    out = run([item(i) for i in IDS], clock, cluster, cloud, replace_capacity=replace_capacity, cordon_workers=8)

    names = [name for name, _ in cluster.calls]
    last_cordon = max(i for i, n in enumerate(names) if n == "taint_and_cordon")
    first_evict = names.index("evict")
    assert last_cordon < first_evict
    assert seen_at_replace == [3]  # one replacement pass, after all three cordons
    assert out.replacement.nodeclaims_launched == 2
    assert [r.outcome.instances[0].status for r in out.items] == [InstanceStatus.REMOVED] * 3
    assert not any(r.failed for r in out.items)
    assert cluster.lost == []


def test_a_pdb_blocked_drain_does_not_delay_other_nodes_cordons() -> None:
    clock, cluster, cloud = world(pdb_blocks={"default/web-0-0": -1})
    requeue = Requeue()
    # Real time here: the drains share one budget and run in parallel, so node-0 spending all of it
    # waiting on its PodDisruptionBudget must not starve node-1 and node-2.
    out = run([item(i) for i in IDS], clock, cluster, cloud, requeue=requeue, drain_budget_seconds=0.5,
              drain_workers=3, sleep=time.sleep, clock=time.monotonic)  # fmt: skip

    cordon_walls = cluster.walls("taint_and_cordon")
    assert len(cordon_walls) == 3 and max(cordon_walls) == min(cordon_walls)  # no sleep before any cordon
    statuses = [r.outcome.instances[0].status for r in out.items]
    assert statuses == [InstanceStatus.DRAIN_INCOMPLETE, InstanceStatus.REMOVED, InstanceStatus.REMOVED]
    assert not any(r.failed for r in out.items)  # continued, so acknowledged
    [(body, delay)] = requeue.sent
    marker = body[CONTINUATION_KEY]
    assert {k: v for k, v in marker.items() if k != "instances"} == {"attempt": 1, "instance-ids": [IDS[0]]}
    assert list(marker["instances"]) == [IDS[0]]  # as located here: the continuation need not describe it
    assert delay == 5


def test_a_spot_interruption_marks_its_offering_unavailable_for_three_minutes_in_the_shared_store() -> None:
    clock, cluster, cloud = world()
    state = memory.MemoryStateStore()
    out = run([item(IDS[0]), item(IDS[1], kind="state", state="stopping")], clock, cluster, cloud, state=state)

    [mark] = state.list_unavailable(now=clock.wall())
    assert (mark.instance_type, mark.zone, mark.capacity_type, mark.reason) == (
        "m5.large",
        "us-west-2a",
        "spot",
        "SpotInterruption",
    )
    assert mark.expires_at == pytest.approx(clock.wall() + SPOT_UNAVAILABLE_SECONDS, abs=1)
    assert out.offerings_marked == 1  # the stopping instance is not a spot interruption


def test_evictions_within_a_node_run_in_parallel_up_to_the_bound() -> None:
    clock, cluster, cloud = world(pods_per_node=10)
    lock = threading.Lock()
    flight = {"now": 0, "max": 0}
    evict = cluster.evict

    def slow_evict(**kwargs: Any) -> str:
        with lock:
            flight["now"] += 1
            flight["max"] = max(flight["max"], flight["now"])
        time.sleep(0.02)
        try:
            return evict(**kwargs)
        finally:
            with lock:
                flight["now"] -= 1

    cluster.evict = slow_evict
    run([item(IDS[0])], clock, cluster, cloud, eviction_workers=4)
    assert flight["max"] == 4
    assert cluster.count("evict") == 10


def test_an_unfinished_drain_continues_from_stored_progress_in_the_next_message() -> None:
    clock, cluster, cloud = world(pods_per_node=3, pdb_blocks={"default/web-0-2": 4})
    state, requeue, once = memory.MemoryStateStore(), Requeue(), DictOnce()
    replaced: list[int] = []

    def replace_capacity(ready_at: float) -> Replacement:
        replaced.append(1)
        return Replacement(ran=True)

    first = run([item(IDS[0])], clock, cluster, cloud, state=state, requeue=requeue, once=once,
                replace_capacity=replace_capacity, drain_budget_seconds=0.2)  # fmt: skip
    [inst] = first.items[0].outcome.instances
    assert inst.status is InstanceStatus.DRAIN_INCOMPLETE and inst.continued
    assert not first.items[0].failed
    progress = state.get_drain(instance_id=IDS[0])
    assert (progress.attempts, progress.evicted, progress.done, progress.replaced) == (1, 2, False, True)
    assert progress.blocked_responses >= 1

    [(body, _)] = requeue.sent
    node_events = lambda: [e for e in cluster.events if e[0] == "Node" and e[2] != "FailedDraining"]  # noqa: E731
    events_before = len(node_events())
    cont = BatchItem(
        item_id="msg-cont", message=first_message(body), event=body, continuation=Continuation.from_event(body)
    )
    second = run([cont], clock, cluster, cloud, state=state, requeue=requeue, once=once,
                 replace_capacity=replace_capacity, now=clock.wall())  # fmt: skip

    [inst] = second.items[0].outcome.instances
    assert inst.status is InstanceStatus.REMOVED
    progress = state.get_drain(instance_id=IDS[0])
    assert (progress.attempts, progress.evicted, progress.done) == (2, 3, True)
    assert progress.started_at == pytest.approx(clock.wall_at_start)  # the same drain, resumed
    assert len(node_events()) == events_before  # the continuation posts no interruption Event again
    assert replaced == [1]  # the continuation launches nothing
    assert once.runs == [f"evt-{IDS[0]}#{IDS[0]}#0", f"evt-{IDS[0]}#{IDS[0]}#1"]
    assert len(requeue.sent) == 1 and cluster.lost == []


def first_message(body: dict[str, Any]) -> Any:
    return parse_message(__import__("json").dumps(body))


def test_without_a_queue_an_unfinished_drain_fails_its_record() -> None:
    clock, cluster, cloud = world(pdb_blocks={"default/web-0-0": -1})
    out = run([item(IDS[0])], clock, cluster, cloud, drain_budget_seconds=1.0)
    assert out.items[0].failed and "unfinished" in out.items[0].error


def test_a_duplicate_delivery_replays_the_stored_result_and_drains_nothing() -> None:
    clock, cluster, cloud = world()
    once = DictOnce()
    first = run([item(IDS[0])], clock, cluster, cloud, once=once)
    evictions = cluster.count("evict")
    second = run([item(IDS[0], message_id="msg-dup")], clock, cluster, cloud, once=once)
    assert cluster.count("evict") == evictions == 2
    assert first.drains_run == 1 and second.drains_run == 0 and second.drains_replayed == 0
    # the node is gone by then, so the duplicate ends at the cordon step: nothing left to drain
    assert second.items[0].outcome.instances[0].status is InstanceStatus.REMOVED


def test_a_duplicate_within_the_same_batch_drains_once() -> None:
    clock, cluster, cloud = world(pods_per_node=4)
    once = DictOnce()
    out = run([item(IDS[0]), item(IDS[0], message_id="msg-dup")], clock, cluster, cloud, once=once, drain_workers=4)
    statuses = sorted(r.outcome.instances[0].status.value for r in out.items)
    assert len(once.runs) == 1 and cluster.count("evict") == 4
    assert statuses in (["in_progress_elsewhere", "removed"], ["removed", "removed"])
    assert not any(r.failed for r in out.items)


def test_a_failing_node_fails_only_its_own_record() -> None:
    clock, cluster, cloud = world(fail_nodes={"node-1"})
    out = run([item(i) for i in IDS], clock, cluster, cloud)
    assert [r.failed for r in out.items] == [False, True, False]
    assert "503" in out.items[1].error


def test_a_failing_replacement_pass_is_reported_and_the_drains_go_on() -> None:
    clock, cluster, cloud = world()

    def broken(ready_at: float) -> Replacement:
        raise RuntimeError("CreateFleet throttled")

    out = run([item(IDS[0])], clock, cluster, cloud, replace_capacity=broken)
    assert out.replacement is not None and not out.replacement.ran and "throttled" in out.replacement.errors[0]
    assert out.items[0].outcome.instances[0].status is InstanceStatus.REMOVED


def test_a_drain_past_its_attempt_limit_is_abandoned_and_acknowledged() -> None:
    clock, cluster, cloud = world(pdb_blocks={"default/web-0-0": -1})
    state, requeue = memory.MemoryStateStore(), Requeue()
    run([item(IDS[0])], clock, cluster, cloud, state=state, requeue=requeue, drain_budget_seconds=1.0)
    body = requeue.sent[-1][0]
    cont = BatchItem(item_id="c", message=first_message(body), event=body, continuation=Continuation.from_event(body))
    out = run([cont], clock, cluster, cloud, state=state, requeue=requeue, max_attempts=1, now=clock.wall())
    inst = out.items[0].outcome.instances[0]
    assert inst.status is InstanceStatus.DRAIN_ABANDONED and not out.items[0].failed
    assert len(requeue.sent) == 1 and cluster.nodes["node-0"].unschedulable


def test_progress_that_cannot_be_stored_does_not_stop_the_drain() -> None:
    clock, cluster, cloud = world()
    state = memory.MemoryStateStore(fail_puts=True)
    out = run([item(IDS[0])], clock, cluster, cloud, state=state)
    inst = out.items[0].outcome.instances[0]
    assert inst.status is InstanceStatus.REMOVED
    assert any("not stored" in w for w in inst.warnings)


def test_continuation_markers_we_did_not_write_are_ignored() -> None:
    event = fakes.event(IDS[0])
    assert Continuation.from_event(event) is None
    assert Continuation.from_event({**event, CONTINUATION_KEY: {"attempt": "2", "instance-ids": []}}) is None
    assert Continuation.from_event({**event, CONTINUATION_KEY: {"attempt": 0, "instance-ids": []}}) is None
    body = continuation_body({**event, CONTINUATION_KEY: {"attempt": 1, "instance-ids": ["x"]}}, attempt=2,
                             instance_ids=[IDS[0]])  # fmt: skip
    assert Continuation.from_event(body) == Continuation(attempt=2, instance_ids=(IDS[0],))
    assert parse_message(__import__("json").dumps(body)).event_id == event["id"]  # still the same event


@pytest.mark.parametrize(
    ("refusals", "writes"),
    [
        # the round evicting the two free pods, the round evicting the last one (6.3 s of backoff later,
        # past the 5 s between writes), the end
        (6, 3),
        # the refused pod goes 0.3 s after the others: its round is not written, the end is (done)
        (2, 2),
    ],
)
def test_drain_progress_is_written_when_pods_go_at_most_every_5_s_not_on_every_refused_eviction(
    refusals: int, writes: int
) -> None:
    # one pod's eviction is refused (PodDisruptionBudget 429s, retried from 100 ms doubling)
    clock, cluster, cloud = world(pods_per_node=3, pdb_blocks={"default/web-0-2": refusals})
    state = memory.MemoryStateStore()
    out = run([item(IDS[0])], clock, cluster, cloud, state=state, eviction_workers=3)

    assert out.items[0].outcome.instances[0].status is InstanceStatus.REMOVED
    progress = state.get_drain(instance_id=IDS[0])
    assert (progress.evicted, progress.blocked_responses, progress.attempts, progress.done) == (3, refusals, 1, True)
    assert state.writes.count(f"drain#{IDS[0]}") == writes


def test_an_attempt_ending_as_its_last_round_left_it_is_not_written_again() -> None:
    # both pods are evicted in one round and take their 30 s grace period to go: the attempt ends
    # unfinished with the counts its round wrote, and only the attempt count was new before that round
    clock, cluster, cloud = world(pods_per_node=2, grace=30)
    state, requeue = memory.MemoryStateStore(), Requeue()
    out = run([item(IDS[0])], clock, cluster, cloud, state=state, requeue=requeue, drain_budget_seconds=1.0)
    [inst] = out.items[0].outcome.instances
    assert inst.status is InstanceStatus.DRAIN_INCOMPLETE and inst.continued
    progress = state.get_drain(instance_id=IDS[0])
    assert (progress.attempts, progress.evicted, progress.done) == (1, 2, False)
    assert state.writes.count(f"drain#{IDS[0]}") == 1


def test_a_hand_offs_cordon_time_is_read_only_when_we_wrote_it_well() -> None:
    marker = {"attempt": 1, "instance-ids": [IDS[0]], "handoff": True}
    read = lambda extra: Continuation.from_event({CONTINUATION_KEY: {**marker, **extra}})  # noqa: E731
    assert read({"cordoned-at": 1_795_327_260.25}).cordoned_at == 1_795_327_260.25
    assert read({"cordoned-at": "soon"}).cordoned_at is None
    assert read({"cordoned-at": True}).cordoned_at is None
    assert read({"cordoned-at": float("nan")}).cordoned_at is None  # json.loads reads NaN; no time to compare with
    assert read({}).cordoned_at is None
    not_a_hand_off = Continuation.from_event({CONTINUATION_KEY: {**marker, "handoff": False, "cordoned-at": 5.0}})
    assert not_a_hand_off is not None and not_a_hand_off.cordoned_at is None


def test_a_drain_held_by_another_invocation_fails_its_record_so_it_comes_back() -> None:
    """SQS can hand one message to two invocations at once; if the one draining dies, only the copy can resume
    it, so the copy is not acknowledged while the drain is held elsewhere. Back later, it replays the result."""
    clock, cluster, cloud = world(pods_per_node=2)
    once = DictOnce()
    once.in_progress.add(f"{item(IDS[0]).message.event_id}#{IDS[0]}#0")  # the other invocation's claim

    held = run([item(IDS[0])], clock, cluster, cloud, once=once)

    assert held.items[0].outcome.instances[0].status is InstanceStatus.IN_PROGRESS_ELSEWHERE
    assert held.items[0].failed and cluster.count("evict") == 0
    once.in_progress.clear()  # the holder died: its claim expired
    back = run([item(IDS[0])], clock, cluster, cloud, once=once)
    assert not back.items[0].failed and back.items[0].outcome.instances[0].status is InstanceStatus.REMOVED
