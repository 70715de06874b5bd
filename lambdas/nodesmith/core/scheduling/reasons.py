"""Human-readable reasons why a pod could not be placed, with the numbers that decided it.

Karpenter reports ``InstanceTypeFilterError`` (``[core]:.../scheduling/nodeclaim.go``) as flags
("no instance type met the scheduling requirements or had enough resources ..."); users asked for
more actionable messages (aws/karpenter-provider-aws#2476, kubernetes-sigs/karpenter#2441). Here a
reason names the first check that ruled a NodePool out and the amounts involved, e.g.
``no instance type has 64 cpu free after DaemonSets (largest allows 47.8)``.
Only computed on the failure path.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from nodesmith.core.requirements import LABEL_CAPACITY_TYPE, LABEL_ZONE, LABEL_ZONE_ID
from nodesmith.core.resources import CPU, EPHEMERAL_STORAGE, MEMORY, PODS
from nodesmith.core.scheduling.instancetypes import NODES

if TYPE_CHECKING:
    from collections.abc import Mapping

    from nodesmith.core.requirements import Requirements
    from nodesmith.core.scheduling.nodeclaim import Template
    from nodesmith.core.scheduling.pods import PodData

__all__ = ["amount", "fit_failure", "limits_failure", "resource_order"]

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


def _free_label(tpl: Template) -> str:
    return " free after DaemonSets" if tpl.has_overhead else " allocatable"


def _narrowed(tpl: Template, reqs: Requirements) -> str:
    keys = [k for k in reqs if k in tpl.type_keys and reqs.get(k) != tpl.requirements.get(k)]
    if not keys:
        keys = [k for k in reqs if k in tpl.type_keys]
    return ", ".join(str(reqs.get(k)) for k in sorted(keys))


def fit_failure(  # noqa: PLR0911 - one return per check, first failing check wins
    tpl: Template, reqs: Requirements, data: PodData, *, compatible: int, allowed: int
) -> str:
    """Why no instance type of ``tpl`` can take the pod alone (first failing check, with numbers)."""
    if not compatible:
        if not tpl.requirement_mask(reqs.without(LABEL_ZONE, LABEL_CAPACITY_TYPE, LABEL_ZONE_ID)):
            return f"no instance type satisfies {_narrowed(tpl, reqs)}"
        return (
            f"no instance type has an available offering in zone {reqs.get(LABEL_ZONE)} "
            f"with capacity type {reqs.get(LABEL_CAPACITY_TYPE)}"
        )
    requests = data.requests
    fitting = compatible & ~tpl.too_small(requests)
    if not fitting:
        members = [i for i in range(len(tpl.types)) if compatible >> i & 1]
        for resource in resource_order(requests):
            need = requests[resource]
            if need <= 0:
                continue
            best = max(tpl.free(resource, i) for i in members)
            if need > best:
                return (
                    f"no instance type has {amount(resource, need)} {resource}{_free_label(tpl)} "
                    f"(largest allows {amount(resource, best)})"
                )
        wanted = ", ".join(f"{amount(r, requests[r])} {r}" for r in resource_order(requests) if requests[r] > 0)
        return f"no single instance type has {wanted}{_free_label(tpl)}"
    if not fitting & allowed:
        left = tpl.remaining or {}
        shown = ", ".join(f"{r} {amount(r, left[r])}" for r in resource_order(left) if r != NODES)
        return f"every instance type that fits would exceed the NodePool limits ({shown} left)"
    if data.host_ports and not fitting & allowed & ~tpl.port_blocked(data.host_ports):
        ports = ", ".join(f"{p[1]}/{p[0]}" for p in data.host_ports)
        return f"host port {ports} is already used by a DaemonSet on every instance type that fits"
    return "no instance type fits all constraints at once"


def limits_failure(tpl: Template, resource: str | None) -> str:
    """Why the NodePool's ``limits`` stop it: ``nodes`` exhausted, or every type exceeds a remaining limit."""
    limits = tpl.limits or {}
    left = tpl.remaining or {}
    if resource == NODES:
        cap = limits.get(NODES, 0)
        return f"limits.nodes reached ({cap - left.get(NODES, 0)} of {cap} in use or planned)"
    for name in resource_order(left):
        smallest = min((t.capacity.get(name, 0) for t in tpl.types), default=0)
        if smallest > left[name]:
            return (
                f"limits.{name} would be exceeded: {amount(name, max(left[name], 0))} of "
                f"{amount(name, limits.get(name, 0))} left, smallest instance type has {amount(name, smallest)}"
            )
    shown = ", ".join(f"{r} {amount(r, left[r])}" for r in resource_order(left))
    return f"no instance type fits within the remaining limits ({shown} left)"
