"""The simulated node lifecycle controller of kube-controller-manager: taints by the ``Ready`` condition, and the
taint eviction controller's evictions of pods that do not tolerate a Node's ``NoExecute`` taints.

What Kubernetes does (docs, "Taints and Tolerations", sections "Taint based evictions" and "Taint Nodes by
Condition"; ``pkg/controller/nodelifecycle`` and ``pkg/controller/tainteviction``):

* a Node whose ``Ready`` condition is ``False`` carries ``node.kubernetes.io/not-ready`` with ``NoSchedule`` and
  ``NoExecute``; one whose ``Ready`` is ``Unknown`` (its kubelet stopped posting status) carries
  ``node.kubernetes.io/unreachable`` with both effects; a Ready Node carries neither. A ``NoExecute`` taint added
  gets ``timeAdded``. A Node without a ``Ready`` condition is left alone (it never reported);
* a pod bound to a Node with ``NoExecute`` taints is deleted (gracefully, its own grace period) at once when one
  of them is not tolerated, else once the least ``tolerationSeconds`` of the tolerations used has passed since the
  controller first saw it so (a toleration without ``tolerationSeconds`` tolerates for good, as DaemonSet pods'
  do); an eviction pending for a pod is dropped when its Node's ``NoExecute`` taints go. Terminal and terminating
  pods are left alone.

Pods get their 300 s tolerations of both taints from the API server's ``DefaultTolerationSeconds`` admission
(:mod:`nodesmith.sim.kube.admission`).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from nodesmith.sim.kube.admission import NOT_READY_TAINT, UNREACHABLE_TAINT
from nodesmith.sim.kube.errors import ApiError
from nodesmith.sim.kube.timefmt import rfc3339

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

    from nodesmith.sim.kube.store import Store

__all__ = ["NodeLifecycle", "eviction_delay"]

LOG = logging.getLogger(__name__)

_CONDITION_TAINTS = {"False": NOT_READY_TAINT, "Unknown": UNREACHABLE_TAINT}
"""The taint key of each not-Ready status of the ``Ready`` condition."""


def _ready_status(node: Mapping[str, Any]) -> str | None:
    for cond in (node.get("status") or {}).get("conditions") or []:
        if cond.get("type") == "Ready":
            return str(cond.get("status"))
    return None


def _tolerates(toleration: Mapping[str, Any], taint: Mapping[str, Any]) -> bool:
    """Kubernetes' ``Toleration.ToleratesTaint``: the effect (empty: any), the key (empty with ``Exists``: any),
    and with ``Equal`` (the default operator) the value."""
    effect = toleration.get("effect") or ""
    if effect and effect != taint.get("effect"):
        return False
    key = toleration.get("key") or ""
    if key and key != taint.get("key"):
        return False
    operator = toleration.get("operator") or "Equal"
    if operator == "Exists":
        return True
    return operator == "Equal" and bool(key) and (toleration.get("value") or "") == (taint.get("value") or "")


def eviction_delay(pod: Mapping[str, Any], taints: Sequence[Mapping[str, Any]]) -> float | None:
    """Seconds the taint eviction controller waits before deleting ``pod`` (a ``v1 Pod`` dict) from a Node with
    ``taints``: 0 when one ``NoExecute`` taint is not tolerated, None when every toleration used has no
    ``tolerationSeconds`` (or there is no ``NoExecute`` taint), else the least ``tolerationSeconds`` (negative
    counts as 0) of the tolerations that match a ``NoExecute`` taint (``tainteviction.getMinTolerationTime``)."""
    tolerations = [t for t in (pod.get("spec") or {}).get("tolerations") or [] if isinstance(t, dict)]
    least: float | None = None
    for taint in taints:
        if taint.get("effect") != "NoExecute":
            continue
        used = [t for t in tolerations if _tolerates(t, taint)]
        if not used:
            return 0.0
        for toleration in used:
            seconds = toleration.get("tolerationSeconds")
            if seconds is not None:
                least = max(0.0, float(seconds)) if least is None else min(least, max(0.0, float(seconds)))
    return least


class NodeLifecycle:
    """Taints Nodes by their ``Ready`` condition and evicts pods from ``NoExecute``-tainted Nodes (see the module
    docstring); :meth:`step` is called by :class:`~nodesmith.sim.controllers.SimControllers`."""

    def __init__(self, *, store: Store) -> None:
        self.store = store
        self.evicted = 0
        """Pods deleted for a ``NoExecute`` taint so far."""
        self._seen: dict[tuple[str, str, str], float] = {}
        """(namespace, name, uid) of a pod waiting out its tolerations -> when that was first seen (epoch s)."""

    def step(self, now: float) -> None:
        """Write the Nodes' condition taints and make the evictions due at ``now`` (epoch seconds)."""
        waiting: set[tuple[str, str, str]] = set()
        for node in sorted(self.store.objects("nodes"), key=lambda n: str(n["metadata"]["name"])):
            taints = self._taint(node, now)
            if any(t.get("effect") == "NoExecute" for t in taints):
                waiting |= self._evict(node["metadata"]["name"], taints, now)
        self._seen = {key: at for key, at in self._seen.items() if key in waiting}

    def _taint(self, node: Mapping[str, Any], now: float) -> list[dict[str, Any]]:
        """Bring the condition taints of ``node`` in line with its ``Ready`` condition; returns its taints."""
        taints: list[dict[str, Any]] = list((node.get("spec") or {}).get("taints") or [])
        status = _ready_status(node)
        if status is None:
            return taints
        wanted_key = _CONDITION_TAINTS.get(status)
        keep = [t for t in taints if t.get("key") not in (NOT_READY_TAINT, UNREACHABLE_TAINT)]
        ours = [t for t in taints if t.get("key") == wanted_key and wanted_key is not None]
        have = {t.get("effect") for t in ours}
        if wanted_key is not None:
            for effect in ("NoSchedule", "NoExecute"):
                if effect not in have:
                    added: dict[str, Any] = {"key": wanted_key, "effect": effect}
                    if effect == "NoExecute":
                        added["timeAdded"] = rfc3339(now)
                    ours.append(added)
        wanted = [*keep, *ours]
        if wanted == taints:
            return taints
        name = node["metadata"]["name"]

        def edit(obj: dict[str, Any]) -> None:
            obj.setdefault("spec", {})["taints"] = wanted

        try:
            self.store.mutate("nodes", name, edit)
        except ApiError as exc:
            if exc.code != 404:
                raise
        return wanted

    def _evict(self, node: str, taints: Sequence[Mapping[str, Any]], now: float) -> set[tuple[str, str, str]]:
        """Delete the pods on ``node`` whose tolerations of ``taints`` ran out; returns the keys of those that
        wait."""
        waiting: set[tuple[str, str, str]] = set()
        for pod in self.store.pods_on(node):
            meta = pod["metadata"]
            if meta.get("deletionTimestamp") or (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
                continue
            delay = eviction_delay(pod, taints)
            if delay is None:
                continue
            key = (str(meta.get("namespace") or "default"), str(meta["name"]), str(meta.get("uid") or ""))
            since = self._seen.setdefault(key, now)
            if now - since < delay:
                waiting.add(key)
                continue
            try:
                self.store.delete("pods", key[1], namespace=key[0])
            except ApiError as exc:
                if exc.code != 404:
                    raise
                continue
            self.evicted += 1
            LOG.info("node lifecycle: evicted pod %s/%s from %s (NoExecute taint)", key[0], key[1], node)
        return waiting
