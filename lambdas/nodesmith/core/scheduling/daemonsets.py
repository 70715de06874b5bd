"""DaemonSet overhead: what the DaemonSet pods that would land on a node take from its allocatable.

New NodeClaims (``[core]:pkg/controllers/provisioning/scheduling/scheduler.go
buildDaemonOverheadGroups`` / ``isDaemonPodCompatible``): per NodePool, each instance type gets the
set of DaemonSets whose pod template tolerates the NodePool's taints (``PreferNoSchedule`` always
tolerated), whose node selector + required node affinity (any OR term) is compatible with the
NodePool's requirements and labels, and intersects the instance type's requirements. Types with the
same set form one group; the group's summed requests (``pods: 1`` each) and host ports are charged
when checking whether pods fit.

Existing nodes (``calculateExistingNodeClaims`` / ``NewExistingNode``): DaemonSets tolerating the
node's taints and selecting its labels; what they would request minus the requests of DaemonSet
pods already on the node (floored at zero) is reserved.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from nodesmith.core.requirements import WELL_KNOWN_LABELS, Requirements
from nodesmith.core.scheduling.pods import Constraints, HostPort, PodData
from nodesmith.core.scheduling.taints import PREFER_NO_SCHEDULE_TOLERATION, first_untolerated

if TYPE_CHECKING:
    from collections.abc import Sequence

    from nodesmith.core.model import DaemonSet, Pod, Taint, Toleration
    from nodesmith.core.resources import Resources
    from nodesmith.core.scheduling.instancetypes import TypeInfo

__all__ = ["DaemonGroup", "DaemonInfo", "build_overhead_groups", "daemon_infos", "existing_node_overhead"]


@dataclass(frozen=True, slots=True)
class DaemonInfo:
    """A DaemonSet reduced to its pod's requests, tolerations, host ports and node-selection terms (ORed)."""

    key: str
    requests: Resources
    tolerations: tuple[Toleration, ...]
    host_ports: tuple[HostPort, ...]
    terms: tuple[Requirements, ...]


@dataclass(frozen=True, slots=True)
class DaemonGroup:
    """Instance types of one NodePool that get the same DaemonSets: their summed ``overhead`` and ``host_ports``."""

    members: tuple[str, ...]
    overhead: Resources
    host_ports: tuple[HostPort, ...]


def daemon_infos(daemonsets: Sequence[DaemonSet]) -> list[DaemonInfo]:
    """Prepare DaemonSets once per pass (sorted by ``namespace/name``; malformed affinities are skipped)."""
    out: list[DaemonInfo] = []
    for ds in sorted(daemonsets, key=lambda d: (d.namespace, d.name)):
        data = PodData(ds.pod, Constraints.from_pod(ds.pod, respect_preferences=False))
        if data.error is not None:
            continue
        out.append(
            DaemonInfo(
                key=f"{ds.namespace}/{ds.name}",
                requests=data.requests,
                tolerations=data.tolerations,
                host_ports=data.host_ports,
                terms=data.node_filter_terms,
            )
        )
    return out


def _sum(infos: Sequence[DaemonInfo]) -> Resources:
    out: Resources = {}
    for d in infos:
        for name, amount in d.requests.items():
            out[name] = out.get(name, 0) + amount
    return out


def build_overhead_groups(
    *,
    requirements: Requirements,
    taints: Sequence[Taint],
    types: Sequence[TypeInfo],
    daemons: Sequence[DaemonInfo],
) -> tuple[list[DaemonGroup], list[int]]:
    """Group a NodePool's instance types by the DaemonSets that would run on them.

    Returns ``(groups, group_of)`` where ``group_of[i]`` is the index in ``groups`` of ``types[i]``.
    """
    # NodePool-level filter first: taints and the NodePool's requirements (well-known keys may be undefined).
    candidates: list[tuple[DaemonInfo, list[Requirements]]] = []
    for d in daemons:
        tolerations = (*d.tolerations, PREFER_NO_SCHEDULE_TOLERATION)
        if first_untolerated(taints, tolerations) is not None:
            continue
        terms = [t for t in d.terms if requirements.compatible(t, allow_undefined=WELL_KNOWN_LABELS) is None]
        if terms:
            candidates.append((d, terms))
    groups: list[DaemonGroup] = []
    index: dict[tuple[str, ...], int] = {}
    group_of: list[int] = []
    for t in types:
        members = [d for d, terms in candidates if any(t.requirements.intersects(term) is None for term in terms)]
        key = tuple(d.key for d in members)
        gi = index.get(key)
        if gi is None:
            gi = len(groups)
            index[key] = gi
            ports = tuple(p for d in members for p in d.host_ports)
            groups.append(DaemonGroup(members=key, overhead=_sum(members), host_ports=ports))
        group_of.append(gi)
    return groups, group_of


def existing_node_overhead(
    *,
    labels: Requirements,
    taints: Sequence[Taint],
    pods: Sequence[Pod],
    daemons: Sequence[DaemonInfo],
) -> Resources:
    """What the DaemonSets that belong on an existing node still need there (per resource, >= 0)."""
    landing = [
        d
        for d in daemons
        if first_untolerated(taints, d.tolerations) is None and any(labels.compatible(term) is None for term in d.terms)
    ]
    want = _sum(landing)
    if not want:
        return {}
    for pod in pods:
        if pod.is_daemonset:
            for name, amount in pod.requests.items():
                if name in want:
                    want[name] -= amount
            if "pods" in want and "pods" not in pod.requests:
                want["pods"] -= 1
    return {k: v for k, v in want.items() if v > 0}
