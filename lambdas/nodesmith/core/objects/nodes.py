"""Node parsing: ``node_from_dict`` (taints, readiness, allocatable/capacity)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from nodesmith.core.model import Node, NodeCondition, Taint
from nodesmith.core.objects.common import (
    ObjectParseError,
    _item_map,
    _list,
    _map,
    _resource_list,
    _str,
    _str_map,
    parse_timestamp,
)

if TYPE_CHECKING:
    from collections.abc import Mapping

__all__ = ["node_from_dict"]


def node_from_dict(obj: Mapping[str, Any]) -> Node:
    """A ``v1 Node`` object -> :class:`~nodesmith.core.model.Node`.

    ``ready`` is the ``Ready`` condition being "True", ``conditions`` every condition with its
    ``lastTransitionTime``; ``unschedulable`` is ``spec.unschedulable``;
    allocatable/capacity are parsed to integers. Raises :class:`ObjectParseError`.
    """
    obj = _item_map(obj, "")
    meta = _map(obj, "metadata", "")
    spec = _map(obj, "spec", "")
    status = _map(obj, "status", "")
    name = _str(meta, "name", "metadata")
    if not name:
        raise ObjectParseError("metadata.name", "is required")
    taints: list[Taint] = []
    for i, raw in enumerate(_list(spec, "taints", "spec")):
        p = f"spec.taints[{i}]"
        item = _item_map(raw, p)
        effect = _str(item, "effect", p)
        if effect not in ("NoSchedule", "PreferNoSchedule", "NoExecute"):
            raise ObjectParseError(f"{p}.effect", f"{effect!r} is not NoSchedule, PreferNoSchedule or NoExecute")
        taints.append(Taint(key=_str(item, "key", p), effect=effect, value=_str(item, "value", p)))
    ready = False
    conditions: list[NodeCondition] = []
    for i, raw in enumerate(_list(status, "conditions", "status")):
        p = f"status.conditions[{i}]"
        cond = _item_map(raw, p)
        if cond.get("type") == "Ready":
            ready = cond.get("status") == "True"
        conditions.append(
            NodeCondition(
                type=_str(cond, "type", p),
                status=_str(cond, "status", p),
                last_transition_time=parse_timestamp(cond.get("lastTransitionTime"), field=f"{p}.lastTransitionTime"),
            )
        )
    unschedulable = spec.get("unschedulable", False)
    return Node(
        name=name,
        provider_id=_str(spec, "providerID", "spec"),
        labels=_str_map(meta, "labels", "metadata"),
        annotations=_str_map(meta, "annotations", "metadata"),
        taints=tuple(taints),
        allocatable=_resource_list(status, "allocatable", "status"),
        capacity=_resource_list(status, "capacity", "status"),
        unschedulable=unschedulable is True,
        ready=ready,
        creation_timestamp=parse_timestamp(meta.get("creationTimestamp"), field="metadata.creationTimestamp") or 0.0,
        deletion_timestamp=parse_timestamp(meta.get("deletionTimestamp"), field="metadata.deletionTimestamp"),
        finalizers=tuple(str(f) for f in _list(meta, "finalizers", "metadata")),
        conditions=tuple(conditions),
    )
