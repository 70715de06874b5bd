"""A batch of warnings for running instances finds them through the NodeClaims we launched them for (one list,
by the ``nodesmith.dev/instance-id`` label), as Karpenter finds them in its NodeClaim cache, and describes in
EC2 only the instances no labelled NodeClaim answers for, those of state-change events (their state is the
news), and those whose warning's deadline has passed (EC2 may have taken them back)."""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

import interruption_fakes as fakes
import memory_state as memory

from nodesmith.core.api.nodeclaim import NodeClaim
from nodesmith.core.interruption import parse_message
from nodesmith.services.interrupt import InstanceStatus
from nodesmith.services.interrupt_batch import BatchItem, handle_batch
from nodesmith.services.interrupt_locate import instance_from_nodeclaim

IDS = [f"i-00000000000000{n:02d}" for n in range(4)]
ZONES = ["us-west-2a", "us-west-2a", "us-west-2b", "us-west-2b"]
NAMES = [f"ip-10-0-0-{n}.us-west-2.compute.internal" for n in range(len(IDS))]


def claim(n: int, *, instance_type: str = "c6i.xlarge", labelled: bool = True) -> NodeClaim:
    """The NodeClaim the launch of instance ``IDS[n]`` left: labelled with its type, zone, capacity type and id."""
    labels = {"karpenter.sh/nodepool": "spot-pool"}
    if labelled:
        labels |= {
            "node.kubernetes.io/instance-type": instance_type,
            "topology.kubernetes.io/zone": ZONES[n],
            "karpenter.sh/capacity-type": "spot",
            "nodesmith.dev/instance-id": IDS[n],
        }
    return NodeClaim.model_validate(
        {
            "apiVersion": "karpenter.sh/v1",
            "kind": "NodeClaim",
            "metadata": {"name": f"spot-pool-{n}", "labels": labels, "creationTimestamp": "2026-11-22T05:00:00Z"},
            "spec": {"nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
                     "requirements": []},
            "status": {"providerID": f"aws:///{ZONES[n]}/{IDS[n]}", "nodeName": NAMES[n], "imageID": "ami-1"},
        }
    )  # fmt: skip


def world(labelled: list[int]) -> tuple[Any, Any, Any]:
    clock = fakes.FakeClock()
    nodes = [fakes.make_node(name, iid, zone) for name, iid, zone in zip(NAMES, IDS, ZONES, strict=True)]
    pods = [fakes.make_pod(f"web-{n}", node=name, grace=0) for n, name in enumerate(NAMES)]
    cluster = fakes.FakeCluster(clock=clock, nodes=nodes, pods=pods)
    cluster.labelled = {IDS[n]: claim(n) for n in labelled}
    cluster.nodeclaims = {f"spot-pool-{n}" for n in range(len(IDS))}
    instances = [
        fakes.make_instance(iid, nodeclaim=f"spot-pool-{n}", zone=zone)
        for n, (iid, zone) in enumerate(zip(IDS, ZONES, strict=True))
    ]
    cloud = fakes.FakeCloud([replace(i, private_dns_name=NAMES[n]) for n, i in enumerate(instances)])
    return clock, cluster, cloud


def run(clock: Any, cluster: Any, cloud: Any, events: list[dict[str, Any]], *, late: float = 0.0, **kw: Any) -> Any:
    items = [BatchItem(item_id=f"m-{n}", message=parse_message(json.dumps(e)), event=e) for n, e in enumerate(events)]
    return handle_batch(items=items, cluster=cluster, cloud=cloud, cluster_name=fakes.CLUSTER,
                        rebalance_action="cordon", now=clock.wall() + late, drain_budget_seconds=60.0,
                        drain_workers=1, eviction_workers=1, sleep=clock.sleep, clock=clock, wall=clock.wall,
                        **kw)  # fmt: skip


def described(cloud: Any) -> list[str]:
    return [iid for call, ids in cloud.calls if call == "get_instances" for iid in ids]


def test_spot_warnings_for_labelled_nodeclaims_are_cordoned_without_describing_an_instance() -> None:
    clock, cluster, cloud = world(labelled=[0, 1, 2, 3])
    state = memory.MemoryStateStore()
    out = run(clock, cluster, cloud, [fakes.event(i) for i in IDS], state=state)

    assert described(cloud) == []
    assert [arg for call, arg in cluster.calls if call == "nodeclaims_for_instances"] == [tuple(IDS)]
    assert {arg for call, arg in cluster.calls if call == "taint_and_cordon"} == set(NAMES)
    assert [r.outcome.instances[0].status for r in out.items] == [InstanceStatus.REMOVED] * len(IDS)
    assert [r.outcome.instances[0].nodepool for r in out.items] == ["spot-pool"] * len(IDS)
    # the offering marked unavailable is the NodeClaim's (c6i.xlarge), not the one EC2 would describe (m5.large)
    assert sorted(w for w in state.writes if w.startswith("offering#")) == [
        "offering#c6i.xlarge#us-west-2a#spot",
        "offering#c6i.xlarge#us-west-2b#spot",
    ]
    assert sorted(i for call, ids in cloud.calls if call == "terminate" for i in ids) == IDS  # ours: terminated


def test_only_instances_without_a_labelled_nodeclaim_are_described() -> None:
    clock, cluster, cloud = world(labelled=[0, 2])
    out = run(clock, cluster, cloud, [fakes.event(i) for i in IDS])

    assert described(cloud) == [IDS[1], IDS[3]]
    assert {arg for call, arg in cluster.calls if call == "taint_and_cordon"} == set(NAMES)
    assert not any(r.failed for r in out.items)


def test_state_change_events_and_warnings_past_their_deadline_are_described() -> None:
    clock, cluster, cloud = world(labelled=[0, 1, 2, 3])
    run(clock, cluster, cloud, [fakes.event(IDS[0], kind="state", state="stopping")])
    assert described(cloud) == [IDS[0]]
    assert all(call != "nodeclaims_for_instances" for call, _ in cluster.calls)

    clock, cluster, cloud = world(labelled=[0, 1, 2, 3])
    run(clock, cluster, cloud, [fakes.event(IDS[1])], late=300.0)  # the two minutes are long over
    assert described(cloud) == [IDS[1]]


def test_a_failing_nodeclaim_list_falls_back_to_describing_the_batch() -> None:
    clock, cluster, cloud = world(labelled=[0, 1])
    cluster.fail_nodeclaim_list = True
    out = run(clock, cluster, cloud, [fakes.event(i) for i in IDS[:2]])

    assert described(cloud) == IDS[:2]
    assert {arg for call, arg in cluster.calls if call == "taint_and_cordon"} == set(NAMES[:2])
    assert not any(r.failed for r in out.items)


def test_a_nodeclaim_without_its_launch_labels_or_naming_another_instance_answers_for_nothing() -> None:
    assert instance_from_nodeclaim(claim(0, labelled=False), fakes.CLUSTER) is None
    moved = claim(0)
    moved.status.provider_id = f"aws:///{ZONES[0]}/{IDS[1]}"
    assert instance_from_nodeclaim(moved, fakes.CLUSTER) is None

    located = instance_from_nodeclaim(claim(2), fakes.CLUSTER)
    assert located is not None
    assert (located.instance_id, located.instance_type, located.zone, located.capacity_type) == (
        IDS[2],
        "c6i.xlarge",
        "us-west-2b",
        "spot",
    )
    assert located.private_dns_name == NAMES[2] and located.provider_id == f"aws:///us-west-2b/{IDS[2]}"
    assert located.tags == {
        f"kubernetes.io/cluster/{fakes.CLUSTER}": "owned",
        "karpenter.sh/nodeclaim": "spot-pool-2",
        "karpenter.sh/nodepool": "spot-pool",
    }
