"""A continuation (a burst's hand-off, or the next attempt of an unfinished drain) carries the instances the
invocation before it located, so it does not describe them again: at 1,000 nodes the hand-offs and
continuations repeated a DescribeInstances of every node. What it carries is read back strictly; anything
else is described as for an original message."""

from __future__ import annotations

import json
import math
from dataclasses import replace
from typing import Any

import interruption_fakes as fakes
import pytest

from nodesmith.core.interruption import parse_message
from nodesmith.services.interrupt import InstanceStatus
from nodesmith.services.interrupt_batch import CONTINUATION_KEY, BatchItem, Continuation, handle_batch
from nodesmith.services.interrupt_items import (
    MAX_CARRIED_INSTANCES,
    continuation_body,
    instance_from_dict,
    instance_to_dict,
)

IDS = [f"i-00000000000000{n:02d}" for n in range(2)]


def test_a_continuation_reads_back_the_instance_it_carries_with_only_the_tags_we_read() -> None:
    located = fakes.make_instance(IDS[0], nodeclaim="nc-0")
    located = replace(located, private_dns_name="ip-10-0-0-1.ec2.internal", image_id="ami-1",
                      tags={**located.tags, "team": "payments", "Name": "x" * 200})  # fmt: skip

    body = json.loads(json.dumps(continuation_body(fakes.event(IDS[0]), attempt=1, instance_ids=[IDS[0]],
                                                   instances=[located])))  # fmt: skip
    [carried] = Continuation.from_event(body).instances

    assert carried == replace(located, tags={k: v for k, v in located.tags.items() if k not in {"team", "Name"}})


def test_only_the_continuations_own_instances_go_along_and_at_most_the_cap() -> None:
    many = [fakes.make_instance(f"i-{n:017x}") for n in range(MAX_CARRIED_INSTANCES + 5)]
    ids = [i.instance_id for i in many[:-1]]  # the last located instance is another message's

    marker = continuation_body(fakes.event(IDS[0]), attempt=1, instance_ids=ids, instances=many)[CONTINUATION_KEY]

    assert list(marker["instances"]) == ids[:MAX_CARRIED_INSTANCES]


@pytest.mark.parametrize(
    "change",
    [
        {"type": None},
        {"zone": 3},
        {"launch-time": True},
        {"launch-time": math.inf},
        {"launch-time": "yesterday"},
        {"tags": ["kubernetes.io/cluster/test"]},
        {"tags": {"karpenter.sh/nodeclaim": 7}},
    ],
)
def test_a_carried_instance_we_did_not_write_is_not_used(change: dict[str, Any]) -> None:
    good = instance_to_dict(fakes.make_instance(IDS[0]))
    assert instance_from_dict(IDS[0], good) is not None
    assert instance_from_dict(IDS[0], {**good, **change}) is None
    assert instance_from_dict(IDS[0], "not a document") is None


def _world() -> tuple[Any, Any, Any]:
    clock = fakes.FakeClock()
    nodes = [fakes.make_node(f"node-{n}", iid) for n, iid in enumerate(IDS)]
    pods = [fakes.make_pod(f"web-{n}-0", node=f"node-{n}", grace=0) for n in range(len(IDS))]
    cluster = fakes.FakeCluster(clock=clock, nodes=nodes, pods=pods)
    cloud = fakes.FakeCloud([fakes.make_instance(iid, nodeclaim=f"nc-{n}") for n, iid in enumerate(IDS)])
    return clock, cluster, cloud


def _item(body: dict[str, Any], message_id: str) -> BatchItem:
    return BatchItem(item_id=message_id, message=parse_message(json.dumps(body)), event=body,
                     continuation=Continuation.from_event(body))  # fmt: skip


def test_a_batch_describes_only_the_instances_its_continuations_do_not_carry() -> None:
    clock, cluster, cloud = _world()
    carrying = continuation_body(fakes.event(IDS[0]), attempt=1, instance_ids=[IDS[0]], handoff=True,
                                 instances=[cloud.instances[IDS[0]]])  # fmt: skip
    bare = continuation_body(fakes.event(IDS[1]), attempt=1, instance_ids=[IDS[1]], handoff=True)  # an older writer's

    out = handle_batch(items=[_item(carrying, "a"), _item(bare, "b")], cluster=cluster, cloud=cloud,
                       cluster_name=fakes.CLUSTER, rebalance_action="cordon", now=clock.wall(),
                       drain_budget_seconds=60.0, sleep=clock.sleep, clock=clock, wall=clock.wall)  # fmt: skip

    assert [c for c in cloud.calls if c[0] != "terminate"] == [("get_instances", (IDS[1],))]
    assert [r.outcome.instances[0].status for r in out.items] == [InstanceStatus.REMOVED] * 2
    assert sorted(i for c in cloud.calls if c[0] == "terminate" for i in c[1]) == [IDS[0], IDS[1]]
    assert cluster.lost == []


def test_a_carried_instance_without_our_cluster_tag_is_still_left_alone() -> None:
    clock, cluster, cloud = _world()
    foreign = fakes.make_instance(IDS[0], ours=False)
    body = continuation_body(fakes.event(IDS[0]), attempt=1, instance_ids=[IDS[0]], handoff=True,
                             instances=[foreign])  # fmt: skip

    out = handle_batch(items=[_item(body, "a")], cluster=cluster, cloud=cloud, cluster_name=fakes.CLUSTER,
                       rebalance_action="cordon", now=clock.wall(), drain_budget_seconds=60.0, sleep=clock.sleep,
                       clock=clock, wall=clock.wall)  # fmt: skip

    assert out.items[0].outcome.instances[0].status is InstanceStatus.FOREIGN
    assert cloud.calls == [] and cluster.count("evict") == 0


def test_past_its_deadline_a_continuation_describes_its_instance_afresh_and_sees_it_gone() -> None:
    clock, cluster, cloud = _world()
    located = cloud.instances[IDS[0]]
    body = continuation_body(fakes.event(IDS[0]), attempt=2, instance_ids=[IDS[0]], instances=[located])
    clock.sleep(200.0)  # the two-minute notice is over: EC2 has taken the instance back
    cloud.instances[IDS[0]] = replace(located, state="terminated")

    out = handle_batch(items=[_item(body, "a")], cluster=cluster, cloud=cloud, cluster_name=fakes.CLUSTER,
                       rebalance_action="cordon", now=clock.wall(), drain_budget_seconds=60.0, sleep=clock.sleep,
                       clock=clock, wall=clock.wall)  # fmt: skip

    assert ("get_instances", (IDS[0],)) in cloud.calls
    assert out.items[0].outcome.instances[0].status is InstanceStatus.REMOVED
    assert cluster.count("evict") == 0  # its pods went with it: the node is removed, not drained
