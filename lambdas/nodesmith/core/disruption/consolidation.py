"""Consolidation: delete or replace underutilized nodes when it is strictly cheaper.

Follows Karpenter ``[core]:pkg/controllers/disruption/consolidation.go computeConsolidation``,
``multinodeconsolidation.go`` and ``singlenodeconsolidation.go`` (``karpenter-v1.md`` §3.4):

* eligible candidates: consolidation enabled (``consolidateAfter`` not ``Never``), policy not
  ``WhenEmpty``, not empty (empties belong to emptiness), known instance type, zone and capacity
  type (to price them), the ``consolidateAfter`` quiet period elapsed since the last pod event,
  no pod blocking graceful disruption, not a static NodePool;
* simulate scheduling without them (:mod:`.simulation`): any moved pod unplaced -> no;
  a moved pod on an uninitialized node -> no; 0 new NodeClaims -> **delete**; more than 1 ->
  no; exactly 1 -> **replace**, keeping only the replacement types whose worst-case launch price
  (most expensive compatible offering of the capacity type that would launch: reserved, then spot,
  then on-demand) is strictly below the candidates' summed price, minValues still met;
* all candidates spot and the replacement may be spot: spot-to-spot, pinned to spot; single-node
  needs at least 15 cheaper spot types and launches only the 15 cheapest (or as many as minValues
  needs), so the launch cannot pick something consolidation would immediately replace again;
* otherwise, a replacement that may be spot or on-demand is pinned to spot (so a spot shortage
  cannot turn into a pricier on-demand node);
* multi-node: candidates by price per unit of disruption, highest first (Karpenter v1.14's ``SavingsRatio``: the
  node's price over 1 plus its moving pods' non-negative eviction costs), pre-filtered by the ``Underutilized``
  budget, at most 100; binary search for the largest prefix (of at least two) with a valid
  command; a replacement whose types include a candidate's own type keeps only types cheaper than
  the cheapest such candidate (``filterOutSameInstanceType``);
* single-node: the same order interleaved across NodePools; the first valid candidate wins;
* ``Balanced`` NodePools (:mod:`.balanced`): a move is carried out only when its score reaches 0.5 (a multi-node
  prefix that does not is treated as invalid, a single node that does not is passed over); a node that could not
  reach it even by being deleted is not simulated.

Nodesmith adds one conservative knob: ``DisruptionSettings.min_savings_per_hour`` — a command
must save at least that much (USD/hour; for a replace, judged at the replacement's worst-case
launch price).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from nodesmith.core.disruption.balanced import balanced_approval, hopeless, move_disruption_cost
from nodesmith.core.disruption.simulation import simulate
from nodesmith.core.disruption.types import METHOD_MULTI_NODE, METHOD_SINGLE_NODE, Decision, Rejection
from nodesmith.core.model import CAPACITY_TYPE_ON_DEMAND, CAPACITY_TYPE_SPOT, NodeSelectorRequirement
from nodesmith.core.requirements import LABEL_CAPACITY_TYPE, LABEL_INSTANCE_TYPE, Requirements
from nodesmith.core.scheduling.instancetypes import min_values_shortfall, type_info

if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping, Sequence

    from nodesmith.core.disruption.candidates import Candidate
    from nodesmith.core.disruption.simulation import SimulationContext
    from nodesmith.core.disruption.types import DisruptionSettings, Method
    from nodesmith.core.model import InstanceType
    from nodesmith.core.scheduling.types import NodeClaimPlan

__all__ = [
    "CAPACITY_RESERVED",
    "Outcome",
    "cheaper_replacement",
    "compute_consolidation",
    "consolidation_block",
    "min_types_for_values",
    "min_values_gap",
    "multi_node_consolidation",
    "narrow",
    "single_node_consolidation",
    "worst_launch_price",
]

CAPACITY_RESERVED = "reserved"
_LAUNCH_PRECEDENCE = (CAPACITY_RESERVED, CAPACITY_TYPE_SPOT, CAPACITY_TYPE_ON_DEMAND)
_INF = float("inf")


def consolidation_block(candidate: Candidate, *, now: float) -> str | None:  # noqa: PLR0911 - one return per check, in Karpenter's order
    """Why ``candidate`` cannot be consolidated (``consolidation.go ShouldDisrupt``), or None."""
    pool = candidate.nodepool
    f = candidate.facts
    if pool.spec.replicas is not None:
        return f'NodePool "{pool.name}" is static (replicas)'
    try:
        after = pool.spec.disruption.consolidate_after_seconds()
    except ValueError:
        after = None
    if after is None:
        return f'NodePool "{pool.name}" has consolidation disabled (consolidateAfter: Never)'
    if candidate.is_empty:
        return "node is empty (emptiness handles it)"
    if pool.spec.disruption.consolidation_policy == "WhenEmpty":
        return f'NodePool "{pool.name}" has consolidation policy WhenEmpty, but the node is not empty'
    if f.instance_type is None:
        return f'instance type "{f.instance_type_name}" not found'
    if f.capacity_type is None:
        return f'node does not have label "{LABEL_CAPACITY_TYPE}"'
    if f.zone is None:
        return 'node does not have label "topology.kubernetes.io/zone"'
    if now - f.last_pod_event < after:
        return (
            f"consolidateAfter not elapsed ({after:g}s since the last pod event, {now - f.last_pod_event:.0f}s so far)"
        )
    if candidate.pod_block is not None:
        return candidate.pod_block
    return None


def worst_launch_price(it: InstanceType, *, zones: frozenset[str], capacity_types: frozenset[str]) -> float:
    """Karpenter ``WorstLaunchPrice``: among available offerings in ``zones``, the capacity type that
    would launch (reserved, then spot, then on-demand, as allowed) and its most expensive price;
    infinity when none. USD/hour."""
    for ct in _LAUNCH_PRECEDENCE:
        if ct not in capacity_types:
            continue
        prices = [o.price for o in it.offerings if o.available and o.capacity_type == ct and o.zone in zones]
        if prices:
            return max(prices)
    return _INF


def _cheapest(it: InstanceType, *, zones: frozenset[str], capacity_types: frozenset[str]) -> float:
    prices = [o.price for o in it.offerings if o.available and o.capacity_type in capacity_types and o.zone in zones]
    return min(prices) if prices else _INF


def narrow(plan: NodeClaimPlan, types: Sequence[InstanceType], capacity_types: frozenset[str]) -> NodeClaimPlan:
    """``plan`` restricted to ``types`` (kept cheapest first) and ``capacity_types``: requirements,
    zones (those with such an offering), price (the cheapest, USD/hour), pinned zone/capacity type."""
    zones = frozenset(
        o.zone
        for it in types
        for o in it.offerings
        if o.available and o.capacity_type in capacity_types and o.zone in plan.zones
    )
    ordered = sorted(types, key=lambda it: (_cheapest(it, zones=zones, capacity_types=capacity_types), it.name))
    names = tuple(it.name for it in ordered)
    reqs: list[NodeSelectorRequirement] = []
    for r in plan.requirements:
        if r.key == LABEL_INSTANCE_TYPE and r.operator == "In":
            reqs.append(replace(r, values=names))
        elif r.key == LABEL_CAPACITY_TYPE and r.operator == "In":
            reqs.append(replace(r, values=tuple(sorted(capacity_types))))
        else:
            reqs.append(r)
    price = _cheapest(ordered[0], zones=zones, capacity_types=capacity_types) if ordered else 0.0
    return replace(
        plan,
        instance_types=tuple(ordered),
        requirements=tuple(reqs),
        capacity_types=capacity_types,
        zones=zones,
        price_per_hour=price if price != _INF else 0.0,
        zone=next(iter(zones)) if len(zones) == 1 else None,
        capacity_type=next(iter(capacity_types)) if len(capacity_types) == 1 else None,
    )


def min_values_gap(plan: NodeClaimPlan, types: Sequence[InstanceType]) -> str | None:
    """Why ``types`` cannot meet ``plan``'s ``minValues`` requirements, or None when they can (or it has none)."""
    reqs = Requirements.from_node_selector_requirements(plan.requirements).without(LABEL_INSTANCE_TYPE)
    if not reqs.has_min_values():
        return None
    short = min_values_shortfall((type_info(it) for it in types), reqs)
    if short is None:
        return None
    return f"minValues: {short[0]} needs {short[2]} distinct values, the cheaper types offer {short[1]}"


def min_types_for_values(plan: NodeClaimPlan, types: Sequence[InstanceType]) -> int:
    """How many of the cheapest ``types`` minValues needs (``SatisfiesMinValues``); len(types) when never met."""
    reqs = Requirements.from_node_selector_requirements(plan.requirements).without(LABEL_INSTANCE_TYPE)
    if not reqs.has_min_values():
        return 0
    infos = [type_info(it) for it in types]
    for n in range(1, len(infos) + 1):
        if min_values_shortfall(infos[:n], reqs) is None:
            return n
    return len(infos)


@dataclass(frozen=True, slots=True)
class Outcome:
    """A consolidation attempt: the decision, or why there is none."""

    decision: Decision | None
    why_not: str = ""


def _describe(candidates: Sequence[Candidate]) -> str:
    return ", ".join(
        f"{c.name} ({c.facts.instance_type_name} {c.facts.capacity_type} ${c.price:.4f}/h)" for c in candidates
    )


def compute_consolidation(
    ctx: SimulationContext,
    candidates: Sequence[Candidate],
    *,
    method: Method,
    settings: DisruptionSettings,
) -> Outcome:
    """Try to consolidate ``candidates`` together (rules in the module docstring), a move of a ``Balanced``
    NodePool only when it scores at least 0.5, its ``approval`` then giving the score
    (:func:`~.balanced.balanced_approval`)."""
    outcome = _compute(ctx, candidates, method=method, settings=settings)
    if outcome.decision is None:
        return outcome
    decision, refusal = balanced_approval(outcome.decision, candidates, ctx.pool_totals)
    return Outcome(decision, refusal)


def _compute(  # noqa: PLR0911 - one return per way a consolidation can fail
    ctx: SimulationContext,
    candidates: Sequence[Candidate],
    *,
    method: Method,
    settings: DisruptionSettings,
) -> Outcome:
    """:func:`compute_consolidation` before the ``Balanced`` score."""
    sim = simulate(ctx, candidates, consolidation=True)
    if not sim.all_scheduled:
        return Outcome(None, sim.explain_failures())
    if sim.uninitialized is not None:
        return Outcome(None, f"would schedule pods on uninitialized node {sim.uninitialized}")
    before = sum(c.price for c in candidates)
    pods = tuple(sorted(sim.moved))
    pools = tuple(sorted({c.nodepool.name for c in candidates}))
    names = tuple(c.name for c in candidates)
    if not sim.new_nodeclaims:
        if before < settings.min_savings_per_hour or before <= 0:
            return Outcome(
                None, f"deleting saves ${before:.4f}/h, below the minimum ${settings.min_savings_per_hour:.4f}/h"
            )
        return Outcome(
            Decision(
                method=method,
                nodes=names,
                cause="Underutilized",
                reason=f"delete {_describe(candidates)}: all {len(pods)} pod(s) fit on other nodes",
                nodepools=pools,
                cost_before=before,
                cost_after=0.0,
                pods=pods,
                placements=tuple(sorted(sim.placements.items())),
            )
        )
    if len(sim.new_nodeclaims) > 1:
        return Outcome(None, f"can't remove without creating {len(sim.new_nodeclaims)} NodeClaims")
    plan = sim.new_nodeclaims[0]
    replacement, why = cheaper_replacement(plan, candidates, before, single=len(candidates) == 1, settings=settings)
    if replacement is None:
        return Outcome(None, why)
    if method == METHOD_MULTI_NODE:
        replacement, why = _filter_same_type(replacement, candidates)
        if replacement is None:
            return Outcome(None, why)
    worst = max(
        worst_launch_price(it, zones=replacement.zones, capacity_types=replacement.capacity_types)
        for it in replacement.instance_types
    )
    if before - worst < settings.min_savings_per_hour:
        return Outcome(
            None,
            f"replacing saves at worst ${before - worst:.4f}/h, "
            f"below the minimum ${settings.min_savings_per_hour:.4f}/h",
        )
    after = replacement.price_per_hour
    cts = "/".join(sorted(replacement.capacity_types))
    return Outcome(
        Decision(
            method=method,
            nodes=names,
            cause="Underutilized",
            reason=(
                f"replace {_describe(candidates)} with one {cts} NodeClaim "
                f"({', '.join(it.name for it in replacement.instance_types[:5])}"
                f"{'...' if len(replacement.instance_types) > 5 else ''}) from ${after:.4f}/h"
            ),
            nodepools=pools,
            replacements=(replacement,),
            cost_before=before,
            cost_after=after,
            pods=pods,
            placements=tuple(sorted(sim.placements.items())),
        )
    )


def cheaper_replacement(  # noqa: PLR0911 - one return per price/flexibility check
    plan: NodeClaimPlan, candidates: Sequence[Candidate], before: float, *, single: bool, settings: DisruptionSettings
) -> tuple[NodeClaimPlan | None, str]:
    """``plan`` narrowed to the types whose worst-case launch price is below ``before`` (USD/hour), or
    None and why not (Karpenter ``computeConsolidation`` / ``computeSpotToSpotConsolidation``).

    When every candidate is spot and the plan may be spot, the replacement is pinned to spot; that
    needs ``settings.spot_to_spot`` and, for a single node (``single``), at least
    ``settings.spot_to_spot_min_types`` cheaper types, of which only that many cheapest are kept
    (more when ``minValues`` needs them). Otherwise a plan allowing spot and on-demand is pinned to
    spot among the cheaper types that have a spot offering.
    """
    all_spot = all(c.facts.capacity_type == CAPACITY_TYPE_SPOT for c in candidates)
    if all_spot and CAPACITY_TYPE_SPOT in plan.capacity_types:
        if not settings.spot_to_spot:
            return None, "spot-to-spot consolidation is disabled, can't replace a spot node with a spot node"
        spot = frozenset({CAPACITY_TYPE_SPOT})
        types = [
            it for it in plan.instance_types if worst_launch_price(it, zones=plan.zones, capacity_types=spot) < before
        ]
        gap = min_values_gap(plan, types)
        if gap is not None:
            return None, f"filtering by price: {gap}"
        if not types:
            return None, "can't replace with a cheaper node"
        if single:
            need = settings.spot_to_spot_min_types
            if len(types) < need:
                return None, (
                    f"spot-to-spot consolidation requires {need} cheaper instance type options than the current "
                    f"candidate to consolidate, got {len(types)}"
                )
            types = types[: max(need, min_types_for_values(plan, types))]
        return narrow(plan, types, spot), ""
    types = [
        it
        for it in plan.instance_types
        if worst_launch_price(it, zones=plan.zones, capacity_types=plan.capacity_types) < before
    ]
    gap = min_values_gap(plan, types)
    if gap is not None:
        return None, f"filtering by price: {gap}"
    if not types:
        return None, "can't replace with a cheaper node"
    capacity_types = plan.capacity_types
    if CAPACITY_TYPE_SPOT in capacity_types and CAPACITY_TYPE_ON_DEMAND in capacity_types:
        capacity_types = frozenset({CAPACITY_TYPE_SPOT})
        types = [it for it in types if _cheapest(it, zones=plan.zones, capacity_types=capacity_types) != _INF]
        if not types:
            return None, "can't replace with a cheaper node (no spot offering among the cheaper types)"
    return narrow(plan, types, capacity_types), ""


def _filter_same_type(plan: NodeClaimPlan, candidates: Sequence[Candidate]) -> tuple[NodeClaimPlan | None, str]:
    """Karpenter ``filterOutSameInstanceType``: if a candidate's type is among the replacement's,
    keep only replacement types cheaper than the cheapest such candidate (else just delete others)."""
    own: dict[str, float] = {}
    for c in candidates:
        name = c.facts.instance_type_name
        if name is None or c.facts.instance_type is None:
            continue
        price = _cheapest(
            c.facts.instance_type,
            zones=frozenset({c.facts.zone})
            if c.facts.zone
            else frozenset(o.zone for o in c.facts.instance_type.offerings),
            capacity_types=frozenset({c.facts.capacity_type})
            if c.facts.capacity_type
            else frozenset(_LAUNCH_PRECEDENCE),
        )
        own[name] = min(own.get(name, _INF), price)
    limit = min((own[it.name] for it in plan.instance_types if it.name in own), default=_INF)
    if limit == _INF:
        return plan, ""
    types = [
        it
        for it in plan.instance_types
        if worst_launch_price(it, zones=plan.zones, capacity_types=plan.capacity_types) < limit
    ]
    gap = min_values_gap(plan, types)
    if gap is not None or not types:
        return None, "the replacement would be one of the candidates' own instance types at no lower price"
    return narrow(plan, types, plan.capacity_types), ""


def sort_by_savings_ratio(candidates: Iterable[Candidate]) -> list[Candidate]:
    """Highest price per unit of disruption first (:func:`~.balanced.move_disruption_cost` of the node alone), then
    name: Karpenter's consolidation order since v1.14 (``consolidation.go sortCandidates``, ``SavingsRatio``), so a
    budget-limited pass tries the moves worth most for the pods they disrupt."""
    return sorted(candidates, key=lambda c: (-c.price / move_disruption_cost([c]), c.name))


def multi_node_consolidation(
    ctx: SimulationContext,
    candidates: Sequence[Candidate],
    *,
    budgets: Mapping[str, int],
    settings: DisruptionSettings,
) -> tuple[Decision | None, list[Rejection]]:
    """The largest valid prefix (>= 2 nodes) of the cost-ordered, budget-filtered candidates."""
    rejected: list[Rejection] = []
    left = dict(budgets)
    allowed: list[Candidate] = []
    for c in sort_by_savings_ratio(candidates):
        if left.get(c.nodepool.name, 0) <= 0:
            rejected.append(
                Rejection(c.name, f'NodePool "{c.nodepool.name}" Underutilized budget exhausted', METHOD_MULTI_NODE)
            )
            continue
        left[c.nodepool.name] -= 1
        allowed.append(c)
    allowed = allowed[: settings.max_multi_node_candidates]
    if len(allowed) < 2:
        return None, rejected
    lo, hi = 1, len(allowed) - 1
    best: Decision | None = None
    while lo <= hi:
        mid = (lo + hi) // 2
        outcome = compute_consolidation(ctx, allowed[: mid + 1], method=METHOD_MULTI_NODE, settings=settings)
        if outcome.decision is not None:
            best = outcome.decision
            lo = mid + 1
        else:
            hi = mid - 1
    if best is not None:
        best = replace(best, rejected=tuple(rejected))
    return best, rejected


def _interleave(candidates: Sequence[Candidate]) -> list[Candidate]:
    """Round-robin across NodePools, pools in order of their first candidate (``shuffleCandidates``)."""
    groups: dict[str, list[Candidate]] = {}
    for c in candidates:
        groups.setdefault(c.nodepool.name, []).append(c)
    out: list[Candidate] = []
    depth = max((len(g) for g in groups.values()), default=0)
    for i in range(depth):
        for group in groups.values():
            if i < len(group):
                out.append(group[i])
    return out


def single_node_consolidation(
    ctx: SimulationContext,
    candidates: Sequence[Candidate],
    *,
    budgets: Mapping[str, int],
    settings: DisruptionSettings,
) -> tuple[Decision | None, list[Rejection]]:
    """The first candidate (cost order, interleaved by NodePool) that can be deleted or replaced."""
    rejected: list[Rejection] = []
    for c in _interleave(sort_by_savings_ratio(candidates)):
        if budgets.get(c.nodepool.name, 0) <= 0:
            rejected.append(
                Rejection(c.name, f'NodePool "{c.nodepool.name}" Underutilized budget exhausted', METHOD_SINGLE_NODE)
            )
            continue
        why = hopeless(c, ctx.pool_totals) if ctx.pool_totals else None
        if why is not None:
            rejected.append(Rejection(c.name, why, METHOD_SINGLE_NODE))
            continue
        outcome = compute_consolidation(ctx, [c], method=METHOD_SINGLE_NODE, settings=settings)
        if outcome.decision is not None:
            return replace(outcome.decision, rejected=tuple(rejected)), rejected
        rejected.append(Rejection(c.name, outcome.why_not, METHOD_SINGLE_NODE))
    return None, rejected
