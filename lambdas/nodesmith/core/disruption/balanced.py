"""The ``Balanced`` consolidation policy: consolidate only when the savings outweigh the disruption.

Karpenter v1.14's ``consolidationPolicy: Balanced`` (``[core]:pkg/controllers/disruption/balanced.go``, the
``Balanced consolidation`` section of ``concepts/disruption``) considers the same nodes as
``WhenEmptyOrUnderutilized``, but scores each consolidation move of a Balanced NodePool and carries it out only
when the score reaches ``1 / k`` (:data:`BALANCED_K` = 2, so 0.5):

* ``savings fraction`` = the move's savings (the nodes' price minus the replacement's cheapest price, USD/hour) /
  the NodePool's total price (every node of the pool);
* ``disruption fraction`` = the move's disruption cost / the NodePool's total disruption cost, where a node's
  disruption cost is :data:`PER_NODE_BASE_DISRUPTION_COST` (1.0) plus the eviction cost of each pod that would move
  (:func:`~.candidates.eviction_cost`, floored at 0: priority and ``controller.kubernetes.io/pod-deletion-cost``
  make a pod weigh more or less), summed over every node of the pool for the total;
* ``score`` = savings fraction / disruption fraction: 0 when the move saves nothing or a pool total is not
  positive, infinite when it disrupts nothing.

A move spanning several NodePools is scored per Balanced pool, each pool credited with the savings in proportion
to its share of the nodes' price; every Balanced pool must approve, other pools are not scored. Deleting empty
nodes (emptiness), drift, expiration and repair are never scored. Pure; prices USD/hour.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from nodesmith.core.disruption.candidates import eviction_cost, is_reschedulable

if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping, Sequence

    from nodesmith.core.api.nodepool import NodePool
    from nodesmith.core.disruption.candidates import Candidate, NodeFacts
    from nodesmith.core.disruption.types import ClusterNode, Decision
    from nodesmith.core.model import Pod

__all__ = [
    "BALANCED",
    "BALANCED_K",
    "PER_NODE_BASE_DISRUPTION_COST",
    "PoolTotals",
    "balanced_approval",
    "hopeless",
    "move_disruption_cost",
    "pool_totals",
    "score",
]

BALANCED = "Balanced"
"""The ``consolidationPolicy`` value."""

BALANCED_K = 2
"""Karpenter's ``BalancedK``: a move is approved when its score is at least ``1 / BALANCED_K``."""

PER_NODE_BASE_DISRUPTION_COST = 1.0
"""Karpenter's ``PerNodeBaseDisruptionCost``: what disrupting a node costs before counting its pods."""


@dataclass(frozen=True, slots=True)
class PoolTotals:
    """One NodePool's totals for scoring: ``cost`` (USD/hour, every node's price) and ``disruption`` (the sum of
    every node's disruption cost, :func:`move_disruption_cost` of its pods)."""

    cost: float
    disruption: float


def _pods_cost(pods: Iterable[Pod]) -> float:
    return PER_NODE_BASE_DISRUPTION_COST + sum(max(0.0, eviction_cost(p)) for p in pods)


def move_disruption_cost(candidates: Iterable[Candidate]) -> float:
    """The disruption cost of disrupting ``candidates``: per node, :data:`PER_NODE_BASE_DISRUPTION_COST` plus the
    non-negative eviction costs of the pods that would move (Karpenter's ``computeRescheduleDisruptionCost``)."""
    return sum(_pods_cost(c.reschedulable_pods) for c in candidates)


def pool_totals(
    nodes: Iterable[ClusterNode], *, facts: Mapping[str, NodeFacts], nodepools: Sequence[NodePool]
) -> dict[str, PoolTotals]:
    """The :class:`PoolTotals` of each Balanced NodePool of ``nodepools`` over its nodes (those of ``nodes`` whose
    ``facts`` name it): a node's price, and its disruption cost over the pods that would move were it disrupted
    (Karpenter's ``StateNode.DisruptionCost``). NodePools of other policies are left out."""
    balanced = {p.name for p in nodepools if p.spec.disruption.consolidation_policy == BALANCED}
    if not balanced:
        return {}
    cost: dict[str, float] = dict.fromkeys(balanced, 0.0)
    disruption: dict[str, float] = dict.fromkeys(balanced, 0.0)
    for cn in nodes:
        f = facts.get(cn.name)
        if f is None or f.nodepool not in balanced:
            continue
        cost[f.nodepool] += f.price
        disruption[f.nodepool] += _pods_cost(p for p in cn.pods if is_reschedulable(p))
    return {name: PoolTotals(cost=cost[name], disruption=disruption[name]) for name in balanced}


def score(*, savings: float, disruption: float, totals: PoolTotals) -> float:
    """``(savings / totals.cost) / (disruption / totals.disruption)`` (module docstring): 0 when ``savings`` is not
    positive or a total is not, infinite when ``disruption`` is 0."""
    if totals.cost <= 0 or totals.disruption <= 0:
        return 0.0
    saved = savings / totals.cost
    if saved <= 0:
        return 0.0
    disrupted = disruption / totals.disruption
    if disrupted <= 0:
        return math.inf
    return saved / disrupted


def _threshold() -> float:
    return 1.0 / BALANCED_K


def balanced_approval(
    decision: Decision, candidates: Sequence[Candidate], totals: Mapping[str, PoolTotals]
) -> tuple[Decision | None, str]:
    """``decision`` (a consolidation of ``candidates``) as the ``Balanced`` policy of their NodePools lets it be
    carried out, or None and why not. Unchanged when none of them is Balanced (none is in ``totals``); else carried
    out when every Balanced NodePool among them scores it at least ``1 / BALANCED_K``, with the scores in words in
    its ``approval`` (as Karpenter's ``ConsolidationApproved`` Event gives them), and refused with the first score
    that fell short.

    The savings are ``decision.cost_before - decision.cost_after``, shared among the NodePools by their nodes' price.
    """
    pools = sorted({c.nodepool.name for c in candidates if c.nodepool.name in totals})
    if not pools:
        return decision, ""
    before = sum(c.price for c in candidates)
    savings = decision.cost_before - decision.cost_after
    said: list[str] = []
    for name in pools:
        mine = [c for c in candidates if c.nodepool.name == name]
        share = sum(c.price for c in mine) / before if before > 0 else 0.0
        t = totals[name]
        disruption = move_disruption_cost(mine)
        value = score(savings=savings * share, disruption=disruption, totals=t)
        text = _explain(name, value, savings * share, disruption, t)
        if value < _threshold():
            return None, text
        said.append(text)
    return replace(decision, approval="; ".join(said)), ""


def hopeless(candidate: Candidate, totals: Mapping[str, PoolTotals]) -> str | None:
    """Why ``candidate`` cannot pass its Balanced NodePool's threshold even if deleting it saved its whole price
    (Karpenter's ``CanPassThreshold``, so single-node consolidation skips it without simulating), or None."""
    t = totals.get(candidate.nodepool.name)
    if t is None:
        return None
    disruption = move_disruption_cost([candidate])
    value = score(savings=candidate.price, disruption=disruption, totals=t)
    if value < _threshold():
        return _explain(candidate.nodepool.name, value, candidate.price, disruption, t, best_case=True)
    return None


def _explain(
    pool: str, value: float, savings: float, disruption: float, t: PoolTotals, *, best_case: bool = False
) -> str:
    saved = 100.0 * savings / t.cost if t.cost > 0 else 0.0
    disrupted = 100.0 * disruption / t.disruption if t.disruption > 0 else 0.0
    what = "even deleting it scores" if best_case else "the move scores"
    relation = ">=" if value >= _threshold() else "<"
    return (
        f'NodePool "{pool}" is Balanced: {what} {value:.2f} {relation} {_threshold():.2f} '
        f"(saves {saved:.1f}% of its cost, disrupts {disrupted:.1f}% of its pods' weight)"
    )
