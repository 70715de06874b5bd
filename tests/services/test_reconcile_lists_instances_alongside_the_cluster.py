"""A reconcile pass lists EC2 instances while it lists the cluster, not after: DescribeInstances is
the slowest read of the snapshot and grows with the fleet, and it stood between a pending pod and
CreateFleet."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from reconcile_fakes import FakeCloud, FakeCluster, make_nodeclass, make_nodepool, make_pod

from nodesmith.services.ports import Ports
from nodesmith.services.provisioning.reconcile import reconcile

if TYPE_CHECKING:
    from nodesmith.core.ports import Instance


@dataclass
class WaitingCluster(FakeCluster):
    """Lists NodeClaims (the last Kubernetes read) only once the instance listing has begun."""

    instances_listing: threading.Event = field(default_factory=threading.Event)
    overlapped: bool = False

    def list_nodeclaims(self):  # type: ignore[no-untyped-def]
        self.overlapped = self.instances_listing.wait(timeout=10)
        return super().list_nodeclaims()


@dataclass
class SignallingCloud(FakeCloud):
    started: threading.Event = field(default_factory=threading.Event)

    def list_instances(self) -> list[Instance]:
        self.started.set()
        return super().list_instances()


def test_the_instance_listing_runs_while_the_cluster_is_listed() -> None:
    cloud = SignallingCloud()
    cluster = WaitingCluster(
        nodepools=[make_nodepool()], nodeclasses=[make_nodeclass()], instances_listing=cloud.started
    )
    cluster.pods = [make_pod("a")]
    out = reconcile(ports=Ports(cluster=cluster, cloud=cloud, cluster_name="test"), now=1000.0)
    assert cluster.overlapped  # sequential listing would call list_instances only after list_nodeclaims
    assert out.nodeclaims_launched == 1
