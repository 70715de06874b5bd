"""Emptiness: delete nodes that run nothing but DaemonSet (or mirror) pods once ``consolidateAfter`` has passed.

Follows Karpenter ``[core]:pkg/controllers/disruption/emptiness.go`` and the ``Consolidatable``
condition of ``[core]:pkg/controllers/nodeclaim/disruption/consolidation.go``:

* applies to every consolidation policy (``WhenEmpty``, ``WhenEmptyOrUnderutilized``, ``Balanced``);
  ``consolidateAfter: Never`` disables it; static NodePools are left alone;
* a node is empty when none of its pods would have to move (only DaemonSet, mirror and finished
  pods; Karpenter v1.14 also calls a node empty when all its pods have a non-positive eviction
  cost — Nodesmith does not, which only disrupts less);
* it is consolidatable once ``now - last pod event >= consolidateAfter`` (the last time a pod was
  bound to or left the node; see :class:`~nodesmith.core.disruption.candidates.NodeFacts`);
* every such node within the NodePool's ``Empty`` budget goes into **one** delete command,
  most expensive first so a tight budget removes the priciest nodes.

Times are epoch seconds; prices USD/hour.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from nodesmith.core.disruption.types import METHOD_EMPTINESS, Decision, Rejection

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

    from nodesmith.core.disruption.candidates import Candidate

__all__ = ["consolidate_after_left", "emptiness_block", "emptiness_command"]


def consolidate_after_left(candidate: Candidate, *, now: float) -> float | None:
    """Seconds left in the node's ``consolidateAfter`` quiet period (0 when elapsed), None when
    consolidation is disabled (``Never``) or the value cannot be read."""
    try:
        after = candidate.nodepool.spec.disruption.consolidate_after_seconds()
    except ValueError:
        return None
    if after is None:
        return None
    return max(0.0, after - (now - candidate.facts.last_pod_event))


def emptiness_block(candidate: Candidate, *, now: float) -> str | None:
    """Why an empty ``candidate`` cannot be removed by emptiness now, or None (it can)."""
    pool = candidate.nodepool
    if pool.spec.replicas is not None:
        return f'NodePool "{pool.name}" is static (replicas)'
    left = consolidate_after_left(candidate, now=now)
    if left is None:
        return f'NodePool "{pool.name}" has consolidation disabled (consolidateAfter: Never)'
    if left > 0:
        return f"empty, but consolidateAfter has {left:.0f}s left since the last pod event"
    if candidate.pod_block is not None:
        return candidate.pod_block
    return None


def emptiness_command(
    candidates: Sequence[Candidate], *, budgets: Mapping[str, int], now: float
) -> tuple[Decision | None, list[Rejection]]:
    """One delete command for every empty, consolidatable candidate the ``Empty`` budgets allow.

    ``budgets`` maps NodePool names to how many more nodes may be disrupted for ``Empty``.
    Returns the decision (None when no node qualifies) and the empty nodes turned down, with why.
    """
    rejected: list[Rejection] = []
    chosen: list[Candidate] = []
    left = dict(budgets)
    for c in sorted((c for c in candidates if c.is_empty), key=lambda c: (-c.price, c.name)):
        why = emptiness_block(c, now=now)
        if why is not None:
            if why != c.pod_block:  # pod blocks are already reported by the candidate filter
                rejected.append(Rejection(c.name, why, METHOD_EMPTINESS))
            continue
        if left.get(c.nodepool.name, 0) <= 0:
            rejected.append(Rejection(c.name, f'NodePool "{c.nodepool.name}" Empty budget exhausted', METHOD_EMPTINESS))
            continue
        left[c.nodepool.name] -= 1
        chosen.append(c)
    if not chosen:
        return None, rejected
    before = sum(c.price for c in chosen)
    names = ", ".join(c.name for c in chosen)
    decision = Decision(
        method=METHOD_EMPTINESS,
        nodes=tuple(c.name for c in chosen),
        cause="Empty",
        reason=f"{names}: no pods but DaemonSet/mirror pods for at least consolidateAfter",
        nodepools=tuple(sorted({c.nodepool.name for c in chosen})),
        cost_before=before,
        cost_after=0.0,
        rejected=tuple(rejected),
    )
    return decision, rejected
