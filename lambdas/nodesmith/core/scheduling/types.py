"""Inputs and outputs of the scheduler (:func:`nodesmith.core.scheduling.solve`).

The reconcile service, ``nodesmith simulate`` and the benchmarks build a :class:`SchedulingInput`
and read a :class:`SchedulingResult`; the scheduler itself is pure.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

    from nodesmith.core.api.nodepool import NodePool
    from nodesmith.core.model import (
        DaemonSet,
        InstanceType,
        NodeSelectorRequirement,
        Pod,
        Taint,
    )
    from nodesmith.core.resources import Resources
    from nodesmith.core.scheduling.existing import ExistingBases
    from nodesmith.core.scheduling.pods import PodDataCache
    from nodesmith.core.scheduling.reasons import Explanation

__all__ = [
    "PACKING_POLICIES",
    "ExistingNode",
    "NodeClaimPlan",
    "SchedulingInput",
    "SchedulingResult",
]


@dataclass(frozen=True, slots=True)
class ExistingNode:
    """Capacity that already exists or is on its way: a registered Node, or an in-flight NodeClaim.

    ``labels`` include the well-known labels (zone, capacity type, instance type, hostname,
    ``karpenter.sh/nodepool``). ``allocatable`` is the node's allocatable (or the NodeClaim's
    expected allocatable); ``pods`` are the pods already bound or nominated to it (DaemonSet pods
    included: their requests count). ``initialized`` is False for in-flight NodeClaims, whose
    startup taints are then ignored. ``unschedulable`` nodes (cordoned) receive no pods.
    """

    name: str
    labels: Mapping[str, str]
    taints: tuple[Taint, ...]
    allocatable: Resources
    pods: tuple[Pod, ...] = ()
    nodepool: str | None = None
    initialized: bool = True
    unschedulable: bool = False
    startup_taints: tuple[Taint, ...] = ()
    price: float = 0.0  # USD/hour of the instance behind it, 0 when unknown


Packing = Literal["nodesmith", "karpenter"]

PACKING_POLICIES: tuple[Packing, ...] = ("nodesmith", "karpenter")
"""``karpenter``: Karpenter's grouping (pods cpu/memory descending, each onto the least-loaded planned
NodeClaim that still fits, cheapest fitting type launched). ``nodesmith``: the same pass, then the
NodeClaims of unconstrained pods re-packed for a lower USD/hour when that is strictly cheaper
(:mod:`nodesmith.core.scheduling.repack`)."""


@dataclass(frozen=True, slots=True)
class SchedulingInput:
    """Everything one scheduling pass needs.

    ``pods`` are the pending pods to place (the scheduler ignores DaemonSet, mirror and bound pods
    among them). ``instance_types`` are the whole catalogue (offerings carry availability and
    USD/hour prices); each NodePool's requirements filter them. ``nodepool_instance_types`` maps a
    NodePool name to the catalogue of its own EC2NodeClass (allocatable from the node class's
    kubelet and AMI family, offerings in its subnets' zones: Karpenter's ``CloudProvider.
    GetInstanceTypes(nodePool)``); a NodePool it does not name uses ``instance_types``. ``nodepool_usage`` is what each
    NodePool already has (cpu millicores, memory bytes, ``nodes`` count ...) for its ``limits``.
    ``volume_requirements`` maps a pod key (``namespace/name``) to the node requirements its
    PersistentVolumeClaims impose (:func:`nodesmith.core.scheduling.volumes.volume_requirements`).
    ``packing`` is the packing policy (:data:`PACKING_POLICIES`). ``explain`` names pods
    (``namespace/name``) whose placement should be explained even when they schedule
    (``SchedulingResult.explanations``); unschedulable pods are always explained. ``existing_bases`` keeps what
    the pass derives from each existing node for the next pass over the same nodes (consolidation's trials);
    ``pod_data`` is what it derives from each pod, for the next pass over the same pods and
    ``volume_requirements`` (ignored when made for other ones). Neither ever changes a result.
    """

    pods: Sequence[Pod]
    nodepools: Sequence[NodePool]
    instance_types: Sequence[InstanceType]
    existing_nodes: Sequence[ExistingNode] = ()
    daemonsets: Sequence[DaemonSet] = ()
    nodepool_usage: Mapping[str, Resources] = field(default_factory=dict)
    packing: Packing = "nodesmith"
    explain: frozenset[str] = frozenset()
    volume_requirements: Mapping[str, tuple[NodeSelectorRequirement, ...]] = field(default_factory=dict)
    nodepool_instance_types: Mapping[str, Sequence[InstanceType]] = field(default_factory=dict)
    existing_bases: ExistingBases | None = None
    pod_data: PodDataCache | None = None

    def types_for(self, nodepool: str) -> Sequence[InstanceType]:
        """The catalogue NodePool ``nodepool`` schedules from: its own, else the shared one."""
        own = self.nodepool_instance_types.get(nodepool)
        return self.instance_types if own is None else own


@dataclass(frozen=True, slots=True)
class NodeClaimPlan:
    """A NodeClaim the scheduler wants launched.

    ``instance_types`` keep every type that fits all of ``pods`` (plus DaemonSet overhead) and
    satisfies the combined requirements, cheapest compatible available offering first.
    ``requirements`` are the NodePool's requirements narrowed by the pods' constraints (including
    ``node.kubernetes.io/instance-type In [...]``, zone and capacity type). ``requests`` is the
    pods' requests plus the DaemonSet overhead (cpu millicores, memory bytes, pods ...).
    ``price_per_hour`` is the cheapest compatible available offering (USD/hour); ``zone`` and
    ``capacity_type`` are set when that choice is pinned to one value, else None.
    """

    nodepool: str
    nodeclass: str
    instance_types: tuple[InstanceType, ...]
    requirements: tuple[NodeSelectorRequirement, ...]
    capacity_types: frozenset[str]
    zones: frozenset[str]
    pods: tuple[Pod, ...]
    requests: Resources
    labels: Mapping[str, str] = field(default_factory=dict)
    taints: tuple[Taint, ...] = ()
    startup_taints: tuple[Taint, ...] = ()
    price_per_hour: float = 0.0
    zone: str | None = None
    capacity_type: str | None = None


@dataclass(frozen=True, slots=True)
class SchedulingResult:
    """What a scheduling pass decided.

    ``nodeclaims``: new capacity to launch. ``existing``: node name to the pending pods placed on
    it. ``unschedulable``: pod key (``namespace/name``) to a reason a person can act on (the
    one-line text of its explanation). ``explanations``: pod key to the structured
    :class:`~nodesmith.core.scheduling.reasons.Explanation` (per NodePool: verdict, stage,
    constraint, numbers, funnel, hints; existing nodes) for every unschedulable pod and every pod
    named in ``SchedulingInput.explain``.
    """

    nodeclaims: tuple[NodeClaimPlan, ...]
    existing: Mapping[str, tuple[Pod, ...]]
    unschedulable: Mapping[str, str]
    explanations: Mapping[str, Explanation] = field(default_factory=dict)

    @property
    def cost_per_hour(self) -> float:
        """Sum of the new NodeClaims' cheapest prices (USD/hour)."""
        return sum(nc.price_per_hour for nc in self.nodeclaims)
