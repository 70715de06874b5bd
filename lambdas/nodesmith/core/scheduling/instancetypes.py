"""Instance types as the scheduler indexes them.

An instance type's requirements are its well-known labels plus ``topology.kubernetes.io/zone`` and
``karpenter.sh/capacity-type`` over its *available* offerings (``[aws]:pkg/providers/instancetype/
types.go computeRequirements``; the fake provider in ``[core]:pkg/cloudprovider/fake`` does the
same). An offering is usable for a set of requirements when its zone, capacity type and zone id
are allowed (``Offerings.Available().Compatible``). ``minValues``: the kept types must cover at
least that many distinct values of the key (``InstanceTypes.SatisfiesMinValues``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from nodesmith.core.capacityreservations import (
    LABEL_CAPACITY_RESERVATION_ID,
    LABEL_CAPACITY_RESERVATION_INTERRUPTIBLE,
    LABEL_CAPACITY_RESERVATION_TYPE,
)
from nodesmith.core.requirements import (
    LABEL_CAPACITY_TYPE,
    LABEL_ZONE,
    LABEL_ZONE_ID,
    Requirement,
    Requirements,
)
from nodesmith.core.tenancy import TENANCIES

if TYPE_CHECKING:
    from collections.abc import Iterable, Sequence

    from nodesmith.core.model import InstanceType, Offering
    from nodesmith.core.resources import Resources

__all__ = [
    "ABSENT_MEANS_DOES_NOT_EXIST",
    "NODES",
    "OFFERING_ONLY_KEYS",
    "OfferingFilter",
    "TypeInfo",
    "cheapest_offering",
    "has_offering",
    "min_values_shortfall",
    "offering_allowed",
    "type_info",
]

ABSENT_MEANS_DOES_NOT_EXIST: frozenset[str] = frozenset(
    {
        "node.kubernetes.io/windows-build",
        *(
            "karpenter.k8s.aws/" + suffix
            for suffix in (
                "instance-cpu-manufacturer",
                "instance-cpu-sustained-clock-speed-mhz",
                "instance-ebs-bandwidth",
                "instance-network-bandwidth",
                "instance-category",
                "instance-capability-flex",
                "instance-family",
                "instance-generation",
                "instance-local-nvme",
                "instance-size",
                "instance-gpu-name",
                "instance-gpu-manufacturer",
                "instance-gpu-count",
                "instance-gpu-memory",
                "instance-accelerator-name",
                "instance-accelerator-manufacturer",
                "instance-accelerator-count",
            )
        ),
    }
)
"""Instance labels the AWS provider declares ``DoesNotExist`` on a type that lacks them
(``[aws]:pkg/providers/instancetype/types.go computeRequirements``), so ``instance-gpu-count Exists``
selects GPU types only."""

_ABSENT = tuple(Requirement(k, complement=False) for k in sorted(ABSENT_MEANS_DOES_NOT_EXIST))

OFFERING_ONLY_KEYS: frozenset[str] = frozenset(
    {LABEL_CAPACITY_RESERVATION_ID, LABEL_CAPACITY_RESERVATION_TYPE, LABEL_CAPACITY_RESERVATION_INTERRUPTIBLE}
)
"""Labels only some offerings of a type carry (reserved ones): they narrow offerings, not instance types."""

NODES = "nodes"
"""Pseudo-resource counted against NodePool ``limits.nodes``: every instance has ``nodes: 1``."""


class TypeInfo:
    """One catalogue entry: the :class:`InstanceType`, its requirements, allocatable, capacity, offerings.

    ``allocatable`` = capacity - overhead (cpu millicores, memory bytes, pods, ...); ``capacity``
    includes ``nodes: 1`` for NodePool limits; ``offerings`` are the available ones only.
    """

    __slots__ = ("allocatable", "capacity", "it", "name", "offerings", "requirements")

    def __init__(self, it: InstanceType) -> None:
        self.it = it
        self.name = it.name
        self.offerings: tuple[Offering, ...] = tuple(o for o in it.offerings if o.available)
        reqs = Requirements.from_labels(it.labels)
        reqs.add(*(r for r in _ABSENT if r.key not in it.labels))
        reqs.add(TENANCIES)  # any type can run on dedicated hardware (Karpenter's offering requirement)
        zones = frozenset(o.zone for o in self.offerings)
        reqs.add(Requirement(LABEL_ZONE, complement=False, values=zones))
        reqs.add(
            Requirement(
                LABEL_CAPACITY_TYPE, complement=False, values=frozenset(o.capacity_type for o in self.offerings)
            )
        )
        zone_ids = frozenset(o.zone_id for o in self.offerings if o.zone_id)
        if zone_ids:
            reqs.add(Requirement(LABEL_ZONE_ID, complement=False, values=zone_ids))
        self.requirements = reqs
        self.allocatable: Resources = it.allocatable
        capacity = dict(it.capacity)
        capacity[NODES] = 1
        self.capacity: Resources = capacity

    def __repr__(self) -> str:
        return f"TypeInfo({self.name})"


_INFO_CACHE: dict[int, TypeInfo] = {}
_INFO_CACHE_MAX = 16_384


def type_info(it: InstanceType) -> TypeInfo:
    """``TypeInfo(it)``, built once per :class:`InstanceType` object and reused while it is passed again.

    Building the requirements of every catalogue entry was most of a warm solve (about 1 400 types,
    each from its labels); a warm reconcile container passes the same catalogue objects again (the
    EC2 catalogue caches its built lists), so later solves reuse them. Keyed by identity: the cached
    entry keeps ``it`` alive, so its id cannot be reused meanwhile. TypeInfo is never mutated after
    construction, so sharing it between solves is safe. The cache is dropped whole when it grows past
    ``_INFO_CACHE_MAX`` entries (catalogues replaced by new objects).
    """
    info = _INFO_CACHE.get(id(it))
    if info is not None and info.it is it:
        return info
    info = TypeInfo(it)
    if len(_INFO_CACHE) >= _INFO_CACHE_MAX:
        _INFO_CACHE.clear()
    _INFO_CACHE[id(it)] = info
    return info


class OfferingFilter:
    """The zone, capacity-type, zone-id and capacity-reservation requirements of a requirement set, for testing
    offerings fast.

    ``karpenter.k8s.aws/capacity-reservation-id``, ``-type`` and ``-interruptible`` are labels of reserved offerings
    only (``[aws]:pkg/providers/instancetype/offering/reserved_capacity_resolver.go``; the on-demand and spot
    offerings of ``base_resolver.go`` require them not to exist): an offering without a reservation passes such a
    requirement only when it is negative (``NotIn``, ``DoesNotExist``).
    """

    __slots__ = (
        "capacity_type",
        "key",
        "reservation_id",
        "reservation_interruptible",
        "reservation_type",
        "zone",
        "zone_id",
    )

    def __init__(self, reqs: Requirements) -> None:
        self.zone = reqs.get(LABEL_ZONE) if reqs.has(LABEL_ZONE) else None
        self.capacity_type = reqs.get(LABEL_CAPACITY_TYPE) if reqs.has(LABEL_CAPACITY_TYPE) else None
        self.zone_id = reqs.get(LABEL_ZONE_ID) if reqs.has(LABEL_ZONE_ID) else None
        rid, rtype, rint = (
            LABEL_CAPACITY_RESERVATION_ID,
            LABEL_CAPACITY_RESERVATION_TYPE,
            LABEL_CAPACITY_RESERVATION_INTERRUPTIBLE,
        )
        self.reservation_id = reqs.get(rid) if reqs.has(rid) else None
        self.reservation_type = reqs.get(rtype) if reqs.has(rtype) else None
        self.reservation_interruptible = reqs.get(rint) if reqs.has(rint) else None
        self.key = (
            self.zone,
            self.capacity_type,
            self.zone_id,
            self.reservation_id,
            self.reservation_type,
            self.reservation_interruptible,
        )

    def allows(self, o: Offering) -> bool:
        """True when the offering's zone, capacity type, zone id and reservation are allowed (undefined keys allow
        all)."""
        if self.zone is not None and not self.zone.has(o.zone):
            return False
        if self.capacity_type is not None and not self.capacity_type.has(o.capacity_type):
            return False
        if o.zone_id and self.zone_id is not None and not self.zone_id.has(o.zone_id):
            return False
        if self.reservation_id is None and self.reservation_type is None and self.reservation_interruptible is None:
            return True
        reserved = bool(o.reservation_id)
        interruptible = ("true" if o.reservation_interruptible else "false") if reserved else ""
        for req, value in (
            (self.reservation_id, o.reservation_id),
            (self.reservation_type, o.reservation_type),
            (self.reservation_interruptible, interruptible),
        ):
            if req is not None and not (req.has(value) if value else req.is_negative()):
                return False
        return True


def offering_allowed(offering: Offering, reqs: Requirements) -> bool:
    """True when the offering's zone, capacity type and zone id are allowed by ``reqs`` (undefined keys allow all)."""
    return OfferingFilter(reqs).allows(offering)


def has_offering(t: TypeInfo, reqs: Requirements | OfferingFilter) -> bool:
    """True when the type has an available offering allowed by ``reqs``."""
    f = reqs if isinstance(reqs, OfferingFilter) else OfferingFilter(reqs)
    return any(f.allows(o) for o in t.offerings)


def cheapest_offering(t: TypeInfo, reqs: Requirements | OfferingFilter) -> Offering | None:
    """The cheapest available offering allowed by ``reqs`` (ties: zone, then capacity type), or None."""
    f = reqs if isinstance(reqs, OfferingFilter) else OfferingFilter(reqs)
    best: Offering | None = None
    for o in t.offerings:
        if not f.allows(o):
            continue
        if best is None or (o.price, o.zone, o.capacity_type) < (best.price, best.zone, best.capacity_type):
            best = o
    return best


def min_values_shortfall(types: Iterable[TypeInfo], reqs: Requirements) -> tuple[str, int, int] | None:
    """The first requirement (by key) whose ``minValues`` the types do not cover: ``(key, have, need)``; else None."""
    wanted = {r.key: r.min_values for r in reqs.values() if r.min_values is not None}
    if not wanted:
        return None
    seen: dict[str, set[str]] = {k: set() for k in wanted}
    type_list: Sequence[TypeInfo] = list(types)
    for t in type_list:
        for key, values in seen.items():
            if t.requirements.has(key):
                req = t.requirements.get(key)
                if not req.complement:
                    values.update(req.values)
    for key in sorted(wanted):
        need = wanted[key] or 0
        if len(seen[key]) < need:
            return (key, len(seen[key]), need)
    return None
