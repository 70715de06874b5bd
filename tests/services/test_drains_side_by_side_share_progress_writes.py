"""The drains one batch runs side by side store their progress together: the writes they make at about the
same time go in one ``put_drains`` request (DynamoDB ``BatchWriteItem``), a lone drain's at once, and a
write the store leaves unwritten is a warning on its own drain only."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

import interruption_fakes as fakes
import memory_state as memory

from nodesmith.core.interruption import parse_message
from nodesmith.services import interrupt_batch_run
from nodesmith.services.interrupt import InstanceStatus
from nodesmith.services.interrupt_batch import BatchItem, Continuation, handle_batch

if TYPE_CHECKING:
    import pytest

IDS = ["i-0000000000000000a", "i-0000000000000000b", "i-0000000000000000c"]


def world() -> tuple[Any, Any, Any]:
    clock = fakes.FakeClock()
    nodes = [fakes.make_node(f"node-{i}", iid) for i, iid in enumerate(IDS)]
    pods = [
        fakes.make_pod(f"web-{i}-{j}", node=f"node-{i}", labels={"app": f"web-{i}"}) for i in range(3) for j in range(2)
    ]
    cluster = fakes.FakeCluster(clock=clock, nodes=nodes, pods=pods)
    cloud = fakes.FakeCloud([fakes.make_instance(iid, nodeclaim=f"nc-{i}") for i, iid in enumerate(IDS)])
    return clock, cluster, cloud


def items(ids: list[str]) -> list[BatchItem]:
    out = []
    for iid in ids:
        event = fakes.event(iid)
        message = parse_message(__import__("json").dumps(event))
        continuation = Continuation.from_event(event)
        out.append(BatchItem(item_id=f"msg-{iid}", message=message, event=event, continuation=continuation))
    return out


def run(ids: list[str], state: memory.MemoryStateStore, drain_workers: int) -> Any:
    clock, cluster, cloud = world()
    return handle_batch(
        items=items(ids), cluster=cluster, cloud=cloud, cluster_name=fakes.CLUSTER, rebalance_action="cordon",
        now=clock.wall(), drain_budget_seconds=60.0, state=state, drain_workers=drain_workers, eviction_workers=2,
        sleep=clock.sleep, clock=clock, wall=clock.wall,
    )  # fmt: skip


def test_the_writes_of_drains_running_side_by_side_go_in_one_request(monkeypatch: pytest.MonkeyPatch) -> None:
    # only a write from every drain sends a batch: nothing is sent for being idle or old
    monkeypatch.setattr(interrupt_batch_run, "PROGRESS_BATCH_IDLE_SECONDS", 30.0)
    monkeypatch.setattr(interrupt_batch_run, "PROGRESS_BATCH_MAX_SECONDS", 30.0)
    state = memory.MemoryStateStore()
    out = run(IDS, state, drain_workers=3)
    assert [i.outcome.instances[0].status for i in out.items] == [InstanceStatus.REMOVED] * 3
    # each drain writes twice (its evicting round, its end): two requests of three, not six of one
    assert [sorted(r) for r in state.drain_requests] == [IDS, IDS]
    assert all(state.get_drain(instance_id=i).done for i in IDS)


def test_a_lone_drain_writes_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(interrupt_batch_run, "PROGRESS_BATCH_IDLE_SECONDS", 30.0)
    monkeypatch.setattr(interrupt_batch_run, "PROGRESS_BATCH_MAX_SECONDS", 30.0)
    state = memory.MemoryStateStore()
    started = time.monotonic()
    out = run(IDS[:1], state, drain_workers=3)
    assert out.items[0].outcome.instances[0].status is InstanceStatus.REMOVED
    assert state.drain_requests == [IDS[:1], IDS[:1]]
    assert time.monotonic() - started < 10.0  # no write waited out the 30 s for others to join it


def test_progress_left_unwritten_is_a_warning_on_its_own_drain_only() -> None:
    state = memory.MemoryStateStore(unprocessed={IDS[1]})
    out = run(IDS, state, drain_workers=3)
    outcomes = {i.outcome.instances[0].instance_id: i.outcome.instances[0] for i in out.items}
    assert all(o.status is InstanceStatus.REMOVED for o in outcomes.values())  # the drains went on
    assert any("drain progress not stored: left unwritten" in w for w in outcomes[IDS[1]].warnings)
    assert not any("not stored" in w for iid in (IDS[0], IDS[2]) for w in outcomes[iid].warnings)
    assert state.get_drain(instance_id=IDS[1]) is None and state.get_drain(instance_id=IDS[0]) is not None
