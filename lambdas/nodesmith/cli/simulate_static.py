"""What ``nodesmith simulate`` says about static NodePools (``spec.replicas``, Karpenter's ``StaticCapacity``).

For each static NodePool of the manifests: its Node manifests (label ``karpenter.sh/nodepool``) are its members,
and :func:`~nodesmith.core.disruption.static.static_decision` says how many NodeClaims it would launch and which
nodes a scale-down would remove (no disruption budget, empty nodes first). Each NodeClaim to launch is shown as
the offering CreateFleet would most likely get (the capacity type Karpenter would ask for, then the cheapest
type and zone among the template's types), and becomes existing capacity for the pending pods, as in-flight static
NodeClaims are for Karpenter's provisioner. Nodes a scale-down removes take no new pods.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from nodesmith.core.disruption.static import (
    StaticDecision,
    StaticMember,
    is_static,
    static_decision,
    static_nodeclaim_plan,
)
from nodesmith.core.requirements import LABEL_CAPACITY_TYPE, LABEL_HOSTNAME, LABEL_NODEPOOL, LABEL_ZONE
from nodesmith.core.scheduling.types import ExistingNode

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

    from nodesmith.adapters.manifests import ManifestBundle
    from nodesmith.core.api.nodepool import NodePool
    from nodesmith.core.model import InstanceType
    from nodesmith.core.scheduling.types import NodeClaimPlan, SchedulingInput

__all__ = ["StaticView", "static_json", "static_lines", "static_views", "with_static_nodes"]


@dataclass(frozen=True, slots=True)
class StaticView:
    """One static NodePool in a simulation: its ``decision``, the offering each new NodeClaim would get
    (``instance_type``, ``capacity_type``, ``zone``, ``price_per_hour`` USD/hour; None when none could launch),
    the new NodeClaims as capacity (``new_nodes``), and ``error`` when its template allows no instance type."""

    decision: StaticDecision
    instance_type: str | None = None
    capacity_type: str | None = None
    zone: str | None = None
    price_per_hour: float = 0.0
    new_nodes: tuple[ExistingNode, ...] = ()
    error: str = ""


def _likely_offering(plan: NodeClaimPlan) -> tuple[InstanceType, str, str, float] | None:
    """``(type, capacity type, zone, price)`` of the cheapest offering of the capacity type Karpenter would ask for."""
    from nodesmith.cli.output import launch_capacity_type

    wanted = launch_capacity_type(plan)
    best: tuple[InstanceType, str, str, float] | None = None
    for it in plan.instance_types:
        for o in it.offerings:
            if not o.available or o.capacity_type != wanted or (plan.zones and o.zone not in plan.zones):
                continue
            if best is None or (o.price, it.name, o.zone) < (best[3], best[0].name, best[2]):
                best = (it, o.capacity_type, o.zone, o.price)
    return best


def _view(pool: NodePool, decision: StaticDecision, types: Sequence[InstanceType]) -> StaticView:
    if not decision.launch:
        return StaticView(decision=decision)
    plan = static_nodeclaim_plan(pool, types)
    if isinstance(plan, str):
        return StaticView(decision=decision, error=plan)
    choice = _likely_offering(plan)
    if choice is None:
        return StaticView(decision=decision, error=f'NodePool "{pool.name}": no offering could be launched')
    it, capacity_type, zone, price = choice
    nodes = []
    for i in range(decision.launch):
        name = f"{pool.name}-static-{i + 1}"
        labels = {
            **it.labels,
            **pool.spec.template.metadata.labels,
            LABEL_NODEPOOL: pool.name,
            LABEL_ZONE: zone,
            LABEL_CAPACITY_TYPE: capacity_type,
            LABEL_HOSTNAME: name,
        }
        nodes.append(
            ExistingNode(
                name=name,
                labels=labels,
                taints=pool.taints_core(),
                allocatable=dict(it.allocatable),
                nodepool=pool.name,
                initialized=False,
                startup_taints=pool.startup_taints_core(),
                price=price,
            )
        )
    return StaticView(
        decision=decision,
        instance_type=it.name,
        capacity_type=capacity_type,
        zone=zone,
        price_per_hour=price,
        new_nodes=tuple(nodes),
    )


def static_views(
    bundle: ManifestBundle,
    instance_types: Sequence[InstanceType],
    per_pool: Mapping[str, Sequence[InstanceType]],
    *,
    now: float,
) -> list[StaticView]:
    """One :class:`StaticView` per static NodePool of ``bundle`` (by name), each from its node class catalogue
    (``per_pool``, else ``instance_types``); ``now`` (epoch seconds) is when ``do-not-disrupt`` durations are read."""
    bound: dict[str, list[Any]] = {}
    for pod in bundle.pods:
        if pod.node_name and not pod.is_terminal:
            bound.setdefault(pod.node_name, []).append(pod)
    views: list[StaticView] = []
    for pool in sorted((p for p in bundle.nodepools if is_static(p)), key=lambda p: p.name):
        members = [
            StaticMember(
                name=node.name,
                deleting=node.deletion_timestamp is not None,
                pods=tuple(bound.get(node.name, ())),
                created=node.creation_timestamp or None,
            )
            for node in bundle.nodes
            if node.labels.get(LABEL_NODEPOOL) == pool.name
        ]
        decision = static_decision(pool=pool, members=members, now=now)
        views.append(_view(pool, decision, per_pool.get(pool.name, instance_types)))
    return views


def with_static_nodes(inp: SchedulingInput, views: Sequence[StaticView]) -> SchedulingInput:
    """``inp`` with the static NodeClaims to launch as existing capacity and the nodes a scale-down removes
    cordoned (they take no new pods)."""
    removed = {name for v in views for name in v.decision.remove}
    existing = [replace(n, unschedulable=True) if n.name in removed else n for n in inp.existing_nodes]
    existing += [n for v in views for n in v.new_nodes]
    return replace(inp, existing_nodes=existing)


def static_json(views: Sequence[StaticView]) -> list[dict[str, Any]]:
    """``static_nodepools`` of ``-o json``: per static NodePool (by name) ``nodepool``, ``replicas``, ``nodes``
    (active now), ``launch``, ``remove`` (node names, in removal order), ``blocked`` (why fewer launch), the
    likely ``instance_type`` / ``capacity_type`` / ``zone`` / ``price_per_hour`` of a new one, ``new_nodes``
    (their names in ``existing_nodes``) and ``error``."""
    return [
        {
            "nodepool": v.decision.nodepool,
            "replicas": v.decision.replicas,
            "nodes": v.decision.active,
            "launch": v.decision.launch,
            "remove": list(v.decision.remove),
            "blocked": v.decision.blocked,
            "instance_type": v.instance_type,
            "capacity_type": v.capacity_type,
            "zone": v.zone,
            "price_per_hour": round(v.price_per_hour, 6),
            "new_nodes": [n.name for n in v.new_nodes],
            "error": v.error,
        }
        for v in views
    ]


def static_lines(views: Sequence[StaticView]) -> list[str]:
    """One line per static NodePool for the table output: held / replicas, what it launches (likely type, USD/hour
    each), what it removes, and why fewer launch or none can."""
    lines = []
    for v in views:
        d = v.decision
        line = (
            f"static NodePool {d.nodepool}: {d.active} of {d.replicas} replicas; launch {d.launch}"
            f" ({v.instance_type or '-'}, {v.price_per_hour:.4f} USD/hour each); remove {', '.join(d.remove) or 'none'}"
        )
        lines.append(line + "".join(f"; {why}" for why in (d.blocked, v.error) if why))
    return lines
