"""What a long-lived caller keeps of the decision passes between them, so a pass costs what changed.

:class:`NodeMemo` holds, per :class:`~.types.ClusterNode` view object, the node's :class:`~.candidates.NodeBasis`
and its drift verdict. Pure: no clock, no I/O; the caller owns the memo (a warm Lambda container keeps it with its
consolidation state, :class:`~nodesmith.services.disruption.consolidated.Consolidated`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, TypeVar, cast

from nodesmith.core.disruption.candidates import node_basis

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable

    from nodesmith.core.disruption.candidates import NodeBasis
    from nodesmith.core.disruption.types import ClusterNode

__all__ = ["NodeMemo"]

T = TypeVar("T")


class NodeMemo:
    """Per-node derivations a long-lived caller (a warm Lambda container, watch mode) keeps between decision passes,
    so a pass costs what changed rather than the cluster's size.

    Entries are keyed by the identity of the :class:`~.types.ClusterNode` (and, for drift, by the value of what
    else it was judged against): callers that hand the same, unchanged view object again (frozen, so unchanged
    means same node, pods and NodeClaim) get the result computed before; any new view (a pod bound or gone, the
    Node or NodeClaim written) is computed afresh. Nothing time-dependent is kept: ``now`` is applied every pass.
    Karpenter keeps its cluster state between reconciles the same way (``[core]:pkg/controllers/state/cluster.go``).
    ``computed`` counts the bases worked out (not reused) since creation; :meth:`retain` forgets nodes gone.
    """

    def __init__(self) -> None:
        self._bases: dict[int, tuple[ClusterNode, NodeBasis]] = {}
        self._drifts: dict[int, tuple[ClusterNode, object, Any]] = {}
        self.computed = 0

    def basis(self, cn: ClusterNode) -> NodeBasis:
        """The :class:`NodeBasis` of ``cn``, computed once per view object."""
        hit = self._bases.get(id(cn))
        if hit is not None and hit[0] is cn:
            return hit[1]
        basis = node_basis(cn)
        self._bases[id(cn)] = (cn, basis)
        self.computed += 1
        return basis

    def judged(self, cn: ClusterNode, key: object, compute: Callable[[], T]) -> T:
        """``compute()`` for ``cn`` judged against ``key`` (everything else it reads, compared by value), reused
        while ``cn`` is the same view and ``key`` is equal."""
        hit = self._drifts.get(id(cn))
        if hit is not None and hit[0] is cn and hit[1] == key:
            return cast("T", hit[2])
        value = compute()
        self._drifts[id(cn)] = (cn, key, value)
        return value

    def retain(self, nodes: Iterable[ClusterNode]) -> None:
        """Forget every entry but those of ``nodes`` (the views of the pass just decided)."""
        keep = {id(cn) for cn in nodes}
        self._bases = {k: v for k, v in self._bases.items() if k in keep}
        self._drifts = {k: v for k, v in self._drifts.items() if k in keep}
