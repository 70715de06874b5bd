"""Expiration: NodeClaims older than ``expireAfter`` are deleted — forcefully, not budgeted.

In Karpenter v1 expiration is not a disruption method: ``[core]:pkg/controllers/nodeclaim/
expiration/controller.go`` deletes the NodeClaim once ``creationTimestamp + expireAfter`` has
passed, without consulting budgets, do-not-disrupt or PodDisruptionBudgets at decision time and
without pre-spinning a replacement (the drain still honours them until ``terminationGracePeriod``,
and the evicted pods are provisioned for as usual). ``expireAfter`` is the NodeClaim's
``spec.expireAfter`` (copied from the NodePool template at launch), or the NodePool's when the
NodeClaim is unknown; ``Never`` disables it. A node whose age is unknown never expires here.

Times are epoch seconds.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from nodesmith.core.disruption.candidates import expire_after_of, node_basis, node_facts
from nodesmith.core.disruption.types import METHOD_EXPIRATION, Decision
from nodesmith.core.labels import LABEL_NODEPOOL

if TYPE_CHECKING:
    from collections.abc import Collection, Sequence

    from nodesmith.core.api.nodepool import NodePool
    from nodesmith.core.disruption.memo import NodeMemo
    from nodesmith.core.disruption.types import ClusterNode
    from nodesmith.core.model import InstanceType

__all__ = ["Expiry", "expiration_decisions", "expired_nodes"]


@dataclass(frozen=True, slots=True)
class Expiry:
    """A node past its ``expireAfter``: created at ``created``, expired at ``expired_at`` (epoch s)."""

    node: str
    nodepool: str
    created: float
    expire_after: float
    expired_at: float
    price: float


def expired_nodes(
    *,
    nodes: Sequence[ClusterNode],
    nodepools: Sequence[NodePool],
    instance_types: Sequence[InstanceType] = (),
    now: float,
    deleting: Collection[str] = (),
    memo: NodeMemo | None = None,
) -> list[Expiry]:
    """Managed nodes (NodePool label naming an existing NodePool) whose ``created + expireAfter <= now``,
    not already deleting, sorted by expiry time then name. ``memo`` supplies each node's
    :class:`~.candidates.NodeBasis` when the caller keeps one."""
    pools = {p.name: p for p in nodepools}
    catalogue = {it.name: it for it in instance_types}
    out: list[Expiry] = []
    for cn in nodes:
        basis = memo.basis(cn) if memo is not None else node_basis(cn)
        pool_name = basis.labels.get(LABEL_NODEPOOL)
        if pool_name is None or basis.deleting or cn.name in deleting or basis.created is None:
            continue
        pool = pools.get(pool_name)
        if pool is None and cn.nodeclaim is None:
            continue
        ttl = expire_after_of(cn, pool)
        if ttl is None:
            continue
        at = basis.created + ttl
        if at <= now:
            facts = node_facts(cn, catalogue=catalogue, deleting=deleting, basis=basis)  # its price
            out.append(
                Expiry(
                    node=facts.name,
                    nodepool=pool_name,
                    created=basis.created,
                    expire_after=ttl,
                    expired_at=at,
                    price=facts.price,
                )
            )
    out.sort(key=lambda e: (e.expired_at, e.node))
    return out


def expiration_decisions(
    expiries: Sequence[Expiry], *, pods_by_node: dict[str, tuple[str, ...]] | None = None
) -> list[Decision]:
    """One ``expiration`` :class:`Decision` per expired node (no replacement; cost unchanged)."""
    out: list[Decision] = []
    for e in expiries:
        hours = e.expire_after / 3600
        out.append(
            Decision(
                method=METHOD_EXPIRATION,
                nodes=(e.node,),
                cause="Expired",
                reason=(
                    f"node {e.node} reached expireAfter ({hours:g}h since creation); deleted without budgets, "
                    "its pods are provisioned for again"
                ),
                nodepools=(e.nodepool,),
                cost_before=e.price,
                cost_after=e.price,
                pods=(pods_by_node or {}).get(e.node, ()),
            )
        )
    return out
