"""One pass of voluntary disruption: which nodes to disrupt now, by which method, and why not the others.

:func:`decide` runs Karpenter's methods in order — Repair (v1.15, only with
``DisruptionSettings.node_repair``: :mod:`.repair`), Emptiness, StaticDrift (static NodePools, :mod:`.static`), Drift,
MultiNodeConsolidation, SingleNodeConsolidation (``[core]:pkg/controllers/disruption/controller.go NewMethods``) — and
returns the first command one of them produces (Karpenter executes at most one method per pass),
together with Expiration, which is not a method in v1 and ignores budgets
(``[core]:pkg/controllers/nodeclaim/expiration/controller.go``). Expired nodes count as deleting
for the methods (they consume budget, their pods must find room, they are not candidates).

With ``DisruptionSettings.policy="nodesmith"`` the two consolidation methods are replaced by the
Nodesmith policy (:mod:`.repack`): one set of wasteful nodes out, their pods re-packed at the lowest
cost, under the same candidate filter, budgets and PDBs.

Every budget is computed per NodePool and reason (``Unhealthy``, ``Empty``, ``Drifted``, ``Underutilized``) by
:mod:`.budgets`; candidates come from :mod:`.candidates`; every node a method turned down is in
``rejected`` with the reason. Pure and deterministic; times are epoch seconds, prices USD/hour.

The caller (the reconcile service) should, as Karpenter does, wait ~15 s and call :func:`decide`
again before acting, and act only when the same command comes back (:func:`still_valid`).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from functools import cache, partial
from typing import TYPE_CHECKING

from nodesmith.core.disruption.budgets import (
    REASON_DRIFTED,
    REASON_EMPTY,
    REASON_UNDERUTILIZED,
    REASON_UNHEALTHY,
    BudgetNode,
    PoolBudget,
    budget_mapping,
)
from nodesmith.core.disruption.candidates import select_candidates
from nodesmith.core.disruption.consolidation import (
    consolidation_block,
    multi_node_consolidation,
    single_node_consolidation,
)
from nodesmith.core.disruption.drift import drift_command, drift_of
from nodesmith.core.disruption.drift_basis import DriftBasis, drift_basis
from nodesmith.core.disruption.emptiness import emptiness_command
from nodesmith.core.disruption.expiration import expiration_decisions, expired_nodes
from nodesmith.core.disruption.pdb import PdbLimits
from nodesmith.core.disruption.repack import repack_consolidation
from nodesmith.core.disruption.repair import repair_command
from nodesmith.core.disruption.simulation import build_context
from nodesmith.core.disruption.static import is_static, members_from_nodes, static_drift_command
from nodesmith.core.disruption.types import DisruptionSettings, DisruptionSnapshot, Rejection

if TYPE_CHECKING:
    from collections.abc import Callable, Collection, Mapping, Sequence

    from nodesmith.core.api.ec2nodeclass import EC2NodeClass
    from nodesmith.core.api.nodepool import NodePool
    from nodesmith.core.disruption.candidates import Candidate, CandidateSelection
    from nodesmith.core.disruption.drift import Drift
    from nodesmith.core.disruption.drift_basis import NodeClassResolution
    from nodesmith.core.disruption.memo import NodeMemo
    from nodesmith.core.disruption.simulation import SimulationContext
    from nodesmith.core.disruption.types import Decision
    from nodesmith.core.model import InstanceType

__all__ = ["METHOD_CONSOLIDATION", "DisruptionPlan", "consolidation_key", "decide", "still_valid"]

METHOD_CONSOLIDATION = "consolidation"
"""``Rejection.method`` for candidates consolidation (multi- and single-node) cannot consider."""


@dataclass(frozen=True, slots=True)
class DisruptionPlan:
    """What to disrupt now.

    ``expirations``: forceful, unbudgeted deletions of expired nodes. ``commands``: the graceful
    commands in the order they would start (:func:`decide` returns at most one).
    ``rejected``: every managed node that was looked at and not disrupted, with why (a node may
    appear once per method that considered it). ``budgets``: reason -> NodePool -> budget, as
    computed at the start of the (last) pass. ``consolidation_state`` is the key of what consolidation decided on
    (:func:`consolidation_key`; empty when the pass did not reach consolidation or was given no
    ``cluster_state``); ``consolidation_skipped`` is True when it was the ``consolidated`` state :func:`decide` was
    given, so consolidation was not computed again.
    """

    expirations: tuple[Decision, ...] = ()
    commands: tuple[Decision, ...] = ()
    rejected: tuple[Rejection, ...] = ()
    budgets: Mapping[str, Mapping[str, PoolBudget]] = field(default_factory=dict)
    consolidation_state: str = ""
    consolidation_skipped: bool = False

    @property
    def command(self) -> Decision | None:
        """The first graceful command, or None."""
        return self.commands[0] if self.commands else None

    @property
    def decisions(self) -> tuple[Decision, ...]:
        """Expirations then commands."""
        return (*self.expirations, *self.commands)


def _budgets(
    selection: CandidateSelection, nodepools: Sequence[NodePool], now: float
) -> dict[str, Mapping[str, PoolBudget]]:
    nodes = [
        BudgetNode(
            nodepool=f.nodepool, counted=f.initialized and not f.terminating, disrupting=f.deleting or not f.ready
        )
        for f in selection.facts.values()
        if f.nodepool is not None
    ]
    return {
        reason: budget_mapping(nodepools=nodepools, nodes=nodes, now=now, reason=reason)
        for reason in (REASON_EMPTY, REASON_DRIFTED, REASON_UNDERUTILIZED, REASON_UNHEALTHY)
    }


def _allowed(budgets: Mapping[str, PoolBudget]) -> dict[str, int]:
    return {name: b.allowed for name, b in budgets.items()}


def _drifted(
    candidates: Sequence[Candidate],
    *,
    nodeclasses: Mapping[str, EC2NodeClass],
    resolutions: Mapping[str, NodeClassResolution],
    catalogue: Mapping[str, InstanceType],
    now: float,
    settings: DisruptionSettings,
    memo: NodeMemo | None,
) -> list[tuple[Candidate, Drift]]:
    out: list[tuple[Candidate, Drift]] = []
    bases: dict[tuple[int, str], DriftBasis] = {}  # one per NodePool and EC2NodeClass name in this pass
    for c in candidates:
        nc = c.cluster_node.nodeclaim
        ref = nc.spec.node_class_ref.name if nc is not None else c.nodepool.spec.template.spec.node_class_ref.name
        nodeclass = nodeclasses.get(ref)
        basis = bases.get((id(c.nodepool), ref))
        if basis is None:
            basis = bases[(id(c.nodepool), ref)] = drift_basis(c.nodepool, nodeclass, resolutions.get(ref))
        judge = partial(
            drift_of,
            basis=basis,
            node=c.cluster_node,
            nodepool=c.nodepool,
            nodeclass=nodeclass,
            resolution=resolutions.get(ref),
            instance_types=catalogue,
            now=now,
            instance_type_min_age=settings.instance_type_not_found_min_age,
        )
        if memo is None:
            drift = judge()
        else:  # the clock matters only through whether InstanceTypeNotFound may be considered yet
            created = c.facts.created
            aged = created is not None and now - created > settings.instance_type_not_found_min_age
            it = catalogue.get(c.facts.instance_type_name) if c.facts.instance_type_name else None
            read = (it.name, it.labels, it.offerings) if it is not None else None  # what drift reads of the type
            drift = memo.judged(c.cluster_node, (basis.key, aged, read), judge)
        if drift is not None:
            out.append((c, drift))
    return out


def _recent(selection: CandidateSelection, nodepools: Sequence[NodePool], now: float) -> set[str]:
    """Managed nodes still inside their NodePool's ``consolidateAfter`` quiet period."""
    pools = {p.name: p for p in nodepools}
    out: set[str] = set()
    for f in selection.facts.values():
        pool = pools.get(f.nodepool or "")
        if pool is None or not f.initialized:
            continue
        try:
            after = pool.spec.disruption.consolidate_after_seconds()
        except ValueError:
            continue
        if after and now - f.last_pod_event < after:
            out.add(f.name)
    return out


def decide(
    snapshot: DisruptionSnapshot,
    *,
    now: float,
    deleting: Collection[str] = (),
    settings: DisruptionSettings | None = None,
    expire: bool = True,
    cluster_state: str = "",
    consolidated: str = "",
    memo: NodeMemo | None = None,
) -> DisruptionPlan:
    """Decide one disruption pass over the cluster ``snapshot`` (:class:`~.types.DisruptionSnapshot`) at ``now``
    (epoch seconds).

    ``deleting``: node names already being disrupted by earlier commands. ``settings``: the
    :class:`~.types.DisruptionSettings` (None: the defaults). ``expire=False`` skips expiration.

    ``cluster_state`` is a key of what consolidation reads of the cluster (the caller's fingerprint of nodes,
    pods, NodeClaims, NodePools, budgets; empty: none), and ``consolidated`` the :attr:`~DisruptionPlan.
    consolidation_state` of an earlier pass whose consolidation found no command. When this pass's state (that
    key, the candidates eligible for consolidation and their budgets: :func:`consolidation_key`) is that one,
    consolidation is not computed again and no consolidation command results: Karpenter's
    ``IsConsolidated`` (``[core]:pkg/controllers/disruption/consolidation.go``), which skips single- and
    multi-node consolidation while the cluster's consolidation state is the one it last found nothing in.
    Repair, emptiness and drift are always decided.

    ``memo`` is the :class:`~.memo.NodeMemo` a long-lived caller keeps between passes: each node's basis and
    drift are then worked out again only when its view (or what it is judged against) changed; the plan is the
    same as without it. It is left holding only ``snapshot``'s nodes.

    Returns a :class:`DisruptionPlan` with the expirations and at most one command.
    Raises nothing for odd nodes or pods: they are rejected with a reason.
    """
    nodes = snapshot.nodes
    nodepools = snapshot.nodepools
    instance_types = snapshot.instance_types
    pending_pods = snapshot.pending_pods
    nodepool_instance_types = snapshot.nodepool_instance_types
    cfg = settings or DisruptionSettings()
    catalogue = {it.name: it for it in instance_types}
    expiries = (
        expired_nodes(
            nodes=nodes, nodepools=nodepools, instance_types=instance_types, now=now, deleting=deleting, memo=memo
        )
        if expire
        else []
    )
    expired = {e.node for e in expiries}
    pods_by_node = {
        cn.name: tuple(sorted(p.key for p in cn.pods if not p.is_daemonset and not p.is_mirror))
        for cn in nodes
        if cn.name in expired
    }
    expirations = tuple(expiration_decisions(expiries, pods_by_node=pods_by_node))
    gone = set(deleting) | expired
    selection = select_candidates(snapshot, now=now, deleting=gone, memo=memo)
    if memo is not None:
        memo.retain(nodes)
    budgets = _budgets(selection, nodepools, now)
    rejected: list[Rejection] = [r for r in selection.rejected if r.node not in expired]
    candidates = selection.candidates

    @cache
    def ctx() -> SimulationContext:
        """The simulation's view of the cluster, built once and only when a simulation runs (repair, drift of a
        dynamic NodePool's node, consolidation not skipped)."""
        return build_context(snapshot, facts=selection.facts, recent=_recent(selection, nodepools, now))

    def done(command: Decision | None, state: str = "", *, skipped: bool = False) -> DisruptionPlan:
        return DisruptionPlan(
            expirations=expirations,
            commands=(command,) if command is not None else (),
            rejected=tuple(rejected),
            budgets=budgets,
            consolidation_state=state,
            consolidation_skipped=skipped,
        )

    if cfg.node_repair:
        repair, why = repair_command(
            ctx(),
            [*candidates, *selection.node_do_not_disrupt],
            nodes=[cn.node for cn in nodes],
            budgets=_allowed(budgets[REASON_UNHEALTHY]),
            now=now,
        )
        rejected.extend(why)
        if repair is not None:
            return done(repair)

    empty, why = emptiness_command(candidates, budgets=_allowed(budgets[REASON_EMPTY]), now=now)
    rejected.extend(why)
    if empty is not None:
        return done(empty)

    drifted = _drifted(
        candidates,
        nodeclasses={nc.name: nc for nc in snapshot.nodeclasses},
        resolutions=snapshot.resolutions or {},
        catalogue=catalogue,
        now=now,
        settings=cfg,
        memo=memo,
    )
    drift, why = static_drift_command(
        [(c, d) for c, d in drifted if is_static(c.nodepool)],
        members=members_from_nodes(nodes, facts=selection.facts, gone=gone),
        budgets=_allowed(budgets[REASON_DRIFTED]),
        instance_types={p.name: (nodepool_instance_types or {}).get(p.name, instance_types) for p in nodepools},
        now=now,
    )
    rejected.extend(why)
    dynamic = [(c, d) for c, d in drifted if not is_static(c.nodepool)]
    if drift is None and dynamic:
        drift, why = drift_command(ctx(), dynamic, budgets=_allowed(budgets[REASON_DRIFTED]))
        rejected.extend(why)
    if drift is not None:
        return done(drift)

    eligible: list[Candidate] = []
    for c in candidates:
        if c.is_empty:
            continue  # emptiness already said why it stays
        block = consolidation_block(c, now=now)
        if block is None:
            eligible.append(c)
        elif c.pod_block is None or block != c.pod_block:
            rejected.append(Rejection(c.name, block, METHOD_CONSOLIDATION))
    under = _allowed(budgets[REASON_UNDERUTILIZED])
    state = consolidation_key(cluster_state, eligible, under) if cluster_state else ""
    if state and state == consolidated:
        return done(None, state, skipped=True)
    command, why = _consolidation(
        ctx(), eligible, budgets=under, settings=cfg,
        limits=lambda: PdbLimits(snapshot.pdbs, [*(p for cn in nodes for p in cn.pods), *pending_pods]),
    )  # fmt: skip
    rejected.extend(why)
    return done(command, state)


def _consolidation(
    ctx: SimulationContext,
    eligible: list[Candidate],
    *,
    limits: Callable[[], PdbLimits],
    budgets: dict[str, int],
    settings: DisruptionSettings,
) -> tuple[Decision | None, list[Rejection]]:
    """The consolidation command of ``settings.policy`` (``nodesmith``: repacking; ``karpenter``: multi-node,
    else single-node) and the candidates it rejected."""
    if settings.policy == "nodesmith":
        command, why = repack_consolidation(ctx, eligible, budgets=budgets, settings=settings, limits=limits())
        return command, list(why)
    multi, why = multi_node_consolidation(ctx, eligible, budgets=budgets, settings=settings)
    if multi is not None:
        return multi, list(why)
    single, why = single_node_consolidation(ctx, eligible, budgets=budgets, settings=settings)
    return single, list(why)


def consolidation_key(cluster_state: str, eligible: Sequence[Candidate], budgets: Mapping[str, int]) -> str:
    """The consolidation state of a pass: ``cluster_state`` with the names of the candidates eligible for
    consolidation and the nodes each NodePool's budget allows (a hex digest). A candidate turning eligible
    (its ``consolidateAfter`` passed) or a budget opening changes it, as the cluster changing does."""
    names = ",".join(sorted(c.name for c in eligible))
    text = "|".join((cluster_state, names, ",".join(f"{k}={v}" for k, v in sorted(budgets.items()))))
    return hashlib.sha256(text.encode()).hexdigest()


def still_valid(previous: Decision, fresh: DisruptionPlan) -> bool:
    """Karpenter's command validation (``validation.go``), against a plan computed ~15 s later.

    The earlier command stays valid when the fresh pass produced a command of the same method
    on the same nodes, with the same number of replacements, and every replacement instance type
    the earlier command would launch is still among the fresh one's (a subset, so prices did not
    move against it). Expirations are always valid.
    """
    if previous.method == "expiration":
        return True
    for cmd in fresh.commands:
        if cmd.method != previous.method or set(cmd.nodes) != set(previous.nodes):
            continue
        if len(cmd.replacements) != len(previous.replacements):
            return False
        for old, new in zip(previous.replacements, cmd.replacements, strict=True):
            if not {it.name for it in old.instance_types} <= {it.name for it in new.instance_types}:
                return False
        return True
    return False
