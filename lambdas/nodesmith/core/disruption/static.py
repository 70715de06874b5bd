"""Static NodePools (``spec.replicas``, Karpenter's alpha gate ``StaticCapacity``): how many NodeClaims to
create, which to remove, and the NodeClaim a static pool launches.

A static NodePool holds ``replicas`` NodeClaims whatever the pods. The rules follow Karpenter v1.15
(``[core]:pkg/controllers/static/provisioning/controller.go``, ``static/deprovisioning/controller.go``,
``pkg/controllers/state/statenodepool.go``; ``karpenter-1.15-features.md`` §1):

* counts per pool: **active** NodeClaims (not deleting, not part of a disruption command), **deleting**
  ones (``deletionTimestamp`` set) and **pending disruption** ones (chosen by a disruption command, their
  node tainted ``karpenter.sh/disrupted``, not deleted yet);
* **scale-up**: nothing while ``active + pending disruption >= replicas``; otherwise ``replicas - active``
  NodeClaims, capped so that ``active + deleting + pending disruption + new`` never exceeds ``limits.nodes``
  (no limit: no cap). A cap of 0 is reported as "node limit reached";
* **scale-down**: ``active - replicas`` NodeClaims (pending disruption not counted), no disruption budget
  consulted (a user-driven, forceful method like expiration; the drain still honours PDBs and
  ``do-not-disrupt`` up to ``terminationGracePeriod``). Order: NodeClaims not launched yet (no
  ``status.providerID``); then empty nodes (no pods but DaemonSet pods, none with an active
  ``karpenter.sh/do-not-disrupt``); then the others, nodes without an active ``do-not-disrupt`` pod first,
  then by rescheduling cost (sum of the pods' eviction costs) times the fraction of ``expireAfter`` left,
  ascending; ties by name;
* **drift** (Karpenter's ``StaticDrift`` method, run after Emptiness and before Drift): a drifted static node is
  replaced 1:1 by a template NodeClaim, within the pool's ``Drifted`` budget, not while a scale-down is pending
  (``active + pending disruption > replicas``), and only when ``limits.nodes`` leaves room to stage the replacement
  (without ``TerminateFirstDrift`` it waits otherwise); pods blocking eviction block it unless the NodeClaim has a
  ``terminationGracePeriod`` (the eventual class);
* the NodeClaim a static pool launches comes from its template alone: its requirements and labels, every
  instance type of its node class they allow with an available offering, cheapest first (Karpenter leaves
  the type choice to ``CloudProvider.Create``, which picks among the same types; no pod narrows it).

Pure: times are epoch seconds, prices USD per hour.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Final

from nodesmith.core.disruption.candidates import eviction_cost, is_do_not_disrupt_active, lifetime_remaining
from nodesmith.core.disruption.types import METHOD_DRIFT, Decision, Rejection
from nodesmith.core.requirements import LABEL_NODEPOOL, RequirementError, Requirements
from nodesmith.core.scheduling.instancetypes import (
    OfferingFilter,
    cheapest_offering,
    min_values_shortfall,
    type_info,
)
from nodesmith.core.scheduling.types import NodeClaimPlan

if TYPE_CHECKING:
    from collections.abc import Collection, Mapping, Sequence

    from nodesmith.core.api.nodepool import NodePool
    from nodesmith.core.disruption.candidates import Candidate, NodeFacts
    from nodesmith.core.disruption.drift import Drift
    from nodesmith.core.disruption.types import ClusterNode
    from nodesmith.core.model import InstanceType, Offering, Pod

__all__ = [
    "REASON_OVERPROVISIONED",
    "StaticDecision",
    "StaticMember",
    "is_static",
    "members_from_nodes",
    "scale_down_order",
    "static_decision",
    "static_drift_command",
    "static_nodeclaim_plan",
]

REASON_OVERPROVISIONED: Final = "Overprovisioned"
"""The termination reason of a NodeClaim removed by a static scale-down (Karpenter's ``overprovisioned``)."""


def is_static(pool: NodePool) -> bool:
    """True when ``pool`` is a static NodePool (``spec.replicas`` set, 0 included)."""
    return pool.spec.replicas is not None


@dataclass(frozen=True, slots=True)
class StaticMember:
    """One NodeClaim of a static NodePool, as the static decision sees it.

    ``launched``: it has a ``status.providerID``. ``deleting``: its ``deletionTimestamp`` is set.
    ``pending_disruption``: a disruption command chose it and it is not deleted yet. ``pods``: the pods
    bound to its Node (empty before registration). ``created`` (epoch seconds) and ``expire_after``
    (seconds, None for ``Never``) give the fraction of its lifetime left.
    """

    name: str
    launched: bool = True
    deleting: bool = False
    pending_disruption: bool = False
    pods: tuple[Pod, ...] = ()
    created: float | None = None
    expire_after: float | None = None

    @property
    def active(self) -> bool:
        """Neither deleting nor pending disruption."""
        return not self.deleting and not self.pending_disruption


@dataclass(frozen=True, slots=True)
class StaticDecision:
    """What one pass does to a static NodePool.

    ``replicas`` is ``spec.replicas``; ``active``, ``deleting`` and ``pending_disruption`` are the counts it
    was decided on; ``limit`` is ``limits.nodes`` (None: unlimited). ``launch`` is how many NodeClaims to
    create; ``remove`` names the NodeClaims to delete, in order; ``blocked`` says why fewer than wanted are
    launched (the node limit), else "".
    """

    nodepool: str
    replicas: int
    active: int
    deleting: int
    pending_disruption: int
    limit: int | None
    launch: int = 0
    remove: tuple[str, ...] = ()
    blocked: str = ""


def _is_empty(member: StaticMember, *, now: float) -> bool:
    pods = [p for p in member.pods if not p.is_terminal]
    return all(p.is_daemonset for p in pods) and not any(is_do_not_disrupt_active(p, now=now) for p in pods)


def scale_down_order(members: Sequence[StaticMember], *, now: float) -> list[StaticMember]:
    """The active members of one static pool in the order a scale-down removes them (module docstring).

    Members deleting or pending disruption are left out: they are already on their way.
    """
    active = [m for m in members if m.active]
    unlaunched = sorted((m for m in active if not m.launched), key=lambda m: m.name)
    launched = [m for m in active if m.launched]
    empty = sorted((m for m in launched if _is_empty(m, now=now)), key=lambda m: m.name)
    empty_names = {m.name for m in empty}

    def cost(m: StaticMember) -> tuple[bool, float, str]:
        pods = [p for p in m.pods if not p.is_terminal]
        protected = any(is_do_not_disrupt_active(p, now=now) for p in pods)
        rescheduling = sum(eviction_cost(p) for p in pods)
        left = lifetime_remaining(created=m.created, expire_after=m.expire_after, now=now)
        return (protected, rescheduling * left, m.name)

    others = sorted((m for m in launched if m.name not in empty_names), key=cost)
    return [*unlaunched, *empty, *others]


def static_decision(*, pool: NodePool, members: Sequence[StaticMember], now: float) -> StaticDecision:
    """Scale-up count and scale-down victims of static NodePool ``pool`` given its NodeClaims ``members``.

    Raises ``ValueError`` when ``pool`` is not static (no ``spec.replicas``). A NodePool being deleted gets
    nothing (its NodeClaims go with it through their owner references): the caller leaves such pools out.
    """
    if pool.spec.replicas is None:
        raise ValueError(f'NodePool "{pool.name}" is not static: spec.replicas is not set')
    replicas = pool.spec.replicas
    active = sum(1 for m in members if m.active)
    deleting = sum(1 for m in members if m.deleting)
    pending = sum(1 for m in members if not m.deleting and m.pending_disruption)
    limit = pool.limits_core().get("nodes")
    base = StaticDecision(
        nodepool=pool.name,
        replicas=replicas,
        active=active,
        deleting=deleting,
        pending_disruption=pending,
        limit=limit,
    )
    if active > replicas:
        victims = scale_down_order(members, now=now)[: active - replicas]
        return _with(base, remove=tuple(m.name for m in victims))
    if active + pending >= replicas:
        return base
    wanted = replicas - active
    room = wanted if limit is None else max(0, limit - (active + deleting + pending))
    grant = min(wanted, room)
    blocked = (
        "" if grant == wanted else f"node limit reached (limits.nodes {limit}, {active + deleting + pending} held)"
    )
    return _with(base, launch=grant, blocked=blocked)


def _with(base: StaticDecision, *, launch: int = 0, remove: tuple[str, ...] = (), blocked: str = "") -> StaticDecision:
    return StaticDecision(
        nodepool=base.nodepool,
        replicas=base.replicas,
        active=base.active,
        deleting=base.deleting,
        pending_disruption=base.pending_disruption,
        limit=base.limit,
        launch=launch,
        remove=remove,
        blocked=blocked,
    )


def static_nodeclaim_plan(pool: NodePool, instance_types: Sequence[InstanceType]) -> NodeClaimPlan | str:
    """The NodeClaim static NodePool ``pool`` launches, from its template alone, or why it cannot launch one.

    ``instance_types`` is the catalogue of the pool's EC2NodeClass (offerings priced in USD per hour). The
    plan keeps every type whose labels the pool's requirements and template labels allow and that has an
    available offering they allow, cheapest such offering first (ties by name); it carries no pods and no
    requests. ``zone`` / ``capacity_type`` are set when the kept offerings leave one value. Returns a
    message (str) when the requirements cannot be read, allow no type, or ``minValues`` is not met.
    """
    try:
        reqs = Requirements.from_node_selector_requirements(pool.requirements_core())
    except RequirementError as exc:
        return f'NodePool "{pool.name}": invalid requirements: {exc}'
    reqs.add(*Requirements.from_labels({**pool.spec.template.metadata.labels, LABEL_NODEPOOL: pool.name}).values())
    offers = OfferingFilter(reqs)
    kept: list[tuple[float, str, InstanceType, list[Offering]]] = []
    for it in instance_types:
        info = type_info(it)
        if info.requirements.intersects(reqs) is not None:
            continue
        best = cheapest_offering(info, offers)
        if best is None:
            continue
        kept.append((best.price, it.name, it, [o for o in info.offerings if offers.allows(o)]))
    if not kept:
        return f'NodePool "{pool.name}": its requirements leave no instance type with an available offering'
    kept.sort(key=lambda k: (k[0], k[1]))
    short = min_values_shortfall((type_info(k[2]) for k in kept), reqs)
    if short is not None:
        key, have, need = short
        return f'NodePool "{pool.name}": minValues: {key} needs {need} distinct values, the types offer {have}'
    zones = frozenset(o.zone for k in kept for o in k[3])
    capacity_types = frozenset(o.capacity_type for k in kept for o in k[3])
    return NodeClaimPlan(
        nodepool=pool.name,
        nodeclass=pool.spec.template.spec.node_class_ref.name,
        instance_types=tuple(k[2] for k in kept),
        requirements=pool.requirements_core(),
        capacity_types=capacity_types,
        zones=zones,
        pods=(),
        requests={},
        price_per_hour=kept[0][0],
        zone=next(iter(zones)) if len(zones) == 1 else None,
        capacity_type=next(iter(capacity_types)) if len(capacity_types) == 1 else None,
    )


def members_from_nodes(
    nodes: Sequence[ClusterNode], *, facts: Mapping[str, NodeFacts], gone: Collection[str] = ()
) -> dict[str, list[StaticMember]]:
    """Static members by NodePool name from a disruption snapshot: every node with a ``karpenter.sh/nodepool``
    label. Deleting: the Node's or its NodeClaim's ``deletionTimestamp``; pending disruption: otherwise marked for
    disruption (``facts``' ``deleting``: the ``karpenter.sh/disrupted`` taint or an earlier command) or in
    ``gone`` (nodes this pass already disrupts)."""
    out: dict[str, list[StaticMember]] = {}
    for cn in nodes:
        f = facts.get(cn.name)
        if f is None or f.nodepool is None:
            continue
        nc = cn.nodeclaim
        deleting = cn.node.deletion_timestamp is not None or (
            nc is not None and nc.metadata.deletion_timestamp is not None
        )
        out.setdefault(f.nodepool, []).append(
            StaticMember(
                name=cn.name,
                deleting=deleting,
                pending_disruption=not deleting and (f.deleting or cn.name in gone),
                pods=cn.pods,
                created=f.created,
            )
        )
    return out


def static_drift_command(
    drifted: Sequence[tuple[Candidate, Drift]],
    *,
    members: Mapping[str, Sequence[StaticMember]],
    budgets: Mapping[str, int],
    instance_types: Mapping[str, Sequence[InstanceType]],
    now: float,
) -> tuple[Decision | None, list[Rejection]]:
    """Karpenter's ``StaticDrift``: the first drifted node of a static pool (empty nodes first, then by name) replaced
    1:1 by a template NodeClaim, or None, with the drifted static nodes turned down and why.

    ``drifted`` holds candidates of static pools only; ``members`` the static members by pool
    (:func:`members_from_nodes`); ``budgets`` the ``Drifted`` budgets by pool; ``instance_types`` each pool's node
    class catalogue by pool name. Rules in the module docstring.
    """
    rejected: list[Rejection] = []
    for c, drift in sorted(drifted, key=lambda item: (not item[0].is_empty, item[0].name)):
        pool = c.nodepool
        state = static_decision(pool=pool, members=members.get(pool.name, ()), now=now)
        why: str | None = None
        if state.active + state.pending_disruption > state.replicas:
            why = f'static NodePool "{pool.name}" is scaling down to {state.replicas}'
        elif budgets.get(pool.name, 0) <= 0:
            why = f'NodePool "{pool.name}" Drifted budget exhausted'
        elif state.limit is not None and state.active + state.deleting + state.pending_disruption >= state.limit:
            why = f"cannot stage a replacement: limits.nodes {state.limit} reached"
        elif c.pod_block is not None and not c.termination_grace_period:
            why = c.pod_block
        if why is not None:
            rejected.append(Rejection(c.name, f"{drift.reason}, but {why}", METHOD_DRIFT))
            continue
        plan = static_nodeclaim_plan(pool, instance_types.get(pool.name, ()))
        if isinstance(plan, str):
            rejected.append(Rejection(c.name, f"{drift.reason}, but {plan}", METHOD_DRIFT))
            continue
        moved = tuple(sorted(p.key for p in c.reschedulable_pods))
        return (
            Decision(
                method=METHOD_DRIFT,
                nodes=(c.name,),
                cause=drift.reason,
                reason=f"{c.name} drifted ({drift.reason}: {drift.message}); "
                f'replace 1:1 from static NodePool "{pool.name}"',
                nodepools=(pool.name,),
                replacements=(plan,),
                cost_before=c.price,
                cost_after=plan.price_per_hour,
                pods=moved,
                rejected=tuple(rejected),
            ),
            rejected,
        )
    return None, rejected
