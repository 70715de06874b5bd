"""The batches of one warm container write an interrupted spot offering's mark once, then again only once
that mark is ``REMARK_AFTER_SECONDS`` old; without the container's marks every batch writes its own once; a
mark whose write failed is written by the next batch; and of threads claiming one offering at once, one does."""

from __future__ import annotations

import json
import threading
from typing import Any

import interruption_fakes as fakes
import memory_state as memory
import pytest

from nodesmith.core.interruption import parse_message
from nodesmith.services.interrupt_batch import (
    REMARK_AFTER_SECONDS,
    SPOT_UNAVAILABLE_SECONDS,
    BatchItem,
    RecentMarks,
    handle_batch,
)

IDS = [f"i-0000000000000001{n}" for n in range(4)]
OFFERING = "offering#m5.large#us-west-2a#spot"


def world() -> tuple[Any, Any, Any]:
    clock = fakes.FakeClock()
    nodes = [fakes.make_node(f"node-{n}", iid) for n, iid in enumerate(IDS)]
    cluster = fakes.FakeCluster(clock=clock, nodes=nodes, pods=[])
    cloud = fakes.FakeCloud([fakes.make_instance(iid, nodeclaim=f"nc-{n}") for n, iid in enumerate(IDS)])
    return clock, cluster, cloud


def spot(instance_id: str) -> BatchItem:
    event = fakes.event(instance_id)
    return BatchItem(item_id=f"msg-{instance_id}", message=parse_message(json.dumps(event)), event=event)


def run(ids: list[str], clock: Any, cluster: Any, cloud: Any, **kwargs: Any) -> Any:
    return handle_batch(items=[spot(i) for i in ids], cluster=cluster, cloud=cloud, cluster_name=fakes.CLUSTER,
                        rebalance_action="cordon", now=clock.wall(), drain_budget_seconds=60.0, drain_workers=1,
                        eviction_workers=1, sleep=clock.sleep, clock=clock, wall=clock.wall, **kwargs)  # fmt: skip


def test_a_containers_batches_write_an_offerings_mark_once_until_it_is_remark_after_seconds_old() -> None:
    clock, cluster, cloud = world()
    state, marks = memory.MemoryStateStore(), RecentMarks()

    first = run(IDS[:2], clock, cluster, cloud, state=state, recent_marks=marks)
    clock.sleep(REMARK_AFTER_SECONDS - 1)
    second = run(IDS[2:3], clock, cluster, cloud, state=state, recent_marks=marks)

    assert (first.offerings_marked, second.offerings_marked) == (1, 0)
    assert state.writes.count(OFFERING) == 1
    [mark] = state.list_unavailable(now=clock.wall())  # the first batch's mark still holds
    assert mark.expires_at == pytest.approx(clock.wall() - (REMARK_AFTER_SECONDS - 1) + SPOT_UNAVAILABLE_SECONDS, abs=1)

    clock.sleep(1)
    third = run(IDS[3:], clock, cluster, cloud, state=state, recent_marks=marks)

    assert third.offerings_marked == 1 and state.writes.count(OFFERING) == 2
    [mark] = state.list_unavailable(now=clock.wall())
    assert mark.expires_at == pytest.approx(clock.wall() + SPOT_UNAVAILABLE_SECONDS, abs=1)  # renewed


def test_without_the_containers_marks_each_batch_writes_its_offerings_once() -> None:
    clock, cluster, cloud = world()
    state = memory.MemoryStateStore()

    outs = [run(IDS[:2], clock, cluster, cloud, state=state), run(IDS[2:], clock, cluster, cloud, state=state)]

    assert [o.offerings_marked for o in outs] == [1, 1]
    assert state.writes.count(OFFERING) == 2


class FailingOnce(memory.MemoryStateStore):  # type: ignore[misc]
    def __init__(self) -> None:
        super().__init__()
        self.failures = 1

    def mark_unavailable(self, **kwargs: Any) -> None:
        if self.failures:
            self.failures -= 1
            raise RuntimeError("DynamoDB PutItem throttled")
        super().mark_unavailable(**kwargs)


def test_a_mark_whose_write_failed_is_written_by_the_next_batch() -> None:
    clock, cluster, cloud = world()
    state, marks = FailingOnce(), RecentMarks()

    first = run(IDS[:1], clock, cluster, cloud, state=state, recent_marks=marks)
    second = run(IDS[1:2], clock, cluster, cloud, state=state, recent_marks=marks)

    assert (first.offerings_marked, second.offerings_marked) == (0, 1)
    assert not any(r.failed for r in first.items)  # the mark only improves plans: the record still succeeds
    assert state.writes.count(OFFERING) == 1


def test_of_threads_claiming_one_offering_at_once_exactly_one_writes() -> None:
    marks = RecentMarks()
    key = ("m5.large", "us-west-2a", "spot")
    start = threading.Barrier(8)
    won: list[bool] = []

    def claim() -> None:
        start.wait()
        won.append(marks.claim(key, 1000.0))

    threads = [threading.Thread(target=claim) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()

    assert sorted(won) == [False] * 7 + [True]
    marks.release(key, 999.0)  # not the claim made: kept
    assert not marks.claim(key, 1000.0 + REMARK_AFTER_SECONDS - 0.001)
    marks.release(key, 1000.0)
    assert marks.claim(key, 1000.5)
