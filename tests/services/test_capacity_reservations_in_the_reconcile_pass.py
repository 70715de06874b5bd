"""The reconcile pass with capacity reservations (gate ``ReservedCapacity``): it writes an EC2NodeClass's
``status.capacityReservations`` when the selected reservations change, and requests the termination of the
NodeClaims of a Capacity Block within 40 minutes of its end, with a deadline 30 minutes before the end (when EC2
starts reclaiming), leaving other NodeClaims alone; without the reservations port nothing of it happens."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from reconcile_fakes import FakeCloud, FakeCluster, FakeQueue, make_nodeclass

from nodesmith.core.api.ec2nodeclass import EC2NodeClass
from nodesmith.core.api.nodeclaim import NodeClaim
from nodesmith.core.capacityreservations import CapacityReservation
from nodesmith.core.ports import Instance
from nodesmith.core.termination import TERMINATION_FINALIZER, TERMINATION_REASON_ANNOTATION
from nodesmith.services.ports import Ports
from nodesmith.services.provisioning.reconcile import reconcile
from nodesmith.services.provisioning.reservations import REASON_CAPACITY_BLOCK_EXPIRING

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

NOW = 1_800_000_000.0


@dataclass
class StatusCluster(FakeCluster):
    statuses: dict[str, list[Mapping[str, Any]]] = field(default_factory=dict)

    def patch_ec2nodeclass_status(self, *, name: str, status: Mapping[str, Any]) -> EC2NodeClass:
        self.statuses.setdefault(name, []).append(dict(status))
        return super().patch_ec2nodeclass_status(name=name, status=status)


@dataclass
class Reservations:
    selected: list[CapacityReservation]
    described: list[list[str]] = field(default_factory=list)

    def capacity_reservations(self, *, nodeclass: EC2NodeClass) -> list[CapacityReservation]:
        return list(self.selected)

    def describe_capacity_reservations(self, *, ids: Sequence[str]) -> list[CapacityReservation]:
        self.described.append(list(ids))
        return [r for r in self.selected if r.id in ids]


def _block(rid: str, *, minutes_left: float) -> CapacityReservation:
    return CapacityReservation(
        id=rid, instance_type="m5.large", zone="us-east-1a", owner_id="123456789012", available_count=0,
        reservation_type="capacity-block", end_time=NOW + minutes_left * 60,
    )  # fmt: skip


def _instance_id(name: str) -> str:
    return "i-" + name.encode().hex()[:16].ljust(16, "0")


def _claim(name: str, reservation: str | None) -> NodeClaim:
    labels = {"karpenter.sh/nodepool": "default", "karpenter.sh/capacity-type": "reserved" if reservation else "spot"}
    if reservation:
        labels["karpenter.k8s.aws/capacity-reservation-id"] = reservation
    return NodeClaim.model_validate({
        "apiVersion": "karpenter.sh/v1", "kind": "NodeClaim",
        "metadata": {"name": name, "labels": labels, "finalizers": [TERMINATION_FINALIZER]},
        "spec": {"nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
                 "requirements": []},
        "status": {"providerID": f"aws:///us-east-1a/{_instance_id(name)}"},
    })  # fmt: skip


def _nodeclass() -> EC2NodeClass:
    doc = make_nodeclass().model_dump(by_alias=True, exclude_none=True, mode="json")
    doc["spec"]["capacityReservationSelectorTerms"] = [{"tags": {"team": "ml"}}]
    return EC2NodeClass.model_validate(doc)


def _world(reservations: Reservations | None) -> tuple[StatusCluster, FakeQueue, Ports]:
    cluster = StatusCluster(now=NOW, nodeclasses=[_nodeclass()])
    for name, rid in (("ending", "cr-0end"), ("later", "cr-0later"), ("plain", None)):
        cluster.nodeclaims[name] = _claim(name, rid)
    cloud = FakeCloud(now=NOW)
    for name, claim in cluster.nodeclaims.items():
        cloud.instances[_instance_id(name)] = Instance(
            instance_id=_instance_id(name), instance_type="m5.large", zone="us-east-1a",
            capacity_type=claim.metadata.labels["karpenter.sh/capacity-type"], state="running", launch_time=NOW - 600,
            image_id="ami-1", tags={"karpenter.sh/nodeclaim": name, "karpenter.sh/nodepool": "default"},
        )  # fmt: skip
    queue = FakeQueue()
    ports = Ports(cluster=cluster, cloud=cloud, cluster_name="test", queue=queue, reservations=reservations)
    return cluster, queue, ports


def test_the_nodeclaims_of_an_expiring_block_are_drained_with_ec2s_reclaim_as_deadline() -> None:
    reservations = Reservations([_block("cr-0end", minutes_left=39), _block("cr-0later", minutes_left=41)])
    cluster, queue, ports = _world(reservations)

    out = reconcile(ports=ports, now=NOW)

    assert cluster.deleting() == ["ending"]
    assert queue.nodeclaims() == ["ending"] and "ending" in out.terminations_requested
    annotations = cluster.nodeclaims["ending"].metadata.annotations
    assert annotations[TERMINATION_REASON_ANNOTATION] == REASON_CAPACITY_BLOCK_EXPIRING
    assert reservations.described == [["cr-0end", "cr-0later"]]
    (status,) = cluster.statuses["default"]
    assert [(s["id"], s["reservationType"], s["state"]) for s in status["capacityReservations"]] == [
        ("cr-0end", "capacity-block", "expiring"),
        ("cr-0later", "capacity-block", "active"),
    ]
    assert status["capacityReservations"][0]["endTime"] == "2027-01-15T08:39:00Z"


def test_the_status_is_written_only_when_it_changes() -> None:
    reservations = Reservations([_block("cr-0later", minutes_left=120)])
    cluster, _, ports = _world(reservations)
    reconcile(ports=ports, now=NOW)
    (written,) = cluster.statuses["default"]
    doc = cluster.nodeclasses[0].model_dump(by_alias=True, exclude_none=True, mode="json")
    doc["status"] = dict(written)
    cluster.nodeclasses = [EC2NodeClass.model_validate(doc)]

    reconcile(ports=ports, now=NOW + 60)

    assert len(cluster.statuses["default"]) == 1
    assert cluster.deleting() == []


def test_without_the_reservations_port_nothing_is_described_or_drained() -> None:
    cluster, queue, ports = _world(None)
    reconcile(ports=ports, now=NOW)
    assert cluster.deleting() == [] and queue.nodeclaims() == [] and cluster.statuses == {}
