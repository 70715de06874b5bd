"""Scheduling simulation for disruption: "where would these nodes' pods go if the nodes were gone?"

Mirrors Karpenter ``SimulateScheduling`` (``[core]:pkg/controllers/disruption/helpers.go``):

* the candidates are removed from the cluster; every other live node is an existing destination
  (:class:`~nodesmith.core.scheduling.types.ExistingNode`), nodes already deleting are not;
* the pods to place are the cluster's pending pods, the pods of nodes already deleting, and the
  candidates' pods that would actually move (``Candidate.moving_pods``), all as pending pods;
* for consolidation (``IsConsolidationSimulation``) nodes still inside their own
  ``consolidateAfter`` quiet period receive no pods (Karpenter still lets pending pods land there;
  here they do not either, which is only more conservative);
* NodePool limits see the usage of the remaining nodes (the candidates' capacity is freed);
* as in provisioning, each NodePool schedules from its own EC2NodeClass's instance types and the
  pods' PersistentVolumeClaims pin them to their volumes' zones (volume topology), so a pod is
  never consolidated away from its zonal volume.

:func:`~nodesmith.core.scheduling.solve` does the placement. The outcome says which moved pods
could not be placed, whether a moved pod would land on an uninitialized node (Karpenter refuses
to decide on capacity that is not there yet), and which new NodeClaims hold moved pods. New
NodeClaims that hold only pending pods (or pods of already-deleting nodes) are provisioning's
business and are not counted against the decision — Karpenter counts them, which can turn a
delete into a strange "replace"; not counting them never disrupts more.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

from nodesmith.core.disruption.balanced import PoolTotals, pool_totals
from nodesmith.core.requirements import LABEL_HOSTNAME, RequirementError, Requirements
from nodesmith.core.resources import add
from nodesmith.core.scheduling import solve
from nodesmith.core.scheduling.existing import ExistingBases
from nodesmith.core.scheduling.instancetypes import NODES, OfferingFilter, has_offering, type_info
from nodesmith.core.scheduling.pods import PodDataCache
from nodesmith.core.scheduling.types import ExistingNode, SchedulingInput

if TYPE_CHECKING:
    from collections.abc import Collection, Mapping, Sequence

    from nodesmith.core.api.nodepool import NodePool
    from nodesmith.core.disruption.candidates import Candidate, NodeFacts
    from nodesmith.core.disruption.types import DisruptionSnapshot
    from nodesmith.core.model import DaemonSet, InstanceType, NodeSelectorRequirement, Pod
    from nodesmith.core.resources import Resources
    from nodesmith.core.scheduling.types import NodeClaimPlan, Packing, SchedulingResult

__all__ = ["NEW_PREFIX", "Simulation", "SimulationContext", "as_pending", "build_context", "simulate", "usable_types"]

NEW_PREFIX = "new:"
"""Placement prefix for a pod going to a new NodeClaim (``new:0`` is ``new_nodeclaims[0]``)."""


def as_pending(pod: Pod) -> Pod:
    """The pod as the scheduler must see it to place it again: unbound, marked Unschedulable."""
    return replace(pod, node_name=None, nominated_node_name=None, unschedulable=True, phase="Pending")


@dataclass(frozen=True, slots=True)
class SimulationContext:
    """The cluster as the simulation sees it, built once per decision pass.

    ``destinations``: every live node as an existing node, by name. ``capacity``: each managed
    live node's capacity (+ ``nodes: 1``) and NodePool, for limits. ``deleting_pods``: pods of
    nodes already deleting (to be placed again). ``recent``: nodes inside their
    ``consolidateAfter`` quiet period. ``volume_requirements``: pod key -> the node requirements its
    PersistentVolumeClaims impose. ``nodepool_instance_types``: NodePool name -> its own EC2NodeClass's
    usable types (a NodePool not named uses ``instance_types``). ``existing_bases``: what the trials' scheduling
    passes derive from each destination, derived once for all of them. ``held_back``: destinations as the trials
    offer them when no pod may join them (``unschedulable``), each made once, so the trials share its base too.
    ``pod_data``: what the trials' scheduling passes derive from each pod (its constraints and requirements), made
    for ``volume_requirements`` and derived once for all of them. ``pool_totals``: each ``Balanced`` NodePool's
    price and disruption totals, which its consolidation moves are scored against (:mod:`.balanced`).
    """

    destinations: Mapping[str, ExistingNode]
    capacity: Mapping[str, tuple[str, Resources]]
    pending: tuple[Pod, ...]
    deleting_pods: tuple[Pod, ...]
    nodepools: tuple[NodePool, ...]
    instance_types: tuple[InstanceType, ...]
    daemonsets: tuple[DaemonSet, ...]
    recent: frozenset[str]
    volume_requirements: Mapping[str, tuple[NodeSelectorRequirement, ...]] = field(default_factory=dict)
    nodepool_instance_types: Mapping[str, tuple[InstanceType, ...]] = field(default_factory=dict)
    existing_bases: ExistingBases = field(default_factory=ExistingBases, compare=False, repr=False)
    held_back: dict[str, ExistingNode] = field(default_factory=dict, compare=False, repr=False)
    pod_data: PodDataCache = field(default_factory=PodDataCache, compare=False, repr=False)
    pool_totals: Mapping[str, PoolTotals] = field(default_factory=dict)


def _held_back(ctx: SimulationContext, name: str, node: ExistingNode) -> ExistingNode:
    """``node`` (destination ``name``) as a node no pod may join, the same object for every trial of ``ctx``."""
    held = ctx.held_back.get(name)
    if held is None:
        held = ctx.held_back[name] = replace(node, unschedulable=True)
    return held


def build_context(
    snapshot: DisruptionSnapshot, *, facts: Mapping[str, NodeFacts], recent: Collection[str]
) -> SimulationContext:
    """Build the :class:`SimulationContext` of ``snapshot``. ``facts`` must hold every node of ``snapshot.nodes``;
    ``recent`` names the nodes inside their NodePool's ``consolidateAfter`` quiet period.

    A node's allocatable is what its status reports, else its instance type's (snapshots often
    leave status out). ``snapshot.pending_pods`` are the cluster's pending pods; terminal pods are ignored. Static
    NodePools (``spec.replicas``) are left out of the pools a simulation may open NodeClaims from, as Karpenter's
    provisioner leaves them out; their nodes are destinations like any other.
    """
    nodes, nodepools = snapshot.nodes, snapshot.nodepools
    pools = {p.name: p for p in nodepools}
    dynamic = tuple(p for p in nodepools if p.spec.replicas is None)  # no simulation plans a static NodeClaim
    destinations: dict[str, ExistingNode] = {}
    capacity: dict[str, tuple[str, Resources]] = {}
    deleting: list[Pod] = []
    for cn in sorted(nodes, key=lambda n: n.name):
        f = facts[cn.name]
        pods = tuple(p for p in cn.pods if not p.is_terminal)
        if f.deleting or f.terminating:
            deleting.extend(as_pending(p) for p in pods if _moves(p))
            continue
        node = cn.node
        it = f.instance_type
        labels = dict(node.labels)
        labels.setdefault(LABEL_HOSTNAME, node.name)
        allocatable = dict(node.allocatable) or (dict(it.allocatable) if it is not None else {})
        pool = pools.get(f.nodepool) if f.nodepool else None
        destinations[node.name] = ExistingNode(
            name=node.name,
            labels=labels,
            taints=node.taints,
            allocatable=allocatable,
            pods=pods,
            nodepool=f.nodepool,
            initialized=f.initialized or f.nodepool is None,
            unschedulable=node.unschedulable,
            startup_taints=pool.startup_taints_core() if pool is not None else (),
            price=f.price,
        )
        if f.nodepool:
            cap = dict(node.capacity) or (dict(it.capacity) if it is not None else dict(allocatable))
            cap[NODES] = 1
            capacity[node.name] = (f.nodepool, cap)
    volumes = dict(snapshot.volume_requirements or {})
    return SimulationContext(
        destinations=destinations,
        capacity=capacity,
        pending=tuple(
            as_pending(p) for p in snapshot.pending_pods if not p.is_terminal and p.deletion_timestamp is None
        ),
        deleting_pods=tuple(deleting),
        nodepools=dynamic,
        instance_types=usable_types(snapshot.instance_types, dynamic),
        daemonsets=tuple(snapshot.daemonsets),
        recent=frozenset(recent),
        volume_requirements=volumes,
        nodepool_instance_types=_usable_per_pool(snapshot.nodepool_instance_types or {}, dynamic),
        pod_data=PodDataCache(volumes),
        pool_totals=pool_totals(nodes, facts=facts, nodepools=nodepools),
    )


def _usable_per_pool(
    types_by_pool: Mapping[str, Sequence[InstanceType]], nodepools: Sequence[NodePool]
) -> dict[str, tuple[InstanceType, ...]]:
    """:func:`usable_types` of each NodePool's own catalogue, once per catalogue (NodePools sharing
    a node class share one filtered tuple)."""
    groups: dict[int, list[NodePool]] = {}
    for pool in nodepools:
        types = types_by_pool.get(pool.name)
        if types is not None:
            groups.setdefault(id(types), []).append(pool)
    out: dict[str, tuple[InstanceType, ...]] = {}
    for pools in groups.values():
        usable = usable_types(types_by_pool[pools[0].name], pools)
        out.update((pool.name, usable) for pool in pools)
    return out


def usable_types(instance_types: Sequence[InstanceType], nodepools: Sequence[NodePool]) -> tuple[InstanceType, ...]:
    """The instance types at least one NodePool could launch (its requirements and template labels
    intersect the type's, and an offering is allowed), in catalogue order.

    The same test the scheduler applies per NodePool (``Template``), done once per pass so that the
    many simulations of a pass do not each re-read a catalogue of ~1400 types. A NodePool whose
    requirements cannot be read keeps every type (the scheduler then reports it).
    """
    filters: list[tuple[Requirements, OfferingFilter]] = []
    for pool in nodepools:
        try:
            reqs = Requirements.from_node_selector_requirements(pool.requirements_core())
        except RequirementError:
            return tuple(instance_types)
        reqs.add(*Requirements.from_labels(pool.spec.template.metadata.labels).values())
        filters.append((reqs, OfferingFilter(reqs)))
    out: list[InstanceType] = []
    for it in instance_types:
        info = type_info(it)
        if any(info.requirements.intersects(reqs) is None and has_offering(info, offers) for reqs, offers in filters):
            out.append(it)
    return tuple(out)


def _moves(pod: Pod) -> bool:
    return not (pod.is_daemonset or pod.is_mirror or pod.owner_kind == "Node") and (
        pod.deletion_timestamp is None or pod.owner_kind == "StatefulSet"
    )


@dataclass(frozen=True, slots=True)
class Simulation:
    """The outcome of simulating the removal of some candidates.

    ``failures``: moved (or deleting-node) pod -> why it fits nowhere. ``uninitialized``: the
    first uninitialized node a moved pod would land on, or None. ``new_nodeclaims``: new
    NodeClaims holding at least one moved pod. ``placements``: moved pod key -> node name or
    ``"new:<i>"`` (index into ``new_nodeclaims``). ``moved``: the keys of the candidates' pods that move.
    """

    result: SchedulingResult
    moved: tuple[str, ...]
    failures: Mapping[str, str]
    uninitialized: str | None
    new_nodeclaims: tuple[NodeClaimPlan, ...]
    placements: Mapping[str, str]

    @property
    def all_scheduled(self) -> bool:
        """True when every pod that is not merely pending found a place."""
        return not self.failures

    def explain_failures(self, limit: int = 3) -> str:
        """A sentence naming up to ``limit`` pods that would not schedule and why."""
        items = sorted(self.failures.items())
        text = "; ".join(f"{pod} => {why}" for pod, why in items[:limit])
        more = f" and {len(items) - limit} other(s)" if len(items) > limit else ""
        return f"not all pods would schedule: {text}{more}"


def simulate(
    ctx: SimulationContext,
    candidates: Sequence[Candidate],
    *,
    consolidation: bool,
    packing: Packing = "karpenter",
    skip_uninitialized: bool = False,
    keep_candidate_usage: bool = False,
) -> Simulation:
    """Simulate removing ``candidates`` (see the module docstring); pure and deterministic.

    ``packing`` is the scheduler's packing policy for the new NodeClaims: ``karpenter`` (its own
    grouping, what Karpenter's consolidation rules are judged on) or ``nodesmith`` (the cost-aware
    re-packing the Nodesmith consolidation policy plans with). ``skip_uninitialized`` makes
    uninitialized nodes no destination for any pod (the Nodesmith policy plans around capacity
    that is not there yet instead of giving up, as Karpenter does, when a pod would land on it).
    ``keep_candidate_usage`` keeps the candidates' capacity counted against their NodePools' limits (a
    replacement launched while they still run: node repair asks whether the pool can hold one).
    """
    names = {c.name for c in candidates}
    existing = [
        _held_back(ctx, name, n)
        if not n.unschedulable
        and ((consolidation and name in ctx.recent) or (skip_uninitialized and not n.initialized))
        else n
        for name, n in ctx.destinations.items()
        if name not in names
    ]
    moving = [as_pending(p) for c in candidates for p in c.moving_pods]
    moved_keys = tuple(p.key for p in moving)
    must_place = set(moved_keys) | {p.key for p in ctx.deleting_pods}
    usage: dict[str, Resources] = {}
    for name, (pool, cap) in ctx.capacity.items():
        if keep_candidate_usage or name not in names:
            usage[pool] = add(usage.get(pool, {}), cap)
    result = solve(
        SchedulingInput(
            pods=[*ctx.pending, *ctx.deleting_pods, *moving],
            nodepools=ctx.nodepools,
            instance_types=ctx.instance_types,
            existing_nodes=existing,
            daemonsets=ctx.daemonsets,
            nodepool_usage=usage,
            packing=packing,
            volume_requirements=ctx.volume_requirements,
            nodepool_instance_types=ctx.nodepool_instance_types,
            existing_bases=ctx.existing_bases,
            pod_data=ctx.pod_data,
        )
    )
    failures = {key: why for key, why in result.unschedulable.items() if key in must_place}
    moved_set = set(moved_keys)
    placements: dict[str, str] = {}
    uninitialized: str | None = None
    for node_name, pods in result.existing.items():
        dest = ctx.destinations.get(node_name)
        for pod in pods:
            if pod.key in moved_set:
                placements[pod.key] = node_name
                if dest is not None and not dest.initialized and uninitialized is None:
                    uninitialized = node_name
    claims = tuple(nc for nc in result.nodeclaims if any(p.key in moved_set for p in nc.pods))
    for index, nc in enumerate(claims):
        for pod in nc.pods:
            if pod.key in moved_set:
                placements[pod.key] = f"{NEW_PREFIX}{index}"
    return Simulation(
        result=result,
        moved=moved_keys,
        failures=failures,
        uninitialized=uninitialized,
        new_nodeclaims=claims,
        placements=placements,
    )
