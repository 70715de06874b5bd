"""SQS may deliver one message twice in the same batch: the batch drains the node once and reports the
copy as replayed, without relying on the idempotency store (whose conditional write two threads of one
invocation would race for)."""

from __future__ import annotations

import json
from typing import Any

import interruption_fakes as fakes

from nodesmith.core.interruption import parse_message
from nodesmith.services.interrupt import InstanceStatus
from nodesmith.services.interrupt_batch import BatchItem, Continuation, handle_batch

IID = "i-0000000000000001"


def item_of(body: dict[str, Any], message_id: str) -> BatchItem:
    return BatchItem(item_id=message_id, message=parse_message(json.dumps(body)), event=body,
                     continuation=Continuation.from_event(body))  # fmt: skip


def test_the_copy_is_replayed_and_every_pod_is_evicted_once() -> None:
    clock = fakes.FakeClock()
    cluster = fakes.FakeCluster(
        clock=clock,
        nodes=[fakes.make_node("node-a", IID)],
        pods=[fakes.make_pod(f"web-{j}", node="node-a", grace=0) for j in range(3)],
    )
    cloud = fakes.FakeCloud([fakes.make_instance(IID, nodeclaim="nc-a")])
    body = fakes.event(IID)

    out = handle_batch(items=[item_of(body, "m-1"), item_of(body, "m-2")], cluster=cluster, cloud=cloud,
                       cluster_name=fakes.CLUSTER, rebalance_action="cordon", now=clock.wall(),
                       drain_budget_seconds=60.0, drain_workers=4, sleep=clock.sleep, clock=clock,
                       wall=clock.wall)  # fmt: skip

    assert cluster.count("evict") == 3  # each pod once: no idempotency store is passed (once=None)
    assert out.drains_run == 1 and out.drains_replayed == 1
    first, copy = (r.outcome.instances[0] for r in out.items)
    assert first.status is copy.status is InstanceStatus.REMOVED
    assert copy.replayed and not first.replayed and not any(r.failed for r in out.items)
