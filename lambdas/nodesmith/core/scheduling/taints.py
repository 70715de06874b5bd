"""Taint helpers for the scheduler.

Karpenter requires a pod to tolerate *every* taint of a node or NodePool, whatever the effect
(``PreferNoSchedule`` included; relaxation may later add a toleration for those) —
``pkg/scheduling/taints.go Taints.Tolerates``. Taints that a node is expected to shed while it
initialises are ignored on uninitialized nodes (``KnownEphemeralTaints`` in the same file, and the
NodePool's ``startupTaints``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from nodesmith.core.model import Taint, Toleration

if TYPE_CHECKING:
    from collections.abc import Iterable, Sequence

__all__ = [
    "EPHEMERAL_TAINTS",
    "PREFER_NO_SCHEDULE_TOLERATION",
    "first_untolerated",
    "format_taint",
    "is_ephemeral",
    "schedulable_taints",
]

EPHEMERAL_TAINTS: tuple[Taint, ...] = (
    Taint("node.kubernetes.io/not-ready", "NoSchedule"),
    Taint("node.kubernetes.io/not-ready", "NoExecute"),
    Taint("node.kubernetes.io/unreachable", "NoSchedule"),
    Taint("node.cloudprovider.kubernetes.io/uninitialized", "NoSchedule", "true"),
    Taint("karpenter.sh/unregistered", "NoExecute"),
)
"""Taints expected to disappear while a node initialises (Karpenter ``KnownEphemeralTaints``)."""

_EPHEMERAL_PREFIXES = ("readiness.k8s.io/",)

PREFER_NO_SCHEDULE_TOLERATION = Toleration(key=None, operator="Exists", effect="PreferNoSchedule")
"""Toleration the last relaxation step adds (Karpenter ``preferences.go toleratePreferNoScheduleTaints``)."""


def format_taint(taint: Taint) -> str:
    """``key=value:Effect`` (``key:Effect`` without a value), as kubectl prints taints."""
    return f"{taint.key}={taint.value}:{taint.effect}" if taint.value else f"{taint.key}:{taint.effect}"


def first_untolerated(taints: Iterable[Taint], tolerations: Sequence[Toleration]) -> Taint | None:
    """The first taint none of ``tolerations`` tolerates, or None when all are tolerated."""
    for taint in taints:
        if not any(t.tolerates(taint) for t in tolerations):
            return taint
    return None


def is_ephemeral(taint: Taint) -> bool:
    """True for a known ephemeral taint (same key and effect, as ``MatchTaint``; or a ``readiness.k8s.io/`` key)."""
    if any(taint.key == e.key and taint.effect == e.effect for e in EPHEMERAL_TAINTS):
        return True
    return taint.key.startswith(_EPHEMERAL_PREFIXES)


def schedulable_taints(
    taints: Sequence[Taint], *, initialized: bool, startup_taints: Sequence[Taint] = ()
) -> tuple[Taint, ...]:
    """The taints a pod must tolerate to land on a node.

    For an uninitialized node, startup taints and known ephemeral taints are dropped, matching on
    key and effect like ``Taint.MatchTaint`` (Karpenter ``state/statenode.go Taints``); an
    initialized node keeps all of them.
    """
    if initialized:
        return tuple(taints)
    startup = {(t.key, t.effect) for t in startup_taints}
    return tuple(t for t in taints if (t.key, t.effect) not in startup and not is_ephemeral(t))
