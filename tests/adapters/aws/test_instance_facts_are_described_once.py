"""Against moto: the EC2 adapter keeps what an instance was launched with (type, zone, AMI, subnet, security groups)
from every DescribeInstances it makes, so drift reads a fleet's facts by id only for instances never described; a
fleet list replaces what it holds (an instance gone from the fleet is forgotten). State is never answered from it."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ec2_support import CLUSTER

from nodesmith.adapters.aws import instances as instances_module
from nodesmith.adapters.aws.instances import NODECLASS_TAG, NODEPOOL_TAG, Instances

if TYPE_CHECKING:
    import pytest

    from nodesmith.sim.aws import SeededAws


def _run(ec2: Any, seeded: SeededAws, count: int, *, ours: bool = True) -> list[str]:
    image = next(iter(seeded.images.values()))
    tags = [{"Key": f"kubernetes.io/cluster/{CLUSTER}", "Value": "owned"}]
    if ours:
        tags += [{"Key": NODEPOOL_TAG, "Value": "default"}, {"Key": NODECLASS_TAG, "Value": "default"}]
    out = ec2.run_instances(
        ImageId=image,
        InstanceType="m5.large",
        MinCount=count,
        MaxCount=count,
        SubnetId=_subnet(seeded),
        SecurityGroupIds=[seeded.security_group_id],
        TagSpecifications=[{"ResourceType": "instance", "Tags": tags}],
    )
    return [str(i["InstanceId"]) for i in out["Instances"]]


def _subnet(seeded: SeededAws) -> str:
    return seeded.subnets[min(seeded.subnets)]


def _counting(ec2: Any) -> list[int]:
    """How many ids each DescribeInstances asks for (0: a filtered list)."""
    calls: list[int] = []
    ec2.meta.events.register(
        "before-parameter-build.ec2.DescribeInstances",
        lambda params, **_: calls.append(len(params.get("InstanceIds") or [])),
    )
    return calls


def test_facts_of_listed_instances_are_answered_without_describing_them_again(ec2: Any, seeded: SeededAws) -> None:
    ids = _run(ec2, seeded, 3)
    instances = Instances(ec2=ec2, cluster_name=CLUSTER)
    calls = _counting(ec2)
    listed = {i.instance_id: i for i in instances.list_all()}
    assert calls == [0]

    facts = instances.facts(instance_ids=ids)

    assert calls == [0]  # nothing read again
    assert set(facts) == set(ids)
    for iid in ids:
        assert facts[iid].subnet_id == _subnet(seeded) == listed[iid].subnet_id
        assert facts[iid].security_group_ids == (seeded.security_group_id,)
        assert facts[iid].image_id == listed[iid].image_id and facts[iid].image_id.startswith("ami-")
        assert facts[iid].instance_type == "m5.large" and facts[iid].zone == listed[iid].zone


def test_instances_never_described_are_read_by_id_in_batches_of_200_then_kept(ec2: Any, seeded: SeededAws) -> None:
    ids = _run(ec2, seeded, 201)
    instances = Instances(ec2=ec2, cluster_name=CLUSTER)
    calls = _counting(ec2)

    first = instances.facts(instance_ids=ids)
    again = instances.facts(instance_ids=ids)

    assert sorted(calls) == [1, 200]  # two by-id reads, no fleet list
    assert set(first) == set(ids) and again == first
    assert instances.facts(instance_ids=["i-0123456789abcdef0"]) == {}  # unknown to EC2: absent


def test_a_by_id_read_fills_what_facts_answer(ec2: Any, seeded: SeededAws) -> None:
    (iid,) = _run(ec2, seeded, 1, ours=False)  # any instance read by id, ours or not
    instances = Instances(ec2=ec2, cluster_name=CLUSTER)
    calls = _counting(ec2)

    described = instances.get(instance_id=iid)
    facts = instances.facts(instance_ids=[iid])

    assert described is not None and calls == [1]
    assert facts[iid].subnet_id == described.subnet_id and facts[iid].launch_time == described.launch_time


def test_a_fleet_list_forgets_the_instances_it_no_longer_shows(ec2: Any, seeded: SeededAws) -> None:
    gone, kept = _run(ec2, seeded, 2)
    instances = Instances(ec2=ec2, cluster_name=CLUSTER)
    instances.list_all()
    ec2.terminate_instances(InstanceIds=[gone])
    instances.list_all()  # the terminated instance is no longer listed
    calls = _counting(ec2)

    facts = instances.facts(instance_ids=[gone, kept])

    assert calls == [1]  # only the forgotten one is read again
    assert set(facts) == {gone, kept}  # EC2 still describes a terminated instance by id
    assert instances.describe(instance_ids=[gone])[0].state in ("shutting-down", "terminated")  # state: always read


def test_a_container_that_never_lists_keeps_a_bounded_number(
    ec2: Any, seeded: SeededAws, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(instances_module, "FACTS_CACHE_MAX", 2)
    first, second, third = _run(ec2, seeded, 3)
    instances = Instances(ec2=ec2, cluster_name=CLUSTER)
    for iid in (first, second, third):
        instances.get(instance_id=iid)
    calls = _counting(ec2)

    instances.facts(instance_ids=[second, third])
    assert calls == []
    instances.facts(instance_ids=[first])  # the oldest was forgotten
    assert calls == [1]
