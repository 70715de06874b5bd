"""Workload objects that shape scheduling and disruption: DaemonSets and PodDisruptionBudgets.

``daemonset_from_dict`` builds the daemon's template pod (with the tolerations the DaemonSet
controller adds); ``pdb_from_dict`` reads a ``policy/v1 PodDisruptionBudget``.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Any

from nodesmith.core.model import (
    DaemonSet,
    LabelSelector,
    LabelSelectorRequirement,
    PodDisruptionBudget,
    Toleration,
)
from nodesmith.core.objects.common import (
    ObjectParseError,
    _int,
    _item_map,
    _join,
    _map,
    _str,
    label_selector_from_dict,
)
from nodesmith.core.objects.pods import pod_from_dict

if TYPE_CHECKING:
    from collections.abc import Mapping

__all__ = [
    "daemonset_from_dict",
    "pdb_from_dict",
]

# Tolerations the DaemonSet controller adds to every daemon pod
# (kubernetes pkg/controller/daemon/util/daemonset_util.go AddOrUpdateDaemonPodTolerations).
_DAEMON_TOLERATIONS = (
    Toleration(key="node.kubernetes.io/not-ready", operator="Exists", effect="NoExecute"),
    Toleration(key="node.kubernetes.io/unreachable", operator="Exists", effect="NoExecute"),
    Toleration(key="node.kubernetes.io/disk-pressure", operator="Exists", effect="NoSchedule"),
    Toleration(key="node.kubernetes.io/memory-pressure", operator="Exists", effect="NoSchedule"),
    Toleration(key="node.kubernetes.io/pid-pressure", operator="Exists", effect="NoSchedule"),
    Toleration(key="node.kubernetes.io/unschedulable", operator="Exists", effect="NoSchedule"),
)
_HOST_NETWORK_TOLERATION = Toleration(
    key="node.kubernetes.io/network-unavailable", operator="Exists", effect="NoSchedule"
)


def daemonset_from_dict(obj: Mapping[str, Any]) -> DaemonSet:
    """An ``apps/v1 DaemonSet`` -> :class:`~nodesmith.core.model.DaemonSet` with a template pod.

    The template pod gets the tolerations the DaemonSet controller adds to every daemon pod
    (not-ready/unreachable NoExecute, disk/memory/pid-pressure and unschedulable NoSchedule,
    network-unavailable for ``hostNetwork``), as Karpenter sees them on real daemon pods.
    Field paths in errors are relative to the DaemonSet (``spec.template.spec...``).
    """
    obj = _item_map(obj, "")
    meta = _map(obj, "metadata", "")
    name = _str(meta, "name", "metadata")
    if not name:
        raise ObjectParseError("metadata.name", "is required")
    namespace = _str(meta, "namespace", "metadata", "default") or "default"
    template = _map(_map(obj, "spec", ""), "template", "spec")
    tmeta = dict(_map(template, "metadata", "spec.template"))
    tmeta.update({"name": name, "namespace": namespace})
    tmeta["ownerReferences"] = [{"apiVersion": "apps/v1", "kind": "DaemonSet", "name": name, "controller": True}]
    tspec = _map(template, "spec", "spec.template")
    try:
        pod = pod_from_dict({"metadata": tmeta, "spec": tspec})
    except ObjectParseError as exc:
        raise ObjectParseError(exc.field.replace("spec", "spec.template.spec", 1), exc.reason) from exc
    extra = [t for t in _DAEMON_TOLERATIONS if t not in pod.tolerations]
    if tspec.get("hostNetwork") is True and _HOST_NETWORK_TOLERATION not in pod.tolerations:
        extra.append(_HOST_NETWORK_TOLERATION)
    pod = replace(pod, tolerations=pod.tolerations + tuple(extra))
    return DaemonSet(namespace=namespace, name=name, pod=pod)


def _int_or_percent(obj: Mapping[str, Any], key: str, path: str) -> int | str | None:
    value = obj.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | str):
        raise ObjectParseError(_join(path, key), f"expected an integer or a percentage, got {value!r}")
    if isinstance(value, str):
        text = value.strip()
        if text.endswith("%") and text[:-1].isdigit():
            return text
        if text.isdigit():
            return int(text)
        raise ObjectParseError(_join(path, key), f"{value!r} is not an integer or a percentage")
    return value


def pdb_from_dict(obj: Mapping[str, Any]) -> PodDisruptionBudget:
    """A ``policy/v1 PodDisruptionBudget`` -> :class:`~nodesmith.core.model.PodDisruptionBudget`.

    ``minAvailable``/``maxUnavailable`` stay int or ``"N%"``; ``disruptions_allowed`` is
    ``status.disruptionsAllowed`` when present. A missing selector matches no pods in policy/v1,
    represented here as a selector that can never match. Raises :class:`ObjectParseError`.
    """
    obj = _item_map(obj, "")
    meta = _map(obj, "metadata", "")
    spec = _map(obj, "spec", "")
    status = _map(obj, "status", "")
    name = _str(meta, "name", "metadata")
    if not name:
        raise ObjectParseError("metadata.name", "is required")
    selector = label_selector_from_dict(spec.get("selector"), path="spec.selector")
    if selector is None:
        # policy/v1: a null selector selects no pods.
        selector = LabelSelector(match_expressions=(LabelSelectorRequirement(key="", operator="In", values=()),))
    min_available = _int_or_percent(spec, "minAvailable", "spec")
    max_unavailable = _int_or_percent(spec, "maxUnavailable", "spec")
    if min_available is not None and max_unavailable is not None:
        raise ObjectParseError("spec", "minAvailable and maxUnavailable are mutually exclusive")
    allowed = status.get("disruptionsAllowed")
    return PodDisruptionBudget(
        namespace=_str(meta, "namespace", "metadata", "default") or "default",
        name=name,
        selector=selector,
        min_available=min_available,
        max_unavailable=max_unavailable,
        disruptions_allowed=_int(status, "disruptionsAllowed", "status", 0) if allowed is not None else None,
    )
