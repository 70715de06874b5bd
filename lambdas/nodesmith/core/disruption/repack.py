"""The ``nodesmith`` consolidation policy: take a set of wasteful nodes out, re-pack their pods cheaply.

Karpenter's consolidation (:mod:`.consolidation`) only ever turns M nodes into at most one new
NodeClaim, tries prefixes of one fixed order (disruption cost), and judges a move on Karpenter's own
grouping. On a fragmented cluster that mostly deletes small, well-used nodes into the free space of
big, half-empty ones: many disruptions, and the expensive half-empty nodes stay. This policy keeps
every Karpenter constraint (candidate filter: do-not-disrupt, PDB-blocked pods, initialized managed
nodes, ``consolidateAfter``; the ``Underutilized`` budget; moved pods must all schedule, and never
onto uninitialized capacity: such nodes are simply no destination here) and changes what it looks
for:

1. **Rank by waste per evicted pod.** Each pod gets a fair price: the cheapest cost of its dominant
   share of an instance type, ``min_t price_t * max_r request_r / allocatable_r`` (USD/hour, as in
   :mod:`nodesmith.core.scheduling.packing`). A node's estimated saving is its price minus the fair
   prices of the pods that would move; candidates are ranked by that saving per moving pod, so a
   big node that is mostly empty comes first and a small node that is full comes last.
2. **Take PDBs at their word.** Once a command evicts pods of a PodDisruptionBudget, it takes no
   other node whose pods would exceed the budget's ``disruptionsAllowed``: that node waits for a
   later command, so the drains of one command do not queue behind each other on a PDB (Karpenter
   lets the Eviction API's 429s sort that out). One node alone may still hold more pods of a budget
   than it allows (its drain evicts them one after the other, as any drain does); otherwise it
   could never be consolidated.
3. **Choose how many.** Prefixes of that order (within the budget, at most
   ``max_multi_node_candidates``) are simulated with the cost-aware packer (``packing="nodesmith"``,
   any number of new NodeClaims): a prefix's value is its saving (the nodes' price minus the
   replacements' worst-case launch price) minus ``min_savings_per_disrupted_node`` per node
   disrupted and ``min_savings_per_evicted_pod`` per pod evicted. A coarse grid of prefix lengths is
   refined around the best one. Then nodes of the best prefix are left out one at a time (first
   those whose instance type a replacement would launch again, then the last ranked) while the
   command is worth at least as much without them. The result, if its saving is at least
   ``min_savings_per_hour``, is the command.
4. **Launch like Karpenter would be safe to.** Each replacement may be spot when its NodePool allows
   it (pinned to spot then, so a spot shortage cannot become a dearer on-demand node), keeps the
   types whose worst-case launch price is within 10 % of its cheapest one (or as many as
   ``minValues`` needs), and the saving is judged at those worst-case prices. Spot nodes replaced by
   spot follow Karpenter's spot-to-spot rule instead: every type cheaper than the nodes, and for a
   single node at least ``spot_to_spot_min_types`` (15) of them, the 15 cheapest launched, so the
   replacement has spot fallbacks. With ``spot_to_spot`` off, spot nodes are only ever deleted, never
   replaced by spot.

The command reuses Karpenter's method names (``single-node-consolidation`` for one node,
``multi-node-consolidation`` for several; cause ``Underutilized``) so budgets, events and metrics
read the same; its reason says it comes from this policy. A ``Balanced`` NodePool's nodes are ranked as any other,
but a set of nodes whose command does not score 0.5 for each Balanced NodePool among them (:mod:`.balanced`) is no
command, and a node that could not score it even by being deleted is left out. Pure and deterministic; prices
USD/hour.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from nodesmith.core.disruption.balanced import balanced_approval, hopeless
from nodesmith.core.disruption.consolidation import (
    cheaper_replacement,
    min_types_for_values,
    min_values_gap,
    narrow,
    worst_launch_price,
)
from nodesmith.core.disruption.simulation import simulate
from nodesmith.core.disruption.types import METHOD_MULTI_NODE, METHOD_SINGLE_NODE, Decision, Rejection
from nodesmith.core.model import CAPACITY_TYPE_SPOT

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

    from nodesmith.core.disruption.candidates import Candidate
    from nodesmith.core.disruption.pdb import PdbLimits
    from nodesmith.core.disruption.simulation import SimulationContext
    from nodesmith.core.disruption.types import DisruptionSettings
    from nodesmith.core.model import InstanceType, Pod
    from nodesmith.core.scheduling.types import NodeClaimPlan

__all__ = ["METHOD_REPACK", "FairPrices", "repack_consolidation"]

METHOD_REPACK = "consolidation"
"""``Rejection.method`` of the candidates this policy looked at and kept."""

_TOLERANCE = 1.10
"""A replacement keeps the types whose worst-case launch price is within 10 % of its cheapest."""
_INF = float("inf")
_GRID = (1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96)
_REFINE_STEPS = 4
_PRUNE_TRIALS = 12


class FairPrices:
    """Fair price of a pod (USD/hour): the cheapest cost of its dominant share of one instance type.

    ``min over types t that hold the pod of cheapest_price_t * max_r request_r / allocatable_r``;
    infinity when no type holds it. Cached per request shape.
    """

    def __init__(self, instance_types: Sequence[InstanceType]) -> None:
        self._types: list[tuple[float, Mapping[str, int]]] = []
        for it in instance_types:
            prices = [o.price for o in it.offerings if o.available and o.price == o.price]
            if prices:
                self._types.append((min(prices), it.allocatable))
        self._cache: dict[tuple[tuple[str, int], ...], float] = {}

    def of(self, pod: Pod) -> float:
        """The pod's fair price (USD/hour)."""
        shape = tuple(sorted((r, a) for r, a in pod.requests.items() if a > 0))
        value = self._cache.get(shape)
        if value is None:
            value = _INF
            for price, alloc in self._types:
                share = 0.0
                for r, amount in shape:
                    cap = alloc.get(r, 0)
                    if cap < amount:
                        share = _INF
                        break
                    share = max(share, amount / cap)
                value = min(value, price * share)
            self._cache[shape] = value
        return value


@dataclass(frozen=True, slots=True)
class _Trial:
    """One simulated prefix: its decision, or why it is not valid; ``net`` = saving - per-node charge."""

    decision: Decision | None
    net: float
    why_not: str = ""


def _launchable(plan: NodeClaimPlan, *, spot_allowed: bool) -> tuple[NodeClaimPlan | None, float]:
    """The replacement to launch for ``plan`` and its worst-case launch price (see module docstring)."""
    capacity_types = plan.capacity_types
    if CAPACITY_TYPE_SPOT in capacity_types and len(capacity_types) > 1 and spot_allowed:
        spot = frozenset({CAPACITY_TYPE_SPOT})
        if any(worst_launch_price(it, zones=plan.zones, capacity_types=spot) < _INF for it in plan.instance_types):
            capacity_types = spot
    if not spot_allowed:
        capacity_types = capacity_types - {CAPACITY_TYPE_SPOT}
    priced = [
        (worst_launch_price(it, zones=plan.zones, capacity_types=capacity_types), it) for it in plan.instance_types
    ]
    priced = sorted((p for p in priced if p[0] < _INF), key=lambda p: (p[0], p[1].name))
    if not priced:
        return None, _INF
    cap = priced[0][0] * _TOLERANCE
    keep = [it for worst, it in priced if worst <= cap]
    keep = [it for _, it in priced][: max(len(keep), min_types_for_values(plan, [it for _, it in priced]))]
    if min_values_gap(plan, keep) is not None:
        return None, _INF
    narrowed = narrow(plan, keep, capacity_types)
    return narrowed, max(worst_launch_price(it, zones=narrowed.zones, capacity_types=capacity_types) for it in keep)


def _spot_to_spot(
    plan: NodeClaimPlan, chosen: Sequence[Candidate], before: float, *, settings: DisruptionSettings
) -> tuple[NodeClaimPlan | None, float, str]:
    """A spot replacement of spot nodes under Karpenter's spot-to-spot rule (see
    :func:`~nodesmith.core.disruption.consolidation.cheaper_replacement`): only types cheaper than the
    nodes' ``before`` price (USD/hour), and for one node at least ``spot_to_spot_min_types`` of them,
    the cheapest that many kept, so a spot shortage leaves the launch fallbacks. Returns the plan, its
    worst-case launch price and '' or None, infinity and why not."""
    launch, why = cheaper_replacement(plan, chosen, before, single=len(chosen) == 1, settings=settings)
    if launch is None:
        return None, _INF, why
    spot = frozenset({CAPACITY_TYPE_SPOT})
    price = max(worst_launch_price(it, zones=launch.zones, capacity_types=spot) for it in launch.instance_types)
    return launch, price, ""


def _trial(ctx: SimulationContext, chosen: Sequence[Candidate], *, settings: DisruptionSettings, method: str) -> _Trial:
    """Taking ``chosen`` out and re-packing their pods (:func:`_priced`), no command when a ``Balanced`` NodePool
    among them does not approve it (:func:`~.balanced.balanced_approval`)."""
    trial = _priced(ctx, chosen, settings=settings, method=method)
    if trial.decision is None:
        return trial
    decision, refusal = balanced_approval(trial.decision, chosen, ctx.pool_totals)
    return replace(trial, decision=decision) if decision is not None else _Trial(None, -_INF, refusal)


def _priced(
    ctx: SimulationContext, chosen: Sequence[Candidate], *, settings: DisruptionSettings, method: str
) -> _Trial:
    sim = simulate(ctx, chosen, consolidation=True, packing="nodesmith", skip_uninitialized=True)
    if not sim.all_scheduled:
        return _Trial(None, -_INF, sim.explain_failures())
    if sim.uninitialized is not None:
        return _Trial(None, -_INF, f"would schedule pods on uninitialized node {sim.uninitialized}")
    all_spot = all(c.facts.capacity_type == CAPACITY_TYPE_SPOT for c in chosen)
    spot_allowed = settings.spot_to_spot or not all_spot
    before = sum(c.price for c in chosen)
    replacements: list[NodeClaimPlan] = []
    worst = 0.0
    for nc in sim.new_nodeclaims:
        if all_spot and spot_allowed and CAPACITY_TYPE_SPOT in nc.capacity_types:
            launch, price, why = _spot_to_spot(nc, chosen, before, settings=settings)
            if launch is None:
                return _Trial(None, -_INF, why)
        else:
            launch, price = _launchable(nc, spot_allowed=spot_allowed)
            if launch is None:
                return _Trial(None, -_INF, "a replacement has no launchable offering (spot-to-spot off?)")
        replacements.append(launch)
        worst += price
    saving = before - worst
    net = (
        saving
        - settings.min_savings_per_disrupted_node * len(chosen)
        - settings.min_savings_per_evicted_pod * len(sim.moved)
    )
    if saving <= 0 or saving < settings.min_savings_per_hour or net <= 0:
        return _Trial(
            None,
            -_INF,
            f"saves at worst ${saving:.4f}/h for {len(chosen)} node(s), below the minimum "
            f"(${settings.min_savings_per_hour:.4f}/h, ${settings.min_savings_per_disrupted_node:.4f}/h per node)",
        )
    after = sum(r.price_per_hour for r in replacements)
    pods = tuple(sorted(sim.moved))
    verb = f"replace with {len(replacements)} NodeClaim(s) from ${after:.4f}/h" if replacements else "delete"
    decision = Decision(
        method=METHOD_SINGLE_NODE if method == METHOD_SINGLE_NODE else METHOD_MULTI_NODE,
        nodes=tuple(c.name for c in chosen),
        cause="Underutilized",
        reason=(
            f"nodesmith policy: {verb}: {len(chosen)} node(s) at ${before:.4f}/h, {len(pods)} pod(s) re-packed "
            f"(at worst ${worst:.4f}/h after, saving ${saving:.4f}/h)"
        ),
        nodepools=tuple(sorted({c.nodepool.name for c in chosen})),
        replacements=tuple(replacements),
        cost_before=before,
        cost_after=after,
        pods=pods,
        placements=tuple(sorted(sim.placements.items())),
    )
    return _Trial(decision, net)


def _ranked(
    candidates: Sequence[Candidate],
    *,
    budgets: Mapping[str, int],
    limits: PdbLimits,
    fair: FairPrices,
    cap: int,
) -> tuple[list[Candidate], list[Rejection]]:
    """Candidates by estimated saving per moving pod, within budgets and PDB allowances (see module docstring)."""

    def key(c: Candidate) -> tuple[float, float, str]:
        value = sum(fair.of(p) for p in c.moving_pods)
        return (-(c.price - value) / max(1, len(c.moving_pods)), c.disruption_cost, c.name)

    left = dict(budgets)
    used: dict[str, int] = {}
    allowed: dict[str, int] = {}
    out: list[Candidate] = []
    rejected: list[Rejection] = []
    for c in sorted(candidates, key=key):
        pool = c.nodepool.name
        if left.get(pool, 0) <= 0:
            rejected.append(Rejection(c.name, f'NodePool "{pool}" Underutilized budget exhausted', METHOD_REPACK))
            continue
        need: dict[str, int] = {}
        for pod in c.moving_pods:
            hit = limits.allowance(pod)
            if hit is not None:
                need[hit[0]] = need.get(hit[0], 0) + 1
                allowed[hit[0]] = hit[1]
        over = next((k for k, n in need.items() if used.get(k, 0) and used[k] + n > allowed[k]), None)
        if over is not None:
            rejected.append(
                Rejection(
                    c.name,
                    f"PodDisruptionBudget {over} allows {allowed[over]} disruption(s), already used by this command",
                    METHOD_REPACK,
                )
            )
            continue
        for k, n in need.items():
            used[k] = used.get(k, 0) + n
        left[pool] -= 1
        out.append(c)
        if len(out) >= cap:
            break
    return out, rejected


def _prune(
    ctx: SimulationContext, chosen: Sequence[Candidate], trial: _Trial, *, settings: DisruptionSettings
) -> _Trial:
    """Leave out nodes of ``chosen`` whose disruption does not pay: first those whose instance type a
    replacement would launch again, then the last ranked; a node stays out when the command is worth
    at least as much without it. At most ``_PRUNE_TRIALS`` simulations."""
    relaunched = {r.instance_types[0].name for r in trial.decision.replacements} if trial.decision else set()
    order = sorted(
        range(len(chosen)),
        key=lambda i: (chosen[i].facts.instance_type_name not in relaunched, -i),
    )
    current = list(chosen)
    for i in order[:_PRUNE_TRIALS]:
        if len(current) <= 1:
            break
        without = [c for c in current if c.name != chosen[i].name]
        method = METHOD_SINGLE_NODE if len(without) == 1 else METHOD_MULTI_NODE
        attempt = _trial(ctx, without, settings=settings, method=method)
        if attempt.decision is not None and attempt.net >= trial.net:
            current, trial = without, attempt
    return trial


def repack_consolidation(
    ctx: SimulationContext,
    candidates: Sequence[Candidate],
    *,
    budgets: Mapping[str, int],
    settings: DisruptionSettings,
    limits: PdbLimits,
) -> tuple[Decision | None, list[Rejection]]:
    """The ``nodesmith`` policy's consolidation command, or None, with the candidates it kept and why.

    ``candidates`` are the consolidation-eligible candidates (non-empty, unblocked, quiet period
    over); ``budgets`` the ``Underutilized`` disruptions allowed per NodePool; ``limits`` the
    cluster's PDBs. Rules in the module docstring.
    """
    scored: list[Rejection] = []
    if ctx.pool_totals:  # a node of a Balanced NodePool that even deleting would not score is left out
        left_out = {c.name: why for c in candidates if (why := hopeless(c, ctx.pool_totals)) is not None}
        scored = [Rejection(name, why, METHOD_REPACK) for name, why in left_out.items()]
        candidates = [c for c in candidates if c.name not in left_out]
    ranked, rejected = _ranked(
        candidates,
        budgets=budgets,
        limits=limits,
        fair=FairPrices(ctx.instance_types),
        cap=settings.max_multi_node_candidates,
    )
    rejected = [*scored, *rejected]
    if not ranked:
        return None, rejected
    trials: dict[int, _Trial] = {}

    def run(k: int) -> _Trial:
        if k not in trials:
            method = METHOD_SINGLE_NODE if k == 1 else METHOD_MULTI_NODE
            trials[k] = _trial(ctx, ranked[:k], settings=settings, method=method)
        return trials[k]

    n = len(ranked)
    for k in sorted({*(g for g in _GRID if g < n), n}):
        run(k)
    best = max(trials, key=lambda k: (trials[k].net, -k))
    for _ in range(_REFINE_STEPS):
        below = max((k for k in trials if k < best), default=0)
        above = min((k for k in trials if k > best), default=n + 1)
        probes = {(below + best) // 2, (best + above) // 2} - {0, n + 1, *trials}
        probes = {k for k in probes if 1 <= k <= n}
        if not probes:
            break
        for k in probes:
            run(k)
        best = max(trials, key=lambda k: (trials[k].net, -k))
    chosen = trials[best]
    if chosen.decision is not None:
        chosen = _prune(ctx, ranked[:best], chosen, settings=settings)
    if chosen.decision is None:
        why = chosen.why_not or "no set of nodes saves enough"
        rejected.extend(Rejection(c.name, f"nodesmith policy: {why}", METHOD_REPACK) for c in ranked[:1])
        return None, rejected
    taken = set(chosen.decision.nodes)
    kept = [c for c in ranked if c.name not in taken]
    rejected.extend(
        Rejection(c.name, "nodesmith policy: moving its pods saves less than keeping the node", METHOD_REPACK)
        for c in kept
    )
    return replace(chosen.decision, rejected=tuple(rejected)), rejected
