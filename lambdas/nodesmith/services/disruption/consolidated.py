"""The consolidation state a warm container remembers between passes, so an unchanged cluster is not simulated
again every pass.

Karpenter's consolidation (``[core]:pkg/controllers/disruption/consolidation.go``, ``IsConsolidated``) records the
cluster's consolidation state when it finds nothing to do and skips single- and multi-node consolidation until
that state changes: the cluster state marks itself unconsolidated on every pod binding, Node or NodeClaim change
and, so that what it cannot see (an instance type becoming available, prices) is looked at again, at least every
five minutes (``[core]:pkg/controllers/state/cluster.go``, ``ConsolidationState``). Here the state is a
fingerprint of what consolidation reads (:func:`cluster_state`) plus, in the core, the candidates eligible now and
their budgets (:func:`~nodesmith.core.disruption.decide.consolidation_key`); :class:`Consolidated` is the memory a
warm Lambda container keeps (an invocation that starts cold computes consolidation again).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from nodesmith.core.disruption.memo import NodeMemo
from nodesmith.core.labels import LABEL_NODEPOOL

if TYPE_CHECKING:
    from collections.abc import Iterable, Sequence

    from nodesmith.core.api.nodeclaim import NodeClaim
    from nodesmith.core.api.nodepool import NodePool
    from nodesmith.core.disruption import ClusterNode
    from nodesmith.core.disruption.decide import DisruptionPlan
    from nodesmith.core.model import DaemonSet, Pod, PodDisruptionBudget

__all__ = ["CONSOLIDATION_STATE_TTL_SECONDS", "Consolidated", "StateParts", "cluster_state"]

CONSOLIDATION_STATE_TTL_SECONDS = 300.0
"""Karpenter's five minutes: a state older than this is computed again even when nothing changed (seconds)."""


@dataclass(slots=True)
class StateParts:
    """What :func:`cluster_state` keeps between calls: ``views``, each node's view (by name) with its part, reused
    while the same view object is handed again; ``claims``, each NodeClaim's part (by name) with the uid and
    ``resourceVersion`` it was read at, reused while both are the same (the API server changes the version with
    every write)."""

    views: dict[str, tuple[ClusterNode, bytes]] = field(default_factory=dict)
    claims: dict[str, tuple[str, str, str]] = field(default_factory=dict)


@dataclass(slots=True)
class Consolidated:
    """The consolidation state (a key, :attr:`DisruptionPlan.consolidation_state`) the last pass found no
    consolidation command in, and when (epoch seconds); empty when there is none.

    With it, what the passes derive from each node and keep while the node does not change: ``views``, the
    last pass's :class:`~nodesmith.core.disruption.ClusterNode` views by node name
    (:func:`~nodesmith.services.disruption.state.cluster_nodes` hands an unchanged node's view back),
    ``nodes``, the core's per-view bases and drift (:class:`~nodesmith.core.disruption.memo.NodeMemo`), and
    ``digests``, each view's and NodeClaim's part of :func:`cluster_state` (:class:`StateParts`). None of it
    changes a decision."""

    state: str = ""
    since: float = 0.0
    views: dict[str, ClusterNode] = field(default_factory=dict)
    nodes: NodeMemo = field(default_factory=NodeMemo)
    digests: StateParts = field(default_factory=StateParts)

    def current(self, *, now: float) -> str:
        """The remembered state while it is younger than :data:`CONSOLIDATION_STATE_TTL_SECONDS`, else ""."""
        if self.state and 0.0 <= now - self.since < CONSOLIDATION_STATE_TTL_SECONDS:
            return self.state
        return ""

    def record(self, plan: DisruptionPlan, *, now: float) -> None:
        """Remember ``plan``'s state when its consolidation was computed and found nothing; forget it when the pass
        found a command (the next pass must compute it again to validate it). A skipped pass keeps the state."""
        if plan.consolidation_skipped:
            return
        if plan.command is None and plan.consolidation_state:
            self.state, self.since = plan.consolidation_state, now
        else:
            self.state, self.since = "", 0.0


def _pods(pods: Iterable[Pod]) -> Iterable[str]:
    for p in pods:
        yield f"{p.uid or p.key}@{p.node_name or ''}:{p.phase}:{p.deletion_timestamp or ''}"


def _claim(nc: NodeClaim) -> str:
    """What consolidation reads of a NodeClaim: its NodePool, whether it is deleting, its instance and node, its
    conditions (type, status, reason, message: a disruption command's record) and ``lastPodEventTime``. Not its
    ``resourceVersion`` nor its other labels: a write consolidation does not read (the labels a launch adds)
    changes nothing."""
    status = nc.status
    conditions = sorted((c.type, c.status, c.reason or "", c.message or "") for c in status.conditions)
    return repr(
        (nc.name, nc.metadata.labels.get(LABEL_NODEPOOL), nc.metadata.deletion_timestamp is not None,
         status.provider_id, status.node_name, conditions, status.last_pod_event_time)
    )  # fmt: skip


def cluster_state(
    *,
    views: Sequence[ClusterNode],
    pending: Sequence[Pod],
    nodeclaims: Iterable[NodeClaim],
    nodepools: Sequence[NodePool],
    pdbs: Sequence[PodDisruptionBudget],
    daemonsets: Sequence[DaemonSet],
    deleting: Iterable[str],
    digests: StateParts | None = None,
) -> str:
    """A fingerprint (hex digest) of what consolidation reads: each node (labels, taints, allocatable, whether it
    is schedulable, ready or deleting) with its pods, the pending pods, the NodeClaims (:func:`_claim`),
    the NodePools' specs, the PodDisruptionBudgets' allowed disruptions, the DaemonSets and the nodes going away.
    Any change to one of them (a pod bound or gone, a node labelled, a NodeClaim written) changes it.
    ``digests`` (:class:`StateParts`) keeps each view's and NodeClaim's part between calls: a view handed again (the
    same object), or a NodeClaim at the same uid and version, is not read again; it is left holding these parts."""
    digest = hashlib.sha256()
    fresh: dict[str, tuple[ClusterNode, bytes]] = {}
    for view in sorted(views, key=lambda v: v.name):
        kept = digests.views.get(view.name) if digests is not None else None
        part = kept[1] if kept is not None and kept[0] is view else _view_part(view)
        fresh[view.name] = (view, part)
        digest.update(part)
    digest.update(("pending:" + ",".join(sorted(_pods(pending)))).encode())
    claims = _claim_parts(nodeclaims, digests.claims if digests is not None else None)
    digest.update(("claims:" + ",".join(sorted(claims))).encode())
    for pool in sorted(nodepools, key=lambda p: p.name):
        digest.update(pool.spec.model_dump_json(by_alias=True, exclude_none=True).encode())
    digest.update(repr(sorted((b.namespace, b.name, b.disruptions_allowed) for b in pdbs)).encode())
    digest.update(repr(sorted(d.name for d in daemonsets)).encode())
    digest.update(("deleting:" + ",".join(sorted(deleting))).encode())
    if digests is not None:
        digests.views = fresh
    return digest.hexdigest()


def _claim_parts(nodeclaims: Iterable[NodeClaim], kept: dict[str, tuple[str, str, str]] | None) -> list[str]:
    """Each NodeClaim's :func:`_claim`, reused from ``kept`` (name -> uid, version, part) for a NodeClaim at the same
    uid and non-empty ``resourceVersion``; ``kept`` is left holding these NodeClaims' parts."""
    out: list[str] = []
    fresh: dict[str, tuple[str, str, str]] = {}
    for nc in nodeclaims:
        uid, version = nc.metadata.uid or "", nc.metadata.resource_version or ""
        held = kept.get(nc.name) if kept is not None and version else None
        part = held[2] if held is not None and held[0] == uid and held[1] == version else _claim(nc)
        fresh[nc.name] = (uid, version, part)
        out.append(part)
    if kept is not None:
        kept.clear()
        kept.update(fresh)
    return out


def _view_part(view: ClusterNode) -> bytes:
    """What :func:`cluster_state` reads of one node and its pods."""
    node = view.node
    shape = (node.name, node.provider_id, sorted(node.labels.items()), node.taints,
             sorted(node.allocatable.items()), node.unschedulable, node.ready, node.deletion_timestamp)  # fmt: skip
    return repr(shape).encode() + ",".join(sorted(_pods(view.pods))).encode()
