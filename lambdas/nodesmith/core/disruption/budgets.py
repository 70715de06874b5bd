"""Disruption budgets: how many nodes of a NodePool may be voluntarily disrupted now, per reason.

Follows Karpenter v1 (``karpenter-v1.md`` §1.1):

* ``[core]:pkg/apis/v1/nodepool.go`` ``GetAllowedDisruptionsByReason`` / ``Budget.GetAllowedDisruptions``
  / ``Budget.IsActive``: a budget without ``schedule`` is always active; with one it is active when
  the schedule fired within the last ``duration`` (robfig/cron ``Next(now - duration) <= now``,
  i.e. a firing ``t`` with ``now - duration < t <= now``, UTC). An active budget allows
  ``nodes`` (an integer) or ``ceil(percent x pool nodes / 100)``; an inactive one is unbounded.
  The pool's limit for a reason is the minimum over the budgets whose ``reasons`` are unset or
  contain the reason. Any misconfigured budget (bad cron, bad ``nodes``, bad ``duration``) makes
  the whole pool allow **0** for every reason (``MustGetAllowedDisruptions`` fails closed).
* ``[core]:pkg/controllers/disruption/helpers.go BuildDisruptionBudgetMapping``: pool nodes are
  managed, initialized nodes whose NodeClaim is not ``InstanceTerminating``; of those, nodes that
  are NotReady or already marked for deletion are subtracted from the limit (never below 0).

Times are epoch seconds. Counts are nodes.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final, Literal

from nodesmith.core.api.common import parse_duration
from nodesmith.core.disruption.cron import CronError, last_hit, parse_cron

if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping, Sequence

    from nodesmith.core.api.nodepool import Budget, NodePool

__all__ = [
    "REASONS",
    "REASON_DRIFTED",
    "REASON_EMPTY",
    "REASON_UNDERUTILIZED",
    "REASON_UNHEALTHY",
    "UNBOUNDED",
    "AllowedDisruptions",
    "BudgetError",
    "BudgetNode",
    "DisruptionReason",
    "PoolBudget",
    "allowed_by_budget",
    "allowed_disruptions",
    "budget_is_active",
    "budget_mapping",
]

DisruptionReason = Literal["Empty", "Drifted", "Underutilized", "Unhealthy"]
REASON_EMPTY: Final = "Empty"
REASON_DRIFTED: Final = "Drifted"
REASON_UNDERUTILIZED: Final = "Underutilized"
REASON_UNHEALTHY: Final = "Unhealthy"
"""Node repair's reason (Karpenter v1.15 ``DisruptionReasonUnhealthy``): budgets may name it in ``reasons``."""
REASONS: Final = (REASON_EMPTY, REASON_DRIFTED, REASON_UNDERUTILIZED, REASON_UNHEALTHY)

UNBOUNDED: Final = 2**31 - 1
"""What an inactive budget allows (Karpenter's ``math.MaxInt32``)."""

_NODES = re.compile(r"^(?:(?P<pct>100|[0-9]{1,2})%|(?P<count>[0-9]+))$")


class BudgetError(ValueError):
    """A budget Karpenter would treat as misconfigured (and fail closed on)."""


def budget_is_active(budget: Budget, *, now: float) -> bool:
    """True when ``budget`` applies at ``now`` (epoch seconds, UTC).

    No schedule: always active. Schedule + duration: active when the schedule fired at some
    ``t`` with ``now - duration < t <= now``.

    Raises
    ------
    BudgetError
        When the schedule is not a cron robfig/cron accepts, or the duration is not a duration,
        or only one of the two is set.
    """
    if budget.schedule is None and budget.duration is None:
        return True
    if budget.schedule is None or budget.duration is None:
        raise BudgetError("'schedule' must be set with 'duration'")
    try:
        schedule = parse_cron(budget.schedule)
    except CronError as exc:
        raise BudgetError(f"schedule {budget.schedule!r}: {exc}") from exc
    try:
        seconds = parse_duration(budget.duration)
    except ValueError as exc:
        raise BudgetError(f"duration {budget.duration!r}: {exc}") from exc
    if seconds is None or seconds < 0:
        raise BudgetError(f"duration {budget.duration!r} must be a non-negative duration")
    return last_hit(schedule, at_or_before=now, after=now - seconds) is not None


def allowed_by_budget(budget: Budget, *, now: float, num_nodes: int) -> int:
    """Nodes one budget allows disrupting at ``now``: :data:`UNBOUNDED` when inactive, else
    ``nodes`` as a count or ``ceil(percent x num_nodes / 100)`` (Kubernetes
    ``GetScaledValueFromIntOrPercent`` with round-up, as Karpenter).

    Raises
    ------
    BudgetError
        For a misconfigured schedule/duration (see :func:`budget_is_active`) or ``nodes``.
    """
    if not budget_is_active(budget, now=now):
        return UNBOUNDED
    match = _NODES.match(budget.nodes.strip())
    if match is None:
        raise BudgetError(f"nodes {budget.nodes!r} is neither a count nor a percentage")
    if match.group("pct") is not None:
        return math.ceil(int(match.group("pct")) * num_nodes / 100)
    return int(match.group("count"))


@dataclass(frozen=True, slots=True)
class AllowedDisruptions:
    """What a NodePool's budgets allow for one reason before subtracting nodes already disrupting.

    ``allowed`` is a node count (:data:`UNBOUNDED` when no active budget applies); ``limiting``
    is the index of the budget that set it (None when unbounded); ``error`` names the first
    misconfigured budget (``allowed`` is then 0).
    """

    allowed: int
    limiting: int | None
    error: str | None = None


def allowed_disruptions(nodepool: NodePool, *, now: float, num_nodes: int, reason: str) -> AllowedDisruptions:
    """The minimum over ``nodepool``'s active budgets that apply to ``reason`` (Empty, Drifted,
    Underutilized); 0 with an ``error`` when any budget is misconfigured (fail closed)."""
    allowed = UNBOUNDED
    limiting: int | None = None
    for index, budget in enumerate(nodepool.spec.disruption.budgets):
        try:
            value = allowed_by_budget(budget, now=now, num_nodes=num_nodes)
        except BudgetError as exc:
            return AllowedDisruptions(allowed=0, limiting=index, error=f"budgets[{index}]: {exc}")
        if (budget.reasons is None or reason in budget.reasons) and value < allowed:
            allowed = value
            limiting = index
    return AllowedDisruptions(allowed=allowed, limiting=limiting)


@dataclass(frozen=True, slots=True)
class BudgetNode:
    """What the budget arithmetic needs to know about one node.

    ``counted``: managed by a NodePool, initialized and not ``InstanceTerminating`` (it counts in
    the pool size). ``disrupting``: NotReady or already marked for deletion (it consumes budget).
    """

    nodepool: str
    counted: bool
    disrupting: bool


@dataclass(frozen=True, slots=True)
class PoolBudget:
    """The budget of one NodePool for one reason, explained.

    ``allowed`` is how many more nodes may be disrupted now (>= 0); ``limit`` what the budgets
    allow before subtracting the ``disrupting`` nodes; ``nodes`` the pool size used for percentages.
    """

    nodepool: str
    reason: str
    allowed: int
    limit: int
    nodes: int
    disrupting: int
    limiting_budget: int | None = None
    error: str | None = None

    def explain(self) -> str:
        """One sentence for logs and rejection reasons."""
        if self.error is not None:
            return f'NodePool "{self.nodepool}" has a misconfigured budget ({self.error}): no {self.reason} disruptions'
        limit = "unbounded" if self.limit >= UNBOUNDED else str(self.limit)
        where = f" by budgets[{self.limiting_budget}]" if self.limiting_budget is not None else ""
        return (
            f'NodePool "{self.nodepool}" allows {self.allowed} more {self.reason} disruption(s) '
            f"(limit {limit}{where} of {self.nodes} node(s), {self.disrupting} already disrupting or NotReady)"
        )


def budget_mapping(
    *, nodepools: Sequence[NodePool], nodes: Iterable[BudgetNode], now: float, reason: str
) -> Mapping[str, PoolBudget]:
    """Per NodePool name, how many nodes may still be disrupted for ``reason`` at ``now``.

    ``allowed = max(0, min over applicable active budgets - disrupting)`` with percentages of the
    pool's counted nodes (``BuildDisruptionBudgetMapping``). NodePools without nodes are included
    (with ``nodes=0``).
    """
    counts: dict[str, int] = {}
    disrupting: dict[str, int] = {}
    for node in nodes:
        if not node.counted:
            continue
        counts[node.nodepool] = counts.get(node.nodepool, 0) + 1
        if node.disrupting:
            disrupting[node.nodepool] = disrupting.get(node.nodepool, 0) + 1
    out: dict[str, PoolBudget] = {}
    for pool in nodepools:
        n = counts.get(pool.name, 0)
        busy = disrupting.get(pool.name, 0)
        got = allowed_disruptions(pool, now=now, num_nodes=n, reason=reason)
        out[pool.name] = PoolBudget(
            nodepool=pool.name,
            reason=reason,
            allowed=max(0, got.allowed - busy),
            limit=got.allowed,
            nodes=n,
            disrupting=busy,
            limiting_budget=got.limiting,
            error=got.error,
        )
    return out
