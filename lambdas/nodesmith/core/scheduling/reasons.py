"""Why a pod goes where it goes, or nowhere: structured explanations with the numbers that decided.

Karpenter reports ``InstanceTypeFilterError`` (``[core]:.../scheduling/nodeclaim.go``) as flags
("incompatible with nodepool ..., no instance type satisfied resources ... and requirements ...");
users asked for more actionable messages (aws/karpenter-provider-aws#2476,
kubernetes-sigs/karpenter#2441). Here every NodePool considered gets a :class:`PoolVerdict`: the
*stage* and the first *constraint* that removed the last option, with *numbers* (amounts needed,
the largest that is free, counts per domain), the instance-type *funnel* (how many types each
filter left) and *hints* (what would fit elsewhere: another zone or capacity type, types outside
the NodePool's requirements). An :class:`Explanation` gathers them for one pod with the existing
nodes' summary, and renders the one-line text that becomes the pod's unschedulable reason and the
``FailedScheduling`` Event, for example::

    nodepool "default": no instance type in zone us-east-1a satisfying karpenter.k8s.aws/instance-category
    In [c, m, t] has 1 cpu free after DaemonSets (largest allows 0.93); 3 types would fit in us-east-1b

Stages follow Karpenter's check order for a new NodeClaim (``scheduler.go addToNewNodeClaim``,
``nodeclaim.go CanAdd``, ``filterInstanceTypesByRequirements``): :data:`STAGES`.
Only computed on the failure path (and for pods asked about).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Final

from nodesmith.core.requirements import LABEL_CAPACITY_TYPE, LABEL_ZONE, LABEL_ZONE_ID
from nodesmith.core.resources import CPU, EPHEMERAL_STORAGE, MEMORY, PODS
from nodesmith.core.scheduling.instancetypes import NODES

if TYPE_CHECKING:
    from collections.abc import Mapping

    from nodesmith.core.requirements import Requirements
    from nodesmith.core.scheduling.nodeclaim import Template
    from nodesmith.core.scheduling.pods import PodData

__all__ = [
    "CHOSEN",
    "REJECTED",
    "STAGES",
    "WOULD_FIT",
    "WOULD_NOT_FIT",
    "Explanation",
    "NodeSummary",
    "PoolVerdict",
    "Rejection",
    "Step",
    "amount",
    "fit_failure",
    "limits_failure",
    "resource_order",
]

STAGES: Final = (
    "nodepool",  # the NodePool itself cannot launch anything (invalid requirements, no type, minValues)
    "taints",  # the pod does not tolerate a NodePool taint
    "requirements",  # the pod's node selector/affinity conflicts with the NodePool's requirements
    "limits",  # NodePool limits leave no instance type
    "topology",  # spread / affinity / anti-affinity leave no domain
    "instance types",  # no type meets the combined requirements
    "offerings",  # types meet them, but none has an available offering in the allowed zones/capacity types
    "resources",  # types with offerings exist, none has the requests free after DaemonSets
    "host ports",  # a DaemonSet already uses the pod's host port on every type that fits
    "minValues",  # too few distinct values left for a minValues requirement
)
"""Where a NodePool can turn a pod away, in the order the checks run."""

REJECTED: Final = "rejected"
CHOSEN: Final = "chosen"
WOULD_FIT: Final = "would also fit"
WOULD_NOT_FIT: Final = "would not fit"

_GI = 2**30
_MI = 2**20


def _trim(value: float, digits: int) -> str:
    text = f"{value:.{digits}f}"
    return text.rstrip("0").rstrip(".") if "." in text else text


def amount(resource: str, value: int) -> str:
    """Render an integer amount for people: cpu in cores (``47.8``), memory/storage in Gi/Mi, else the count."""
    if resource == CPU:
        return _trim(value / 1000, 3)
    if resource in (MEMORY, EPHEMERAL_STORAGE):
        if abs(value) >= _GI:
            return _trim(value / _GI, 2) + "Gi"
        return _trim(value / _MI, 1) + "Mi"
    return str(value)


def resource_order(names: Mapping[str, int]) -> list[str]:
    """cpu, memory, pods first, then the rest alphabetically."""
    first = [n for n in (CPU, MEMORY, PODS) if n in names]
    return first + sorted(n for n in names if n not in first)


@dataclass(frozen=True, slots=True)
class Rejection:
    """The first check a NodePool failed for a pod: ``stage`` (one of :data:`STAGES`), the blocking
    ``constraint``, a ``message`` for people and the ``numbers`` behind it (rendered amounts).

    ``requirements`` are the NodePool's requirements narrowed by the pod and its topology when the
    instance-type stages failed, so the funnel and hints can be worked out later.
    """

    stage: str
    constraint: str
    message: str
    numbers: Mapping[str, str] = field(default_factory=dict)
    requirements: Requirements | None = field(default=None, compare=False, repr=False)


@dataclass(frozen=True, slots=True)
class Step:
    """One filter of the instance-type funnel and how many types were left after it."""

    constraint: str
    remaining: int


@dataclass(frozen=True, slots=True)
class PoolVerdict:
    """What one NodePool said about one pod.

    ``verdict``: :data:`REJECTED`, :data:`CHOSEN` (a new NodeClaim of this pool took it),
    :data:`WOULD_FIT` / :data:`WOULD_NOT_FIT` (not needed: the pod went elsewhere first, here
    is what the pool would have said). ``stage``/``constraint``/``message``/``numbers`` as in
    :class:`Rejection` (``stage`` is ``"fits"`` when it fits). ``funnel``: types left after each
    filter; ``hints``: what would fit elsewhere.
    """

    nodepool: str
    verdict: str
    stage: str
    constraint: str
    message: str
    numbers: Mapping[str, str] = field(default_factory=dict)
    funnel: tuple[Step, ...] = ()
    hints: tuple[str, ...] = ()

    def line(self) -> str:
        """``nodepool "NAME": message; hint; hint``."""
        text = f'nodepool "{self.nodepool}": {self.message}'
        return "; ".join((text, *self.hints))


@dataclass(frozen=True, slots=True)
class NodeSummary:
    """Why the existing nodes (and in-flight NodeClaims) did not take the pod: how many were
    considered and, per first failing check, how many nodes and the detail (with numbers)."""

    considered: int
    reasons: tuple[tuple[int, str], ...] = ()

    def text(self) -> str:
        """``existing nodes (3): 2 have too little cpu free (most 1.5, needs 4), 1 is cordoned ...``."""
        shown = ", ".join(f"{count} {_singular(detail) if count == 1 else detail}" for count, detail in self.reasons)
        return f"existing nodes ({self.considered}): {shown}" if shown else f"existing nodes ({self.considered})"


_SINGULAR = (("have ", "has "), ("are ", "is "), ("already use ", "already uses "))


def _singular(detail: str) -> str:
    """The detail's verb for one node (details are written for several: "have", "are", "use")."""
    for plural, single in _SINGULAR:
        if detail.startswith(plural):
            return single + detail[len(plural) :]
    return detail


NO_NODEPOOL: Final = "no NodePool to provision from, and no existing node fits"


@dataclass(frozen=True, slots=True)
class Explanation:
    """Everything known about one pod's placement in a pass.

    ``pod`` is ``namespace/name``. ``scheduled`` and ``placement`` (``existing node NAME`` or
    ``new NodeClaim of nodepool NAME ...``; empty when unschedulable). ``pools`` in the order they
    were considered (weight, then name; NodePools that cannot launch anything last). ``existing``:
    why existing capacity did not take it (None when there is none or it did). ``relaxed``: the
    soft constraints dropped, in order, before the last attempt. ``error``: the pod itself cannot
    be scheduled by this implementation (malformed affinity, unsupported namespaceSelector).
    ``volumes``: the requirements its PersistentVolumeClaims impose (rendered), so a zone that
    comes from storage is not mistaken for one the pod asked for.
    """

    pod: str
    scheduled: bool
    placement: str = ""
    pools: tuple[PoolVerdict, ...] = ()
    existing: NodeSummary | None = None
    relaxed: tuple[str, ...] = ()
    error: str = ""
    volumes: tuple[str, ...] = ()

    def text(self) -> str:
        """The one-line reason: every rejecting NodePool's line, then the existing nodes' summary."""
        if self.error:
            return self.error
        parts = [p.line() for p in self.pools if p.verdict == REJECTED]
        if not parts:
            parts = [NO_NODEPOOL]
        if self.existing is not None and self.existing.reasons:
            parts.append(self.existing.text())
        if self.volumes:
            parts.append(f"the pod's volumes require {', '.join(self.volumes)}")
        return "; ".join(parts)


# ------------------------------------------------------------------------------- rejections


def _free_label(tpl: Template) -> str:
    return " free after DaemonSets" if tpl.has_overhead else " allocatable"


def _narrowed(tpl: Template, reqs: Requirements, *, offerings: bool = False) -> list[str]:
    """Instance-label requirements the pod (or its topology) narrowed beyond the NodePool's, rendered.
    Zone, capacity type and zone id only when ``offerings``."""
    domain = (LABEL_ZONE, LABEL_CAPACITY_TYPE, LABEL_ZONE_ID)
    keys = [
        k for k in reqs if k in tpl.type_keys and (k in domain) == offerings and reqs.get(k) != tpl.requirements.get(k)
    ]
    return [str(reqs.get(k)) for k in sorted(keys)]


def _scope(tpl: Template, reqs: Requirements) -> str:
    """`` in zone us-east-1a with capacity type on-demand satisfying <reqs>`` for what the pod narrowed."""
    out = ""
    zone = reqs.peek(LABEL_ZONE)
    if zone is not None and zone != tpl.requirements.peek(LABEL_ZONE) and not zone.complement:
        out += f" in zone {', '.join(zone.sorted_values())}"
    capacity = reqs.peek(LABEL_CAPACITY_TYPE)
    if capacity is not None and capacity != tpl.requirements.peek(LABEL_CAPACITY_TYPE) and not capacity.complement:
        out += f" with capacity type {', '.join(capacity.sorted_values())}"
    labels = _narrowed(tpl, reqs)
    if labels:
        out += f" satisfying {', '.join(labels)}"
    return out


def fit_failure(  # noqa: PLR0911 - one return per check, first failing check wins
    tpl: Template, reqs: Requirements, data: PodData, *, compatible: int, allowed: int
) -> Rejection:
    """Why no instance type of ``tpl`` can take the pod alone (first failing check, with numbers)."""
    if not compatible:
        if not tpl.requirement_mask(reqs.without(LABEL_ZONE, LABEL_CAPACITY_TYPE, LABEL_ZONE_ID)):
            constraint = ", ".join(_narrowed(tpl, reqs)) or ", ".join(
                str(reqs.get(k)) for k in sorted(reqs) if k in tpl.type_keys
            )
            return Rejection(
                "instance types",
                constraint,
                f"no instance type satisfies {constraint}",
                {"types in nodepool": str(len(tpl.types))},
                reqs,
            )
        where = f"zone {reqs.get(LABEL_ZONE)} with capacity type {reqs.get(LABEL_CAPACITY_TYPE)}"
        return Rejection("offerings", where, f"no instance type has an available offering in {where}", {}, reqs)
    requests = data.requests
    fitting = compatible & ~tpl.too_small(requests)
    if not fitting:
        members = [i for i in range(len(tpl.types)) if compatible >> i & 1]
        scope = _scope(tpl, reqs)
        for resource in resource_order(requests):
            need = requests[resource]
            if need <= 0:
                continue
            best = max(tpl.free(resource, i) for i in members)
            if need > best:
                constraint = f"{amount(resource, need)} {resource}{_free_label(tpl)}"
                return Rejection(
                    "resources",
                    constraint,
                    f"no instance type{scope} has {constraint} (largest allows {amount(resource, best)})",
                    {"needs": f"{amount(resource, need)} {resource}", "largest free": amount(resource, best)},
                    reqs,
                )
        wanted = ", ".join(f"{amount(r, requests[r])} {r}" for r in resource_order(requests) if requests[r] > 0)
        return Rejection(
            "resources",
            wanted,
            f"no single instance type{scope} has {wanted}{_free_label(tpl)}",
            {"needs": wanted},
            reqs,
        )
    if not fitting & allowed:
        left = tpl.remaining or {}
        shown = ", ".join(f"{r} {amount(r, left[r])}" for r in resource_order(left) if r != NODES)
        return Rejection(
            "limits",
            "limits",
            f"every instance type that fits would exceed the NodePool limits ({shown} left)",
            {r: amount(r, left[r]) for r in resource_order(left)},
            reqs,
        )
    if data.host_ports and not fitting & allowed & ~tpl.port_blocked(data.host_ports):
        ports = ", ".join(f"{p[1]}/{p[0]}" for p in data.host_ports)
        return Rejection(
            "host ports",
            f"host port {ports}",
            f"host port {ports} is already used by a DaemonSet on every instance type that fits",
            {},
            reqs,
        )
    return Rejection("instance types", "all constraints", "no instance type fits all constraints at once", {}, reqs)


def limits_failure(tpl: Template, resource: str | None) -> Rejection:
    """Why the NodePool's ``limits`` stop it: ``nodes`` exhausted, or every type exceeds a remaining limit."""
    limits = tpl.limits or {}
    left = tpl.remaining or {}
    if resource == NODES:
        cap = limits.get(NODES, 0)
        used = cap - left.get(NODES, 0)
        return Rejection(
            "limits",
            f"limits.{NODES}",
            f"limits.nodes reached ({used} of {cap} in use or planned)",
            {"in use or planned": str(used), "limit": str(cap)},
        )
    for name in resource_order(left):
        smallest = min((t.capacity.get(name, 0) for t in tpl.types), default=0)
        if smallest > left[name]:
            return Rejection(
                "limits",
                f"limits.{name}",
                f"limits.{name} would be exceeded: {amount(name, max(left[name], 0))} of "
                f"{amount(name, limits.get(name, 0))} left, smallest instance type has {amount(name, smallest)}",
                {
                    "left": amount(name, max(left[name], 0)),
                    "limit": amount(name, limits.get(name, 0)),
                    "smallest type": amount(name, smallest),
                },
            )
    shown = ", ".join(f"{r} {amount(r, left[r])}" for r in resource_order(left))
    return Rejection(
        "limits",
        "limits",
        f"no instance type fits within the remaining limits ({shown} left)",
        {r: amount(r, left[r]) for r in resource_order(left)},
    )
