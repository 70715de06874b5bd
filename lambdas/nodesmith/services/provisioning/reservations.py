"""Capacity reservations in the reconcile pass (feature gate ``ReservedCapacity``): EC2NodeClass status and the
drain of Capacity Blocks before they end.

* :func:`sync_nodeclass_status` writes each EC2NodeClass's ``status.capacityReservations`` from the reservations its
  ``capacityReservationSelectorTerms`` select, when they changed (Karpenter's node class controller,
  ``[aws]:pkg/controllers/nodeclass/capacityreservation.go``): id, instance type, zone, owner, match criteria,
  reservation type, ``state`` (``expiring`` for a Capacity Block within 40 minutes of its end) and ``endTime``.
* :func:`expire_capacity_blocks` requests the termination of every NodeClaim labelled with the id of an ``expiring``
  reservation, as Karpenter's ``capacityreservation.expiration`` controller deletes them
  (``[aws]:pkg/controllers/capacityreservation/expiration/controller.go``): the reservations are described by the
  ids on the NodeClaims, the drain starts 40 minutes before the block ends, and its deadline is when EC2 starts
  reclaiming the block's instances, 30 minutes before the end (:data:`EC2_RECLAIM_LEAD_SECONDS`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final

from nodesmith.core.capacityreservations import LABEL_CAPACITY_RESERVATION_ID, CapacityReservation
from nodesmith.core.errors import KubernetesError, LaunchError, NodeClassNotReadyError
from nodesmith.services.provisioning.capacity import to_rfc3339
from nodesmith.services.termination.requests import request_termination

if TYPE_CHECKING:
    from collections.abc import Sequence

    from nodesmith.core.api.ec2nodeclass import EC2NodeClass
    from nodesmith.core.api.nodeclaim import NodeClaim
    from nodesmith.core.ports import CapacityReservations
    from nodesmith.services.ports import Ports

__all__ = [
    "EC2_RECLAIM_LEAD_SECONDS",
    "REASON_CAPACITY_BLOCK_EXPIRING",
    "Expiry",
    "expire_capacity_blocks",
    "reservation_status",
    "sync_nodeclass_status",
]

EC2_RECLAIM_LEAD_SECONDS: Final = 30 * 60
"""EC2 begins terminating a Capacity Block's instances this long before the block ends (EC2 User Guide, Capacity
Blocks for ML; 60 minutes for UltraServers)."""

REASON_CAPACITY_BLOCK_EXPIRING: Final = "CapacityBlockExpiring"
"""The termination reason of a NodeClaim drained because its Capacity Block ends."""


def reservation_status(reservation: CapacityReservation, *, now: float) -> dict[str, Any]:
    """One ``status.capacityReservations`` entry (Karpenter JSON) for ``reservation`` at ``now`` (epoch seconds)."""
    entry: dict[str, Any] = {
        "availabilityZone": reservation.zone,
        "id": reservation.id,
        "instanceMatchCriteria": reservation.instance_match_criteria,
        "instanceType": reservation.instance_type,
        "interruptible": reservation.interruptible,
        "ownerID": reservation.owner_id,
        "reservationType": reservation.reservation_type,
        "state": reservation.state(now=now),
    }
    if reservation.end_time is not None:
        entry["endTime"] = to_rfc3339(reservation.end_time)
    return entry


def _current_status(nodeclass: EC2NodeClass) -> list[dict[str, Any]]:
    if nodeclass.status is None:
        return []
    return [r.model_dump(by_alias=True, exclude_none=True, mode="json") for r in nodeclass.status.capacity_reservations]


def sync_nodeclass_status(
    *, ports: Ports, reservations: CapacityReservations, nodeclasses: Sequence[EC2NodeClass], now: float
) -> tuple[dict[str, EC2NodeClass], list[str]]:
    """Write ``status.capacityReservations`` of each node class in ``nodeclasses`` whose selected reservations
    changed (a node class without terms and without entries is left alone). Returns the classes written, as
    written, by name, and the errors; never raises for one node class."""
    written: dict[str, EC2NodeClass] = {}
    errors: list[str] = []
    for nodeclass in nodeclasses:
        current = _current_status(nodeclass)
        if not nodeclass.spec.capacity_reservation_selector_terms and not current:
            continue
        try:
            found = reservations.capacity_reservations(nodeclass=nodeclass)
        except NodeClassNotReadyError as exc:
            errors.append(f"capacity reservations of EC2NodeClass {nodeclass.name}: {exc}")
            continue
        wanted = [reservation_status(r, now=now) for r in found]
        if wanted == current:
            continue
        try:
            written[nodeclass.name] = ports.cluster.patch_ec2nodeclass_status(
                name=nodeclass.name, status={"capacityReservations": wanted}
            )
        except KubernetesError as exc:
            errors.append(f"write status of EC2NodeClass {nodeclass.name}: {exc}")
    return written, errors


@dataclass(slots=True)
class Expiry:
    """What :func:`expire_capacity_blocks` did: the NodeClaims whose termination it requested, and errors."""

    requested: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)


def expire_capacity_blocks(
    *, ports: Ports, reservations: CapacityReservations, nodeclaims: Sequence[NodeClaim], now: float
) -> Expiry:
    """Request the termination of the NodeClaims of expiring Capacity Blocks (see the module docstring); NodeClaims
    already deleting are left to their termination. Requests go to ``ports.queue`` when there is one."""
    out = Expiry()
    labelled = [
        nc
        for nc in nodeclaims
        if nc.metadata.labels.get(LABEL_CAPACITY_RESERVATION_ID) and nc.metadata.deletion_timestamp is None
    ]
    if not labelled:
        return out
    try:
        found = reservations.describe_capacity_reservations(
            ids=sorted({nc.metadata.labels[LABEL_CAPACITY_RESERVATION_ID] for nc in labelled})
        )
    except LaunchError as exc:
        out.errors.append(f"describe capacity reservations of NodeClaims: {exc}")
        return out
    ending = {r.id: r for r in found if r.state(now=now) == "expiring"}
    requests = []
    for nc in labelled:
        block = ending.get(nc.metadata.labels[LABEL_CAPACITY_RESERVATION_ID])
        if block is None or block.end_time is None:
            continue
        try:
            requests.append(
                request_termination(
                    cluster=ports.cluster,
                    nodeclaim=nc,
                    reason=REASON_CAPACITY_BLOCK_EXPIRING,
                    now=now,
                    deadline=max(now, block.end_time - EC2_RECLAIM_LEAD_SECONDS),
                )
            )
        except KubernetesError as exc:
            out.errors.append(f"request termination of NodeClaim {nc.name} (capacity block {block.id} ends): {exc}")
            continue
        out.requested.append(nc.name)
    if requests and ports.queue is not None:
        out.errors.extend(ports.queue.send(requests=requests))
    return out
