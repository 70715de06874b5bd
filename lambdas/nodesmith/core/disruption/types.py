"""Value types shared by the disruption methods: inputs per node, decisions, rejections, settings.

Prices are USD per hour; times are epoch seconds.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Final, Literal

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

    from nodesmith.core.api.ec2nodeclass import EC2NodeClass
    from nodesmith.core.api.nodeclaim import NodeClaim
    from nodesmith.core.api.nodepool import NodePool
    from nodesmith.core.disruption.drift_basis import NodeClassResolution
    from nodesmith.core.model import (
        DaemonSet,
        InstanceType,
        Node,
        NodeSelectorRequirement,
        Pod,
        PodDisruptionBudget,
    )
    from nodesmith.core.scheduling.types import NodeClaimPlan

__all__ = [
    "METHODS",
    "METHOD_DRIFT",
    "METHOD_EMPTINESS",
    "METHOD_EXPIRATION",
    "METHOD_MULTI_NODE",
    "METHOD_REPAIR",
    "METHOD_SINGLE_NODE",
    "POLICIES",
    "ClusterNode",
    "Decision",
    "DisruptionSettings",
    "DisruptionSnapshot",
    "Method",
    "Policy",
    "Rejection",
]

Method = Literal["repair", "emptiness", "drift", "expiration", "multi-node-consolidation", "single-node-consolidation"]
METHOD_REPAIR: Final = "repair"
METHOD_EMPTINESS: Final = "emptiness"
METHOD_DRIFT: Final = "drift"
METHOD_EXPIRATION: Final = "expiration"
METHOD_MULTI_NODE: Final = "multi-node-consolidation"
METHOD_SINGLE_NODE: Final = "single-node-consolidation"
METHODS: Final = (METHOD_REPAIR, METHOD_EMPTINESS, METHOD_DRIFT, METHOD_MULTI_NODE, METHOD_SINGLE_NODE)
"""The budgeted (graceful) methods in Karpenter order (``controller.go NewMethods``); repair (v1.15, gate
``NodeRepair``) runs first when enabled."""

Policy = Literal["karpenter", "nodesmith"]
POLICIES: Final = ("karpenter", "nodesmith")
"""Consolidation policies: ``karpenter`` (multi- then single-node, Karpenter's rules) and ``nodesmith``
(:mod:`nodesmith.core.disruption.repack`: one set of nodes out, its pods re-packed at the lowest cost)."""


@dataclass(frozen=True, slots=True)
class ClusterNode:
    """One Node of the cluster snapshot with everything disruption needs to know about it.

    ``pods`` are the pods bound to the node (DaemonSet and mirror pods included; terminal pods
    are ignored). ``nodeclaim`` is its Karpenter NodeClaim when known (matched by
    ``status.nodeName`` or ``status.providerID``). ``last_pod_event_time`` is when a pod was last
    bound to or removed from the node (Karpenter's ``status.lastPodEventTime``); None falls back
    to the NodeClaim's ``lastPodEventTime``, then its ``Initialized`` transition, then the node's
    creation. ``image_id`` (AMI), ``subnet_id`` and ``security_group_ids`` describe the EC2
    instance behind the node for drift; None means unknown (that drift check is skipped).
    """

    node: Node
    pods: tuple[Pod, ...] = ()
    nodeclaim: NodeClaim | None = None
    last_pod_event_time: float | None = None
    image_id: str | None = None
    subnet_id: str | None = None
    security_group_ids: frozenset[str] | None = None

    @property
    def name(self) -> str:
        """The node name."""
        return self.node.name


@dataclass(frozen=True, slots=True)
class DisruptionSnapshot:
    """The cluster a disruption pass decides on: what Karpenter's disruption controller reads from its cluster state.

    ``nodes``: every Node with its pods and NodeClaim (:class:`ClusterNode`). ``nodepools`` and
    ``nodeclasses``: the ``karpenter.sh/v1`` NodePools and ``karpenter.k8s.aws/v1`` EC2NodeClasses.
    ``instance_types``: the priced catalogue (offering prices in USD per hour; resources in millicores
    and bytes). ``pending_pods``: pods not bound to a node. ``pdbs``: every PodDisruptionBudget.
    ``daemonsets``: for the DaemonSet overhead of new NodeClaims. ``resolutions``: EC2NodeClass name ->
    what its selectors resolve to now (None: what each EC2NodeClass states,
    :func:`~nodesmith.core.disruption.drift_basis.resolution_from_nodeclass`). ``volume_requirements``: pod key
    (``namespace/name``) -> the node requirements its PersistentVolumeClaims impose (volume topology: moved
    pods stay in their volumes' zones). ``nodepool_instance_types``: NodePool name -> the catalogue of its
    own EC2NodeClass (None, or a NodePool not named: ``instance_types``).
    """

    nodes: Sequence[ClusterNode]
    nodepools: Sequence[NodePool]
    instance_types: Sequence[InstanceType]
    nodeclasses: Sequence[EC2NodeClass] = ()
    pending_pods: Sequence[Pod] = ()
    pdbs: Sequence[PodDisruptionBudget] = ()
    daemonsets: Sequence[DaemonSet] = ()
    resolutions: Mapping[str, NodeClassResolution] | None = None
    volume_requirements: Mapping[str, tuple[NodeSelectorRequirement, ...]] | None = None
    nodepool_instance_types: Mapping[str, Sequence[InstanceType]] | None = None


@dataclass(frozen=True, slots=True)
class Rejection:
    """Why a node was not disrupted: ``method`` is the method that looked at it, or None when the
    candidate filter excluded it from every voluntary method. ``event`` is the Event reason to post on
    the node when it is not the default for the method (node repair's ``NodeRepairBlocked``)."""

    node: str
    reason: str
    method: str | None = None
    event: str | None = None


@dataclass(frozen=True, slots=True)
class Decision:
    """One disruption command, explained.

    ``method`` is emptiness, drift, expiration, multi-node-consolidation or
    single-node-consolidation; ``cause`` the machine-readable why (``Empty``, ``Underutilized``,
    ``Expired`` or a drift reason such as ``AMIDrift``); ``nodes`` the nodes to disrupt;
    ``replacements`` the NodeClaims to launch (and see Ready) before draining them — at most one
    for consolidation, possibly several for drift, none for emptiness/expiration/deletes.
    ``cost_before`` is the nodes' price and ``cost_after`` the replacements' (USD/hour; for
    expiration both are the node's price, the pods being re-provisioned like for like).
    ``pods`` are the pods that will be evicted (``namespace/name``); ``placements`` pairs each
    with where the simulation put it (a node name, or ``new:<i>`` for ``replacements[i]``).
    ``rejected`` lists the
    candidates the method looked at and turned down, with why. ``drain_bound`` (seconds, repair only)
    bounds the nodes' drain from when their termination is requested; None leaves it to the NodeClaim's
    ``terminationGracePeriod``. ``approval`` is, for a consolidation of a ``Balanced`` NodePool's nodes, the score
    that approved it (:func:`~nodesmith.core.disruption.balanced.balanced_approval`); empty otherwise.
    """

    method: Method
    nodes: tuple[str, ...]
    cause: str
    reason: str
    nodepools: tuple[str, ...] = ()
    replacements: tuple[NodeClaimPlan, ...] = ()
    cost_before: float = 0.0
    cost_after: float = 0.0
    pods: tuple[str, ...] = ()
    placements: tuple[tuple[str, str], ...] = ()
    rejected: tuple[Rejection, ...] = ()
    drain_bound: float | None = None
    approval: str = ""

    @property
    def replacement(self) -> NodeClaimPlan | None:
        """The replacement NodeClaim when there is exactly one, else None."""
        return self.replacements[0] if len(self.replacements) == 1 else None

    @property
    def savings_per_hour(self) -> float:
        """``cost_before - cost_after`` in USD/hour (negative when a drift replacement costs more)."""
        return self.cost_before - self.cost_after

    @property
    def is_delete(self) -> bool:
        """True when no replacement is launched."""
        return not self.replacements


@dataclass(frozen=True, slots=True)
class DisruptionSettings:
    """Knobs that make Nodesmith more conservative than (or as eager as) Karpenter.

    ``min_savings_per_hour`` (USD/hour, default 0): consolidation (multi- and single-node) acts
    only when it saves at least this much; with the default any strictly cheaper result acts,
    as in Karpenter. ``spot_to_spot`` enables spot-to-spot consolidation (Karpenter's
    ``SpotToSpotConsolidation`` gate, off by default there; on here, still requiring
    :attr:`spot_to_spot_min_types` cheaper spot types for single-node moves).
    ``max_multi_node_candidates`` caps multi-node batches (Karpenter: 100).
    ``instance_type_not_found_min_age`` (seconds): ``InstanceTypeNotFound`` drift is only checked on
    NodeClaims older than this (Karpenter: 1 h).

    ``policy`` picks the consolidation policy (:data:`POLICIES`; default ``karpenter``, Karpenter's
    semantics). ``min_savings_per_disrupted_node`` (USD/hour, ``nodesmith`` policy only): each node a
    command disrupts must pay for itself with at least this much saving, so the policy prefers fewer,
    more valuable disruptions and stops once what is left would save less.
    ``min_savings_per_evicted_pod`` (USD/hour, ``nodesmith`` policy only, default 0): the same per
    evicted pod, for clusters where evictions matter more than node count.

    ``node_repair`` enables node repair (Karpenter's alpha feature gate ``NodeRepair``, off by default
    there and here): :mod:`nodesmith.core.disruption.repair`.
    """

    min_savings_per_hour: float = 0.0
    spot_to_spot: bool = True
    spot_to_spot_min_types: int = 15
    max_multi_node_candidates: int = 100
    instance_type_not_found_min_age: float = 3600.0
    policy: Policy = "karpenter"
    min_savings_per_disrupted_node: float = 0.05
    min_savings_per_evicted_pod: float = 0.0
    node_repair: bool = False
