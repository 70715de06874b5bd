"""NodePool templates: a NodePool prepared for scheduling.

A :class:`Template` is a NodePool prepared for scheduling (``[core]:.../scheduling/
nodeclaimtemplate.go``): its requirements (NodePool requirements + template labels +
``karpenter.sh/nodepool`` + node class label), taints, the instance types its requirements allow
(``filterInstanceTypesByRequirements`` with no pod), DaemonSet overhead groups and remaining limits.

Instance-type sets are Python ints used as bitsets over the template's type list; per resource
the template keeps the types sorted by allocatable-after-DaemonSets and the prefix bitsets, so
"types with less than N free" is one bisect and one lookup.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from nodesmith.core.requirements import (
    LABEL_INITIALIZED,
    LABEL_INSTANCE_TYPE,
    LABEL_NODEPOOL,
    LABEL_REGISTERED,
    WELL_KNOWN_LABELS,
    Requirement,
    RequirementError,
    Requirements,
)
from nodesmith.core.scheduling.daemonsets import DaemonGroup, build_overhead_groups
from nodesmith.core.scheduling.instancetypes import (
    NODES,
    OFFERING_ONLY_KEYS,
    OfferingFilter,
    has_offering,
    min_values_shortfall,
)
from nodesmith.core.scheduling.pods import ports_conflict
from nodesmith.core.scheduling.reasons import Rejection, limits_failure
from nodesmith.core.scheduling.taints import first_untolerated, format_taint
from nodesmith.core.scheduling.typesets import Chosen, SortedAmounts

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

    from nodesmith.core.api.nodepool import NodePool
    from nodesmith.core.model import Offering, Taint
    from nodesmith.core.scheduling.daemonsets import DaemonInfo
    from nodesmith.core.scheduling.instancetypes import TypeInfo
    from nodesmith.core.scheduling.pods import HostPort, PodData

__all__ = ["PricedType", "Template"]

PricedType = tuple[float, str, int, frozenset[str], frozenset[str]]
"""``(cheapest allowed price USD/hour, type name, type index, allowed zones, allowed capacity types)``."""


def _node_class_label(np: NodePool) -> tuple[str, str]:
    ref = np.spec.template.spec.node_class_ref
    return f"{ref.group}/{ref.kind.lower()}", ref.name


class Template:
    """A NodePool ready for scheduling. ``error`` is set (and ``types`` empty) when it cannot launch anything."""

    def __init__(
        self,
        np: NodePool,
        *,
        catalogue: Sequence[TypeInfo],
        daemons: Sequence[DaemonInfo],
        usage: Mapping[str, int],
    ) -> None:
        self.name = np.name
        self.catalogue = catalogue  # the whole catalogue, for explanations ("types outside this NodePool ...")
        self.weight = np.weight_or_zero
        self.nodeclass = np.spec.template.spec.node_class_ref.name
        self.taints: tuple[Taint, ...] = np.taints_core()
        self.startup_taints: tuple[Taint, ...] = np.startup_taints_core()
        class_key, class_name = _node_class_label(np)
        self.labels: dict[str, str] = {
            **np.spec.template.metadata.labels,
            LABEL_NODEPOOL: self.name,
            class_key: class_name,
        }
        self.error: str | None = None
        self.types: list[TypeInfo] = []
        self.reserved: dict[int, tuple[Offering, ...]] = {}
        """Type index -> its available reserved offerings the NodePool's requirements allow (none: the NodePool
        has no capacity reservation to account for)."""
        self.groups: list[DaemonGroup] = []
        self.group_of: list[int] = []
        self.has_overhead = False
        limits = np.limits_core()
        self.limits: dict[str, int] | None = dict(limits) if np.spec.limits is not None else None
        self.remaining: dict[str, int] | None = (
            {k: v - usage.get(k, 0) for k, v in limits.items()} if self.limits is not None else None
        )
        self._taint_ok: dict[int, str] = {}
        self._compat: dict[int, tuple[Requirements | None, str]] = {}
        self._masks: dict[frozenset[Requirement], int] = {}
        self._priced: dict[tuple[Requirement | None, ...], list[PricedType]] = {}
        self._chosen: dict[tuple[object, ...], Chosen] = {}
        self._fit: dict[str, SortedAmounts] = {}
        self._cap: dict[str, SortedAmounts] = {}
        self._limit_mask: int | None = None
        try:
            reqs = Requirements.from_node_selector_requirements(np.requirements_core())
        except RequirementError as exc:
            self.requirements = Requirements()
            self.error = f"invalid requirements: {exc}"
            return
        reqs.add(*Requirements.from_labels(self.labels).values())
        reqs.add(
            Requirement.new(LABEL_REGISTERED, "In", ("true",)), Requirement.new(LABEL_INITIALIZED, "In", ("true",))
        )
        self.requirements = reqs
        offers = OfferingFilter(reqs)
        self.types = [t for t in catalogue if t.requirements.intersects(reqs) is None and has_offering(t, offers)]
        if not self.types:
            self.error = f"requirements ({self._describe_reqs(reqs)}) leave no instance type with an available offering"
            return
        short = min_values_shortfall(self.types, reqs)
        if short is not None:
            self.error = (
                f"minValues: {short[0]} needs {short[2]} distinct values, the instance types allowed offer {short[1]}"
            )
            self.types = []
            return
        self.all_mask = (1 << len(self.types)) - 1
        for i, t in enumerate(self.types):
            if held := tuple(o for o in t.offerings if o.reservation_id and offers.allows(o)):
                self.reserved[i] = held
        self.type_keys = frozenset(k for t in self.types for k in t.requirements)
        self.groups, self.group_of = build_overhead_groups(
            requirements=reqs, taints=self.taints, types=self.types, daemons=daemons
        )
        self.has_overhead = any(g.overhead for g in self.groups)
        self.group_masks = [0] * len(self.groups)
        for i, g in enumerate(self.group_of):
            self.group_masks[g] |= 1 << i

    @staticmethod
    def _describe_reqs(reqs: Requirements) -> str:
        return str(reqs.without(LABEL_REGISTERED, LABEL_INITIALIZED, LABEL_NODEPOOL))

    # -- cached per-pod checks -------------------------------------------------------------

    def untolerated(self, data: PodData) -> str:
        """``""`` when the pod tolerates the NodePool's taints (startup taints excluded), else the reason."""
        reason = self._taint_ok.get(id(data))
        if reason is None:
            taint = first_untolerated(self.taints, data.tolerations)
            reason = "" if taint is None else f"pod does not tolerate taint {format_taint(taint)}"
            self._taint_ok[id(data)] = reason
        return reason

    def merged(self, data: PodData) -> tuple[Requirements | None, str]:
        """NodePool requirements ∩ pod requirements, or ``(None, reason)`` when incompatible (cached)."""
        hit = self._compat.get(id(data))
        if hit is None:
            conflict = self.requirements.compatible(data.requirements, allow_undefined=WELL_KNOWN_LABELS)
            if conflict is not None:
                hit = (None, f"incompatible requirements: {conflict}")
            else:
                hit = (self.requirements.intersect(data.requirements), "")
            self._compat[id(data)] = hit
        return hit

    # -- instance-type bitsets ---------------------------------------------------------------

    def compatible_mask(self, reqs: Requirements) -> int:
        """Types whose requirements intersect ``reqs`` and that have an allowed available offering (cached)."""
        key = frozenset(reqs.get(k) for k in self.type_keys | OFFERING_ONLY_KEYS if reqs.has(k))
        mask = self._masks.get(key)
        if mask is None:
            mask = 0
            offers = OfferingFilter(reqs)
            for i, t in enumerate(self.types):
                if t.requirements.intersects(reqs) is None and has_offering(t, offers):
                    mask |= 1 << i
            self._masks[key] = mask
        return mask

    def priced(self, reqs: Requirements) -> list[PricedType]:
        """Every type with an offering ``reqs`` allows, cheapest first (price, then name), with the
        zones and capacity types of those offerings (cached per zone/capacity-type requirements).
        """
        offers = OfferingFilter(reqs)
        hit = self._priced.get(offers.key)
        if hit is None:
            hit = []
            for i, t in enumerate(self.types):
                allowed = [o for o in t.offerings if offers.allows(o)]
                if allowed:
                    price = min(o.price for o in allowed)
                    zones = frozenset(o.zone for o in allowed)
                    capacity_types = frozenset(o.capacity_type for o in allowed)
                    hit.append((price, t.name, i, zones, capacity_types))
            hit.sort(key=lambda e: (e[0], e[1]))
            self._priced[offers.key] = hit
        return hit

    def chosen(self, reqs: Requirements, mask: int, limit: int) -> Chosen:
        """The launch choice for a NodeClaim whose types are ``mask``: at most ``limit`` types, cheapest
        allowed offering first, with their zones, capacity types and an ``instance-type In`` requirement.
        Cached per (zone/capacity-type requirements, mask): NodeClaims of a batch often end up alike.
        """
        offers = OfferingFilter(reqs)
        key = (offers.key, mask, limit)
        hit = self._chosen.get(key)
        if hit is None:
            bits = bin(mask)[:1:-1]  # bits[i] == "1" when type i is kept; cheaper than big-int shifts
            width = len(bits)
            entries = [e for e in self.priced(reqs) if e[2] < width and bits[e[2]] == "1"][:limit]
            types = tuple(self.types[e[2]] for e in entries)
            hit = Chosen(
                types=types,
                instance_types=tuple(t.it for t in types),
                instance_type_requirement=Requirement(
                    LABEL_INSTANCE_TYPE, complement=False, values=frozenset(e[1] for e in entries)
                ),
                zones=frozenset().union(*(e[3] for e in entries)),
                capacity_types=frozenset().union(*(e[4] for e in entries)),
                price=entries[0][0] if entries else 0.0,
            )
            self._chosen[key] = hit
        return hit

    def requirement_mask(self, reqs: Requirements) -> int:
        """Types whose requirements intersect ``reqs`` (offerings ignored; for explanations)."""
        mask = 0
        for i, t in enumerate(self.types):
            if t.requirements.intersects(reqs) is None:
                mask |= 1 << i
        return mask

    def _fit_index(self, resource: str) -> SortedAmounts:
        idx = self._fit.get(resource)
        if idx is None:
            amounts = [
                t.allocatable.get(resource, 0) - self.groups[self.group_of[i]].overhead.get(resource, 0)
                for i, t in enumerate(self.types)
            ]
            idx = SortedAmounts(amounts)
            self._fit[resource] = idx
        return idx

    def too_small(self, total: Mapping[str, int]) -> int:
        """Types where ``total`` + their DaemonSet overhead exceeds allocatable for some resource."""
        dead = 0
        for resource, amount in total.items():
            if amount > 0:
                dead |= self._fit_index(resource).below(amount)
        return dead

    def max_free(self, mask: int, resource: str) -> int:
        """The most ``resource`` any type of ``mask`` has free after DaemonSets (0 for an empty mask)."""
        idx = self._fit_index(resource)
        order = idx.order
        for pos in range(len(order) - 1, -1, -1):
            if mask >> order[pos] & 1:
                return idx.values[pos]
        return 0

    def free(self, resource: str, i: int) -> int:
        """Allocatable of type ``i`` minus its DaemonSet overhead for ``resource``."""
        return self.types[i].allocatable.get(resource, 0) - self.groups[self.group_of[i]].overhead.get(resource, 0)

    def port_blocked(self, ports: Sequence[HostPort]) -> int:
        """Types whose DaemonSets already use one of ``ports``."""
        if not ports:
            return 0
        blocked = 0
        for g, group in enumerate(self.groups):
            if group.host_ports and ports_conflict(ports, group.host_ports) is not None:
                blocked |= self.group_masks[g]
        return blocked

    # -- limits ---------------------------------------------------------------------------------

    def _cap_index(self, resource: str) -> SortedAmounts:
        idx = self._cap.get(resource)
        if idx is None:
            idx = SortedAmounts([t.capacity.get(resource, 0) for t in self.types])
            self._cap[resource] = idx
        return idx

    def within_limits(self) -> tuple[int, Rejection | None]:
        """Types whose capacity fits the remaining limits, and why not when none does."""
        if self.remaining is None:
            return self.all_mask, None
        if self._limit_mask is None:
            over = 0
            for resource, left in self.remaining.items():
                over |= self._cap_index(resource).above(left)
            self._limit_mask = self.all_mask & ~over
        if self.remaining.get(NODES, 1) <= 0:
            return 0, limits_failure(self, NODES)
        if not self._limit_mask:
            return 0, limits_failure(self, None)
        return self._limit_mask, None

    def max_capacity(self, mask: int) -> dict[str, int]:
        """Per limited resource, the largest capacity among ``mask``'s types (what ``subtractMax`` charges)."""
        out: dict[str, int] = {}
        for resource in self.remaining or {}:
            idx = self._cap_index(resource)
            biggest = 0
            for pos in range(len(idx.order) - 1, -1, -1):
                if mask >> idx.order[pos] & 1:
                    biggest = idx.values[pos]
                    break
            out[resource] = biggest
        return out

    def charge(self, mask: int, *, sign: int = 1) -> None:
        """Subtract the largest capacity among ``mask``'s types from the remaining limits (``subtractMax``);
        ``sign=-1`` gives it back (a planned NodeClaim withdrawn before launch)."""
        if self.remaining is None:
            return
        for resource, biggest in self.max_capacity(mask).items():
            self.remaining[resource] -= sign * biggest
        self._limit_mask = None
