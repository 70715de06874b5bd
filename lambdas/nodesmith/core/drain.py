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
* ``karpenter.sh/do-not-disrupt`` pods (``"true"``, or a Go duration counted from the pod's
  creation, Karpenter v1.12+) are never evicted; they wait (``waiting``) and block the drain.
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
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING

from nodesmith.core.model import Taint

if TYPE_CHECKING:
    from collections.abc import Sequence

    from nodesmith.core.model import Node, Pod

__all__ = [
    "CRITICAL_PRIORITY_CLASSES",
    "DISRUPTED_TAINT",
    "DO_NOT_DISRUPT_ANNOTATION",
    "STUCK_TERMINATING_SECONDS",
    "DrainPlan",
    "ForceDeletion",
    "SkippedPod",
    "WaitingPod",
    "do_not_disrupt_until",
    "plan_drain",
]

DISRUPTED_TAINT = Taint(key="karpenter.sh/disrupted", effect="NoSchedule")
"""Karpenter v1's disruption taint, put on a node before it is drained (``[core]:pkg/apis/v1/taints.go``)."""

DO_NOT_DISRUPT_ANNOTATION = "karpenter.sh/do-not-disrupt"
CRITICAL_PRIORITY_CLASSES = frozenset({"system-cluster-critical", "system-node-critical"})
STUCK_TERMINATING_SECONDS = 60.0
"""A pod still present this long after its ``deletionTimestamp`` is stuck; the drain stops waiting for it."""

_GO_DURATION_PART = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ns|us|µs|ms|s|m|h)")
_GO_UNITS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}


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
    exactly one of these.
    """

    node_name: str
    evict: tuple[Pod, ...] = ()
    later: tuple[Pod, ...] = ()
    force_delete: tuple[ForceDeletion, ...] = ()
    waiting: tuple[WaitingPod, ...] = ()
    terminating: tuple[Pod, ...] = ()
    skipped: tuple[SkippedPod, ...] = ()

    @property
    def drained(self) -> bool:
        """True when no pod that must leave the node is left (skipped pods do not count)."""
        return not (self.evict or self.later or self.force_delete or self.waiting or self.terminating)

    @property
    def remaining(self) -> int:
        """Pods that still have to leave the node: to evict, to force-delete, waiting or terminating."""
        return len(self.evict) + len(self.later) + len(self.force_delete) + len(self.waiting) + len(self.terminating)


def _parse_go_duration(text: str) -> float | None:
    """Seconds in a Go ``time.ParseDuration`` string (``90s``, ``1h30m``), or None when it is not one."""
    text = text.strip()
    if not text:
        return None
    pos = 0
    total = 0.0
    for match in _GO_DURATION_PART.finditer(text):
        if match.start() != pos:
            return None
        total += float(match.group(1)) * _GO_UNITS[match.group(2)]
        pos = match.end()
    if pos != len(text):
        return None
    return total


def do_not_disrupt_until(pod: Pod) -> float | None:
    """When the pod's ``karpenter.sh/do-not-disrupt`` protection ends, in epoch seconds.

    Returns ``math.inf`` for ``"true"`` (and, conservatively, for a value that is neither ``"true"``
    nor a Go duration), ``creation_timestamp + duration`` for a duration (Karpenter v1.12+), and
    None when the annotation is absent or ``"false"``.
    """
    value = pod.annotations.get(DO_NOT_DISRUPT_ANNOTATION)
    if value is None or value.strip().lower() == "false":
        return None
    if value.strip().lower() == "true":
        return math.inf
    seconds = _parse_go_duration(value)
    if seconds is None:
        return math.inf
    return pod.creation_timestamp + seconds


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

    for pod in sorted(pods, key=lambda p: (p.namespace, p.name, p.uid)):
        if pod.node_name is not None and pod.node_name != node.name:
            continue
        reason = _skip_reason(pod, now)
        if reason is not None:
            skipped.append(SkippedPod(pod=pod, reason=reason))
            continue
        overruns = deadline is not None and now + pod.termination_grace_period_seconds > deadline
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
        protected_until = do_not_disrupt_until(pod)
        if protected_until is not None and protected_until > now:
            force_at = None if deadline is None else deadline - pod.termination_grace_period_seconds
            ends = [t for t in (protected_until, force_at) if t is not None and t != math.inf]
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
    )
