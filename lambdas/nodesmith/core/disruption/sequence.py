"""Every command the disruption loop would start now, back to back, each consuming budget.

Karpenter's disruption controller runs a pass, starts the command it found (candidates tainted
and marked for deletion, replacements launched), and immediately runs the next pass, in which the
started command's nodes count as disrupting against the budgets and its replacements are
uninitialized capacity no other decision may rely on. :func:`plan_disruptions` replays that on a
snapshot: after each command the snapshot is advanced as the simulation predicted (moved pods
bound to their destinations, replacement NodeClaims added as uninitialized nodes holding their
pods, disrupted nodes deleting) and :func:`~nodesmith.core.disruption.decide.decide` runs again,
until a pass finds nothing. This is what ``nodesmith simulate --disrupt`` prints.

Pure; times are epoch seconds, prices USD/hour.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Final

from nodesmith.core.disruption.decide import DisruptionPlan, decide
from nodesmith.core.disruption.simulation import NEW_PREFIX
from nodesmith.core.disruption.types import ClusterNode
from nodesmith.core.model import CAPACITY_TYPE_ON_DEMAND, CAPACITY_TYPE_SPOT, Node
from nodesmith.core.requirements import (
    LABEL_CAPACITY_TYPE,
    LABEL_HOSTNAME,
    LABEL_INITIALIZED,
    LABEL_NODEPOOL,
    LABEL_ZONE,
)

if TYPE_CHECKING:
    from collections.abc import Collection, Sequence

    from nodesmith.core.disruption.types import Decision, DisruptionSettings, DisruptionSnapshot
    from nodesmith.core.model import Pod
    from nodesmith.core.scheduling.types import NodeClaimPlan

__all__ = ["REPLACEMENT_PREFIX", "plan_disruptions", "replacement_node"]

REPLACEMENT_PREFIX: Final = "replacement-"
"""Name prefix of the in-flight replacement nodes the replay adds (never shown as rejections)."""


def replacement_node(plan: NodeClaimPlan, *, name: str, now: float) -> Node:
    """An uninitialized Node standing for a launching replacement NodeClaim: its cheapest type,
    spot when the plan allows it and that type has a spot offering, in the plan's (cheapest) zone."""
    it = plan.instance_types[0]
    capacity_type = plan.capacity_type
    if capacity_type is None:
        spot = CAPACITY_TYPE_SPOT in plan.capacity_types and any(
            o.capacity_type == CAPACITY_TYPE_SPOT and o.available and o.zone in plan.zones for o in it.offerings
        )
        capacity_type = CAPACITY_TYPE_SPOT if spot else CAPACITY_TYPE_ON_DEMAND
    zone = plan.zone
    if zone is None:
        offers = sorted(
            (o for o in it.offerings if o.available and o.capacity_type == capacity_type and o.zone in plan.zones),
            key=lambda o: (o.price, o.zone),
        )
        zone = offers[0].zone if offers else next(iter(sorted(plan.zones)), "")
    labels = {
        **it.labels,
        **plan.labels,
        LABEL_NODEPOOL: plan.nodepool,
        LABEL_ZONE: zone,
        LABEL_CAPACITY_TYPE: capacity_type,
        LABEL_HOSTNAME: name,
        LABEL_INITIALIZED: "false",
    }
    return Node(
        name=name,
        labels=labels,
        taints=(*plan.taints, *plan.startup_taints),
        allocatable=dict(it.allocatable),
        capacity=dict(it.capacity),
        ready=False,
        creation_timestamp=now,
    )


def _bind(pod: Pod, node: str) -> Pod:
    return replace(pod, node_name=node, nominated_node_name=None, unschedulable=False, phase="Running")


def _advance(
    nodes: Sequence[ClusterNode], cmd: Decision, *, seq: int, now: float
) -> tuple[list[ClusterNode], set[str]]:
    """The snapshot after ``cmd`` played out as simulated; returns it and the replacement node names."""
    placements = dict(cmd.placements)
    leaving = set(cmd.nodes)
    moving: dict[str, list[Pod]] = {}
    out: list[ClusterNode] = []
    for cn in nodes:
        if cn.name in leaving:
            for pod in cn.pods:
                dest = placements.get(pod.key)
                if dest is not None:
                    moving.setdefault(dest, []).append(pod)
            out.append(replace(cn, pods=tuple(p for p in cn.pods if p.key not in placements)))
        else:
            out.append(cn)
    for i, cn in enumerate(out):
        arriving = moving.get(cn.name)
        if arriving and cn.name not in leaving:
            out[i] = replace(cn, pods=(*cn.pods, *(_bind(p, cn.name) for p in arriving)))
    names: set[str] = set()
    for index, plan in enumerate(cmd.replacements):
        name = f"{REPLACEMENT_PREFIX}{seq}-{index}"
        names.add(name)
        pods = tuple(_bind(p, name) for p in moving.get(f"{NEW_PREFIX}{index}", ()))
        out.append(ClusterNode(node=replacement_node(plan, name=name, now=now), pods=pods, last_pod_event_time=now))
    return out, names


def plan_disruptions(
    snapshot: DisruptionSnapshot,
    *,
    now: float,
    deleting: Collection[str] = (),
    settings: DisruptionSettings | None = None,
    max_commands: int = 100,
) -> DisruptionPlan:
    """Expirations plus every graceful command the loop would start now (see the module docstring).

    ``snapshot``, ``now`` (epoch seconds), ``deleting`` and ``settings`` are those of
    :func:`~nodesmith.core.disruption.decide.decide`; ``max_commands`` bounds the replay. ``budgets`` in the
    result are those of the first pass; ``rejected`` those of the last pass (the nodes still left alone, and why;
    nodes already chosen are not repeated).
    """

    def run(nodes: Sequence[ClusterNode], gone: Collection[str], *, expire: bool) -> DisruptionPlan:
        return decide(replace(snapshot, nodes=nodes), now=now, deleting=gone, settings=settings, expire=expire)

    nodes = snapshot.nodes
    first = run(nodes, deleting, expire=True)
    gone = set(deleting) | {n for e in first.expirations for n in e.nodes}
    state = list(nodes)
    synthetic: set[str] = set()
    commands: list[Decision] = []
    plan = first
    while plan.command is not None and len(commands) < max_commands:
        cmd = plan.command
        commands.append(replace(cmd, rejected=tuple(r for r in cmd.rejected if r.node not in synthetic)))
        state, added = _advance(state, cmd, seq=len(commands), now=now)
        synthetic |= added
        gone |= set(cmd.nodes)
        plan = run(state, gone, expire=False)
    return DisruptionPlan(
        expirations=first.expirations,
        commands=tuple(commands),
        rejected=tuple(r for r in plan.rejected if r.node not in synthetic and r.node not in gone),
        budgets=first.budgets,
    )
