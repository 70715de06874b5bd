"""PodDisruptionBudget limits as voluntary disruption sees them.

Follows Karpenter ``[core]:pkg/utils/pdb/pdb.go`` (``Limits``): for a pod Karpenter would evict
(active, not a mirror pod, not tolerating ``karpenter.sh/disrupted:NoSchedule``, no active
``karpenter.sh/do-not-disrupt``), the matching PDBs (same namespace, selector matches) decide:

* more than one matching PDB blocks eviction (the Eviction API refuses it);
* one PDB with ``disruptionsAllowed == 0`` blocks it;
* a PDB is *fully blocking* when ``maxUnavailable`` is ``0``/``"0%"`` or ``minAvailable`` is
  ``"100%"``: its pods are not even counted as reschedulable (``IsCurrentlyReschedulable``).

``disruptionsAllowed`` is the PDB's ``status.disruptionsAllowed`` when known; a snapshot without
status gets it computed as the Kubernetes disruption controller would
(``pkg/controller/disruption/disruption.go``), approximating each controller's scale by the
number of matching pods: healthy = matching pods that are Running and not terminating;
``minAvailable`` N -> desired N, ``minAvailable`` P% -> ceil(P% x expected), ``maxUnavailable``
N/P% -> expected - N (or - ceil(P% x expected)); ``disruptionsAllowed = max(0, healthy - desired)``.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from nodesmith.core.drain import DISRUPTED_TAINT

if TYPE_CHECKING:
    from collections.abc import Iterable, Sequence

    from nodesmith.core.model import Pod, PodDisruptionBudget

__all__ = ["PdbLimits", "disruptions_allowed", "is_fully_blocking"]


def _scaled(value: int | str, total: int) -> int:
    """``intstr.GetScaledValueFromIntOrPercent(value, total, roundUp=true)``."""
    if isinstance(value, int):
        return value
    text = value.strip()
    if text.endswith("%"):
        return math.ceil(int(text[:-1]) * total / 100)
    return int(text)


def _matches(pdb: PodDisruptionBudget, pod: Pod) -> bool:
    return pdb.namespace == pod.namespace and pdb.selector.matches(pod.labels)


def disruptions_allowed(pdb: PodDisruptionBudget, pods: Iterable[Pod]) -> int:
    """``status.disruptionsAllowed`` when set, else computed from ``pods`` (see module docstring).

    A malformed ``minAvailable``/``maxUnavailable`` gives 0 (fail closed).
    """
    if pdb.disruptions_allowed is not None:
        return max(0, pdb.disruptions_allowed)
    matching = [p for p in pods if _matches(pdb, p) and not p.is_terminal]
    expected = len(matching)
    healthy = sum(1 for p in matching if p.deletion_timestamp is None and p.phase == "Running")
    try:
        if pdb.min_available is not None:
            desired = _scaled(pdb.min_available, expected)
        elif pdb.max_unavailable is not None:
            desired = expected - _scaled(pdb.max_unavailable, expected)
        else:
            desired = 0
    except ValueError:
        return 0
    return max(0, healthy - desired)


def is_fully_blocking(pdb: PodDisruptionBudget) -> bool:
    """True for ``maxUnavailable: 0`` / ``"0%"`` or ``minAvailable: "100%"`` (``newPdb`` in ``pdb.go``)."""
    mu, ma = pdb.max_unavailable, pdb.min_available
    return (
        mu == 0 or (isinstance(mu, str) and mu.strip() in ("0%", "0")) or (isinstance(ma, str) and ma.strip() == "100%")
    )


def _evictable(pod: Pod, *, protected: bool) -> bool:
    """Karpenter ``IsEvictable``: active, not mirror, not tolerating the disrupted taint, no do-not-disrupt."""
    if pod.is_terminal or pod.deletion_timestamp is not None:
        return False
    if pod.is_mirror or pod.owner_kind == "Node":
        return False
    if any(t.tolerates(DISRUPTED_TAINT) for t in pod.tolerations):
        return False
    return not protected


class PdbLimits:
    """The PDBs of a cluster with their current ``disruptionsAllowed``.

    Built once per decision pass from every PDB and every pod of the cluster (bound or not). A PDB selects pods of
    its own namespace only, so a pod is matched against its namespace's PDBs alone.
    """

    def __init__(self, pdbs: Sequence[PodDisruptionBudget], pods: Sequence[Pod]) -> None:
        pods_in: dict[str, list[Pod]] = {}
        if any(pdb.disruptions_allowed is None for pdb in pdbs):  # some budget's allowance is counted from pods
            for pod in pods:
                pods_in.setdefault(pod.namespace, []).append(pod)
        self._by_namespace: dict[str, list[tuple[PodDisruptionBudget, int, bool]]] = {}
        for pdb in pdbs:
            allowed = disruptions_allowed(pdb, pods_in.get(pdb.namespace, ()))
            self._by_namespace.setdefault(pdb.namespace, []).append((pdb, allowed, is_fully_blocking(pdb)))

    @property
    def empty(self) -> bool:
        """True when there is no PDB: no pod is then blocked (:meth:`blocks` None, :meth:`fully_blocked` False)."""
        return not self._by_namespace

    def _matching(self, pod: Pod) -> list[tuple[PodDisruptionBudget, int, bool]]:
        return [item for item in self._by_namespace.get(pod.namespace, ()) if item[0].selector.matches(pod.labels)]

    def blocks(self, pod: Pod, *, protected: bool = False) -> str | None:
        """Why PDBs would refuse evicting ``pod`` now, or None. ``protected`` is True when the pod
        has an active do-not-disrupt (it is then not evicted at all, so PDBs do not matter)."""
        if not _evictable(pod, protected=protected):
            return None
        matching = self._matching(pod)
        if len(matching) > 1:
            names = ", ".join(f"{p.namespace}/{p.name}" for p, _, _ in matching)
            return f"pod {pod.key} is selected by several PodDisruptionBudgets ({names}); eviction is refused"
        for pdb, allowed, _ in matching:
            if allowed == 0:
                return f"PodDisruptionBudget {pdb.namespace}/{pdb.name} allows 0 disruptions (pod {pod.key})"
        return None

    def fully_blocked(self, pod: Pod) -> bool:
        """True when a fully blocking PDB (or several PDBs) selects the evictable ``pod``."""
        if not _evictable(pod, protected=False):
            return False
        matching = self._matching(pod)
        return len(matching) > 1 or any(full for _, _, full in matching)

    def allowance(self, pod: Pod) -> tuple[str, int] | None:
        """The one PDB that limits evicting ``pod`` as ``(namespace/name, disruptionsAllowed)``, or
        None when none does (not evictable, or no PDB selects it). Several matching PDBs give
        ``(first's key, 0)``: the Eviction API refuses the pod."""
        if not _evictable(pod, protected=False):
            return None
        matching = self._matching(pod)
        if not matching:
            return None
        pdb, allowed, _ = matching[0]
        return f"{pdb.namespace}/{pdb.name}", allowed if len(matching) == 1 else 0
