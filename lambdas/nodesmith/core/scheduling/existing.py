"""Existing capacity during a pass: registered nodes and in-flight NodeClaims with their headroom.

Mirrors ``[core]:.../scheduling/existingnode.go``: a pod fits when it tolerates the node's taints
(startup and known ephemeral taints ignored until the node is initialized), its host ports are
free, ``allocatable - pods on the node - DaemonSets still to come ≥ requests``, the node's labels
satisfy the pod's requirements (keys must be defined: no well-known allowance here) and the
topology allows the node's domains. Cordoned (``unschedulable``) nodes receive nothing.
The node's requirements stay its labels (Karpenter also folds pod requirements into them,
which can let a later pod match a label the node does not carry; we do not).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from nodesmith.core.requirements import LABEL_HOSTNAME, Requirement, Requirements
from nodesmith.core.scheduling.daemonsets import existing_node_overhead
from nodesmith.core.scheduling.pods import host_ports, ports_conflict
from nodesmith.core.scheduling.taints import first_untolerated, schedulable_taints

if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping, Sequence

    from nodesmith.core.model import DaemonSet, Pod, Taint
    from nodesmith.core.resources import Resources
    from nodesmith.core.scheduling.daemonsets import DaemonInfo
    from nodesmith.core.scheduling.pods import HostPort, PodData
    from nodesmith.core.scheduling.topology import Topology
    from nodesmith.core.scheduling.types import ExistingNode

__all__ = ["ExistingBase", "ExistingBases", "SimExistingNode", "derive_base"]


@dataclass(frozen=True, slots=True)
class ExistingBase:
    """What a :class:`SimExistingNode` derives from its node before any pod is placed: the hostname, the taints
    pods must tolerate, the node's requirements (its labels and hostname), its headroom (allocatable - requests of
    the pods on it - DaemonSet overhead still to come: cpu millicores, memory bytes, pods ...) and the host ports in
    use. Never changed after it is built: each pass's :class:`SimExistingNode` copies what it places pods into."""

    node: ExistingNode
    hostname: str
    taints: tuple[Taint, ...]
    requirements: Requirements
    remaining: Mapping[str, int]
    ports: tuple[HostPort, ...]


def derive_base(node: ExistingNode, daemons: Sequence[DaemonInfo]) -> ExistingBase:
    """The :class:`ExistingBase` of ``node`` given the cluster's DaemonSets (``daemons``)."""
    hostname = node.labels.get(LABEL_HOSTNAME, node.name)
    taints: tuple[Taint, ...] = tuple(
        schedulable_taints(node.taints, initialized=node.initialized, startup_taints=node.startup_taints)
    )
    labels = Requirements.from_labels(node.labels)
    reqs = labels.copy()
    host = Requirement(LABEL_HOSTNAME, complement=False, values=frozenset((hostname,)))
    if reqs.peek(LABEL_HOSTNAME) != host:  # the hostname label, when there, already says as much
        reqs.add(host)
    remaining: Resources = dict(node.allocatable)
    ports: list[HostPort] = []
    for pod in node.pods:
        if pod.is_terminal:
            continue
        for name, amount in pod.requests.items():
            remaining[name] = remaining.get(name, 0) - amount
        if pod.host_ports:
            ports.extend(host_ports(pod))
    if daemons:
        overhead = existing_node_overhead(labels=labels, taints=taints, pods=node.pods, daemons=daemons)
        for name, amount in overhead.items():
            remaining[name] = remaining.get(name, 0) - amount
    return ExistingBase(
        node=node, hostname=hostname, taints=taints, requirements=reqs, remaining=remaining, ports=tuple(ports)
    )


class ExistingBases:
    """The :class:`ExistingBase` of each node, kept for many scheduling passes over the same nodes and DaemonSets
    (a consolidation's trials each schedule against the cluster less a few candidates; a warm container's passes
    schedule against the nodes that did not change since the last).

    Keyed by the identity of the :class:`~nodesmith.core.scheduling.types.ExistingNode` (immutable) and by the
    DaemonSets it was derived with, compared object by object (a new list of the same DaemonSet objects, as each
    pass lists them, is the same; any DaemonSet added, removed or changed derives every base again): a node passed
    anew, even if equal, is derived again, so a kept base is never stale. Holds references to the nodes, so an
    identity is never reused while kept; :meth:`retain` forgets the nodes gone. One pass at a time (not
    thread-safe)."""

    __slots__ = ("_bases", "_daemonsets", "_seen")

    def __init__(self) -> None:
        self._bases: dict[int, ExistingBase] = {}
        self._daemonsets: tuple[DaemonSet, ...] = ()
        self._seen: Sequence[DaemonSet] | None = None

    def _same_daemonsets(self, daemonsets: Sequence[DaemonSet]) -> bool:
        """Whether ``daemonsets`` are, object by object, those the kept bases were derived with (else they become
        so, and every kept base is dropped)."""
        if daemonsets is self._seen:
            return True
        same = len(daemonsets) == len(self._daemonsets) and all(
            a is b for a, b in zip(daemonsets, self._daemonsets, strict=True)
        )
        if not same:
            self._bases.clear()
            self._daemonsets = tuple(daemonsets)
        self._seen = daemonsets
        return same

    def base(self, node: ExistingNode, daemonsets: Sequence[DaemonSet], daemons: Sequence[DaemonInfo]) -> ExistingBase:
        """``node``'s base for ``daemonsets`` (``daemons``: their :class:`DaemonInfo`), derived on first use."""
        kept = self._bases.get(id(node)) if self._same_daemonsets(daemonsets) else None
        if kept is not None and kept.node is node:
            return kept
        base = derive_base(node, daemons)
        self._bases[id(node)] = base
        return base

    def retain(self, nodes: Iterable[ExistingNode]) -> None:
        """Forget every base but those of ``nodes``."""
        keep = {id(n) for n in nodes}
        self._bases = {k: v for k, v in self._bases.items() if k in keep}


class SimExistingNode:
    """An :class:`~nodesmith.core.scheduling.types.ExistingNode` with its remaining headroom.

    ``remaining`` = allocatable - requests of the pods on it - DaemonSet overhead still to come
    (cpu millicores, memory bytes, pods ...). ``placed`` are the pending pods this pass put there.
    """

    __slots__ = ("_static", "hostname", "node", "placed", "ports", "remaining", "requirements", "taints")

    def __init__(self, node: ExistingNode, daemons: Sequence[DaemonInfo], base: ExistingBase | None = None) -> None:
        base = base if base is not None and base.node is node else derive_base(node, daemons)
        self.node = node
        self.hostname = base.hostname
        self.taints = base.taints
        self.requirements = base.requirements
        self.remaining: Resources = dict(base.remaining)
        self.ports: list[HostPort] = list(base.ports)
        self.placed: list[Pod] = []
        self._static: dict[int, bool] = {}

    @property
    def name(self) -> str:
        """The node (or in-flight NodeClaim) name."""
        return self.node.name

    def _compatible(self, data: PodData) -> bool:
        ok = self._static.get(id(data))
        if ok is None:
            ok = (
                first_untolerated(self.taints, data.tolerations) is None
                and self.requirements.compatible(data.requirements) is None
            )
            self._static[id(data)] = ok
        return ok

    def can_add(self, pod: Pod, data: PodData, topology: Topology) -> Requirements | None:
        """The node's requirements narrowed for the pod when it fits here, else None."""
        remaining = self.remaining
        for name, amount in data.requests.items():
            if amount > 0 and amount > remaining.get(name, 0):
                return None
        if not self._compatible(data):
            return None
        if data.host_ports and ports_conflict(data.host_ports, self.ports) is not None:
            return None
        if not topology.matching(pod, data):
            return self.requirements
        reqs = self.requirements.intersect(data.requirements)
        narrowed, _ = topology.add_requirements(pod, data, reqs, ())
        return narrowed

    def add(self, pod: Pod, data: PodData, reqs: Requirements, topology: Topology) -> None:
        """Place the pod here and record it in the topology."""
        for name, amount in data.requests.items():
            self.remaining[name] = self.remaining.get(name, 0) - amount
        self.ports.extend(data.host_ports)
        self.placed.append(pod)
        topology.record(pod, data, self.taints, reqs, ())
