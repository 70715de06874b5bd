"""A pass that does not list the fleet (garbage collection not due) decides drift as one that did: the AMI comes
from the NodeClaim's ``status.imageID`` (Karpenter's AMI drift), the subnet and security groups from the cloud
provider's launch facts of the nodes' instances, read by id (Karpenter's AWS provider reads the instance)."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

import pytest
from reconcile_fakes import FakeCloud, FakeCluster, FakeQueue, make_nodepool, make_pod, node_for

from nodesmith.core.api.ec2nodeclass import EC2NodeClass
from nodesmith.services.disruption.service import DisruptionOutcome, disrupt
from nodesmith.services.ports import Ports
from nodesmith.services.provisioning.reconcile import ReconcileOptions, reconcile

if TYPE_CHECKING:
    from collections.abc import Sequence

    from nodesmith.core.ports import Instance, InstanceFacts


@dataclass
class CountingCloud(FakeCloud):
    listings: int = 0

    def list_instances(self) -> list[Instance]:
        self.listings += 1
        return super().list_instances()


@dataclass
class ForgetfulCloud(CountingCloud):
    """A provider that can tell no instance's launch facts."""

    asked: list[str] = field(default_factory=list)

    def instance_facts(self, *, instance_ids: Sequence[str]) -> dict[str, InstanceFacts]:
        self.asked.extend(instance_ids)
        return {}


def _nodeclass() -> EC2NodeClass:
    """Selected by tags, resolved (status) to subnet-a, sg-1 and ami-123."""
    return EC2NodeClass.model_validate(
        {
            "apiVersion": "karpenter.k8s.aws/v1",
            "kind": "EC2NodeClass",
            "metadata": {"name": "default"},
            "spec": {
                "role": "KarpenterNodeRole-test",
                "amiFamily": "AL2023",
                "amiSelectorTerms": [{"tags": {"karpenter.sh/discovery": "test"}}],
                "subnetSelectorTerms": [{"tags": {"karpenter.sh/discovery": "test"}}],
                "securityGroupSelectorTerms": [{"tags": {"karpenter.sh/discovery": "test"}}],
            },
            "status": {
                "subnets": [{"id": "subnet-a", "zone": "us-east-1a"}],
                "securityGroups": [{"id": "sg-1"}],
                "amis": [{"id": "ami-123"}],
            },
        }
    )


def _one_busy_node(cloud: CountingCloud) -> tuple[FakeCluster, str]:
    """One registered, initialized node running a pod, its instance in subnet-a with sg-1 and ami-123."""
    cluster = FakeCluster(nodepools=[make_nodepool()], nodeclasses=[_nodeclass()])
    cluster.pods = [make_pod("web")]
    ports = Ports(cluster=cluster, cloud=cloud, cluster_name="test", queue=FakeQueue())
    reconcile(ports=ports, now=1000.0)
    (claim,) = cluster.nodeclaims.values()
    (iid,) = cloud.instances
    cloud.instances[iid] = replace(cloud.instances[iid], subnet_id="subnet-a", security_group_ids=("sg-1",))
    cluster.nodes.append(node_for(cloud.instances[iid], claim, ready=True))
    cluster.now = cloud.now = 1001.0
    reconcile(ports=ports, now=1001.0)  # registered and initialized
    cluster.pods = [
        replace(p, node_name=cluster.nodes[0].name, unschedulable=False, phase="Running") for p in cluster.pods
    ]
    return cluster, iid


def _drift_pass(cluster: FakeCluster, cloud: CountingCloud, *, collect_garbage: bool) -> DisruptionOutcome:
    """A scheduled pass at 1100 (its provisioning, then disruption on the snapshot it left)."""
    cluster.now = cloud.now = 1100.0
    ports = Ports(cluster=cluster, cloud=cloud, cluster_name="test", queue=FakeQueue())
    cloud.listings = 0
    out = reconcile(ports=ports, now=1100.0, options=ReconcileOptions(collect_garbage=collect_garbage))
    assert out.garbage_collected is collect_garbage
    return disrupt(ports=ports, now=1100.0, snapshot=out.snapshot)


def _causes(outcome: DisruptionOutcome) -> list[str]:
    return [d["cause"] for d in outcome.decisions if d["method"] == "drift"]


@pytest.mark.parametrize(
    ("change", "cause"),
    [
        ({"security_group_ids": ("sg-1", "sg-2")}, "SecurityGroupDrift"),
        ({"subnet_id": "subnet-b"}, "SubnetDrift"),
        ({}, None),
    ],
)
def test_subnet_and_security_group_drift_are_found_alike_with_or_without_a_fleet_list(
    change: dict[str, object], cause: str | None
) -> None:
    found: dict[bool, list[str]] = {}
    for collect_garbage in (True, False):
        cloud = CountingCloud()
        cluster, iid = _one_busy_node(cloud)
        cloud.instances[iid] = replace(cloud.instances[iid], **change)  # type: ignore[arg-type]
        cloud.facts_read.clear()

        found[collect_garbage] = _causes(_drift_pass(cluster, cloud, collect_garbage=collect_garbage))

        if collect_garbage:
            assert cloud.listings == 1 and cloud.facts_read == []  # the listed fleet gave the facts
        else:
            assert cloud.listings == 0 and cloud.facts_read == [iid]  # read by id, no fleet list
    assert found[True] == found[False] == ([cause] if cause else [])


def test_ami_drift_comes_from_the_nodeclaims_image_id_without_reading_the_instance() -> None:
    cloud = ForgetfulCloud()
    cluster, iid = _one_busy_node(cloud)
    (claim,) = cluster.nodeclaims.values()
    assert claim.status.image_id == "ami-123"  # written at launch from CreateFleet's answer
    claim.status.image_id = "ami-old"  # launched from an AMI the EC2NodeClass no longer resolves

    out = _drift_pass(cluster, cloud, collect_garbage=False)

    assert _causes(out) == ["AMIDrift"]
    assert cloud.asked == [iid] and cloud.listings == 0
