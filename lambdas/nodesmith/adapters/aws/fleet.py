"""CreateFleet ``instant`` for one NodeClaim: choose offerings, build the request, read the answer.

Follows Karpenter ``pkg/providers/instance/instance.go`` and ``types.go``:

* capacity type: ``reserved`` when reserved is allowed and some candidate has an available reserved offering
  (the reservations go through Karpenter's launch filters,
  :func:`~nodesmith.core.capacityreservations.select_reserved_for_launch`, and each override carries its
  reservation); else ``spot`` when spot is allowed and some candidate has an available spot offering no
  pricier than the cheapest on-demand one (when on-demand is allowed), else ``on-demand``
  (``getCapacityType`` after ``filterUnwantedSpot``);
* filters (``filter/filter.go``): exotic types (GPUs, accelerators, ``metal``) are dropped when any
  other type remains; spot offerings pricier than the cheapest on-demand offering are dropped when
  on-demand is allowed;
* the cheapest 60 types (by their cheapest usable offering, ``maxInstanceTypes``) become overrides:
  instance type x one subnet per allowed zone where the offering is available, each with
  ``ImageId``, ``AvailabilityZone`` and ``Priority`` = offering price (USD/hour);
* request: ``Type=instant``, ``TotalTargetCapacity=1``, ``DefaultTargetCapacityType``, spot
  ``price-capacity-optimized`` / on-demand ``lowest-price`` (``capacity-optimized-prioritized`` / ``prioritized``
  when a NodeOverlay priced the offerings), launch templates at ``$Latest`` (one per AMI and reservation), tags
  on instance, volume and fleet, and a ``ClientToken``; a reserved launch asks for ``on-demand`` (an ODCR, whose
  launch template targets it) or ``capacity-block``;
* answer: an instance -> success (capacity ``Errors`` for other overrides are still reported so the
  unavailable-offerings cache learns them); none -> :class:`InsufficientCapacityError` when every
  error is a capacity error (``pkg/errors/errors.go`` ``unfulfillableCapacityErrorCodes``), else
  :class:`LaunchError` with the first other code.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from nodesmith.core.capacityreservations import RESERVATION_TYPE_CAPACITY_BLOCK, select_reserved_for_launch
from nodesmith.core.errors import InsufficientCapacityError, LaunchError, UnavailableOffering
from nodesmith.core.instancetypes import EFA, HABANA_GAUDI, NEURON, NEURON_CORE
from nodesmith.core.model import (
    CAPACITY_TYPE_ON_DEMAND,
    CAPACITY_TYPE_RESERVED,
    CAPACITY_TYPE_SPOT,
    InstanceType,
    Offering,
)
from nodesmith.core.resources import GPU_AMD, GPU_NVIDIA

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping, Sequence

__all__ = [
    "CAPACITY_ERROR_CODES",
    "MAX_INSTANCE_TYPES",
    "FleetChoice",
    "FleetInstance",
    "Override",
    "build_create_fleet_request",
    "capacity_errors",
    "choose_offerings",
    "client_token",
    "read_create_fleet_response",
    "target_capacity_type",
]

MAX_INSTANCE_TYPES = 60
"""Karpenter ``instance.go`` ``maxInstanceTypes``: at most 60 types go into one CreateFleet."""

CAPACITY_ERROR_CODES = frozenset(
    {
        "InsufficientInstanceCapacity",
        "MaxSpotInstanceCountExceeded",
        "VcpuLimitExceeded",
        "UnfulfillableCapacity",
        "Unsupported",
        "InsufficientFreeAddressesInSubnet",
        "MaxFleetCountExceeded",
        "ReservationCapacityExceeded",
        "InsufficientCapacity",
        "AuthFailure.ServiceLinkedRoleCreationNotPermitted",
    }
)
"""Fleet error codes meaning "no capacity for this offering now" (Karpenter's unfulfillable codes,
plus the spot service-linked-role failure Karpenter also treats as capacity)."""

_EXOTIC_RESOURCES = (GPU_NVIDIA, GPU_AMD, NEURON, NEURON_CORE, HABANA_GAUDI, EFA)


@dataclass(frozen=True, slots=True)
class Override:
    """One CreateFleet override: a type in a zone's subnet with an AMI, at a price (USD/hour); a reserved one names
    its reservation (``reservation_id``, ``reservation_type`` ``default`` | ``capacity-block``, and whether it is an
    interruptible ODCR, ``reservation_interruptible``)."""

    instance_type: str
    zone: str
    subnet_id: str
    image_id: str
    price: float
    reservation_id: str = ""
    reservation_type: str = ""
    reservation_interruptible: bool = False

    @property
    def template_key(self) -> tuple[str, str]:
        """(AMI, reservation id): overrides sharing it share a launch template."""
        return (self.image_id, self.reservation_id)


@dataclass(frozen=True, slots=True)
class FleetChoice:
    """What to ask CreateFleet for: the capacity type and the overrides, cheapest first."""

    capacity_type: str
    overrides: tuple[Override, ...]


@dataclass(frozen=True, slots=True)
class FleetInstance:
    """The instance CreateFleet launched (into ``reservation_id`` for a reserved launch), and the capacity errors it
    reported for other overrides."""

    instance_id: str
    instance_type: str
    zone: str
    subnet_id: str
    image_id: str
    capacity_type: str
    capacity_errors: tuple[UnavailableOffering, ...] = ()
    reservation_id: str = ""
    reservation_type: str = ""
    reservation_interruptible: bool = False


def _exotic(it: InstanceType) -> bool:
    if any(it.capacity.get(r, 0) > 0 for r in _EXOTIC_RESOURCES):
        return True
    return it.labels.get("karpenter.k8s.aws/instance-size", "").endswith("metal")


def choose_offerings(
    *,
    instance_types: Sequence[InstanceType],
    capacity_types: frozenset[str],
    zones: frozenset[str],
    subnets: Mapping[str, str],
    image_for: Callable[[InstanceType], str | None],
    unavailable: Callable[[str, str, str], bool] = lambda _t, _z, _c: False,
    max_instance_types: int = MAX_INSTANCE_TYPES,
) -> FleetChoice | None:
    """Pick the capacity type and overrides for one launch, or None when nothing can be launched.

    ``subnets`` maps zone -> subnet id (the node class's best subnet per zone); ``image_for``
    returns the AMI id for a type (None: no compatible AMI); ``unavailable`` is the
    unavailable-offerings cache. Offerings must be available, in ``zones`` and in a zone with a
    subnet.
    """
    usable_zones = zones & frozenset(subnets)
    candidates: list[tuple[InstanceType, str, list[Offering]]] = []
    for it in instance_types:
        image = image_for(it)
        if image is None:
            continue
        offerings = [
            o
            for o in it.offerings
            if o.available
            and o.zone in usable_zones
            and o.capacity_type in capacity_types
            and not unavailable(it.name, o.zone, o.capacity_type)
        ]
        if offerings:
            candidates.append((it, image, offerings))
    reserved = _reserved_choice(candidates, subnets=subnets)  # reserved first, exotic (GPU blocks) included
    if reserved is not None:
        return reserved
    if any(not _exotic(it) for it, _, _ in candidates):  # exotic types only when nothing else fits
        candidates = [c for c in candidates if not _exotic(c[0])]
    candidates = [
        (it, image, kept)
        for it, image, offs in candidates
        if (kept := [o for o in offs if o.capacity_type != CAPACITY_TYPE_RESERVED])
    ]
    on_demand_prices = [
        o.price for _, _, offs in candidates for o in offs if o.capacity_type == CAPACITY_TYPE_ON_DEMAND
    ]
    cheapest_on_demand = min(on_demand_prices) if on_demand_prices else None
    # spot counts only where it is no pricier than on-demand (Karpenter filters the rest before getCapacityType):
    # once capacity errors took the cheap spot offerings, what spot is left must not keep on-demand from launching
    spot = [
        o
        for _, _, offs in candidates
        for o in offs
        if o.capacity_type == CAPACITY_TYPE_SPOT and (cheapest_on_demand is None or o.price <= cheapest_on_demand)
    ]
    capacity_type = CAPACITY_TYPE_SPOT if spot else CAPACITY_TYPE_ON_DEMAND
    ceiling = cheapest_on_demand if capacity_type == CAPACITY_TYPE_SPOT else None
    ranked: list[tuple[float, str, list[Override]]] = []
    for it, image, offerings in candidates:
        chosen = [o for o in offerings if o.capacity_type == capacity_type and (ceiling is None or o.price <= ceiling)]
        if not chosen:
            continue
        overrides = [
            Override(instance_type=it.name, zone=o.zone, subnet_id=subnets[o.zone], image_id=image, price=o.price)
            for o in sorted(chosen, key=lambda o: (o.price, o.zone))
        ]
        ranked.append((overrides[0].price, it.name, overrides))
    if not ranked:
        return None
    ranked.sort(key=lambda r: (r[0], r[1]))
    flat = tuple(o for _, _, overrides in ranked[:max_instance_types] for o in overrides)
    return FleetChoice(capacity_type=capacity_type, overrides=flat)


def _reserved_choice(
    candidates: Sequence[tuple[InstanceType, str, list[Offering]]], *, subnets: Mapping[str, str]
) -> FleetChoice | None:
    """The reserved launch when a candidate has a reserved offering (Karpenter launches reserved first)."""
    images = {it.name: image for it, image, _ in candidates}
    pairs = [(it.name, o) for it, _, offs in candidates for o in offs if o.capacity_type == CAPACITY_TYPE_RESERVED]
    picked = select_reserved_for_launch(pairs)
    if not picked:
        return None
    overrides = tuple(
        Override(
            instance_type=name,
            zone=o.zone,
            subnet_id=subnets[o.zone],
            image_id=images[name],
            price=o.price,
            reservation_id=o.reservation_id,
            reservation_type=o.reservation_type,
            reservation_interruptible=o.reservation_interruptible,
        )
        for name, o in picked
    )
    return FleetChoice(capacity_type=CAPACITY_TYPE_RESERVED, overrides=overrides)


def target_capacity_type(choice: FleetChoice) -> str:
    """CreateFleet's ``DefaultTargetCapacityType`` for ``choice``: ``capacity-block`` for a Capacity Block,
    ``on-demand`` for an ODCR (its launch template targets it), else the capacity type (``spot``, ``on-demand``)."""
    if choice.capacity_type != CAPACITY_TYPE_RESERVED:
        return choice.capacity_type
    if any(o.reservation_type == RESERVATION_TYPE_CAPACITY_BLOCK for o in choice.overrides):
        return RESERVATION_TYPE_CAPACITY_BLOCK
    return CAPACITY_TYPE_ON_DEMAND


def client_token(*, base: str, choice: FleetChoice) -> str:
    """A CreateFleet ``ClientToken`` (<= 64 ASCII chars): ``base`` plus a digest of the overrides.

    The same NodeClaim asking again with the same overrides gets EC2's idempotent answer (no second
    instance); a retry with different overrides (after capacity errors) is a new request rather
    than an ``IdempotentParameterMismatch``.
    """
    body = json.dumps([choice.capacity_type, [o.__repr__() for o in choice.overrides]])
    digest = hashlib.sha256(body.encode()).hexdigest()[:16]
    prefix = "".join(c for c in base if c.isascii() and (c.isalnum() or c in "-_."))[:47]
    return f"{prefix}-{digest}" if prefix else digest


def build_create_fleet_request(
    *,
    choice: FleetChoice,
    launch_templates: Mapping[tuple[str, str], str],
    tags: Mapping[str, str],
    token: str,
    context: str | None = None,
    prioritized: bool = False,
) -> dict[str, Any]:
    """The CreateFleet request for ``choice``.

    ``launch_templates`` maps :attr:`Override.template_key` (AMI, reservation id) -> launch template name; overrides
    are grouped under their template, in ``choice`` order. ``prioritized`` (a NodeOverlay priced the
    offerings) launches by the overrides' ``Priority`` (their overlaid price, lowest first) instead of EC2's
    prices: spot ``capacity-optimized-prioritized``, on-demand ``prioritized``
    (``[aws]:pkg/providers/instance/types.go``).
    """
    configs: dict[str, list[dict[str, Any]]] = {}
    for o in choice.overrides:
        name = launch_templates[o.template_key]
        configs.setdefault(name, []).append(
            {
                "InstanceType": o.instance_type,
                "SubnetId": o.subnet_id,
                "ImageId": o.image_id,
                "AvailabilityZone": o.zone,
                "Priority": o.price,
            }
        )
    tag_list = [{"Key": k, "Value": v} for k, v in sorted(tags.items())]
    request: dict[str, Any] = {
        "Type": "instant",
        "ClientToken": token,
        "TargetCapacitySpecification": {
            "TotalTargetCapacity": 1,
            "DefaultTargetCapacityType": target_capacity_type(choice),
        },
        "LaunchTemplateConfigs": [
            {"LaunchTemplateSpecification": {"LaunchTemplateName": name, "Version": "$Latest"}, "Overrides": overrides}
            for name, overrides in configs.items()
        ],
        "TagSpecifications": [{"ResourceType": r, "Tags": tag_list} for r in ("instance", "volume", "fleet")],
    }
    target = target_capacity_type(choice)
    if target == CAPACITY_TYPE_SPOT:
        strategy = "capacity-optimized-prioritized" if prioritized else "price-capacity-optimized"
        request["SpotOptions"] = {"AllocationStrategy": strategy}
    elif target == CAPACITY_TYPE_ON_DEMAND:
        request["OnDemandOptions"] = {"AllocationStrategy": "prioritized" if prioritized else "lowest-price"}
    if context:
        request["Context"] = context
    return request


def _error_offering(
    error: Mapping[str, Any], *, capacity_type: str, subnet_zones: Mapping[str, str]
) -> UnavailableOffering:
    overrides = (error.get("LaunchTemplateAndOverrides") or {}).get("Overrides") or {}
    zone = overrides.get("AvailabilityZone") or subnet_zones.get(overrides.get("SubnetId", ""), "")
    reserved = capacity_type == CAPACITY_TYPE_RESERVED  # EC2 says on-demand for a reservation's instances
    return UnavailableOffering(
        instance_type=str(overrides.get("InstanceType", "")),
        zone=str(zone),
        capacity_type=capacity_type if reserved else str(error.get("Lifecycle") or capacity_type),
        code=str(error.get("ErrorCode", "")),
    )


def capacity_errors(
    response: Mapping[str, Any], *, choice: FleetChoice, subnet_zones: Mapping[str, str]
) -> tuple[UnavailableOffering, ...]:
    """The (type, zone, capacity type, code) of every capacity error in a CreateFleet response."""
    return tuple(
        _error_offering(e, capacity_type=choice.capacity_type, subnet_zones=subnet_zones)
        for e in response.get("Errors") or []
        if e.get("ErrorCode") in CAPACITY_ERROR_CODES
    )


def read_create_fleet_response(
    response: Mapping[str, Any],
    *,
    choice: FleetChoice,
    subnet_zones: Mapping[str, str],
) -> FleetInstance:
    """The launched instance from a CreateFleet response.

    ``subnet_zones`` maps subnet id -> zone (to place errors that omit the zone).
    Raises ``InsufficientCapacityError`` (offerings = every capacity error) when nothing launched
    and all errors are capacity errors, ``LaunchError`` (code = first other error code) otherwise.
    """
    errors = list(response.get("Errors") or [])
    capacity = capacity_errors(response, choice=choice, subnet_zones=subnet_zones)
    for item in response.get("Instances") or []:
        ids = item.get("InstanceIds") or []
        if not ids:
            continue
        overrides = (item.get("LaunchTemplateAndOverrides") or {}).get("Overrides") or {}
        instance_type = str(item.get("InstanceType") or overrides.get("InstanceType", ""))
        subnet_id = str(overrides.get("SubnetId", ""))
        match = next(
            (o for o in choice.overrides if o.instance_type == instance_type and o.subnet_id == subnet_id), None
        )
        if match is None:
            match = next((o for o in choice.overrides if o.instance_type == instance_type), None)
        zone = str(overrides.get("AvailabilityZone") or subnet_zones.get(subnet_id) or (match.zone if match else ""))
        if choice.capacity_type == CAPACITY_TYPE_RESERVED:  # the reservation of the override that launched
            match = next((o for o in choice.overrides if o.instance_type == instance_type and o.zone == zone), match)
        reserved = choice.capacity_type == CAPACITY_TYPE_RESERVED and match is not None
        return FleetInstance(
            instance_id=str(ids[0]),
            instance_type=instance_type,
            zone=zone,
            subnet_id=subnet_id or (match.subnet_id if match else ""),
            image_id=str(overrides.get("ImageId") or (match.image_id if match else "")),
            capacity_type=CAPACITY_TYPE_RESERVED if reserved else str(item.get("Lifecycle") or choice.capacity_type),
            capacity_errors=capacity,
            reservation_id=match.reservation_id if reserved and match else "",
            reservation_type=match.reservation_type if reserved and match else "",
            reservation_interruptible=bool(reserved and match and match.reservation_interruptible),
        )
    if errors and len(capacity) == len(errors):
        codes = sorted({o.code for o in capacity})
        raise InsufficientCapacityError(
            f"CreateFleet launched nothing: {', '.join(codes)} for {len(capacity)} offering(s)", offerings=capacity
        )
    other = next((e for e in errors if e.get("ErrorCode") not in CAPACITY_ERROR_CODES), None)
    if other is None:
        raise LaunchError("CreateFleet returned no instance and no error", code="NoInstance")
    code = str(other.get("ErrorCode", ""))
    raise LaunchError(f"CreateFleet failed: {code}: {other.get('ErrorMessage', '')}", code=code)
