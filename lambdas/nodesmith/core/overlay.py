"""NodeOverlays applied to each NodePool's instance types: offering prices and extended-resource capacity.

Pure. :func:`apply_overlays` takes the NodeOverlays, the NodePools and each NodePool's instance types
(its EC2NodeClass catalogue) and returns each NodePool's types as scheduling should see them, with a
verdict per overlay. It follows Karpenter's NodeOverlay controller and store (``[core]:
pkg/controllers/nodeoverlay/controller.go``, ``store.go``; ``[core]:pkg/cloudprovider/types.go``
``AdjustedPrice``; docs ``website/content/en/preview/concepts/nodeoverlays.md``):

* Overlays are evaluated in Karpenter's ``OrderByWeight``: ``weight`` descending (unset is 0), then
  name descending.
* An overlay selects an instance type of a NodePool when the type's requirements (its labels, the
  zones and capacity types of its offerings, ``karpenter.sh/nodepool=<pool>`` and the pool's template
  labels) are compatible with the overlay's requirements; of that type, the offerings whose zone,
  zone id and capacity type intersect the requirements are the ones repriced. A type none of whose
  offerings match is left alone.
* Price: the first overlay to price an offering (the highest precedence) sets it; ``price`` replaces
  the offering's USD/hour, ``priceAdjustment`` ``+N``/``-N`` adds, ``+N%``/``-N%`` scales, and the
  result is never below 0.
* Capacity: per resource, the highest-precedence overlay's quantity replaces the type's; lower ones
  only add resources not yet set.
* Conflict: an overlay whose weight equals the lowest weight that already priced one of the same
  offerings, or already set one of the same resources of the same type, conflicts. For resources, every
  overlay of that lowest weight counts (Karpenter's store remembers only the last one's resources, so a
  third equal-weight overlay repeating the first one's resource would slip through there). It is reported
  (``ValidationSucceeded=False``, reason ``Conflict``, "conflict with another overlay") and applied
  nowhere: an overlay is checked against every NodePool before any of its changes is kept.
* An overlay failing Karpenter's runtime validation (:meth:`~nodesmith.core.api.nodeoverlay.NodeOverlay.
  runtime_errors`, or requirements that cannot be built) is reported with reason ``RuntimeValidation`` and
  applied nowhere.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from decimal import Decimal
from typing import TYPE_CHECKING, Final

from nodesmith.core.api.common import Condition
from nodesmith.core.api.nodeoverlay import CONDITION_VALIDATION_SUCCEEDED
from nodesmith.core.labels import LABEL_CAPACITY_TYPE, LABEL_NODEPOOL, LABEL_ZONE, LABEL_ZONE_ID
from nodesmith.core.requirement import Requirement, RequirementError
from nodesmith.core.requirements import Requirements
from nodesmith.core.resources import QuantityError, parse_quantity
from nodesmith.core.timestamps import to_rfc3339

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

    from nodesmith.core.api.nodeoverlay import NodeOverlay
    from nodesmith.core.api.nodepool import NodePool
    from nodesmith.core.model import InstanceType, Offering

__all__ = [
    "REASON_CONFLICT",
    "REASON_RUNTIME_VALIDATION",
    "OverlayResult",
    "OverlayVerdict",
    "adjusted_price",
    "apply_overlays",
    "order_by_weight",
    "status_conditions",
]

REASON_CONFLICT: Final = "Conflict"
"""``ValidationSucceeded=False`` reason of an overlay that conflicts with an equal-weight one."""
REASON_RUNTIME_VALIDATION: Final = "RuntimeValidation"
"""``ValidationSucceeded=False`` reason of an overlay whose spec fails runtime validation."""
CONFLICT_MESSAGE: Final = "conflict with another overlay"


@dataclass(frozen=True, slots=True)
class OverlayVerdict:
    """What evaluation concluded about one overlay: ``valid`` (its ``ValidationSucceeded`` status), and when
    not, Karpenter's ``reason`` (:data:`REASON_CONFLICT`, :data:`REASON_RUNTIME_VALIDATION`) and ``message``.
    ``conflicts_with`` names the overlays already holding what it conflicted on."""

    name: str
    valid: bool
    reason: str = ""
    message: str = ""
    conflicts_with: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class OverlayResult:
    """Each NodePool's instance types with the overlays applied, and the verdict of every overlay.

    ``instance_types`` maps a NodePool name to its types in the given order (a pool no overlay touches
    keeps the very sequence it was given). ``price_overlays`` / ``capacity_overlays`` map
    ``(nodepool, instance type)`` to the overlays that set its offerings' prices / its capacity, in
    precedence order. ``verdicts`` maps each overlay name to its :class:`OverlayVerdict`.
    """

    instance_types: Mapping[str, Sequence[InstanceType]]
    verdicts: Mapping[str, OverlayVerdict]
    price_overlays: Mapping[tuple[str, str], tuple[str, ...]] = field(default_factory=dict)
    capacity_overlays: Mapping[tuple[str, str], tuple[str, ...]] = field(default_factory=dict)

    @property
    def conflicts(self) -> list[OverlayVerdict]:
        """The overlays reported False (conflict or runtime validation), by name."""
        return [v for _, v in sorted(self.verdicts.items()) if not v.valid]

    def overlays_of(self, nodepool: str, instance_type: str) -> tuple[str, ...]:
        """The overlays that changed ``instance_type`` in ``nodepool`` (price first, then capacity), no repeats."""
        names = [
            *self.price_overlays.get((nodepool, instance_type), ()),
            *self.capacity_overlays.get((nodepool, instance_type), ()),
        ]
        return tuple(dict.fromkeys(names))


def order_by_weight(overlays: Sequence[NodeOverlay]) -> list[NodeOverlay]:
    """Karpenter's ``OrderByWeight``: heavier first (unset weight is 0), equal weights by name descending."""
    by_name = sorted(overlays, key=lambda o: o.name, reverse=True)
    return sorted(by_name, key=lambda o: -o.weight_or_zero)  # stable: equal weights keep name descending


def adjusted_price(price: float, *, overlay_price: str | None, adjustment: str | None) -> float:
    """The offering price (USD/hour) after one overlay: ``overlay_price`` replaces it; ``adjustment``
    ``"+0.1"``/``"-0.05"`` adds, ``"+25%"``/``"-10%"`` multiplies by ``1 + N/100``; never below 0.

    Karpenter's ``AdjustedPrice`` (``[core]:pkg/cloudprovider/types.go``). Both None: ``price`` unchanged.
    """
    if overlay_price is not None:
        return max(float(Decimal(overlay_price)), 0.0)
    if adjustment is None:
        return price
    if adjustment.endswith("%"):
        out = price * (1 + float(Decimal(adjustment[:-1])) / 100)
    else:
        out = price + float(Decimal(adjustment))
    return max(out, 0.0)


@dataclass(slots=True)
class _PriceEntry:
    overlay: str
    price: str | None
    adjustment: str | None
    lowest_weight: int
    lowest_names: list[str]


@dataclass(slots=True)
class _CapacityEntry:
    values: dict[str, tuple[int, str]]  # resource -> (amount, overlay)
    lowest_weight: int
    lowest_resources: dict[str, str]  # resource -> overlay, of the overlays at lowest_weight


@dataclass(slots=True)
class _Store:
    prices: dict[tuple[str, str, str, str], _PriceEntry] = field(default_factory=dict)  # pool, type, zone, ct
    capacity: dict[tuple[str, str], _CapacityEntry] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class _Match:
    pool: str
    type_name: str
    offerings: tuple[Offering, ...]


def _type_requirements(it: InstanceType, pool_labels: Requirements) -> Requirements:
    reqs = Requirements.from_labels(it.labels)
    reqs.add(*pool_labels.values())
    zones = frozenset(o.zone for o in it.offerings)
    capacity_types = frozenset(o.capacity_type for o in it.offerings)
    zone_ids = frozenset(o.zone_id for o in it.offerings if o.zone_id)
    reqs.add(Requirement(LABEL_ZONE, complement=False, values=zones))
    reqs.add(Requirement(LABEL_CAPACITY_TYPE, complement=False, values=capacity_types))
    if zone_ids:
        reqs.add(Requirement(LABEL_ZONE_ID, complement=False, values=zone_ids))
    return reqs


def _offering_requirements(o: Offering) -> Requirements:
    labels = {LABEL_ZONE: o.zone, LABEL_CAPACITY_TYPE: o.capacity_type}
    if o.zone_id:
        labels[LABEL_ZONE_ID] = o.zone_id
    return Requirements.from_labels(labels)


def _pool_requirements(pool: NodePool) -> Requirements:
    reqs = Requirements.from_labels(dict(pool.spec.template.metadata.labels))
    reqs.add(Requirement(LABEL_NODEPOOL, complement=False, values=frozenset((pool.name,))))
    return reqs


def _compatible(type_reqs: Requirements, wanted: Sequence[Requirement]) -> bool:
    """``type_reqs.is_compatible(overlay)`` without building the reason text (Karpenter's ``IsCompatible``): every
    key the overlay asks for with a positive operator is defined by the type and has a value in common."""
    for req in wanted:
        have = type_reqs.peek(req.key)
        if have is None:
            if req.is_negative():
                continue
            return False
        if have is not req and not have.has_intersection(req) and not (have.is_negative() and req.is_negative()):
            return False
    return True


def _matches(
    overlay_reqs: Requirements,
    pools: Sequence[NodePool],
    instance_types: Mapping[str, Sequence[InstanceType]],
    pool_reqs: Mapping[str, Requirements],
    type_reqs: dict[tuple[str, str], Requirements],
) -> list[_Match]:
    """Every (pool, type) the overlay selects, with the offerings it reprices (Karpenter's ``getOverlaidOfferings``).
    ``type_reqs`` caches each (pool, type)'s requirements across the overlays of one evaluation."""
    out: list[_Match] = []
    overlay_wanted = overlay_reqs.values()
    selected: dict[tuple[str, str, str], bool] = {}  # (zone, capacity type, zone id): few distinct per catalogue

    def selects(o: Offering) -> bool:
        key = (o.zone, o.capacity_type, o.zone_id)
        hit = selected.get(key)
        if hit is None:
            hit = selected[key] = _offering_requirements(o).intersects(overlay_reqs) is None
        return hit

    for pool in pools:
        for it in instance_types.get(pool.name, ()):
            reqs = type_reqs.get((pool.name, it.name))
            if reqs is None:
                reqs = type_reqs[(pool.name, it.name)] = _type_requirements(it, pool_reqs[pool.name])
            if not _compatible(reqs, overlay_wanted):
                continue
            offerings = tuple(o for o in it.offerings if selects(o))
            if offerings:
                out.append(_Match(pool=pool.name, type_name=it.name, offerings=offerings))
    return out


def _parse_capacity(overlay: NodeOverlay) -> dict[str, int]:
    return {name: parse_quantity(value, resource=name) for name, value in overlay.spec.capacity.items()}


def _conflicts(store: _Store, overlay: NodeOverlay, matches: Sequence[_Match]) -> list[str]:
    """The overlays ``overlay`` conflicts with (equal weight, same offering priced or same resource set)."""
    weight = overlay.weight_or_zero
    prices = overlay.spec.price is not None or overlay.spec.price_adjustment is not None
    found: list[str] = []
    for m in matches:
        if prices:
            for o in m.offerings:
                entry = store.prices.get((m.pool, m.type_name, o.zone, o.capacity_type))
                if entry is not None and entry.lowest_weight == weight:
                    found.extend(entry.lowest_names)
        if overlay.spec.capacity:
            cap = store.capacity.get((m.pool, m.type_name))
            if cap is not None and cap.lowest_weight == weight:
                found.extend(cap.lowest_resources[r] for r in overlay.spec.capacity if r in cap.lowest_resources)
    return sorted(set(found))


def _store(store: _Store, overlay: NodeOverlay, matches: Sequence[_Match], amounts: Mapping[str, int]) -> None:
    weight, name = overlay.weight_or_zero, overlay.name
    prices = overlay.spec.price is not None or overlay.spec.price_adjustment is not None
    for m in matches:
        if prices:
            for o in m.offerings:
                key = (m.pool, m.type_name, o.zone, o.capacity_type)
                entry = store.prices.get(key)
                if entry is None:
                    store.prices[key] = _PriceEntry(
                        overlay=name,
                        price=overlay.spec.price,
                        adjustment=overlay.spec.price_adjustment,
                        lowest_weight=weight,
                        lowest_names=[name],
                    )
                elif entry.lowest_weight == weight:
                    entry.lowest_names.append(name)
                else:
                    entry.lowest_weight, entry.lowest_names = weight, [name]
        if amounts:
            cap = store.capacity.get((m.pool, m.type_name))
            if cap is None:
                store.capacity[(m.pool, m.type_name)] = _CapacityEntry(
                    values={r: (v, name) for r, v in amounts.items()},
                    lowest_weight=weight,
                    lowest_resources=dict.fromkeys(amounts, name),
                )
                continue
            for resource, value in amounts.items():
                cap.values.setdefault(resource, (value, name))
            if cap.lowest_weight == weight:
                cap.lowest_resources.update(dict.fromkeys(amounts, name))
            else:
                cap.lowest_weight, cap.lowest_resources = weight, dict.fromkeys(amounts, name)


def apply_overlays(
    *,
    overlays: Sequence[NodeOverlay],
    nodepools: Sequence[NodePool],
    instance_types: Mapping[str, Sequence[InstanceType]],
) -> OverlayResult:
    """Apply ``overlays`` to each NodePool's instance types (rules in the module docstring).

    ``instance_types`` maps a NodePool name to its catalogue (offering prices in USD/hour, capacity in
    the core's integer units); NodePools it does not name are neither evaluated nor returned.
    Returns an :class:`OverlayResult`; raises nothing for a bad overlay (it gets a False verdict).
    """
    pools = [p for p in nodepools if p.name in instance_types]
    pool_reqs = {p.name: _pool_requirements(p) for p in pools}
    store = _Store()
    type_reqs: dict[tuple[str, str], Requirements] = {}
    verdicts: dict[str, OverlayVerdict] = {}
    for overlay in order_by_weight(overlays):
        invalid = overlay.runtime_errors()
        if invalid:
            message = "; ".join(f"{where}: {why}" for where, why in invalid)
            verdicts[overlay.name] = OverlayVerdict(
                name=overlay.name, valid=False, reason=REASON_RUNTIME_VALIDATION, message=message
            )
            continue
        try:
            overlay_reqs = Requirements.from_node_selector_requirements(overlay.requirements_core())
            amounts = _parse_capacity(overlay)
        except (RequirementError, QuantityError) as exc:
            verdicts[overlay.name] = OverlayVerdict(
                name=overlay.name, valid=False, reason=REASON_RUNTIME_VALIDATION, message=str(exc)
            )
            continue
        matches = _matches(overlay_reqs, pools, instance_types, pool_reqs, type_reqs)
        clashing = _conflicts(store, overlay, matches)
        if clashing:
            verdicts[overlay.name] = OverlayVerdict(
                name=overlay.name,
                valid=False,
                reason=REASON_CONFLICT,
                message=CONFLICT_MESSAGE,
                conflicts_with=tuple(clashing),
            )
            continue
        _store(store, overlay, matches, amounts)
        verdicts[overlay.name] = OverlayVerdict(name=overlay.name, valid=True)
    return _build(pools, instance_types, store, verdicts)


def _build(
    pools: Sequence[NodePool],
    instance_types: Mapping[str, Sequence[InstanceType]],
    store: _Store,
    verdicts: dict[str, OverlayVerdict],
) -> OverlayResult:
    price_by_type: dict[tuple[str, str], dict[tuple[str, str], _PriceEntry]] = {}
    for (pool_name, type_name, zone, ct), entry in store.prices.items():
        price_by_type.setdefault((pool_name, type_name), {})[(zone, ct)] = entry
    out: dict[str, Sequence[InstanceType]] = {}
    price_overlays: dict[tuple[str, str], tuple[str, ...]] = {}
    capacity_overlays: dict[tuple[str, str], tuple[str, ...]] = {}
    for pool in pools:
        types = instance_types[pool.name]
        changed = False
        result: list[InstanceType] = []
        for it in types:
            key = (pool.name, it.name)
            prices, cap = price_by_type.get(key), store.capacity.get(key)
            if prices is None and cap is None:
                result.append(it)
                continue
            changed = True
            new = it
            if prices is not None:
                offerings = tuple(_reprice(o, prices.get((o.zone, o.capacity_type))) for o in it.offerings)
                new = replace(new, offerings=offerings)
                price_overlays[key] = tuple(dict.fromkeys(e.overlay for e in prices.values()))
            if cap is not None:
                new = replace(new, capacity={**new.capacity, **{r: v for r, (v, _) in cap.values.items()}})
                capacity_overlays[key] = tuple(dict.fromkeys(n for _, n in cap.values.values()))
            result.append(new)
        out[pool.name] = result if changed else types
    return OverlayResult(
        instance_types=out, verdicts=verdicts, price_overlays=price_overlays, capacity_overlays=capacity_overlays
    )


def _reprice(offering: Offering, entry: _PriceEntry | None) -> Offering:
    if entry is None:
        return offering
    base = offering.price if not math.isnan(offering.price) else 0.0
    price = adjusted_price(base, overlay_price=entry.price, adjustment=entry.adjustment)
    return replace(offering, price=price, price_estimated=offering.price_estimated and entry.price is None)


def status_conditions(*, overlay: NodeOverlay, verdict: OverlayVerdict, now: float) -> list[Condition] | None:
    """The ``status.conditions`` ``overlay`` should carry after ``verdict``, or None when it already carries them.

    ``ValidationSucceeded`` and the root ``Ready`` are True (reason the condition's type, as operatorpkg's
    ``SetTrue`` writes it) for a valid overlay, else False with Karpenter's reason (``Conflict``,
    ``RuntimeValidation``) and message (``[core]:pkg/controllers/nodeoverlay/controller.go``
    ``updateOverlayStatuses``). ``lastTransitionTime`` (RFC 3339, from ``now`` in epoch seconds) moves only when a
    condition's status changes; ``observedGeneration`` is the overlay's ``metadata.generation``. Other conditions
    are kept.
    """
    status = "True" if verdict.valid else "False"
    current = {c.type: c for c in (overlay.status.conditions if overlay.status is not None else [])}
    wanted: list[Condition] = []
    for type_ in (CONDITION_VALIDATION_SUCCEEDED, "Ready"):
        reason = type_ if verdict.valid else verdict.reason
        message = "" if verdict.valid else verdict.message
        old = current.get(type_)
        moved = old is None or old.status != status or not old.last_transition_time
        wanted.append(
            Condition(
                type=type_,
                status=status,
                reason=reason,
                message=message,
                last_transition_time=to_rfc3339(now) if moved or old is None else old.last_transition_time,
                observed_generation=overlay.metadata.generation,
            )
        )
    unchanged = all(
        (old := current.get(c.type)) is not None
        and (old.status, old.reason or "", old.message or "", old.observed_generation)
        == (c.status, c.reason, c.message, c.observed_generation)
        for c in wanted
    )
    if unchanged:
        return None
    kept = [c for t, c in current.items() if t not in {w.type for w in wanted}]
    return [*wanted, *kept]
