"""A NodeClaim gets one instance even when its launch is not recorded at once. A launch whose status write meets a
409 (the NodeClaim changed since the pass read it) reads the NodeClaim again and writes the launch once more, as
Kubernetes controllers do. A NodeClaim left unlaunched-looking (its pass died, or the write failed) is not launched
again while it is younger than EC2's eventual-consistency grace: the instance its pass launched may not be listed
yet, and a second launch would carry a new ClientToken, since the offerings have changed since."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, TypeVar

from reconcile_fakes import FakeCloud, FakeCluster, make_nodeclass, make_nodepool, make_pod

from nodesmith.core.errors import ConflictError, KubernetesError
from nodesmith.core.model import instance_id_of
from nodesmith.services.ports import Ports
from nodesmith.services.provisioning.reconcile import reconcile

ClusterT = TypeVar("ClusterT", bound=FakeCluster)

if TYPE_CHECKING:
    from nodesmith.core.api.nodeclaim import NodeClaim
    from nodesmith.core.ports import Instance
    from nodesmith.services.provisioning.outcome import ReconcileOutcome


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


@dataclass
class StatusLost(FakeCluster):
    """Fails every launch status write (an API server answering 500), as a pass ended before it would."""

    def update_nodeclaim_status(self, *, nodeclaim: NodeClaim) -> NodeClaim:
        raise KubernetesError(f"update nodeclaim {nodeclaim.name} status: 500", status=500)


def one_pending_pod(cluster_type: type[ClusterT]) -> ClusterT:
    """A cluster of ``cluster_type`` with one NodePool, its EC2NodeClass and one pending pod of 3 CPUs."""
    return cluster_type(nodepools=[make_nodepool()], nodeclasses=[make_nodeclass()], pods=[make_pod("a", cpu="3")])


def reconcile_at(cluster: FakeCluster, cloud: FakeCloud, now: float) -> ReconcileOutcome:
    """One reconcile pass over the fakes at ``now`` (epoch seconds)."""
    return reconcile(ports=Ports(cluster=cluster, cloud=cloud, cluster_name="test"), now=now)


def test_a_conflicting_launch_status_is_written_again_and_no_second_instance_is_launched() -> None:
    cluster = one_pending_pod(ConflictOnce)
    cloud = Unseen()

    first = reconcile_at(cluster, cloud, 1000.0)

    # the status write was refused once, then written on the NodeClaim as read again (its new label kept)
    (claim,) = cluster.nodeclaims.values()
    (instance,) = cloud.instances.values()
    assert cluster.refused == 1 and not first.errors
    assert instance_id_of(claim.status.provider_id) == instance.instance_id
    assert claim.metadata.labels["example.com/changed"] == "true"

    # so a pass that cannot list the instance yet launches nothing more for the NodeClaim
    cloud.hidden = True
    reconcile_at(cluster, cloud, 1002.0)
    assert len(cloud.instances) == 1


def test_a_nodeclaim_created_moments_ago_is_not_launched_again_while_ec2_may_not_show_its_instance() -> None:
    # Given a pass that launched a NodeClaim's instance but could not record it, and EC2 not listing it yet
    cluster = one_pending_pod(StatusLost)
    cloud = Unseen()
    reconcile_at(cluster, cloud, 1000.0)
    (claim,) = cluster.nodeclaims.values()
    assert not claim.status.provider_id and len(cloud.instances) == 1
    cloud.hidden = True

    # When the next pass comes 2 s later: the NodeClaim is left for EC2 to show its instance, and no other is made
    reconcile_at(cluster, cloud, 1002.0)
    assert len(cloud.instances) == 1 and list(cluster.nodeclaims) == [claim.name]

    # Once the instance shows, a pass adopts it rather than launching
    cloud.hidden = False
    reconcile_at(cluster, cloud, 1012.0)
    assert len(cloud.instances) == 1


def test_a_nodeclaim_never_launched_is_launched_once_the_grace_has_passed() -> None:
    # Given a NodeClaim whose pass died before CreateFleet (no instance carries its name)
    cluster = one_pending_pod(FakeCluster)
    cloud = FakeCloud()
    reconcile_at(cluster, cloud, 1000.0)
    (claim,) = cluster.nodeclaims.values()
    cloud.instances.clear()
    claim.status = type(claim.status)()

    # Then a pass 2 s later leaves it, and one 12 s later launches it
    reconcile_at(cluster, cloud, 1002.0)
    assert not cloud.instances
    reconcile_at(cluster, cloud, 1012.0)
    assert len(cloud.instances) == 1 and cluster.nodeclaims[claim.name].status.provider_id
