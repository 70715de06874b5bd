"""End to end against moto: an EC2NodeClass resolves, create() launches a tagged instance, list/terminate see it."""

from __future__ import annotations

import base64
from typing import TYPE_CHECKING, Any

import boto3
import pytest
from ec2_support import CLUSTER, REGION, SHARED_PRICES, nodeclass, seeded_provider

from nodesmith.core.errors import TerminationError
from nodesmith.core.model import Taint
from nodesmith.core.ports import LaunchRequest
from nodesmith.sim.aws import SeededAws, write_price_table

if TYPE_CHECKING:
    from pathlib import Path

    from nodesmith.adapters.aws.provider import Ec2CloudProvider

TYPES = ("m5.large", "c5.large", "t3.medium", "m7g.large", "g4dn.xlarge")


def provider(seeded: SeededAws, price_table: Path | None) -> Ec2CloudProvider:
    return seeded_provider(seeded, types=TYPES, price_table=price_table)


def test_create_launches_a_tagged_instance_from_the_catalogue(seeded: SeededAws, tmp_path: Path) -> None:
    table = write_price_table(path=tmp_path / "prices.json", source=SHARED_PRICES)
    cloud = provider(seeded, table)
    nc = nodeclass(tags={"team": "payments"})
    types = {it.name: it for it in cloud.instance_types(nodeclass=nc)}
    assert set(types) == set(TYPES)
    m5 = types["m5.large"]
    assert {o.zone for o in m5.offerings if o.available} == {"us-east-1a", "us-east-1b", "us-east-1c"}
    if SHARED_PRICES.is_file():
        assert {o.price for o in m5.offerings if o.capacity_type == "on-demand"} == {0.096}
    candidates = sorted(types.values(), key=lambda it: it.cheapest_price() or 0.0)

    request = LaunchRequest(
        nodeclaim_name="default-abcde",
        nodepool_name="default",
        nodeclass=nc,
        instance_types=tuple(candidates),
        capacity_types=frozenset({"on-demand"}),
        zones=frozenset({"us-east-1b"}),
        labels={"team": "payments"},
        taints=(Taint(key="dedicated", value="payments", effect="NoSchedule"),),
        client_token="default-abcde",
    )
    result = cloud.create(request=request)
    assert result.zone == "us-east-1b"
    assert result.capacity_type == "on-demand"
    assert result.instance_type in TYPES and result.instance_type != "g4dn.xlarge"  # GPUs only when needed

    ec2 = boto3.client("ec2", region_name=REGION)
    described = ec2.describe_instances(InstanceIds=[result.instance_id])["Reservations"][0]["Instances"][0]
    tags = {t["Key"]: t["Value"] for t in described["Tags"]}
    assert tags == {
        f"kubernetes.io/cluster/{CLUSTER}": "owned",
        "eks:eks-cluster-name": CLUSTER,
        "karpenter.sh/nodepool": "default",
        "karpenter.sh/nodeclaim": "default-abcde",
        "karpenter.k8s.aws/ec2nodeclass": "default",
        "Name": "default-abcde",
        "team": "payments",
    }
    assert described["SubnetId"] == seeded.subnets["us-east-1b"]
    arch = types[result.instance_type].labels["kubernetes.io/arch"]
    assert described["ImageId"] == seeded.images[("x86_64" if arch == "amd64" else "arm64", "standard")]

    template = ec2.describe_launch_template_versions(LaunchTemplateName=result.launch_template_name)[
        "LaunchTemplateVersions"
    ][0]["LaunchTemplateData"]
    assert template["MetadataOptions"]["HttpTokens"] == "required"
    assert template["IamInstanceProfile"] == {"Name": seeded.instance_profile}
    assert template["SecurityGroupIds"] == [seeded.security_group_id]
    user_data = base64.b64decode(template["UserData"]).decode()
    assert f"name: {CLUSTER}" in user_data
    assert "cidr: 172.20.0.0/16" in user_data  # from EKS DescribeCluster
    assert "karpenter.sh/capacity-type=on-demand" in user_data

    listed = cloud.list_instances()
    assert [i.instance_id for i in listed] == [result.instance_id]
    assert listed[0].provider_id == result.provider_id
    assert listed[0].tags["karpenter.sh/nodeclaim"] == "default-abcde"


def test_spot_launch_is_reported_as_spot(seeded: SeededAws, tmp_path: Path) -> None:
    cloud = provider(seeded, write_price_table(path=tmp_path / "prices.json", source=None))
    nc = nodeclass()
    types = cloud.instance_types(nodeclass=nc)
    request = LaunchRequest(
        nodeclaim_name="default-spot1",
        nodepool_name="default",
        nodeclass=nc,
        instance_types=tuple(sorted(types, key=lambda it: it.cheapest_price() or 0.0)),
        capacity_types=frozenset({"spot", "on-demand"}),
        zones=frozenset({"us-east-1a", "us-east-1c"}),
    )
    result = cloud.create(request=request)
    assert result.capacity_type == "spot"
    instance = cloud.get_instance(instance_id=result.instance_id)
    assert instance is not None
    assert instance.capacity_type == "spot"
    assert instance.zone in {"us-east-1a", "us-east-1c"}


def test_instances_of_other_node_groups_are_never_listed_and_terminate_tolerates_unknown_ids(
    seeded: SeededAws, ec2: Any
) -> None:
    cloud = provider(seeded, None)
    image = seeded.images[("x86_64", "standard")]
    subnet = seeded.subnets["us-east-1a"]

    def run(tags: dict[str, str]) -> str:
        spec = [{"ResourceType": "instance", "Tags": [{"Key": k, "Value": v} for k, v in tags.items()]}]
        out = ec2.run_instances(ImageId=image, MinCount=1, MaxCount=1, SubnetId=subnet, TagSpecifications=spec)
        return str(out["Instances"][0]["InstanceId"])

    ours_tags = {
        f"kubernetes.io/cluster/{CLUSTER}": "owned",
        "karpenter.sh/nodepool": "default",
        "karpenter.k8s.aws/ec2nodeclass": "default",
    }
    ours = run(ours_tags)
    gone = run(ours_tags)
    run({f"kubernetes.io/cluster/{CLUSTER}": "owned", "eks:nodegroup-name": "system"})  # managed node group
    run({**ours_tags, f"kubernetes.io/cluster/{CLUSTER}": "shared"})  # not owned
    run({"karpenter.sh/nodepool": "default", "karpenter.k8s.aws/ec2nodeclass": "default"})  # another cluster
    ec2.terminate_instances(InstanceIds=[gone])

    assert [i.instance_id for i in cloud.list_instances()] == [ours]
    assert cloud.get_instance(instance_id="i-0123456789abcdef0") is None
    assert cloud.get_instance(instance_id=gone).state == "terminated"  # type: ignore[union-attr]

    cloud.terminate(instance_ids=[ours, "i-0123456789abcdef0", gone])
    assert cloud.list_instances() == []
    cloud.terminate(instance_ids=[])


def test_an_unready_node_class_yields_types_with_nothing_available(seeded: SeededAws, tmp_path: Path) -> None:
    cloud = provider(seeded, write_price_table(path=tmp_path / "prices.json", source=None))
    broken = nodeclass(subnet_terms=[{"tags": {"karpenter.sh/discovery": "nobody"}}])
    types = cloud.instance_types(nodeclass=broken)
    assert {it.name for it in types} == set(TYPES)
    assert not any(o.available for it in types for o in it.offerings)
    with pytest.raises(Exception, match="no subnet matched"):
        cloud.create(
            request=LaunchRequest(
                nodeclaim_name="x",
                nodepool_name="default",
                nodeclass=broken,
                instance_types=tuple(types),
                capacity_types=frozenset({"on-demand"}),
                zones=frozenset({"us-east-1a"}),
            )
        )


def test_terminate_tries_a_refused_call_s_ids_one_by_one_and_names_only_the_protected_instance(
    seeded: SeededAws, ec2: Any
) -> None:
    cloud = provider(seeded, None)
    image = seeded.images[("x86_64", "standard")]
    out = ec2.run_instances(ImageId=image, MinCount=3, MaxCount=3, SubnetId=seeded.subnets["us-east-1a"])
    first, protected, last = (str(i["InstanceId"]) for i in out["Instances"])
    ec2.modify_instance_attribute(InstanceId=protected, DisableApiTermination={"Value": True})

    with pytest.raises(TerminationError) as raised:
        cloud.terminate(instance_ids=[first, protected, "i-0123456789abcdef0", last])

    assert list(raised.value.failed) == [protected]
    assert raised.value.code == "OperationNotPermitted" and protected in str(raised.value)
    reservations = ec2.describe_instances()["Reservations"]
    states = {i["InstanceId"]: i["State"]["Name"] for r in reservations for i in r["Instances"]}
    assert (states[first], states[protected], states[last]) == ("terminated", "running", "terminated")


def test_a_throttled_terminate_fails_the_request_at_once_without_trying_each_id() -> None:
    from botocore.exceptions import ClientError

    from nodesmith.adapters.aws.instances import Instances
    from nodesmith.core.errors import LaunchError

    class Throttled:
        def __init__(self) -> None:
            self.calls: list[list[str]] = []

        def terminate_instances(self, *, InstanceIds: list[str]) -> Any:
            self.calls.append(InstanceIds)
            error = {"Error": {"Code": "RequestLimitExceeded", "Message": "Request limit exceeded."}}
            raise ClientError(error, "TerminateInstances")

    ec2 = Throttled()
    with pytest.raises(LaunchError) as raised:
        Instances(ec2=ec2, cluster_name=CLUSTER).terminate(instance_ids=["i-1", "i-2", "i-3"])

    assert not isinstance(raised.value, TerminationError) and raised.value.code == "RequestLimitExceeded"
    assert ec2.calls == [["i-1", "i-2", "i-3"]]  # not 3 more calls, one per id
