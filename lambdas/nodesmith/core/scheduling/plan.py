"""Turn a planned :class:`~nodesmith.core.scheduling.nodeclaim.SimNodeClaim` into a :class:`NodeClaimPlan`.

Mirrors ``NodeClaim.FinalizeScheduling`` and ``NodeClaimTemplate.ToNodeClaim``
(``[core]:.../scheduling/nodeclaim.go``, ``nodeclaimtemplate.go``): simulation-only requirement keys
are dropped; the smallest DaemonSet overhead among the groups that still have a type is added to
the requests; instance types are ordered by their cheapest allowed available offering and cut to
:data:`MAX_INSTANCE_TYPES` (minValues re-checked after the cut); ``node.kubernetes.io/instance-type``
and ``karpenter.sh/capacity-type`` requirements list what is left; a NodeClaim holding capacity reservation slots
is pinned to them; custom labels with a known value become NodeClaim labels.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from nodesmith.core.capacityreservations import LABEL_CAPACITY_RESERVATION_ID
from nodesmith.core.model import CAPACITY_TYPE_RESERVED
from nodesmith.core.requirements import (
    LABEL_CAPACITY_TYPE,
    RESTRICTED_LABELS,
    WELL_KNOWN_LABELS,
    Requirement,
)
from nodesmith.core.scheduling.instancetypes import min_values_shortfall
from nodesmith.core.scheduling.nodeclaim import SIMULATION_KEYS
from nodesmith.core.scheduling.types import NodeClaimPlan

if TYPE_CHECKING:
    from nodesmith.core.resources import Resources
    from nodesmith.core.scheduling.nodeclaim import SimNodeClaim

__all__ = ["MAX_INSTANCE_TYPES", "to_plan"]

MAX_INSTANCE_TYPES = 600
"""Instance types kept on a NodeClaim (``MaxInstanceTypes`` in ``nodeclaimtemplate.go``)."""


def _min_overhead(nc: SimNodeClaim) -> Resources:
    tpl = nc.template
    overheads = [g.overhead for g, m in zip(tpl.groups, tpl.group_masks, strict=True) if nc.mask & m]
    if not overheads:
        return {}
    names: set[str] = set().union(*overheads)
    least = {n: min(o.get(n, 0) for o in overheads) for n in names}
    return {n: v for n, v in least.items() if v > 0}


def to_plan(nc: SimNodeClaim, *, reservations: frozenset[str] = frozenset()) -> NodeClaimPlan | str:
    """The launchable plan for ``nc``, or a reason (for its pods) when minValues fails after the cut.

    ``reservations`` are the capacity reservations ``nc`` holds a slot of in the pass
    (:class:`~nodesmith.core.scheduling.reservations.ReservationLedger`): as Karpenter's ``FinalizeScheduling``, the
    NodeClaim is then pinned to them (capacity type ``reserved``, ``capacity-reservation-id In`` them), so it never
    launches elsewhere while holding their slots.
    """
    tpl = nc.template
    reqs = nc.requirements.without(*SIMULATION_KEYS)
    if reservations:
        reqs.add(
            Requirement(LABEL_CAPACITY_TYPE, complement=False, values=frozenset((CAPACITY_TYPE_RESERVED,))),
            Requirement(LABEL_CAPACITY_RESERVATION_ID, complement=False, values=reservations),
        )
    chosen = tpl.chosen(reqs, nc.mask, MAX_INSTANCE_TYPES)
    if reqs.has_min_values():
        short = min_values_shortfall(chosen.types, reqs)
        if short is not None:
            return (
                f'nodepool "{tpl.name}": minValues: {short[0]} needs {short[2]} distinct values, '
                f"the {len(chosen.types)} cheapest instance types offer {short[1]}"
            )
    # Intersecting keeps the NodePool's minValues on the instance-type key (Requirement.intersection).
    reqs.add(chosen.instance_type_requirement)
    if chosen.capacity_types:
        reqs.add(Requirement(LABEL_CAPACITY_TYPE, complement=False, values=chosen.capacity_types))
    requests = dict(nc.requests)
    for name, amount in _min_overhead(nc).items():
        requests[name] = requests.get(name, 0) + amount
    # Custom labels with a known value become node labels (resolveCustomLabelsFromRequirements). A
    # negative requirement (NotIn/DoesNotExist) is met by leaving the label off, so no value is made up.
    labels = dict(tpl.labels)
    for key in reqs:
        if key in labels or key in WELL_KNOWN_LABELS or key in RESTRICTED_LABELS or key in SIMULATION_KEYS:
            continue
        req = reqs.get(key)
        value = "" if req.is_negative() else req.any()
        if value:
            labels[key] = value
    return NodeClaimPlan(
        nodepool=tpl.name,
        nodeclass=tpl.nodeclass,
        instance_types=chosen.instance_types,
        requirements=reqs.node_selector_requirements(),
        capacity_types=chosen.capacity_types,
        zones=chosen.zones,
        pods=tuple(nc.pods),
        requests=requests,
        labels=labels,
        taints=tpl.taints,
        startup_taints=tpl.startup_taints,
        price_per_hour=chosen.price,
        zone=next(iter(chosen.zones)) if len(chosen.zones) == 1 else None,
        capacity_type=next(iter(chosen.capacity_types)) if len(chosen.capacity_types) == 1 else None,
    )
