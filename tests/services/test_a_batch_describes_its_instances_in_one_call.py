"""A burst of interruptions costs few API calls per node: handle_batch describes all the batch's instances
in one ``get_instances`` call (one by one only when that call fails), finds each node by its name (the
instance's private DNS name) instead of listing or searching every node, finds the nodes of our
instances its names miss through their NodeClaims (already removed, or named otherwise), lists the
nodes at most once for the other instances' misses, and marks an interrupted spot
offering once per batch however many of its nodes were interrupted."""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

import interruption_fakes as fakes
import memory_state as memory

from nodesmith.core.errors import LaunchError, TerminationError
from nodesmith.core.interruption import parse_message
from nodesmith.services.interrupt import InstanceStatus
from nodesmith.services.interrupt_batch import BatchItem, handle_batch

IDS = [f"i-00000000000000{n:02d}" for n in range(6)]
ZONES = ["us-west-2a", "us-west-2a", "us-west-2a", "us-west-2a", "us-west-2b", "us-west-2b"]


class BatchCloud(fakes.FakeCloud):
    """A cloud that can describe several instances at once (like ``Ec2CloudProvider.get_instances``)."""

    def __init__(self, instances: list[Any], *, fail_batch: bool = False) -> None:
        super().__init__(instances)
        self.fail_batch = fail_batch

    def get_instances(self, *, instance_ids: list[str]) -> dict[str, Any]:
        self.calls.append(("get_instances", tuple(instance_ids)))
        if self.fail_batch:
            raise RuntimeError("DescribeInstances: RequestLimitExceeded")
        return {i: self.instances[i] for i in instance_ids if i in self.instances}


def world(*, fail_batch: bool = False) -> tuple[Any, Any, Any]:
    clock = fakes.FakeClock()
    names = [f"ip-10-0-0-{n}.us-west-2.compute.internal" for n in range(len(IDS))]
    nodes = [fakes.make_node(name, iid, zone) for name, iid, zone in zip(names, IDS, ZONES, strict=True)]
    pods = [fakes.make_pod(f"web-{n}", node=name, grace=0) for n, name in enumerate(names)]
    cluster = fakes.FakeCluster(clock=clock, nodes=nodes, pods=pods)
    instances = [
        replace(fakes.make_instance(iid, nodeclaim=f"nc-{n}", zone=zone), private_dns_name=names[n])
        for n, (iid, zone) in enumerate(zip(IDS, ZONES, strict=True))
    ]
    return clock, cluster, BatchCloud(instances, fail_batch=fail_batch)


def items(ids: list[str]) -> list[BatchItem]:
    out = []
    for iid in ids:
        event = fakes.event(iid)
        out.append(BatchItem(item_id=f"msg-{iid}", message=parse_message(json.dumps(event)), event=event))
    return out


def run(clock: Any, cluster: Any, cloud: Any, ids: list[str], **kwargs: Any) -> Any:
    options: dict[str, Any] = {"drain_workers": 1, "eviction_workers": 1, **kwargs}
    return handle_batch(items=items(ids), cluster=cluster, cloud=cloud, cluster_name=fakes.CLUSTER,
                        rebalance_action="cordon", now=clock.wall(), drain_budget_seconds=60.0,
                        sleep=clock.sleep, clock=clock, wall=clock.wall, **options)  # fmt: skip


def calls(cloud: Any, name: str) -> list[Any]:
    return [arg for call, arg in cloud.calls if call == name]


def test_the_batch_describes_its_instances_in_one_call_and_finds_nodes_by_name() -> None:
    clock, cluster, cloud = world()
    out = run(clock, cluster, cloud, IDS, cordon_workers=4)

    assert calls(cloud, "get_instances") == [tuple(IDS)]
    assert calls(cloud, "get_instance") == []
    assert cluster.count("list_nodes") == 0
    assert cluster.count("taint_and_cordon") == len(IDS)
    assert [r.outcome.instances[0].status for r in out.items] == [InstanceStatus.REMOVED] * len(IDS)


def test_a_failing_batch_describe_falls_back_to_one_call_per_instance() -> None:
    clock, cluster, cloud = world(fail_batch=True)
    out = run(clock, cluster, cloud, IDS[:3])

    assert len(calls(cloud, "get_instances")) == 1
    assert sorted(calls(cloud, "get_instance")) == sorted(IDS[:3])
    assert [r.outcome.instances[0].status for r in out.items] == [InstanceStatus.REMOVED] * 3
    assert not any(r.failed for r in out.items)


def test_an_instance_ec2_no_longer_knows_is_not_described_again() -> None:
    clock, cluster, cloud = world()
    del cloud.instances[IDS[1]]  # terminated long ago: DescribeInstances leaves it out
    out = run(clock, cluster, cloud, IDS[:2])

    assert calls(cloud, "get_instance") == []
    gone = out.items[1].outcome.instances[0]
    assert gone.status is InstanceStatus.REMOVED and gone.node_deleted  # found through its node, removed


def test_an_interrupted_spot_offering_is_marked_once_per_batch() -> None:
    clock, cluster, cloud = world()
    state = memory.MemoryStateStore()
    out = run(clock, cluster, cloud, IDS, state=state, cordon_workers=4)

    offering_writes = sorted(w for w in state.writes if w.startswith("offering#"))
    assert offering_writes == ["offering#m5.large#us-west-2a#spot", "offering#m5.large#us-west-2b#spot"]
    assert out.offerings_marked == 2
    assert {(m.zone, m.capacity_type) for m in state.list_unavailable(now=clock.wall())} == {
        ("us-west-2a", "spot"),
        ("us-west-2b", "spot"),
    }


def test_our_nodes_missing_by_name_are_found_through_their_nodeclaims_without_listing_every_node() -> None:
    clock, cluster, cloud = world()
    for n in (0, 1, 2):  # already removed: a continuation or redelivery after the drain removed them
        del cluster.nodes[f"ip-10-0-0-{n}.us-west-2.compute.internal"]
    cluster.nodeclaim_nodes["nc-2"] = "ip-10-0-0-2.us-west-2.compute.internal"  # its node went first
    renamed = cluster.nodes.pop("ip-10-0-0-3.us-west-2.compute.internal")  # a node not named after its host
    cluster.nodes["custom-name"] = replace(renamed, name="custom-name")
    cluster.nodeclaim_nodes["nc-3"] = "custom-name"
    out = run(clock, cluster, cloud, IDS[:4], cordon_workers=4)

    assert cluster.count("list_nodes") == 0
    assert sorted(arg for call, arg in cluster.calls if call == "get_nodeclaim") == ["nc-0", "nc-1", "nc-2", "nc-3"]
    statuses = [r.outcome.instances[0] for r in out.items]
    assert [o.node_name for o in statuses] == [None, None, None, "custom-name"]
    assert [o.status for o in statuses] == [InstanceStatus.REMOVED] * 4  # the NodeClaims go, the last is drained
    assert ("taint_and_cordon", "custom-name") in cluster.calls


def test_a_nodeclaim_not_yet_marked_registered_falls_back_to_the_list() -> None:
    clock, cluster, cloud = world()
    renamed = cluster.nodes.pop("ip-10-0-0-0.us-west-2.compute.internal")  # registered since the last pass
    cluster.nodes["custom-name"] = replace(renamed, name="custom-name")
    cluster.nodeclaims.add("nc-0")  # no status.nodeName yet
    out = run(clock, cluster, cloud, IDS[:1])

    assert cluster.count("list_nodes") == 1
    assert out.items[0].outcome.instances[0].node_name == "custom-name"
    assert ("taint_and_cordon", "custom-name") in cluster.calls


def test_a_nodeclaim_naming_another_instances_node_finds_no_node() -> None:
    clock, cluster, cloud = world()
    del cluster.nodes["ip-10-0-0-0.us-west-2.compute.internal"]
    cluster.nodeclaim_nodes["nc-0"] = "ip-10-0-0-1.us-west-2.compute.internal"  # a stale or wrong nodeName
    out = run(clock, cluster, cloud, IDS[:1])

    assert out.items[0].outcome.instances[0].node_name is None
    assert ("taint_and_cordon", "ip-10-0-0-1.us-west-2.compute.internal") not in cluster.calls


def test_nodes_of_instances_we_did_not_launch_are_looked_for_in_one_list_for_the_whole_batch() -> None:
    clock, cluster, cloud = world()
    for iid in IDS[:4]:  # a managed node group's instances: the cluster tag, no NodeClaim
        inst = cloud.instances[iid]
        tags = {k: v for k, v in inst.tags.items() if not k.startswith("karpenter.sh/")}
        cloud.instances[iid] = replace(inst, tags=tags)
    for n in (0, 1, 2):
        del cluster.nodes[f"ip-10-0-0-{n}.us-west-2.compute.internal"]
    renamed = cluster.nodes.pop("ip-10-0-0-3.us-west-2.compute.internal")
    cluster.nodes["custom-name"] = replace(renamed, name="custom-name")
    out = run(clock, cluster, cloud, IDS[:4], cordon_workers=4)

    assert cluster.count("list_nodes") == 1
    assert cluster.count("get_nodeclaim") == 0
    statuses = [r.outcome.instances[0] for r in out.items]
    assert [o.node_name for o in statuses] == [None, None, None, "custom-name"]
    assert [o.status for o in statuses] == [InstanceStatus.NO_NODE] * 3 + [InstanceStatus.DRAINED]


def test_an_instance_ec2_no_longer_knows_shares_the_batch_list_too() -> None:
    clock, cluster, cloud = world()
    del cloud.instances[IDS[0]], cloud.instances[IDS[1]]
    out = run(clock, cluster, cloud, IDS[:2])

    assert cluster.count("list_nodes") == 1
    assert all(r.outcome.instances[0].node_deleted for r in out.items)


def test_nodes_removed_together_terminate_their_instances_in_shared_calls() -> None:
    clock, cluster, cloud = world()
    out = run(clock, cluster, cloud, IDS, drain_workers=len(IDS))

    assert [r.outcome.instances[0].status for r in out.items] == [InstanceStatus.REMOVED] * len(IDS)
    terminated = calls(cloud, "terminate")
    assert sorted(i for call in terminated for i in call) == sorted(IDS)
    assert len(terminated) < len(IDS)  # one TerminateInstances per node before the batcher


class ProtectedCloud(BatchCloud):
    """One instance has termination protection: the provider terminates the others of a request and names it
    (``TerminationError``, as ``Ec2CloudProvider.terminate`` does after trying the ids one by one)."""

    def __init__(self, instances: list[Any], *, protected: str) -> None:
        super().__init__(instances)
        self.protected = protected

    def terminate(self, *, instance_ids: list[str]) -> None:
        super().terminate(instance_ids=[i for i in instance_ids if i != self.protected])
        if self.protected in instance_ids:
            self.calls.append(("terminate refused", (self.protected,)))
            error = LaunchError(f"{self.protected} is protected", code="OperationNotPermitted")
            raise TerminationError(str(error), failed={self.protected: error})


def test_one_protected_instance_fails_only_its_own_record_not_the_shared_call_s_others() -> None:
    clock, cluster, cloud = world()
    cloud = ProtectedCloud(list(cloud.instances.values()), protected=IDS[2])
    out = run(clock, cluster, cloud, IDS, drain_workers=len(IDS))

    assert sorted(i for call in calls(cloud, "terminate") for i in call) == sorted(set(IDS) - {IDS[2]})
    failed = [r.item_id for r in out.items if r.failed]
    assert failed == [f"msg-{IDS[2]}"]  # SQS delivers it again; the others are done
    assert "is protected" in next(r.error for r in out.items if r.failed)


class RefusingCloud(BatchCloud):
    """A provider whose TerminateInstances fails without saying for which instance (no ``TerminationError``)."""

    def terminate(self, *, instance_ids: list[str]) -> None:
        self.calls.append(("terminate refused", tuple(instance_ids)))
        raise LaunchError("TerminateInstances failed: UnauthorizedOperation", code="UnauthorizedOperation")


def test_a_termination_error_no_instance_is_named_in_fails_every_record_of_the_shared_call() -> None:
    clock, cluster, cloud = world()
    cloud = RefusingCloud(list(cloud.instances.values()))
    out = run(clock, cluster, cloud, IDS[:3], drain_workers=3)

    assert [r.failed for r in out.items] == [True] * 3  # SQS delivers each again
    assert all("UnauthorizedOperation" in (r.error or "") for r in out.items)
