"""Node repair: which nodes have been unhealthy past their toleration, and the one repair command of a pass.

Karpenter v1.15 makes repair a voluntary disruption method, first in the loop when the alpha feature gate
``NodeRepair`` is on (``[core]:pkg/controllers/disruption/repair.go``; before v1.15 the forceful
``pkg/controllers/node/health/controller.go``). Its rules, reproduced here:

* **Policies.** A node needs repair when one of its conditions has had a policy's status for longer than
  the policy's toleration, counted from the condition's ``lastTransitionTime`` (a condition without one
  counts as long ago, as Go's zero time does). The AWS provider's policies
  (``[aws]:pkg/cloudprovider/cloudprovider.go RepairPolicies``) are :data:`AWS_REPAIR_POLICIES`: ``Ready``
  ``False`` or ``Unknown`` for 30 min; the node monitoring agent's ``AcceleratedHardwareReady`` ``False`` for
  10 min; ``StorageReady``, ``NetworkingReady``, ``KernelReady``, ``ContainerRuntimeReady`` ``False`` for
  30 min. When several match, the one whose toleration ends first is the node's (``findUnhealthyConditions``).
* **Vetoes.** ``karpenter.sh/do-not-repair: "true"`` on the Node or its NodeClaim blocks repair;
  ``karpenter.sh/do-not-disrupt`` on the node does not. A node with pods that block eviction (an active
  do-not-disrupt, a PodDisruptionBudget at 0) is repaired only when a drain bound exists (the policy's
  termination grace period or the NodeClaim's ``terminationGracePeriod``); otherwise ``DisruptionBlocked``
  "repair requires a termination grace period to bypass blocking pods".
* **Circuit breaker.** A NodePool with more than ``ceil(20% x its nodes)`` unhealthy nodes is not repaired
  (``NodeRepairBlocked``: "more than 20% of nodes in nodepool ... are unhealthy"). A node counts as
  unhealthy as soon as a condition matches a policy, whatever its toleration (``breakerTrippedPools``).
* **Budgets.** Repair consumes the NodePool's disruption budget for reason ``Unhealthy`` (a budget without
  ``reasons`` applies to it too). As in Karpenter's ``BuildDisruptionBudgetMapping``, NotReady nodes of the
  pool, the one being repaired included, already consume that budget.
* **Order and command.** Candidates are taken most overdue first (time past the toleration over the
  toleration), then by lower disruption cost, then by name; one command per pass. The node's pods, the
  blocked ones included, are simulated elsewhere: a replacement is pre-spun and must be initialized before
  the node is drained (the usual command path). When the pods would fit only if the node's capacity were
  already freed, the NodePool cannot hold a replacement within its ``limits``: the command deletes the node
  first and the next provisioning pass replaces it (terminate-first). When they fit nowhere,
  ``DisruptionBlocked`` says why.
* **Drain bound.** ``min(policy grace period, NodeClaim terminationGracePeriod)`` when the policy has one,
  else the NodeClaim's own (:func:`effective_drain_bound`).

Pure: times are epoch seconds passed in; durations are seconds.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Final

from nodesmith.core.disruption.simulation import simulate
from nodesmith.core.disruption.types import METHOD_REPAIR, Decision, Rejection
from nodesmith.core.labels import LABEL_NODEPOOL

if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping, Sequence

    from nodesmith.core.disruption.candidates import Candidate
    from nodesmith.core.disruption.simulation import SimulationContext
    from nodesmith.core.model import Node, NodeCondition

__all__ = [
    "AWS_REPAIR_POLICIES",
    "DO_NOT_REPAIR_ANNOTATION",
    "NODE_REPAIR_BLOCKED",
    "REASON_UNHEALTHY",
    "UNHEALTHY_THRESHOLD_PERCENT",
    "RepairPolicy",
    "Unhealthy",
    "effective_drain_bound",
    "overdue",
    "repair_command",
    "tripped_pools",
    "unhealthy_condition",
]

DO_NOT_REPAIR_ANNOTATION: Final = "karpenter.sh/do-not-repair"
REASON_UNHEALTHY: Final = "Unhealthy"
NODE_REPAIR_BLOCKED: Final = "NodeRepairBlocked"
UNHEALTHY_THRESHOLD_PERCENT: Final = 20
"""``repairUnhealthyThreshold``: more than this share of a NodePool's nodes unhealthy stops its repair."""
_NO_DRAIN_BOUND: Final = "repair requires a termination grace period to bypass blocking pods"


@dataclass(frozen=True, slots=True)
class RepairPolicy:
    """A condition that needs repair: ``condition_type`` at ``status`` for longer than ``toleration``
    seconds. ``termination_grace_period`` (seconds) bounds the drain of a node repaired for it; None leaves
    the NodeClaim's own ``terminationGracePeriod``."""

    condition_type: str
    status: str
    toleration: float
    termination_grace_period: float | None = None


AWS_REPAIR_POLICIES: Final = (
    RepairPolicy("Ready", "False", 30 * 60.0),
    RepairPolicy("Ready", "Unknown", 30 * 60.0),
    RepairPolicy("AcceleratedHardwareReady", "False", 10 * 60.0),
    RepairPolicy("StorageReady", "False", 30 * 60.0),
    RepairPolicy("NetworkingReady", "False", 30 * 60.0),
    RepairPolicy("KernelReady", "False", 30 * 60.0),
    RepairPolicy("ContainerRuntimeReady", "False", 30 * 60.0),
)
"""The AWS provider's policies (``[aws]:pkg/cloudprovider/cloudprovider.go RepairPolicies``); none sets a
termination grace period."""


@dataclass(frozen=True, slots=True)
class Unhealthy:
    """A node's condition that matches ``policy``: ``eligible_at`` (epoch seconds) is when its toleration ends."""

    condition: NodeCondition
    policy: RepairPolicy
    eligible_at: float


def unhealthy_condition(node: Node, policies: Sequence[RepairPolicy] = AWS_REPAIR_POLICIES) -> Unhealthy | None:
    """The condition of ``node`` that matches a policy and whose toleration ends first, or None when none matches.

    A condition without ``lastTransitionTime`` has been in its state since long ago (its toleration has ended).
    """
    best: Unhealthy | None = None
    for policy in policies:
        cond = node.condition(policy.condition_type)
        if cond is None or cond.status != policy.status:
            continue
        since = cond.last_transition_time if cond.last_transition_time is not None else -math.inf
        found = Unhealthy(condition=cond, policy=policy, eligible_at=since + policy.toleration)
        if best is None or found.eligible_at < best.eligible_at:
            best = found
    return best


def overdue(unhealthy: Unhealthy, *, now: float) -> float:
    """How far past its toleration the condition is, in tolerations (the repair order key; larger first)."""
    if math.isinf(unhealthy.eligible_at):
        return math.inf
    return (now - unhealthy.eligible_at) / max(unhealthy.policy.toleration, 1.0)


def tripped_pools(
    nodes: Iterable[Node], policies: Sequence[RepairPolicy] = AWS_REPAIR_POLICIES
) -> dict[str, tuple[int, int]]:
    """NodePool name -> (unhealthy, total) for every NodePool whose repair the circuit breaker stops.

    Counts the nodes labelled ``karpenter.sh/nodepool``; a node is unhealthy when any condition matches a
    policy, toleration or not. A pool trips when unhealthy > ``ceil(20% x total)`` (rounded up, so one
    unhealthy node never stops repair in a small pool).
    """
    total: dict[str, int] = {}
    unhealthy: dict[str, int] = {}
    for node in nodes:
        pool = node.labels.get(LABEL_NODEPOOL)
        if not pool:
            continue
        total[pool] = total.get(pool, 0) + 1
        if unhealthy_condition(node, policies) is not None:
            unhealthy[pool] = unhealthy.get(pool, 0) + 1
    out: dict[str, tuple[int, int]] = {}
    for pool, count in total.items():
        threshold = math.ceil(count * UNHEALTHY_THRESHOLD_PERCENT / 100)
        if unhealthy.get(pool, 0) > threshold:
            out[pool] = (unhealthy[pool], count)
    return out


def effective_drain_bound(policy_grace: float | None, nodeclaim_grace: float | None) -> float | None:
    """The drain bound of a repair (seconds): ``min(policy_grace, nodeclaim_grace)`` when the policy sets one
    (0 is forceful), else None (the NodeClaim's own ``terminationGracePeriod`` applies) — ``effectiveDrainBound``."""
    if policy_grace is None:
        return None
    return policy_grace if nodeclaim_grace is None else min(policy_grace, nodeclaim_grace)


def _vetoed(c: Candidate) -> bool:
    claim = c.cluster_node.nodeclaim
    claim_annotations = claim.metadata.annotations if claim is not None else {}
    return "true" in (
        c.cluster_node.node.annotations.get(DO_NOT_REPAIR_ANNOTATION),
        claim_annotations.get(DO_NOT_REPAIR_ANNOTATION),
    )


def _describe(c: Candidate, found: Unhealthy, now: float) -> str:
    cond = found.condition
    since = cond.last_transition_time
    how_long = f"for {now - since:.0f}s" if since is not None else "since an unknown time"
    return (
        f"{c.name} is unhealthy: {cond.type}={cond.status} {how_long}, "
        f"past its {found.policy.toleration:.0f}s toleration"
    )


def repair_command(
    ctx: SimulationContext,
    candidates: Sequence[Candidate],
    *,
    nodes: Sequence[Node],
    budgets: Mapping[str, int],
    now: float,
    policies: Sequence[RepairPolicy] = AWS_REPAIR_POLICIES,
) -> tuple[Decision | None, list[Rejection]]:
    """The repair command of this pass (see the module docstring), and the unhealthy nodes it turned down.

    ``candidates``: the disruption candidates, nodes protected only by their own do-not-disrupt included.
    ``nodes``: every Node of the cluster (for the circuit breaker). ``budgets``: NodePool -> nodes still
    allowed for reason ``Unhealthy``. Healthy nodes, and unhealthy ones still within their toleration, are
    neither chosen nor rejected. Raises nothing.
    """
    tripped = tripped_pools(nodes, policies)
    due: list[tuple[Candidate, Unhealthy]] = []
    for c in candidates:
        found = unhealthy_condition(c.cluster_node.node, policies)
        if found is None or now < found.eligible_at or _vetoed(c):
            continue
        due.append((c, found))
    due.sort(key=lambda item: (-overdue(item[1], now=now), item[0].disruption_cost, item[0].name))
    rejected: list[Rejection] = []
    for c, found in due:
        what = _describe(c, found, now)
        pool = c.nodepool.name
        if pool in tripped:
            bad, total = tripped[pool]
            share = f"{UNHEALTHY_THRESHOLD_PERCENT}%"
            why = f'more than {share} of nodes in nodepool "{pool}" are unhealthy ({bad}/{total})'
            rejected.append(Rejection(c.name, why, METHOD_REPAIR, event=NODE_REPAIR_BLOCKED))
            continue
        bound = effective_drain_bound(found.policy.termination_grace_period, c.termination_grace_period)
        if c.pod_block is not None and bound is None and not c.termination_grace_period:
            rejected.append(Rejection(c.name, f"{_NO_DRAIN_BOUND} ({c.pod_block})", METHOD_REPAIR))
            continue
        if budgets.get(pool, 0) <= 0:
            why = f'{what}, but NodePool "{pool}" Unhealthy budget exhausted'
            rejected.append(Rejection(c.name, why, METHOD_REPAIR))
            continue
        everyone = replace(c, moving_pods=c.reschedulable_pods)  # blocked pods move too: the drain is bounded
        held = simulate(ctx, [everyone], consolidation=False, keep_candidate_usage=True)
        sim, how = held, ""
        if not held.all_scheduled or held.uninitialized is not None:
            freed = simulate(ctx, [everyone], consolidation=False)
            if not freed.all_scheduled:
                rejected.append(Rejection(c.name, f"{what}, but {freed.explain_failures()}", METHOD_REPAIR))
                continue
            if freed.uninitialized is not None:
                why = f"{what}, but its pods would land on uninitialized node {freed.uninitialized}"
                rejected.append(Rejection(c.name, why, METHOD_REPAIR))
                continue
            sim, how = freed, f'NodePool "{pool}" cannot hold a replacement within its limits: terminate first'
        claims = () if how else sim.new_nodeclaims
        if not how:
            how = f"replace with {len(claims)} new NodeClaim(s)" if claims else "its pods fit on other nodes"
        decision = Decision(
            method=METHOD_REPAIR,
            nodes=(c.name,),
            cause=REASON_UNHEALTHY,
            reason=f"{what}; {how}",
            nodepools=(pool,),
            replacements=claims,
            cost_before=c.price,
            cost_after=sum(nc.price_per_hour for nc in claims),
            pods=tuple(sorted(sim.moved)),
            placements=tuple(sorted(sim.placements.items())) if claims or not sim.new_nodeclaims else (),
            rejected=tuple(rejected),
            drain_bound=bound,
        )
        return decision, rejected
    return None, rejected
