"""``meta.k8s.io/v1 Table`` answers: what ``kubectl get`` prints, computed on the server as upstream.

``kubectl get`` asks for ``Accept: application/json;as=Table;v=v1;g=meta.k8s.io`` and prints the
columns the server returns. The built-in kinds follow the API server's printers
(``pkg/printers/internalversion/printers.go``: pods, nodes, deployments, replicasets, namespaces,
events); the Karpenter CRDs use the ``additionalPrinterColumns`` of their CRDs
(``kubernetes-sigs/karpenter`` and ``aws/karpenter-provider-aws`` ``pkg/apis/crds``), evaluated as
the apiextensions server does (``date`` columns become a human-readable age); any other kind gets
the default ``Name`` / ``Created At`` table. Times are epoch seconds.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from nodesmith.sim.kube.timefmt import parse_rfc3339

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable

    from nodesmith.sim.kube.registry import ResourceType

__all__ = ["Column", "human_duration", "jsonpath", "table", "wants_table", "watch_tables"]

Cell = str | int | float | bool | None


def wants_table(accept: str | None) -> bool:
    """True when an ``Accept`` header asks for a ``meta.k8s.io/v1`` Table first (``kubectl get``)."""
    if not accept:
        return False
    first = accept.split(",")[0]
    params = {p.strip() for p in first.split(";")[1:]}
    return "as=Table" in params and "g=meta.k8s.io" in params and "v=v1" in params


def _with_rest(big: int, unit: str, rest: int, rest_unit: str) -> str:
    return f"{big}{unit}{rest}{rest_unit}" if rest else f"{big}{unit}"


_HOUR, _DAY, _YEAR = 3600, 86400, 365 * 86400

_DURATION_STEPS: tuple[tuple[int, Callable[[int], str]], ...] = (
    (120, lambda s: f"{s}s"),
    (600, lambda s: _with_rest(s // 60, "m", s % 60, "s")),
    (3 * _HOUR, lambda s: f"{s // 60}m"),
    (8 * _HOUR, lambda s: _with_rest(s // _HOUR, "h", (s // 60) % 60, "m")),
    (48 * _HOUR, lambda s: f"{s // _HOUR}h"),
    (8 * _DAY, lambda s: _with_rest(s // _DAY, "d", (s // _HOUR) % 24, "h")),
    (2 * _YEAR, lambda s: f"{s // _DAY}d"),
    (8 * _YEAR, lambda s: _with_rest(s // _YEAR, "y", (s // _DAY) % 365, "d")),
)


def human_duration(seconds: float) -> str:
    """A duration as ``kubectl`` prints an age (``apimachinery/pkg/util/duration.HumanDuration``).

    ``seconds`` is the elapsed time; below -1 s it is ``<invalid>``, below 0 it is ``0s``.
    """
    secs = int(seconds)
    if secs < -1:
        return "<invalid>"
    if secs < 0:
        return "0s"
    for limit, render in _DURATION_STEPS:
        if secs < limit:
            return render(secs)
    return f"{secs // _YEAR}y"


_FILTER = re.compile(r'^\[\?\(@\.([A-Za-z0-9_]+)\s*==\s*"([^"]*)"\)\]')


def jsonpath(obj: Any, path: str) -> list[Any]:
    """The values a CRD printer column's ``jsonPath`` selects in ``obj`` (empty when absent).

    Supports what Karpenter's CRDs use: ``.a.b`` with ``\\.`` escaping a dot inside a key, and a
    filter ``[?(@.key=="value")]`` over a list. ValueError names an unsupported expression.
    """
    current: list[Any] = [obj]
    i = 0
    while i < len(path):
        if path[i] == ".":
            j = i + 1
            key = ""
            while j < len(path) and path[j] not in ".[":
                if path[j] == "\\" and j + 1 < len(path):
                    key += path[j + 1]
                    j += 2
                    continue
                key += path[j]
                j += 1
            current = [v[key] for v in current if isinstance(v, dict) and key in v]
            i = j
        elif (m := _FILTER.match(path[i:])) is not None:
            field, wanted = m.group(1), m.group(2)
            current = [
                item
                for v in current
                if isinstance(v, list)
                for item in v
                if isinstance(item, dict) and str(item.get(field)) == wanted
            ]
            i += m.end()
        else:
            raise ValueError(f"unsupported jsonPath {path!r} at offset {i}")
    return current


@dataclass(frozen=True, slots=True)
class Column:
    """One column: its ``TableColumnDefinition`` and how a cell is read from an object at ``now``."""

    name: str
    type: str
    cell: Callable[[dict[str, Any], float], Cell]
    priority: int = 0
    format: str = ""
    description: str = ""

    def definition(self) -> dict[str, Any]:
        """The ``TableColumnDefinition``."""
        return {
            "name": self.name,
            "type": self.type,
            "format": self.format,
            "description": self.description,
            "priority": self.priority,
        }


def _age(obj: dict[str, Any], now: float) -> Cell:
    created = (obj.get("metadata") or {}).get("creationTimestamp")
    return "<unknown>" if not created else human_duration(now - parse_rfc3339(created))


def _name(obj: dict[str, Any], _now: float) -> Cell:
    return str((obj.get("metadata") or {}).get("name", ""))


def _crd_column(name: str, path: str, kind: str = "string", priority: int = 0) -> Column:
    """A CRD ``additionalPrinterColumns`` entry as the apiextensions server renders it."""

    def cell(obj: dict[str, Any], now: float) -> Cell:
        values = jsonpath(obj, path)
        if not values:
            return None
        value = values[0]
        if kind == "date" and isinstance(value, str):
            return human_duration(now - parse_rfc3339(value))
        if kind == "string" and not isinstance(value, str):
            return str(value) if not isinstance(value, dict | list) else str(values)
        return value  # type: ignore[no-any-return]

    return Column(name, kind, cell, priority)


_NAME = Column("Name", "string", _name, format="name", description="Name must be unique within a namespace.")
_AGE = Column("Age", "string", _age, description="CreationTimestamp of the object.")


# -- built-in printers ------------------------------------------------------------------------------


def _pod_status(pod: dict[str, Any], _now: float) -> Cell:
    status = pod.get("status") or {}
    reason = status.get("reason") or status.get("phase") or "Unknown"
    for cs in status.get("containerStatuses") or []:
        state = cs.get("state") or {}
        if (state.get("waiting") or {}).get("reason"):
            reason = state["waiting"]["reason"]
        elif (state.get("terminated") or {}).get("reason"):
            reason = state["terminated"]["reason"]
    if (pod.get("metadata") or {}).get("deletionTimestamp"):
        reason = "Terminating"
    return str(reason)


def _pod_ready(pod: dict[str, Any], _now: float) -> Cell:
    total = len((pod.get("spec") or {}).get("containers") or [])
    ready = sum(1 for cs in (pod.get("status") or {}).get("containerStatuses") or [] if cs.get("ready"))
    return f"{ready}/{total}"


def _pod_restarts(pod: dict[str, Any], _now: float) -> Cell:
    return sum(int(cs.get("restartCount") or 0) for cs in (pod.get("status") or {}).get("containerStatuses") or [])


def _none_if_empty(value: object) -> Cell:
    return str(value) if value else "<none>"


_POD = (
    _NAME,
    Column(
        "Ready", "string", _pod_ready, description="The aggregate readiness state of this pod for accepting traffic."
    ),
    Column("Status", "string", _pod_status, description="The aggregate status of the containers in this pod."),
    Column("Restarts", "string", _pod_restarts, description="The number of times the containers were restarted."),
    _AGE,
    Column("IP", "string", lambda p, _n: _none_if_empty((p.get("status") or {}).get("podIP")), priority=1),
    Column("Node", "string", lambda p, _n: _none_if_empty((p.get("spec") or {}).get("nodeName")), priority=1),
    Column(
        "Nominated Node",
        "string",
        lambda p, _n: _none_if_empty((p.get("status") or {}).get("nominatedNodeName")),
        priority=1,
    ),
    Column("Readiness Gates", "string", lambda _p, _n: "<none>", priority=1),
)


def _node_status(node: dict[str, Any], _now: float) -> Cell:
    conditions = {c.get("type"): c.get("status") for c in (node.get("status") or {}).get("conditions") or []}
    ready = conditions.get("Ready")
    out = ["Ready" if ready == "True" else "NotReady" if ready == "False" else "Unknown"]
    if (node.get("spec") or {}).get("unschedulable"):
        out.append("SchedulingDisabled")
    return ",".join(out)


def _node_roles(node: dict[str, Any], _now: float) -> Cell:
    roles = sorted(
        key.removeprefix("node-role.kubernetes.io/") or "<none>"
        for key in ((node.get("metadata") or {}).get("labels") or {})
        if key.startswith("node-role.kubernetes.io/")
    )
    return ",".join(roles) if roles else "<none>"


def _node_info(key: str) -> Callable[[dict[str, Any], float], Cell]:
    return lambda node, _n: _none_if_empty(((node.get("status") or {}).get("nodeInfo") or {}).get(key))


def _node_address(kind: str) -> Callable[[dict[str, Any], float], Cell]:
    def cell(node: dict[str, Any], _now: float) -> Cell:
        for address in (node.get("status") or {}).get("addresses") or []:
            if address.get("type") == kind:
                return str(address.get("address"))
        return "<none>"

    return cell


_NODE = (
    _NAME,
    Column("Status", "string", _node_status, description="The status of the node."),
    Column("Roles", "string", _node_roles, description="The roles of the node."),
    _AGE,
    Column("Version", "string", _node_info("kubeletVersion"), description="Kubelet Version reported by the node."),
    Column("Internal-IP", "string", _node_address("InternalIP"), priority=1),
    Column("External-IP", "string", _node_address("ExternalIP"), priority=1),
    Column("OS-Image", "string", _node_info("osImage"), priority=1),
    Column("Kernel-Version", "string", _node_info("kernelVersion"), priority=1),
    Column("Container-Runtime", "string", _node_info("containerRuntimeVersion"), priority=1),
)


def _field(*path: str, default: Cell = 0) -> Callable[[dict[str, Any], float], Cell]:
    def cell(obj: dict[str, Any], _now: float) -> Cell:
        value: Any = obj
        for key in path:
            value = value.get(key) if isinstance(value, dict) else None
        return default if value is None else value

    return cell


def _containers(what: str) -> Callable[[dict[str, Any], float], Cell]:
    def cell(obj: dict[str, Any], _now: float) -> Cell:
        containers = ((((obj.get("spec") or {}).get("template") or {}).get("spec") or {}).get("containers")) or []
        return ",".join(str(c.get(what, "")) for c in containers)

    return cell


def _selector(obj: dict[str, Any], _now: float) -> Cell:
    labels = ((obj.get("spec") or {}).get("selector") or {}).get("matchLabels") or {}
    return ",".join(f"{k}={v}" for k, v in sorted(labels.items())) or "<none>"


_DEPLOYMENT = (
    _NAME,
    Column(
        "Ready",
        "string",
        lambda d, _n: f"{(d.get('status') or {}).get('readyReplicas', 0)}/{(d.get('spec') or {}).get('replicas', 1)}",
    ),
    Column("Up-to-date", "integer", _field("status", "updatedReplicas")),
    Column("Available", "integer", _field("status", "availableReplicas")),
    _AGE,
    Column("Containers", "string", _containers("name"), priority=1),
    Column("Images", "string", _containers("image"), priority=1),
    Column("Selector", "string", _selector, priority=1),
)

_REPLICASET = (
    _NAME,
    Column("Desired", "integer", _field("spec", "replicas")),
    Column("Current", "integer", _field("status", "replicas")),
    Column("Ready", "integer", _field("status", "readyReplicas")),
    _AGE,
)

_NAMESPACE = (_NAME, Column("Status", "string", _field("status", "phase", default="Active")), _AGE)


def _event_last_seen(event: dict[str, Any], now: float) -> Cell:
    seen = (
        event.get("lastTimestamp") or event.get("eventTime") or (event.get("metadata") or {}).get("creationTimestamp")
    )
    return "<unknown>" if not seen else human_duration(now - parse_rfc3339(str(seen)))


def _event_object(event: dict[str, Any], _now: float) -> Cell:
    involved = event.get("involvedObject") or {}
    return f"{str(involved.get('kind', '')).lower()}/{involved.get('name', '')}"


_EVENT = (
    Column("Last Seen", "string", _event_last_seen),
    Column("Type", "string", _field("type", default="")),
    Column("Reason", "string", _field("reason", default="")),
    Column("Object", "string", _event_object),
    Column("Message", "string", _field("message", default="")),
)

# -- Karpenter's CRDs: their additionalPrinterColumns -----------------------------------------------

_READY = '.status.conditions[?(@.type=="Ready")].status'
_CREATED = ".metadata.creationTimestamp"

_NODEPOOL = (
    _NAME,
    _crd_column("NodeClass", ".spec.template.spec.nodeClassRef.name"),
    _crd_column("Nodes", ".status.nodes"),
    _crd_column("Ready", _READY),
    _crd_column("Age", _CREATED, "date"),
    _crd_column("Weight", ".spec.weight", "integer", priority=1),
    _crd_column("CPU", ".status.resources.cpu", priority=1),
    _crd_column("Memory", ".status.resources.memory", priority=1),
)

_NODECLAIM = (
    _NAME,
    _crd_column("Type", r".metadata.labels.node\.kubernetes\.io/instance-type"),
    _crd_column("Capacity", r".metadata.labels.karpenter\.sh/capacity-type"),
    _crd_column("Zone", r".metadata.labels.topology\.kubernetes\.io/zone"),
    _crd_column("Node", ".status.nodeName"),
    _crd_column("Ready", _READY),
    _crd_column("Age", _CREATED, "date"),
    _crd_column("ImageID", ".status.imageID", priority=1),
    _crd_column("ID", ".status.providerID", priority=1),
    _crd_column("NodePool", r".metadata.labels.karpenter\.sh/nodepool", priority=1),
    _crd_column("NodeClass", ".spec.nodeClassRef.name", priority=1),
    _crd_column("Drifted", '.status.conditions[?(@.type=="Drifted")].status', priority=1),
)

_EC2NODECLASS = (
    _NAME,
    _crd_column("Ready", _READY),
    _crd_column("Age", _CREATED, "date"),
    _crd_column("Role", ".spec.role", priority=1),
)

_DEFAULT = (_NAME, Column("Created At", "date", lambda o, _n: (o.get("metadata") or {}).get("creationTimestamp")))

COLUMNS: dict[str, tuple[Column, ...]] = {
    "pods": _POD,
    "nodes": _NODE,
    "namespaces": _NAMESPACE,
    "events": _EVENT,
    "deployments.apps": _DEPLOYMENT,
    "replicasets.apps": _REPLICASET,
    "nodepools.karpenter.sh": _NODEPOOL,
    "nodeclaims.karpenter.sh": _NODECLAIM,
    "ec2nodeclasses.karpenter.k8s.aws": _EC2NODECLASS,
}
"""Columns per resource key; any other resource prints ``_DEFAULT``."""


def columns_of(rt: ResourceType) -> tuple[Column, ...]:
    """The columns ``kubectl get`` prints for ``rt``."""
    return COLUMNS.get(rt.key, _DEFAULT)


def _row_object(obj: dict[str, Any], include: str) -> dict[str, Any] | None:
    if include == "None":
        return None
    if include == "Object":
        return obj
    return {"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1", "metadata": obj.get("metadata") or {}}


def table(
    rt: ResourceType,
    objects: Iterable[dict[str, Any]],
    *,
    now: float,
    resource_version: str | None = None,
    continue_token: str | None = None,
    include_object: str = "Metadata",
    with_columns: bool = True,
) -> dict[str, Any]:
    """A ``meta.k8s.io/v1 Table`` of ``objects`` at ``now`` (epoch seconds).

    ``include_object`` is the request's ``includeObject`` (``None``, ``Metadata`` — the default,
    a ``PartialObjectMetadata`` per row — or ``Object``). ``with_columns`` False leaves out the
    column definitions, as the API server does after a watch's first event.
    """
    cols = columns_of(rt)
    rows = []
    for obj in objects:
        row: dict[str, Any] = {"cells": [c.cell(obj, now) for c in cols]}
        embedded = _row_object(obj, include_object)
        if embedded is not None:
            row["object"] = embedded
        rows.append(row)
    meta: dict[str, str] = {}
    if resource_version is not None:
        meta["resourceVersion"] = resource_version
    if continue_token:
        meta["continue"] = continue_token
    return {
        "kind": "Table",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": meta,
        "columnDefinitions": [c.definition() for c in cols] if with_columns else [],
        "rows": rows,
    }


def watch_tables(
    rt: ResourceType, translate: Callable[[Any], dict[str, Any] | None], include_object: str
) -> Callable[[Any], dict[str, Any] | None]:
    """Wrap a watch's event translation so each ADDED/MODIFIED/DELETED object becomes a one-row Table.

    The column definitions ride on the first event only, as the API server sends them; ``ERROR`` and
    ``BOOKMARK`` events pass through unchanged.
    """
    first = [True]

    def wrapped(event: Any) -> dict[str, Any] | None:
        out = translate(event)
        if out is None or out["type"] not in ("ADDED", "MODIFIED", "DELETED"):
            return out
        obj = out["object"]
        rv = str((obj.get("metadata") or {}).get("resourceVersion", ""))
        out = dict(out)
        out["object"] = table(
            rt, [obj], now=time.time(), resource_version=rv, include_object=include_object, with_columns=first[0]
        )
        first[0] = False
        return out

    return wrapped
