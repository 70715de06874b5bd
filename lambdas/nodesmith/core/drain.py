"""Drain planning: which pods on a node to evict now, which to force-delete, which to wait for or leave.

Follows Karpenter's terminator (``karpenter-v1.md`` §3.7; ``[core]:pkg/controllers/node/termination/
terminator/terminator.go`` and ``[core]:pkg/utils/pod/scheduling.go``):

* Left alone (``skipped``, with a reason): mirror (static) pods, DaemonSet pods (their controller
  tolerates the disruption taint and would put them back), terminal pods (Succeeded/Failed), pods
  that tolerate ``karpenter.sh/disrupted:NoSchedule`` (they would land right back), and pods stuck
  terminating: deleted more than 60 s past their ``deletionTimestamp`` (Karpenter
  ``IsStuckTerminating``).
* Already terminating (``terminating``): not evicted again; the drain waits for them to go.
* Evictable pods in tiers, one tier at a time: non-critical first, then critical
  (``priorityClassName`` ``system-cluster-critical`` or ``system-node-critical``). A tier is
  evicted only once every earlier tier has left the node, so cluster services (CoreDNS, ...) keep
  serving the pods that are still shutting down.
* ``karpenter.sh/do-not-disrupt`` pods whose protection is active
  (:func:`~nodesmith.core.do_not_disrupt.do_not_disrupt`: ``"true"``, or a Go duration counted from the
  pod's ``status.startTime``) are never evicted; they wait (``waiting``) and block the drain. A pod whose
  value is invalid is evicted as if it had none, and the plan lists it in ``invalid_annotations`` so the
  caller can say so on the node.
* Deadline (``terminationGracePeriod`` in Karpenter; the spot interruption time here): a pod is
  force-deleted (bypassing PodDisruptionBudgets and do-not-disrupt) once its own
  ``terminationGracePeriodSeconds`` would run past the deadline, i.e. ``now + grace > deadline``,
  with the grace clamped to the time left (Karpenter deletes at ``deadline - grace`` with the grace
  clamped to the remaining time). Terminating pods whose ``deletionTimestamp`` is after the
  deadline are deleted again with the clamped grace. The grace never drops below 1 s (0 for a pod
  whose own grace is 0), as in Karpenter.

Pure: times are epoch seconds passed in.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

from nodesmith.core.do_not_disrupt import DO_NOT_DISRUPT_ANNOTATION, DoNotDisrupt, do_not_disrupt
from nodesmith.core.model import Taint

if TYPE_CHECKING:
    from collections.abc import Sequence

    from nodesmith.core.model import Node, Pod

__all__ = [
    "CORDONED_ANNOTATION",
    "CRITICAL_PRIORITY_CLASSES",
    "DISRUPTED_TAINT",
    "DO_NOT_DISRUPT_ANNOTATION",
    "STUCK_TERMINATING_SECONDS",
    "DrainPlan",
    "ForceDeletion",
    "SkippedPod",
    "WaitingPod",
    "carries_disrupted_taint",
    "plan_drain",
]

DISRUPTED_TAINT = Taint(key="karpenter.sh/disrupted", effect="NoSchedule")
"""Karpenter v1's disruption taint, put on a node before it is drained (``[core]:pkg/apis/v1/taints.go``)."""


def carries_disrupted_taint(taints: Sequence[Taint]) -> bool:
    """Whether ``taints`` hold a taint keyed ``karpenter.sh/disrupted`` (any value or effect): the node is being
    disrupted, and whoever tainted it requested its termination first."""
    return any(t.key == DISRUPTED_TAINT.key for t in taints)


CORDONED_ANNOTATION = "nodesmith.dev/cordoned"
"""Set (``"true"``) on a Node whose ``spec.unschedulable`` Nodesmith set itself when it tainted or cordoned it, so
undoing the taint lifts only Nodesmith's cordon, never one an operator (``kubectl cordon``) put there first."""

CRITICAL_PRIORITY_CLASSES = frozenset({"system-cluster-critical", "system-node-critical"})
STUCK_TERMINATING_SECONDS = 60.0
"""A pod still present this long after its ``deletionTimestamp`` is stuck; the drain stops waiting for it."""


@dataclass(frozen=True, slots=True)
class SkippedPod:
    """A pod the drain leaves alone, and why (``mirror pod``, ``daemonset pod``, ...)."""

    pod: Pod
    reason: str


@dataclass(frozen=True, slots=True)
class WaitingPod:
    """A pod protected by ``karpenter.sh/do-not-disrupt``: not evicted, blocks the drain.

    ``until`` (epoch seconds) is when it will be force-deleted because of the deadline, or when its
    do-not-disrupt duration ends; None when neither will happen.
    """

    pod: Pod
    until: float | None
    reason: str


@dataclass(frozen=True, slots=True)
class ForceDeletion:
    """A pod to delete directly (no Eviction API) with ``grace_period_seconds`` (>= 0, clamped to the deadline)."""

    pod: Pod
    grace_period_seconds: int
    reason: str


@dataclass(frozen=True, slots=True)
class DrainPlan:
    """What to do now to drain ``node_name``.

    ``evict`` is the first tier that still has evictable pods (evict them through the Eviction API);
    ``later`` holds the evictable pods of later tiers, evicted once ``evict`` and ``terminating``
    are empty. ``force_delete`` are due now. ``waiting`` are do-not-disrupt pods, ``terminating``
    pods already being deleted, ``skipped`` pods the drain ignores. Every pod on the node is in
    exactly one of these. ``invalid_annotations`` pairs each pod to evict (or force-delete) whose
    do-not-disrupt value was ignored with how it read.
    """

    node_name: str
    evict: tuple[Pod, ...] = ()
    later: tuple[Pod, ...] = ()
    force_delete: tuple[ForceDeletion, ...] = ()
    waiting: tuple[WaitingPod, ...] = ()
    terminating: tuple[Pod, ...] = ()
    skipped: tuple[SkippedPod, ...] = ()
    invalid_annotations: tuple[tuple[Pod, DoNotDisrupt], ...] = ()

    @property
    def drained(self) -> bool:
        """True when no pod that must leave the node is left (skipped pods do not count)."""
        return not (self.evict or self.later or self.force_delete or self.waiting or self.terminating)

    @property
    def remaining(self) -> int:
        """Pods that still have to leave the node: to evict, to force-delete, waiting or terminating."""
        return len(self.evict) + len(self.later) + len(self.force_delete) + len(self.waiting) + len(self.terminating)


def _clamped_grace(pod: Pod, now: float, deadline: float) -> int:
    """The pod's own grace, clamped to the whole seconds left before ``deadline``, but at least 1 s for a pod that
    has a grace period at all: Karpenter's terminator never deletes with 0 (kubernetes-sigs/karpenter#3038), so
    the kubelet still stops the containers before the API server removes the pod."""
    grace = pod.termination_grace_period_seconds
    return max(min(1, grace), min(grace, math.floor(deadline - now)))


def _skip_reason(pod: Pod, now: float) -> str | None:
    if pod.is_mirror or pod.owner_kind == "Node":
        return "mirror pod"
    if pod.is_daemonset:
        return "daemonset pod"
    if pod.is_terminal:
        return f"terminal (phase {pod.phase})"
    if pod.deletion_timestamp is not None and now > pod.deletion_timestamp + STUCK_TERMINATING_SECONDS:
        return "stuck terminating"
    if any(t.tolerates(DISRUPTED_TAINT) for t in pod.tolerations):
        return "tolerates karpenter.sh/disrupted"
    return None


def plan_drain(*, node: Node, pods: Sequence[Pod], now: float, deadline: float | None) -> DrainPlan:
    """Plan one drain step for ``node`` from the pods bound to it.

    ``now`` and ``deadline`` are epoch seconds; ``deadline`` is when the node goes away (spot
    interruption: event time + 120 s) or None when there is none (pods are then never
    force-deleted). Pods bound to another node are ignored. Tier order within a tier: by
    namespace/name, so plans are deterministic. See the module docstring for the rules.
    """
    evictable: list[Pod] = []
    force: list[ForceDeletion] = []
    waiting: list[WaitingPod] = []
    terminating: list[Pod] = []
    skipped: list[SkippedPod] = []
    invalid: list[tuple[Pod, DoNotDisrupt]] = []

    for pod in sorted(pods, key=lambda p: (p.namespace, p.name, p.uid)):
        if pod.node_name is not None and pod.node_name != node.name:
            continue
        reason = _skip_reason(pod, now)
        if reason is not None:
            skipped.append(SkippedPod(pod=pod, reason=reason))
            continue
        overruns = deadline is not None and now + pod.termination_grace_period_seconds > deadline
        verdict = do_not_disrupt(pod, now=now)
        if verdict.invalid is not None and pod.deletion_timestamp is None:
            invalid.append((pod, verdict))
        if pod.deletion_timestamp is not None:
            if deadline is not None and pod.deletion_timestamp > deadline:
                force.append(
                    ForceDeletion(
                        pod=pod,
                        grace_period_seconds=_clamped_grace(pod, now, deadline),
                        reason="terminating past the deadline",
                    )
                )
            else:
                terminating.append(pod)
            continue
        if overruns and deadline is not None:
            force.append(
                ForceDeletion(
                    pod=pod,
                    grace_period_seconds=_clamped_grace(pod, now, deadline),
                    reason=f"grace {pod.termination_grace_period_seconds}s would overrun the deadline",
                )
            )
            continue
        if verdict.active:
            force_at = None if deadline is None else deadline - pod.termination_grace_period_seconds
            ends = [t for t in (verdict.until, force_at) if t is not None]
            waiting.append(
                WaitingPod(pod=pod, until=min(ends) if ends else None, reason=f"{DO_NOT_DISRUPT_ANNOTATION} is set")
            )
            continue
        evictable.append(pod)

    leaving = [*terminating, *(f.pod for f in force)]
    non_critical = tuple(p for p in evictable if p.priority_class_name not in CRITICAL_PRIORITY_CLASSES)
    critical = tuple(p for p in evictable if p.priority_class_name in CRITICAL_PRIORITY_CLASSES)
    if non_critical:
        evict, later = non_critical, critical
    elif any(p.priority_class_name not in CRITICAL_PRIORITY_CLASSES for p in leaving):
        # Critical pods wait until the non-critical ones being deleted are gone (Karpenter's tiers).
        evict, later = (), critical
    else:
        evict, later = critical, ()
    return DrainPlan(
        node_name=node.name,
        evict=evict,
        later=later,
        force_delete=tuple(force),
        waiting=tuple(waiting),
        terminating=tuple(terminating),
        skipped=tuple(skipped),
        invalid_annotations=tuple(invalid),
    )
