"""A launch whose status write meets a 409 (the NodeClaim changed since the pass read it) reads the NodeClaim
again and writes the launch once more, as Kubernetes controllers do. Left unrecorded, the instance could only be
adopted by a later pass that sees it, and a pass that cannot yet (EC2's eventual consistency) launched a second
instance for the NodeClaim."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from reconcile_fakes import FakeCloud, FakeCluster, make_nodeclass, make_nodepool, make_pod

from nodesmith.core.errors import ConflictError
from nodesmith.core.model import instance_id_of
from nodesmith.services.ports import Ports
from nodesmith.services.provisioning.reconcile import reconcile

if TYPE_CHECKING:
    from nodesmith.core.api.nodeclaim import NodeClaim
    from nodesmith.core.ports import Instance


@dataclass
class ConflictOnce(FakeCluster):
    """Refuses the first status write of each NodeClaim with a 409, after a label was added to it meanwhile."""

    refused: int = 0

    def update_nodeclaim_status(self, *, nodeclaim: NodeClaim) -> NodeClaim:
        stored = self.nodeclaims[nodeclaim.name]
        if "example.com/changed" not in stored.metadata.labels:
            stored.metadata.labels["example.com/changed"] = "true"
            self.refused += 1
            raise ConflictError(f"nodeclaim {nodeclaim.name}: the object has been modified", status=409)
        return super().update_nodeclaim_status(nodeclaim=nodeclaim)


@dataclass
class Unseen(FakeCloud):
    """EC2 that does not list its instances yet (eventual consistency)."""

    hidden: bool = False

    def list_instances(self) -> list[Instance]:
        return [] if self.hidden else super().list_instances()


def test_a_conflicting_launch_status_is_written_again_and_no_second_instance_is_launched() -> None:
    cluster = ConflictOnce(nodepools=[make_nodepool()], nodeclasses=[make_nodeclass()])
    cloud = Unseen()
    cluster.pods = [make_pod("a", cpu="3")]

    first = reconcile(ports=Ports(cluster=cluster, cloud=cloud, cluster_name="test"), now=1000.0)

    # the status write was refused once, then written on the NodeClaim as read again (its new label kept)
    (claim,) = cluster.nodeclaims.values()
    (instance,) = cloud.instances.values()
    assert cluster.refused == 1 and not first.errors
    assert instance_id_of(claim.status.provider_id) == instance.instance_id
    assert claim.metadata.labels["example.com/changed"] == "true"

    # so a pass that cannot list the instance yet launches nothing more for the NodeClaim
    cloud.hidden = True
    reconcile(ports=Ports(cluster=cluster, cloud=cloud, cluster_name="test"), now=1002.0)
    assert len(cloud.instances) == 1
