"""One drain round: evict what may leave a cordoned node now, delete what its deadline requires, report the rest.

The rules of what leaves when are Karpenter's terminator's, in :func:`nodesmith.core.drain.plan_drain`
(tiers, ``karpenter.sh/do-not-disrupt``, DaemonSet and mirror pods left, force-deletion at
``deadline - terminationGracePeriodSeconds``). A round does what the plan says once and returns: an
eviction refused by a PodDisruptionBudget (HTTP 429) is simply tried again in the next round, which the
termination queue delivers after a backoff (Karpenter's eviction queue retries 429s with backoff the same
way, ``[core]:pkg/controllers/node/termination/terminator/eviction.go``). 404 and 409 on an eviction mean
the pod is gone or replaced: done. Evictions and deletions of one round go out in parallel, at most
``workers`` at a time.

Events (:mod:`nodesmith.services.termination.events`, Karpenter's reasons): ``Evicted`` on each pod whose eviction was
accepted, ``Disrupted`` on each pod deleted for the deadline, ``InvalidDoNotDisruptAnnotation`` on the node for each
pod evicted or deleted this round whose ``karpenter.sh/do-not-disrupt`` value was ignored.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

from nodesmith.core.drain import DISRUPTED_TAINT, plan_drain
from nodesmith.core.errors import ConflictError, KubernetesError, NotFoundError
from nodesmith.services.parallel import map_ordered
from nodesmith.services.termination import events

if TYPE_CHECKING:
    from nodesmith.core.drain import DrainPlan, ForceDeletion
    from nodesmith.core.model import Node, Pod
    from nodesmith.core.ports import Cluster

__all__ = ["DrainRound", "cordon_node", "drain_round", "is_cordoned"]

_MAX_NAMED_PODS = 20  # pods named in a round, so one log line stays readable


@dataclass(frozen=True, slots=True)
class DrainRound:
    """What one :func:`drain_round` found and did. Counts are pods; times are epoch seconds.

    ``drained`` is True when no pod that must leave the node was left when the round listed them.
    ``evicted`` counts evictions accepted (or pods already gone), ``blocked`` evictions refused by a
    PodDisruptionBudget, ``force_deleted`` pods deleted directly for the deadline, ``errors`` other failed
    calls (the pod is tried again next round). ``remaining`` pods still had to leave when listed;
    ``blocked_pods`` and ``remaining_pods`` name up to 20 (``namespace/name``) for the logs and Events.
    ``next_due`` is when the next pod falls due for deletion (its do-not-disrupt ends, or the deadline less
    its grace period), or None.
    """

    drained: bool
    evicted: int = 0
    blocked: int = 0
    force_deleted: int = 0
    errors: int = 0
    remaining: int = 0
    blocked_pods: tuple[str, ...] = ()
    remaining_pods: tuple[str, ...] = ()
    next_due: float | None = None
    last_error: str = ""


def is_cordoned(node: Node) -> bool:
    """Whether ``node`` as read is cordoned (``spec.unschedulable``) and carries ``karpenter.sh/disrupted:NoSchedule``:
    a round that finds both writes nothing (Karpenter's terminator patches the taint only when it is missing)."""
    return node.unschedulable and any(
        (t.key, t.effect) == (DISRUPTED_TAINT.key, DISRUPTED_TAINT.effect) for t in node.taints
    )


def cordon_node(*, cluster: Cluster, node_name: str) -> bool:
    """Taint ``karpenter.sh/disrupted:NoSchedule`` and cordon (idempotent). False when the node is gone.

    Raises :class:`~nodesmith.core.errors.KubernetesError` when the API call fails.
    """
    return cluster.taint_and_cordon(node_name=node_name, taint=DISRUPTED_TAINT)


def _evict(cluster: Cluster, pod: Pod) -> str:
    """One eviction: ``evicted``, ``blocked``, ``gone``, or the error's text."""
    try:
        answer = cluster.evict(pod=pod)
    except (NotFoundError, ConflictError):
        return "gone"
    except KubernetesError as exc:
        return f"evict {pod.key}: {exc}"
    if answer == "evicted":
        events.pod_evicted(cluster, pod)
    return answer


def _force_delete(cluster: Cluster, item: ForceDeletion) -> str:
    """One deletion for the deadline: ``deleted``, or the error's text."""
    try:
        cluster.delete_pod(pod=item.pod, grace_period_seconds=item.grace_period_seconds)
    except (NotFoundError, ConflictError):
        return "deleted"
    except KubernetesError as exc:
        return f"delete {item.pod.key}: {exc}"
    events.pod_force_deleted(cluster, item.pod, grace_period_seconds=item.grace_period_seconds, why=item.reason)
    return "deleted"


def _next_due(plan: DrainPlan, deadline: float | None) -> float | None:
    """When the next pod of ``plan`` falls due for deletion, or None."""
    dues = [w.until for w in plan.waiting if w.until is not None and math.isfinite(w.until)]
    if deadline is not None:
        dues += [deadline - p.termination_grace_period_seconds for p in (*plan.evict, *plan.later)]
        dues.append(deadline)
    return min(dues, default=None)


def drain_round(*, cluster: Cluster, node: Node, now: float, deadline: float | None, workers: int) -> DrainRound:
    """List the pods bound to the (cordoned) ``node``, then evict and delete what :func:`plan_drain` says, once.

    ``now`` and ``deadline`` are epoch seconds (``deadline`` None: no pod is ever deleted directly).
    Raises :class:`~nodesmith.core.errors.KubernetesError` when the pods cannot be listed; a failed eviction
    or deletion is counted in ``errors`` and tried again next round.
    """
    plan = plan_drain(node=node, pods=cluster.list_pods(node_name=node.name), now=now, deadline=deadline)
    remaining = sorted(p.key for p in (*plan.evict, *plan.later, *plan.terminating))
    remaining += sorted(f.pod.key for f in plan.force_delete) + sorted(w.pod.key for w in plan.waiting)
    if plan.drained:
        return DrainRound(drained=True)
    leaving = {p.uid or p.key for p in (*plan.evict, *(f.pod for f in plan.force_delete))}
    for pod, verdict in plan.invalid_annotations:
        if (pod.uid or pod.key) in leaving:
            events.node_invalid_do_not_disrupt(cluster, node.name, pod, verdict)
    deleted = map_ordered(lambda f: _force_delete(cluster, f), plan.force_delete, workers=workers, name="delete")
    answers = map_ordered(lambda p: _evict(cluster, p), plan.evict, workers=workers, name="evict")
    failures = [a for a in (*deleted, *answers) if a not in ("deleted", "evicted", "blocked", "gone")]
    blocked = [p.key for p, a in zip(plan.evict, answers, strict=True) if a == "blocked"]
    return DrainRound(
        drained=False,
        evicted=sum(a in ("evicted", "gone") for a in answers),
        blocked=len(blocked),
        force_deleted=sum(a == "deleted" for a in deleted),
        errors=len(failures),
        remaining=plan.remaining,
        blocked_pods=tuple(blocked[:_MAX_NAMED_PODS]),
        remaining_pods=tuple(remaining[:_MAX_NAMED_PODS]),
        next_due=_next_due(plan, deadline),
        last_error=failures[-1] if failures else "",
    )
