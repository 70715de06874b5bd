"""Disruption candidates: which nodes voluntary disruption may touch, and why the others may not.

A :class:`Candidate` is a node seen the way Karpenter's disruption controller sees it
(``[core]:pkg/controllers/disruption/types.go NewCandidate``): its NodeClaim, Node, pods, NodePool,
instance type, zone, capacity type, price, reschedulable pods and disruption cost.

The filter (:func:`select_candidates`) follows ``state/statenode.go``
``ValidateNodeDisruptable`` and ``ValidatePodsDisruptable``:

* the node is managed (label ``karpenter.sh/nodepool`` naming an existing NodePool), initialized,
  not deleting or marked for deletion (``deletionTimestamp``, the ``karpenter.sh/disrupted``
  taint, or already chosen by an earlier command), and has no ``karpenter.sh/do-not-disrupt: "true"``
  annotation;
* no active pod on it has an active ``karpenter.sh/do-not-disrupt``
  (:func:`~nodesmith.core.do_not_disrupt.do_not_disrupt`: ``"true"``, or a Go duration not yet elapsed
  since the pod's ``status.startTime``; an invalid value is ignored, as Karpenter ignores it), and no
  evictable pod is blocked by a PodDisruptionBudget (:mod:`.pdb`).

Pod blocks are kept on the candidate (``pod_block``) rather than dropping it, because drift
of a NodeClaim with ``terminationGracePeriod`` proceeds despite them (Karpenter's *eventual*
class). Karpenter's "nominated by a recent provisioning pass" check is not modelled.

Times are epoch seconds; prices USD/hour.
"""

from __future__ import annotations

import contextlib
import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

from nodesmith.core.api.common import parse_duration
from nodesmith.core.api.nodeclaim import CONDITION_INITIALIZED
from nodesmith.core.disruption.pdb import PdbLimits
from nodesmith.core.disruption.types import Rejection
from nodesmith.core.do_not_disrupt import DO_NOT_DISRUPT_ANNOTATION, do_not_disrupt, node_blocks_disruption
from nodesmith.core.drain import carries_disrupted_taint
from nodesmith.core.objects import parse_timestamp
from nodesmith.core.requirements import (
    LABEL_CAPACITY_TYPE,
    LABEL_INITIALIZED,
    LABEL_INSTANCE_TYPE,
    LABEL_NODEPOOL,
    LABEL_ZONE,
)

if TYPE_CHECKING:
    from collections.abc import Collection, Iterable, Mapping, Sequence

    from nodesmith.core.api.nodeclaim import NodeClaim
    from nodesmith.core.api.nodepool import NodePool
    from nodesmith.core.disruption.memo import NodeMemo
    from nodesmith.core.disruption.types import ClusterNode, DisruptionSnapshot
    from nodesmith.core.model import InstanceType, Pod

__all__ = [
    "POD_DELETION_COST_ANNOTATION",
    "Candidate",
    "CandidateSelection",
    "NodeBasis",
    "NodeFacts",
    "eviction_cost",
    "expire_after_of",
    "is_do_not_disrupt_active",
    "is_reschedulable",
    "lifetime_remaining",
    "match_nodeclaims",
    "node_basis",
    "node_facts",
    "select_candidates",
]

POD_DELETION_COST_ANNOTATION = "controller.kubernetes.io/pod-deletion-cost"
CONDITION_INSTANCE_TERMINATING = "InstanceTerminating"


def _timestamp(value: str | None) -> float | None:
    try:
        return parse_timestamp(value)
    except ValueError:
        return None


def match_nodeclaims(
    nodes: Iterable[str], nodeclaims: Sequence[NodeClaim], provider_ids: Mapping[str, str]
) -> dict[str, NodeClaim]:
    """Node name -> its NodeClaim, matched on ``status.nodeName`` then ``status.providerID``.

    ``provider_ids`` maps node names to their ``spec.providerID``. NodeClaims without a Node
    (still launching) are not returned.
    """
    names = set(nodes)
    by_provider = {pid: name for name, pid in provider_ids.items() if pid}
    out: dict[str, NodeClaim] = {}
    for nc in nodeclaims:
        name = nc.status.node_name if nc.status.node_name in names else None
        if name is None and nc.status.provider_id:
            name = by_provider.get(nc.status.provider_id)
        if name is not None and name not in out:
            out[name] = nc
    return out


@dataclass(frozen=True, slots=True)
class NodeFacts:
    """What disruption derives from a :class:`~.types.ClusterNode` before filtering.

    ``nodepool`` is the ``karpenter.sh/nodepool`` label (None: not managed). ``initialized``: the
    NodeClaim's ``Initialized`` condition when it has one, else the ``karpenter.sh/initialized``
    label when present, else the node's ``Ready``. ``deleting``: deletion requested or marked for
    disruption. ``terminating``: NodeClaim ``InstanceTerminating=True``. ``price`` is the offering
    for the node's zone and capacity type (0.0 when unknown). ``created`` is the NodeClaim's (else
    the Node's) creation time, None when unknown. ``last_pod_event`` starts the ``consolidateAfter``
    clock (0.0 when nothing is known: long ago).
    """

    name: str
    nodepool: str | None
    instance_type_name: str | None
    instance_type: InstanceType | None
    zone: str | None
    capacity_type: str | None
    price: float
    initialized: bool
    ready: bool
    deleting: bool
    terminating: bool
    created: float | None
    last_pod_event: float


def _price(it: InstanceType | None, zone: str | None, capacity_type: str | None) -> float:
    """Karpenter ``resolveNodePrice``: the offering matching the node's zone and capacity type."""
    if it is None or zone is None or capacity_type is None:
        return 0.0
    for offering in it.offerings:
        if offering.zone == zone and offering.capacity_type == capacity_type:
            return offering.price if not math.isnan(offering.price) else 0.0
    return 0.0


@dataclass(frozen=True, slots=True)
class NodeBasis:
    """What disruption derives from one :class:`~.types.ClusterNode` alone, before the pass's catalogue, deleting
    set and clock are applied (:func:`node_facts`, :func:`select_candidates`).

    ``labels`` are the NodeClaim's labels overlaid with the Node's. ``deleting`` is the node's own state
    (``deletionTimestamp`` on the Node or NodeClaim, the ``karpenter.sh/disrupted`` taint); the other fact fields
    follow :class:`NodeFacts`. ``pods`` are the non-terminal pods, ``reschedulable`` those
    :func:`is_reschedulable`, ``eviction_cost`` the sum of their :func:`eviction_cost` over ``pods``, ``annotated``
    the pods carrying ``karpenter.sh/do-not-disrupt`` (the only ones it may protect, depending on the time).
    """

    labels: Mapping[str, str]
    instance_type_name: str | None
    initialized: bool
    deleting: bool
    terminating: bool
    created: float | None
    last_pod_event: float
    pods: tuple[Pod, ...]
    reschedulable: tuple[Pod, ...]
    eviction_cost: float
    annotated: tuple[Pod, ...]


def node_basis(cn: ClusterNode) -> NodeBasis:
    """The :class:`NodeBasis` of ``cn`` (rules in :class:`NodeFacts`)."""
    node, nc = cn.node, cn.nodeclaim
    labels = dict(nc.metadata.labels) if nc is not None else {}
    labels.update(node.labels)
    init_cond = nc.condition(CONDITION_INITIALIZED) if nc is not None else None
    if init_cond is not None:
        initialized = init_cond.status == "True"
    elif LABEL_INITIALIZED in node.labels:
        initialized = node.labels[LABEL_INITIALIZED] == "true"
    else:
        initialized = node.ready
    deleting = (
        node.deletion_timestamp is not None
        or (nc is not None and nc.metadata.deletion_timestamp is not None)
        or carries_disrupted_taint(node.taints)
    )
    created = _timestamp(nc.metadata.creation_timestamp) if nc is not None else None
    if created is None and node.creation_timestamp > 0:
        created = node.creation_timestamp
    last = cn.last_pod_event_time
    if last is None and nc is not None:
        last = _timestamp(nc.status.last_pod_event_time)
        if last is None and init_cond is not None and init_cond.status == "True":
            last = _timestamp(init_cond.last_transition_time)
    if last is None:
        last = created if created is not None else 0.0
    pods = tuple(p for p in cn.pods if not p.is_terminal)
    return NodeBasis(
        labels=labels,
        instance_type_name=labels.get(LABEL_INSTANCE_TYPE),
        initialized=initialized,
        deleting=deleting,
        terminating=nc is not None and nc.is_true(CONDITION_INSTANCE_TERMINATING),
        created=created,
        last_pod_event=last,
        pods=pods,
        reschedulable=tuple(p for p in pods if is_reschedulable(p)),
        eviction_cost=sum(eviction_cost(p) for p in pods),
        annotated=tuple(p for p in pods if DO_NOT_DISRUPT_ANNOTATION in p.annotations),
    )


def node_facts(
    cn: ClusterNode,
    *,
    catalogue: Mapping[str, InstanceType],
    deleting: Collection[str] = (),
    nodepool_catalogues: Mapping[str, Mapping[str, InstanceType]] | None = None,
    basis: NodeBasis | None = None,
) -> NodeFacts:
    """Derive :class:`NodeFacts` for ``cn`` (rules in the class docstring).

    The node's instance type (and so its price) is looked up in its NodePool's own catalogue when
    ``nodepool_catalogues`` has one (Karpenter prices a candidate from ``GetInstanceTypes(nodePool)``, NodeOverlays
    included), else in ``catalogue``. ``basis`` is :func:`node_basis` of ``cn`` when the caller has it.
    """
    b = basis if basis is not None else node_basis(cn)
    labels = b.labels
    type_name = b.instance_type_name
    own = nodepool_catalogues.get(labels.get(LABEL_NODEPOOL, "")) if nodepool_catalogues else None
    it = ((own if own is not None and type_name in own else catalogue).get(type_name)) if type_name else None
    zone, capacity_type = labels.get(LABEL_ZONE), labels.get(LABEL_CAPACITY_TYPE)
    return NodeFacts(
        name=cn.node.name,
        nodepool=labels.get(LABEL_NODEPOOL),
        instance_type_name=type_name,
        instance_type=it,
        zone=zone,
        capacity_type=capacity_type,
        price=_price(it, zone, capacity_type),
        initialized=b.initialized,
        ready=cn.node.ready,
        deleting=b.deleting or cn.node.name in deleting,
        terminating=b.terminating,
        created=b.created,
        last_pod_event=b.last_pod_event,
    )


def is_do_not_disrupt_active(pod: Pod, *, now: float) -> bool:
    """True while the pod's ``karpenter.sh/do-not-disrupt`` protects it at ``now`` (epoch seconds).

    Terminal and terminating pods are never protected (``IsDisruptable``); otherwise
    :func:`~nodesmith.core.do_not_disrupt.do_not_disrupt` decides (``IsDoNotDisruptActive``).
    """
    if pod.is_terminal or pod.deletion_timestamp is not None:
        return False
    return do_not_disrupt(pod, now=now).active


def is_reschedulable(pod: Pod) -> bool:
    """Karpenter ``IsReschedulable``: active (or a terminating StatefulSet pod), not DaemonSet, not mirror."""
    if pod.is_daemonset or pod.is_mirror or pod.owner_kind == "Node":
        return False
    if pod.is_terminal:
        return False
    return pod.deletion_timestamp is None or pod.owner_kind == "StatefulSet"


def eviction_cost(pod: Pod) -> float:
    """Karpenter ``EvictionCost``: ``1 + pod-deletion-cost/2^27 + priority/2^25`` clamped to [-10, 10]
    (``[core]:pkg/utils/disruption/disruption.go``). An unparsable deletion cost is ignored."""
    cost = 1.0
    raw = pod.annotations.get(POD_DELETION_COST_ANNOTATION)
    if raw is not None:
        with contextlib.suppress(ValueError):
            cost += float(raw) / 2.0**27
    cost += pod.priority / 2.0**25
    return min(10.0, max(-10.0, cost))


def lifetime_remaining(*, created: float | None, expire_after: float | None, now: float) -> float:
    """Fraction of the node's ``expireAfter`` left, in [0, 1]; 1.0 when it never expires or its age is unknown."""
    if expire_after is None or expire_after <= 0 or created is None:
        return 1.0
    return min(1.0, max(0.0, (expire_after - (now - created)) / expire_after))


def expire_after_of(cn: ClusterNode, nodepool: NodePool | None) -> float | None:
    """``expireAfter`` in seconds: the NodeClaim's spec, else the NodePool template's; None for Never/unknown."""
    try:
        if cn.nodeclaim is not None:
            return cn.nodeclaim.expire_after_seconds()
        if nodepool is not None:
            return nodepool.expire_after_seconds()
    except ValueError:
        return None
    return None


@dataclass(frozen=True, slots=True)
class Candidate:
    """A node voluntary disruption may consider.

    ``reschedulable_pods`` are the pods that would move (Karpenter ``IsReschedulable``);
    ``moving_pods`` those the simulation reschedules (minus pods with an active do-not-disrupt or a
    fully blocking PDB, ``IsCurrentlyReschedulable``). ``disruption_cost`` = Σ eviction cost of
    all its pods x lifetime remaining (Karpenter's ``DisruptionCost``; consolidation orders candidates by
    price per reschedule cost instead, :func:`~.consolidation.sort_by_savings_ratio`). ``pod_block``
    says which pod blocks graceful disruption (None when nothing does).
    """

    cluster_node: ClusterNode
    facts: NodeFacts
    nodepool: NodePool
    reschedulable_pods: tuple[Pod, ...]
    moving_pods: tuple[Pod, ...]
    disruption_cost: float
    pod_block: str | None = None

    @property
    def name(self) -> str:
        """The node name."""
        return self.facts.name

    @property
    def price(self) -> float:
        """USD/hour of the node's offering (0.0 when unknown)."""
        return self.facts.price

    @property
    def is_empty(self) -> bool:
        """True when no pod would have to move (only DaemonSet, mirror or finished pods)."""
        return not self.reschedulable_pods

    @property
    def termination_grace_period(self) -> float | None:
        """``terminationGracePeriod`` in seconds (NodeClaim spec, else NodePool template), None when unset."""
        nc = self.cluster_node.nodeclaim
        try:
            if nc is not None:
                tgp = nc.spec.termination_grace_period
                return None if tgp is None else parse_duration(tgp)
            return self.nodepool.termination_grace_period_seconds()
        except ValueError:
            return None


@dataclass(frozen=True, slots=True)
class CandidateSelection:
    """The result of :func:`select_candidates`: candidates (pod-blocked ones included, see
    ``Candidate.pod_block``), rejected nodes with why, and the facts of every node by name.
    ``node_do_not_disrupt`` are the nodes that would be candidates but for their own
    ``karpenter.sh/do-not-disrupt: "true"`` (rejected for every method but node repair, which that
    annotation does not block in Karpenter v1.15)."""

    candidates: tuple[Candidate, ...]
    rejected: tuple[Rejection, ...]
    facts: Mapping[str, NodeFacts]
    node_do_not_disrupt: tuple[Candidate, ...] = ()


def _pod_block(pods: Sequence[Pod], protected: Collection[str], limits: PdbLimits) -> str | None:
    """The first pod (by key) with an active do-not-disrupt (its key in ``protected``), else the first a PDB
    blocks, said as a sentence; None when no pod blocks."""
    if protected:
        return f'pod {min(protected)} has "{DO_NOT_DISRUPT_ANNOTATION}" set'
    if limits.empty:
        return None
    for pod in sorted(pods, key=lambda p: p.key):
        why = limits.blocks(pod, protected=False)
        if why is not None:
            return why
    return None


def _node_block(facts: NodeFacts, pools: Mapping[str, NodePool]) -> str | None:
    if facts.nodepool not in pools:
        return f'NodePool "{facts.nodepool}" not found'
    if not facts.initialized:
        return "node is not initialized"
    if facts.deleting:
        return "node is deleting or already being disrupted"
    if facts.terminating:
        return "instance is terminating"
    return None


def select_candidates(
    snapshot: DisruptionSnapshot,
    *,
    now: float,
    deleting: Collection[str] = (),
    memo: NodeMemo | None = None,
) -> CandidateSelection:
    """Build candidates from the nodes of ``snapshot`` (:class:`~.types.DisruptionSnapshot`) at ``now`` (epoch
    seconds) and say why each managed non-candidate was rejected.

    Of the snapshot, ``nodes`` are judged against their ``nodepools``; ``pdbs`` and the pods on the nodes plus
    ``pending_pods`` (bound to none of them) give each PodDisruptionBudget's allowed disruptions when its status
    lacks them (:class:`~.pdb.PdbLimits`); a node is priced (USD per hour) from its NodePool's own catalogue in
    ``nodepool_instance_types`` (NodeOverlays applied) when there is one, else from ``instance_types``
    (Karpenter's ``GetInstanceTypes(nodePool)``). ``deleting`` names nodes already chosen for disruption. Nodes
    without the ``karpenter.sh/nodepool`` label are not managed and neither candidates nor rejections. ``memo``
    (:class:`~.memo.NodeMemo`) keeps each node's :class:`NodeBasis` between passes (None: computed here). Pure;
    raises nothing for odd input (odd nodes are rejected).
    """
    nodes, nodepools = snapshot.nodes, snapshot.nodepools
    pools = {p.name: p for p in nodepools}
    catalogue = {it.name: it for it in snapshot.instance_types}
    by_list: dict[int, dict[str, InstanceType]] = {}
    own: dict[str, Mapping[str, InstanceType]] = {}
    for pool_name, types in (snapshot.nodepool_instance_types or {}).items():
        own[pool_name] = by_list.setdefault(id(types), {it.name: it for it in types})
    all_pods = [p for cn in nodes for p in cn.pods] + list(snapshot.pending_pods)
    limits = PdbLimits(snapshot.pdbs, all_pods)
    facts: dict[str, NodeFacts] = {}
    candidates: list[Candidate] = []
    vetoed: list[Candidate] = []
    rejected: list[Rejection] = []
    for cn in sorted(nodes, key=lambda n: n.name):
        basis = memo.basis(cn) if memo is not None else node_basis(cn)
        f = node_facts(cn, catalogue=catalogue, deleting=deleting, nodepool_catalogues=own, basis=basis)
        facts[f.name] = f
        if f.nodepool is None:
            continue
        why = _node_block(f, pools)
        if why is not None:
            rejected.append(Rejection(node=f.name, reason=why))
            continue
        pool = pools[f.nodepool]
        pods, reschedulable = basis.pods, basis.reschedulable
        protected = {p.key for p in basis.annotated if is_do_not_disrupt_active(p, now=now)}
        moving = (
            reschedulable
            if not protected and limits.empty
            else tuple(
                p for p in reschedulable if p.key not in protected and (limits.empty or not limits.fully_blocked(p))
            )
        )
        cost = basis.eviction_cost * lifetime_remaining(
            created=f.created, expire_after=expire_after_of(cn, pool), now=now
        )
        block = _pod_block(pods, protected, limits)
        candidate = Candidate(
            cluster_node=cn,
            facts=f,
            nodepool=pool,
            reschedulable_pods=reschedulable,
            moving_pods=moving,
            disruption_cost=cost,
            pod_block=block,
        )
        if node_blocks_disruption(cn.node.annotations):
            rejected.append(Rejection(node=f.name, reason=f'node has "{DO_NOT_DISRUPT_ANNOTATION}: true"'))
            vetoed.append(candidate)
            continue
        candidates.append(candidate)
        if block is not None:
            note = (
                " (drift may still proceed: terminationGracePeriod bounds the drain)"
                if candidate.termination_grace_period
                else ""
            )
            rejected.append(Rejection(node=f.name, reason=block + note))
    return CandidateSelection(
        candidates=tuple(candidates), rejected=tuple(rejected), facts=facts, node_do_not_disrupt=tuple(vetoed)
    )
