"""Reporting of a disruption pass: what it did (:class:`DisruptionOutcome`), the JSON-safe record
that explains each decision, and the short summary the reconcile pass logs.

Split out of :mod:`.disruption`; the flow that fills these lives in :mod:`.disruption_pass`,
:mod:`.disruption_inflight` and :mod:`.disruption_command`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Mapping

    from nodesmith.core.disruption import Decision
    from nodesmith.services.breakdown import PoolKey

__all__ = ["DisruptionOutcome", "explain", "summary", "tally"]

_MAX_LOGGED_REJECTIONS = 50


@dataclass(slots=True)
class DisruptionOutcome:
    """What one :func:`~nodesmith.services.disruption.service.disrupt` call did.

    ``decisions`` are JSON-safe explanations (one per command found, validated, executed or
    finished, and per expiration); ``executed`` counts commands started by method; ``savings_per_hour``
    sums ``cost_before - cost_after`` of commands started now (USD/hour), ``savings_by_method`` splits
    it by the method that claims it. ``nodes_terminated`` are the nodes whose termination this pass requested
    (the termination function drains them and counts them terminated); ``errors`` describe calls that
    failed without stopping the pass. ``created_by`` / ``launched_by`` count replacement NodeClaims by
    (NodePool, capacity type). ``consolidation_skipped`` is True when consolidation was not computed because the
    cluster's consolidation state was the one an earlier pass found nothing in (:mod:`.consolidated`).
    """

    decisions: list[dict[str, Any]] = field(default_factory=list)
    executed: dict[str, int] = field(default_factory=dict)
    savings_per_hour: float = 0.0
    savings_by_method: dict[str, float] = field(default_factory=dict)
    candidates: list[str] = field(default_factory=list)
    nodes_terminated: list[str] = field(default_factory=list)
    created_by: dict[PoolKey, int] = field(default_factory=dict)
    launched_by: dict[PoolKey, int] = field(default_factory=dict)
    replacements_launched: list[str] = field(default_factory=list)
    rejected: int = 0
    errors: list[str] = field(default_factory=list)
    consolidation_skipped: bool = False


def explain(decision: Decision, *, stage: str) -> dict[str, Any]:
    """The JSON-safe record of ``decision`` at ``stage`` (``candidate``, ``executed``, ...): method,
    cause, nodes, replacements (first five instance types each), costs in USD/hour, pods, and the
    first 50 rejected candidates with why (``rejected_total`` counts them all), and the ``Balanced`` score that
    approved it when there is one (``approval``)."""
    rejected = [
        {"node": r.node, "method": r.method, "reason": r.reason} for r in decision.rejected[:_MAX_LOGGED_REJECTIONS]
    ]
    record: dict[str, Any] = {
        "stage": stage,
        "method": decision.method,
        "cause": decision.cause,
        "reason": decision.reason,
        "nodes": list(decision.nodes),
        "nodepools": list(decision.nodepools),
        "replacements": [
            {"nodepool": p.nodepool, "instance_types": [it.name for it in p.instance_types[:5]]}
            for p in decision.replacements
        ],
        "cost_before_usd_per_hour": round(decision.cost_before, 6),
        "cost_after_usd_per_hour": round(decision.cost_after, 6),
        "savings_usd_per_hour": round(decision.savings_per_hour, 6),
        "pods": list(decision.pods),
        "rejected": rejected,
        "rejected_total": len(decision.rejected),
    }
    if decision.approval:
        record["approval"] = decision.approval
    return record


def tally(counts: dict[PoolKey, int], key: PoolKey) -> None:
    """Add one to ``counts[key]``."""
    counts[key] = counts.get(key, 0) + 1


def summary(outcome: DisruptionOutcome) -> Mapping[str, Any]:
    """A short JSON-safe summary of ``outcome`` for the reconcile pass summary."""
    return {
        "executed": dict(outcome.executed),
        "candidates": list(outcome.candidates),
        "nodes_terminated": list(outcome.nodes_terminated),
        "replacements_launched": list(outcome.replacements_launched),
        "savings_usd_per_hour": round(outcome.savings_per_hour, 6),
        "consolidation_skipped": outcome.consolidation_skipped,
        "errors": list(outcome.errors),
    }
