"""Static NodePools in the reconcile pass (feature gate ``StaticCapacity``): what each holds, launches and removes.

The decision is the core's (:func:`~nodesmith.core.disruption.static.static_decision`); this module reads
the pass's snapshot into :class:`~nodesmith.core.disruption.static.StaticMember` views and carries out the
removals. A removed NodeClaim goes the way every disruption goes: annotated with the reason
``Overprovisioned``, deleted (its ``karpenter.sh/termination`` finalizer keeps it) and its termination
request sent to the termination queue, which drains the node through the Eviction API (PDBs honoured) and
terminates the instance. No disruption budget gates it (Karpenter's static deprovisioning controller). Its Node
(or, before registration, the NodeClaim) gets a ``DisruptionTerminating`` Event naming the static NodePool.
The launches go through the reconcile pass's own create-and-launch path (:mod:`.reconcile`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from nodesmith.core.api.nodeclaim import CONDITION_DISRUPTION_REASON
from nodesmith.core.disruption.static import (
    REASON_OVERPROVISIONED,
    StaticDecision,
    StaticMember,
    is_static,
    static_decision,
    static_nodeclaim_plan,
)
from nodesmith.core.drain import carries_disrupted_taint
from nodesmith.core.errors import KubernetesError, NotFoundError
from nodesmith.core.objects import parse_timestamp
from nodesmith.core.ports import ObjectRef
from nodesmith.services.provisioning.capacity import to_rfc3339
from nodesmith.services.provisioning.lifecycle import nodeclaim_ref
from nodesmith.services.termination.requests import request_termination

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

    from nodesmith.core.api.nodeclaim import NodeClaim
    from nodesmith.core.api.nodepool import NodePool
    from nodesmith.core.model import InstanceType, Node, Pod
    from nodesmith.core.ports import Cluster, TerminationQueue
    from nodesmith.core.scheduling.types import NodeClaimPlan

__all__ = ["StaticRemoval", "decide_static", "launch_plans", "remove_static", "static_members", "static_pools"]


def static_pools(
    nodepools: Sequence[NodePool], nodeclasses_ready: Mapping[str, object], errors: list[str]
) -> list[NodePool]:
    """The static NodePools a pass keeps at their replicas: not being deleted (their NodeClaims go with them), and
    with a resolved EC2NodeClass (``nodeclasses_ready``: the pass's catalogues by node class; others are reported
    in ``errors``, as Karpenter waits for the pool to be Ready)."""
    out: list[NodePool] = []
    for pool in nodepools:
        if not is_static(pool) or pool.metadata.deletion_timestamp:
            continue
        ref = pool.spec.template.spec.node_class_ref.name
        if ref not in nodeclasses_ready:
            errors.append(f'static NodePool {pool.name}: EC2NodeClass "{ref}" not found or not ready')
            continue
        out.append(pool)
    return out


def _created(claim: NodeClaim) -> float | None:
    try:
        return parse_timestamp(claim.metadata.creation_timestamp)
    except ValueError:
        return None


def _expire_after(claim: NodeClaim) -> float | None:
    try:
        return claim.expire_after_seconds()
    except ValueError:
        return None


def static_members(
    pool: str, *, nodeclaims: Sequence[NodeClaim], nodes: Sequence[Node], pods: Sequence[Pod]
) -> list[StaticMember]:
    """The NodeClaims of NodePool ``pool`` (label ``karpenter.sh/nodepool``) as static members.

    Pending disruption: the NodeClaim carries a ``DisruptionReason`` condition (a disruption command chose it)
    or its Node the ``karpenter.sh/disrupted`` taint. Pods are the non-terminal ones bound to its Node.
    """
    node_by_name = {n.name: n for n in nodes}
    by_node: dict[str, list[Pod]] = {}
    for pod in pods:
        if pod.node_name and not pod.is_terminal:
            by_node.setdefault(pod.node_name, []).append(pod)
    out: list[StaticMember] = []
    for claim in nodeclaims:
        if claim.nodepool_name != pool:
            continue
        node = node_by_name.get(claim.status.node_name or "")
        tainted = node is not None and carries_disrupted_taint(node.taints)
        out.append(
            StaticMember(
                name=claim.name,
                launched=bool(claim.status.provider_id),
                deleting=claim.metadata.deletion_timestamp is not None,
                pending_disruption=tainted or claim.is_true(CONDITION_DISRUPTION_REASON),
                pods=tuple(by_node.get(node.name, ())) if node is not None else (),
                created=_created(claim),
                expire_after=_expire_after(claim),
            )
        )
    return out


def decide_static(
    *,
    pools: Sequence[NodePool],
    nodeclaims: Sequence[NodeClaim],
    nodes: Sequence[Node],
    pods: Sequence[Pod],
    now: float,
) -> list[StaticDecision]:
    """One :class:`~nodesmith.core.disruption.static.StaticDecision` per pool in ``pools``, in their order."""
    return [
        static_decision(
            pool=pool, members=static_members(pool.name, nodeclaims=nodeclaims, nodes=nodes, pods=pods), now=now
        )
        for pool in pools
    ]


def launch_plans(
    *,
    pools: Sequence[NodePool],
    decisions: Sequence[StaticDecision],
    catalogues: Mapping[str, Mapping[str, InstanceType]],
    errors: list[str],
) -> list[NodeClaimPlan]:
    """One template NodeClaim plan (:func:`~nodesmith.core.disruption.static.static_nodeclaim_plan`) per NodeClaim
    the ``decisions`` launch, from each pool's EC2NodeClass catalogue (``catalogues`` by node class name); a pool
    whose template allows no instance type is reported in ``errors``."""
    plans: list[NodeClaimPlan] = []
    for pool, decision in zip(pools, decisions, strict=True):
        if not decision.launch:
            continue
        catalogue = catalogues.get(pool.spec.template.spec.node_class_ref.name, {})
        plan = static_nodeclaim_plan(pool, list(catalogue.values()))
        if isinstance(plan, str):
            errors.append(plan)
            continue
        plans.extend([plan] * decision.launch)
    return plans


@dataclass(slots=True)
class StaticRemoval:
    """What :func:`remove_static` did: ``removed`` NodeClaim names (their termination requested, in decision
    order), ``claims`` the pass's NodeClaims with those marked deleting, ``errors`` per NodeClaim."""

    removed: list[str]
    claims: list[NodeClaim]
    errors: list[str]


def remove_static(
    *,
    cluster: Cluster,
    queue: TerminationQueue | None,
    nodeclaims: Sequence[NodeClaim],
    decisions: Sequence[StaticDecision],
    now: float,
) -> StaticRemoval:
    """Request the termination of every NodeClaim the ``decisions`` remove (reason ``Overprovisioned``, no deadline:
    the NodeClaim's ``terminationGracePeriod`` bounds the drain) and send the requests to ``queue`` (None: the next
    pass's sweep sends them). A NodeClaim already gone is skipped; other API errors are reported, not raised.
    """
    wanted = [(name, d) for d in decisions for name in d.remove]
    by_name = {nc.name: nc for nc in nodeclaims}
    removed: list[str] = []
    errors: list[str] = []
    requests = []
    for name, decision in wanted:
        claim = by_name.get(name)
        if claim is None:
            continue
        try:
            requests.append(
                request_termination(cluster=cluster, nodeclaim=claim, reason=REASON_OVERPROVISIONED, now=now)
            )
        except NotFoundError:
            continue
        except KubernetesError as exc:
            errors.append(f"scale down NodeClaim {name}: {exc}")
            continue
        removed.append(name)
        node = claim.status.node_name
        cluster.record_event(
            ref=ObjectRef(kind="Node", name=node) if node else nodeclaim_ref(claim),
            reason="DisruptionTerminating",
            message=f"Disrupting Node: {REASON_OVERPROVISIONED} "
            f'(static NodePool "{decision.nodepool}" scaled to {decision.replicas} replicas)',
        )
    if queue is not None and requests:
        errors += [f"send termination request {p}" for p in queue.send(requests=requests)]
    stamp = to_rfc3339(now)
    gone = set(removed)
    claims = [_deleting(nc, stamp) if nc.name in gone else nc for nc in nodeclaims]
    return StaticRemoval(removed=removed, claims=claims, errors=errors)


def _deleting(claim: NodeClaim, stamp: str) -> NodeClaim:
    out = claim.model_copy(deep=True)
    out.metadata.deletion_timestamp = out.metadata.deletion_timestamp or stamp
    return out
