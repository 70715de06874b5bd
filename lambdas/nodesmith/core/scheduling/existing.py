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

from typing import TYPE_CHECKING

from nodesmith.core.requirements import LABEL_HOSTNAME, Requirement, Requirements
from nodesmith.core.scheduling.daemonsets import existing_node_overhead
from nodesmith.core.scheduling.pods import host_ports, ports_conflict
from nodesmith.core.scheduling.taints import first_untolerated, schedulable_taints

if TYPE_CHECKING:
    from collections.abc import Sequence

    from nodesmith.core.model import Pod, Taint
    from nodesmith.core.resources import Resources
    from nodesmith.core.scheduling.daemonsets import DaemonInfo
    from nodesmith.core.scheduling.pods import HostPort, PodData
    from nodesmith.core.scheduling.topology import Topology
    from nodesmith.core.scheduling.types import ExistingNode

__all__ = ["SimExistingNode"]


class SimExistingNode:
    """An :class:`~nodesmith.core.scheduling.types.ExistingNode` with its remaining headroom.

    ``remaining`` = allocatable - requests of the pods on it - DaemonSet overhead still to come
    (cpu millicores, memory bytes, pods ...). ``placed`` are the pending pods this pass put there.
    """

    __slots__ = ("_static", "hostname", "node", "placed", "ports", "remaining", "requirements", "taints")

    def __init__(self, node: ExistingNode, daemons: Sequence[DaemonInfo]) -> None:
        self.node = node
        self.hostname = node.labels.get(LABEL_HOSTNAME, node.name)
        self.taints: tuple[Taint, ...] = schedulable_taints(
            node.taints, initialized=node.initialized, startup_taints=node.startup_taints
        )
        labels = Requirements.from_labels(node.labels)
        reqs = labels.copy()
        host = Requirement(LABEL_HOSTNAME, complement=False, values=frozenset((self.hostname,)))
        if reqs.peek(LABEL_HOSTNAME) != host:  # the hostname label, when there, already says as much
            reqs.add(host)
        self.requirements = reqs
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
            overhead = existing_node_overhead(labels=labels, taints=self.taints, pods=node.pods, daemons=daemons)
            for name, amount in overhead.items():
                remaining[name] = remaining.get(name, 0) - amount
        self.remaining = remaining
        self.ports = ports
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
