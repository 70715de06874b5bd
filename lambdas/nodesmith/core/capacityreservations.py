"""Capacity reservations as Karpenter's AWS provider uses them: reserved offerings, their price, launch choice, expiry.

Pure: the caller passes the reservations an EC2NodeClass selected (``DescribeCapacityReservations``, read by the
adapter) and the time (epoch seconds). Sources, in ``aws/karpenter-provider-aws``:

* ``pkg/providers/instancetype/offering/reserved_capacity_resolver.go``: one ``reserved`` offering per
  (instance type, selected reservation of that type), in the reservation's zone, labelled with
  ``karpenter.k8s.aws/capacity-reservation-id``, ``-type`` (``default`` | ``capacity-block``) and
  ``-interruptible`` (``"true"`` for an interruptible ODCR, else ``"false"``); available while the reservation can
  take an instance, is not ``expiring`` and its zone is one the node class launches into. Its price is the on-demand
  price / 10,000,000 (:data:`RESERVED_PRICE_DIVISOR`): next to free, so reserved capacity is preferred over spot and
  on-demand, yet types keep their relative order.
* ``pkg/apis/v1/ec2nodeclass_status.go``: a ``capacity-block`` reservation is ``expiring`` from 40 minutes before
  its end (:data:`CAPACITY_BLOCK_EXPIRATION_SECONDS`); EC2 starts reclaiming the block's instances 30 minutes before
  the end, and ``pkg/controllers/capacityreservation/expiration`` deletes (drains) every NodeClaim of an expiring
  reservation meanwhile.
* ``pkg/providers/instance/filter/filter.go``: before a reserved launch, one reservation-type partition is kept (the
  one with the cheapest offering; ties: default before capacity-block), a single capacity block at most (CreateFleet
  takes one), and one reservation per zone (the one with the most capacity).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Final, Literal

from nodesmith.core.model import CAPACITY_TYPE_ON_DEMAND, CAPACITY_TYPE_RESERVED, InstanceType, Offering

if TYPE_CHECKING:
    from collections.abc import Collection, Iterable, Mapping, Sequence

__all__ = [
    "CAPACITY_BLOCK_EXPIRATION_SECONDS",
    "LABEL_CAPACITY_RESERVATION_ID",
    "LABEL_CAPACITY_RESERVATION_INTERRUPTIBLE",
    "LABEL_CAPACITY_RESERVATION_TYPE",
    "RESERVATION_TYPE_CAPACITY_BLOCK",
    "RESERVATION_TYPE_DEFAULT",
    "RESERVED_PRICE_DIVISOR",
    "CapacityReservation",
    "expiring_reservation_ids",
    "reservation_labels",
    "reserved_offerings",
    "reserved_price",
    "select_reserved_for_launch",
    "with_reserved_offerings",
]

LABEL_CAPACITY_RESERVATION_ID: Final = "karpenter.k8s.aws/capacity-reservation-id"
LABEL_CAPACITY_RESERVATION_TYPE: Final = "karpenter.k8s.aws/capacity-reservation-type"
LABEL_CAPACITY_RESERVATION_INTERRUPTIBLE: Final = "karpenter.k8s.aws/capacity-reservation-interruptible"

RESERVATION_TYPE_DEFAULT: Final = "default"
RESERVATION_TYPE_CAPACITY_BLOCK: Final = "capacity-block"

RESERVED_PRICE_DIVISOR: Final = 10_000_000
"""A reserved offering costs the type's on-demand price divided by this (Karpenter's reserved offering price)."""

CAPACITY_BLOCK_EXPIRATION_SECONDS: Final = 40 * 60
"""A Capacity Block is ``expiring`` this long before its end (Karpenter ``capacityReservationExpirationPeriod``)."""

ReservationState = Literal["active", "expiring"]


@dataclass(frozen=True, slots=True)
class CapacityReservation:
    """One active capacity reservation an EC2NodeClass selected, as ``status.capacityReservations`` lists it.

    ``instance_type`` and ``zone`` are what it reserves; ``available_count`` the instances it can still take
    (EC2's ``AvailableInstanceCount``, lowered by launches and capacity errors until the next describe);
    ``reservation_type`` is ``default`` (an ODCR) or ``capacity-block``; ``end_time`` is epoch seconds, or None for
    an ODCR without an end date; ``instance_match_criteria`` is ``open`` or ``targeted``.
    """

    id: str
    instance_type: str
    zone: str
    owner_id: str = ""
    available_count: int = 0
    reservation_type: str = RESERVATION_TYPE_DEFAULT
    instance_match_criteria: str = "targeted"
    interruptible: bool = False
    end_time: float | None = None

    def state(self, *, now: float) -> ReservationState:
        """``expiring`` for a Capacity Block within :data:`CAPACITY_BLOCK_EXPIRATION_SECONDS` of its end (or past
        it), else ``active``; an ODCR is never ``expiring`` (Karpenter ``ec2nodeclass_status.go``)."""
        if (
            self.reservation_type == RESERVATION_TYPE_CAPACITY_BLOCK
            and self.end_time is not None
            and now >= self.end_time - CAPACITY_BLOCK_EXPIRATION_SECONDS
        ):
            return "expiring"
        return "active"


def reserved_price(on_demand_price: float) -> float:
    """USD/hour of a reserved offering: ``on_demand_price / RESERVED_PRICE_DIVISOR`` (0 when unknown or 0)."""
    return on_demand_price / RESERVED_PRICE_DIVISOR if on_demand_price > 0 else 0.0


def _on_demand_price(it: InstanceType, zone: str) -> float:
    prices = [o.price for o in it.offerings if o.capacity_type == CAPACITY_TYPE_ON_DEMAND]
    in_zone = [o.price for o in it.offerings if o.capacity_type == CAPACITY_TYPE_ON_DEMAND and o.zone == zone]
    return (in_zone or prices or [0.0])[0]


def reserved_offerings(
    it: InstanceType,
    reservations: Iterable[CapacityReservation],
    *,
    zones: Collection[str] | None,
    now: float,
    zone_ids: Mapping[str, str] | None = None,
) -> tuple[Offering, ...]:
    """The ``reserved`` offerings of ``it``: one per reservation of its type (see the module docstring).

    ``zones`` are the zones the node class launches into (None: any); ``zone_ids`` maps zone -> zone id (else the
    type's own offerings give it). An offering is available when the reservation can take an instance
    (``available_count > 0``), is ``active`` at ``now`` and its zone is allowed.
    """
    known_ids = {o.zone: o.zone_id for o in it.offerings if o.zone_id}
    out: list[Offering] = []
    for r in sorted(reservations, key=lambda r: r.id):
        if r.instance_type != it.name:
            continue
        out.append(
            Offering(
                zone=r.zone,
                capacity_type=CAPACITY_TYPE_RESERVED,
                price=reserved_price(_on_demand_price(it, r.zone)),
                available=r.available_count > 0 and r.state(now=now) == "active" and (zones is None or r.zone in zones),
                zone_id=(zone_ids or {}).get(r.zone, known_ids.get(r.zone, "")),
                reservation_id=r.id,
                reservation_type=r.reservation_type,
                reservation_interruptible=r.interruptible,
                reservation_capacity=max(0, r.available_count),
            )
        )
    return tuple(out)


def with_reserved_offerings(
    instance_types: Sequence[InstanceType],
    reservations: Collection[CapacityReservation],
    *,
    zones: Collection[str] | None,
    now: float,
) -> list[InstanceType]:
    """``instance_types`` with each reservation's offering added to its type (:func:`reserved_offerings`); types
    no reservation names are the same objects, and so is the list's order."""
    if not reservations:
        return list(instance_types)
    named = {r.instance_type for r in reservations}
    out: list[InstanceType] = []
    for it in instance_types:
        if it.name not in named:
            out.append(it)
            continue
        extra = reserved_offerings(it, reservations, zones=zones, now=now)
        kept = tuple(o for o in it.offerings if o.capacity_type != CAPACITY_TYPE_RESERVED)
        out.append(replace(it, offerings=kept + extra))
    return out


def reservation_labels(*, reservation_id: str, reservation_type: str, interruptible: bool) -> dict[str, str]:
    """The labels of a node launched into the capacity reservation ``reservation_id`` (none when it is empty: the
    node is not in a reservation): ``karpenter.k8s.aws/capacity-reservation-id``, ``-type`` (``reservation_type``,
    ``default`` when empty) and ``-interruptible`` (``"true"``/``"false"``), the reserved offering's labels
    (``[aws]:pkg/providers/instancetype/offering/reserved_capacity_resolver.go``)."""
    if not reservation_id:
        return {}
    return {
        LABEL_CAPACITY_RESERVATION_ID: reservation_id,
        LABEL_CAPACITY_RESERVATION_TYPE: reservation_type or RESERVATION_TYPE_DEFAULT,
        LABEL_CAPACITY_RESERVATION_INTERRUPTIBLE: "true" if interruptible else "false",
    }


_PARTITION_ORDER = {RESERVATION_TYPE_DEFAULT: 0, RESERVATION_TYPE_CAPACITY_BLOCK: 1}


def select_reserved_for_launch(candidates: Sequence[tuple[str, Offering]]) -> list[tuple[str, Offering]]:
    """The reserved (instance type name, offering) pairs one CreateFleet may target, from ``candidates``.

    Karpenter's filters, in order: keep the reservation-type partition holding the cheapest offering (ties:
    ``default`` before ``capacity-block``); among capacity blocks keep only the cheapest one; then one offering per
    zone, the one with the most ``reservation_capacity`` (ties: cheaper, then reservation id). The result is ordered
    cheapest first. Non-reserved candidates are ignored.
    """
    reserved = [(name, o) for name, o in candidates if o.capacity_type == CAPACITY_TYPE_RESERVED]
    if not reserved:
        return []
    cheapest = min(reserved, key=lambda c: (c[1].price, _PARTITION_ORDER.get(c[1].reservation_type, 2)))
    partition = cheapest[1].reservation_type
    kept = [c for c in reserved if c[1].reservation_type == partition]
    if partition == RESERVATION_TYPE_CAPACITY_BLOCK:
        kept = [min(kept, key=lambda c: (c[1].price, c[1].reservation_id))]
    per_zone: dict[str, tuple[str, Offering]] = {}
    for name, o in sorted(kept, key=lambda c: (-c[1].reservation_capacity, c[1].price, c[1].reservation_id)):
        per_zone.setdefault(o.zone, (name, o))
    return sorted(per_zone.values(), key=lambda c: (c[1].price, c[1].zone))


def expiring_reservation_ids(reservations: Iterable[CapacityReservation], *, now: float) -> frozenset[str]:
    """Ids of the reservations ``expiring`` at ``now`` (Capacity Blocks within 40 minutes of their end): their
    NodeClaims are drained and terminated before EC2 reclaims the instances."""
    return frozenset(r.id for r in reservations if r.state(now=now) == "expiring")
