"""The reconcile pass's status step (``update_nodeclass_status``) writes each live EC2NodeClass's status conditions
and resolved parts from the readiness port in one write: once when they change and not again while nothing changes,
never for a class being deleted, and an EC2 error on one class is reported without stopping the others; without the
port nothing is written."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from reconcile_fakes import FakeCloud, FakeCluster, make_nodeclass, make_nodepool, make_pod

from nodesmith.core.api.ec2nodeclass import EC2NodeClass, EC2NodeClassStatus
from nodesmith.core.errors import LaunchError
from nodesmith.core.nodeclass_parts import SecurityGroup, Subnet
from nodesmith.core.nodeclass_status import Check, ResolvedParts
from nodesmith.services.ports import Ports
from nodesmith.services.provisioning.nodeclasses import update_nodeclass_status
from nodesmith.services.provisioning.reconcile import reconcile

if TYPE_CHECKING:
    from collections.abc import Mapping

NOW = 1_800_000_000.0
PARTS = ("SubnetsReady", "SecurityGroupsReady", "AMIsReady", "InstanceProfileReady")
SUBNET = Subnet(id="subnet-0a", zone="us-east-1a", zone_id="use1-az1", available_ips=100)


@dataclass
class StatusCluster(FakeCluster):
    statuses: dict[str, list[Mapping[str, Any]]] = field(default_factory=dict)

    def patch_ec2nodeclass_status(self, *, name: str, status: Mapping[str, Any]) -> EC2NodeClass:
        self.statuses.setdefault(name, []).append(dict(status))
        return with_status(make_nodeclass(name), status)


@dataclass
class Readiness:
    """Every part resolves except the ``failing`` ones (class name -> condition type); ``refusing`` classes raise."""

    failing: dict[str, str] = field(default_factory=dict)
    refusing: set[str] = field(default_factory=set)

    def nodeclass_parts(self, *, nodeclass: EC2NodeClass) -> ResolvedParts:
        if nodeclass.name in self.refusing:
            raise LaunchError("DescribeSubnets: RequestLimitExceeded")
        bad = self.failing.get(nodeclass.name)
        return ResolvedParts(
            checks=tuple(
                Check(type=t, ok=t != bad, reason="SubnetsNotFound", message="nothing matched") for t in PARTS
            ),
            subnets=() if bad == "SubnetsReady" else (SUBNET,),
            security_groups=(SecurityGroup(id="sg-0a", name="nodes"),),
            images=(),
            instance_profile="profile",
        )


def ports(cluster: StatusCluster, readiness: Readiness | None) -> Ports:
    return Ports(cluster=cluster, cloud=FakeCloud(), cluster_name="test", readiness=readiness)


def with_status(nodeclass: EC2NodeClass, written: Mapping[str, Any]) -> EC2NodeClass:
    merged = {k: v for k, v in written.items() if v is not None}  # a merge patch's null removes the field
    return nodeclass.model_copy(update={"status": EC2NodeClassStatus.model_validate(merged)})


def test_the_status_is_written_once_and_not_again_while_nothing_changes() -> None:
    cluster = StatusCluster()
    readiness = Readiness(failing={"broken": "SubnetsReady"})
    classes = [make_nodeclass("default"), make_nodeclass("broken")]

    written, errors = update_nodeclass_status(ports=ports(cluster, readiness), nodeclasses=classes, now=NOW)

    assert errors == [] and sorted(written) == ["broken", "default"]
    [ready] = cluster.statuses["default"]
    [broken] = cluster.statuses["broken"]
    assert {c["type"]: c["status"] for c in ready["conditions"]}["Ready"] == "True"
    assert {c["type"]: c["status"] for c in broken["conditions"]}["Ready"] == "False"
    assert ready["subnets"] == [{"id": "subnet-0a", "zone": "us-east-1a", "zoneID": "use1-az1"}]
    assert broken["subnets"] is None
    assert ready["securityGroups"] == broken["securityGroups"] == [{"id": "sg-0a", "name": "nodes"}]
    assert ready["instanceProfile"] == "profile"

    again = [written["default"], written["broken"]]  # as written: unchanged since
    assert update_nodeclass_status(ports=ports(cluster, readiness), nodeclasses=again, now=NOW + 60) == ({}, [])
    assert [len(v) for v in cluster.statuses.values()] == [1, 1]


def test_a_deleting_class_is_left_alone_and_one_refusal_does_not_stop_the_others() -> None:
    cluster = StatusCluster()
    deleting = make_nodeclass("old")
    deleting = deleting.model_copy(
        update={"metadata": deleting.metadata.model_copy(update={"deletion_timestamp": "2027-01-15T08:00:00Z"})}
    )
    classes = [make_nodeclass("throttled"), deleting, make_nodeclass("default")]

    written, errors = update_nodeclass_status(
        ports=ports(cluster, Readiness(refusing={"throttled"})), nodeclasses=classes, now=NOW
    )

    assert errors == ["status of EC2NodeClass throttled: DescribeSubnets: RequestLimitExceeded"]
    assert set(cluster.statuses) == set(written) == {"default"}


def test_without_the_readiness_port_nothing_is_written() -> None:
    cluster = StatusCluster()
    assert update_nodeclass_status(ports=ports(cluster, None), nodeclasses=[make_nodeclass()], now=NOW) == ({}, [])
    assert cluster.statuses == {}


def test_the_pass_leaves_the_status_it_wrote_to_the_disruption_pass_after_it() -> None:
    """The disruption pass decides on the snapshot the provisioning pass left: drift reads the class's resolved
    subnets and AMIs as this pass wrote them, not as they were before it."""
    cluster = StatusCluster(nodepools=[make_nodepool()], nodeclasses=[make_nodeclass()])
    cluster.pods = [make_pod("web", cpu="1")]

    outcome = reconcile(ports=ports(cluster, Readiness()), now=NOW)

    assert outcome.snapshot is not None
    left = outcome.snapshot.nodeclasses["default"]
    assert left.status is not None and [s.id for s in left.status.subnets] == ["subnet-0a"]
    assert left.status.instance_profile == "profile"
    pool = cluster.nodepools[0].status  # the NodePool's readiness follows the class's, in the same pass
    assert pool is not None and {c.type: c.status for c in pool.conditions}["NodeClassReady"] == "True"
