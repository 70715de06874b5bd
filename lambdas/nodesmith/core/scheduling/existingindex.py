"""Existing nodes indexed so a pod reaches only the nodes that may hold it, in the order it tries them.

Karpenter's ``Scheduler.add`` (``[core]:pkg/controllers/provisioning/scheduling/scheduler.go``)
tries every existing node in turn and takes the first whose ``ExistingNode.CanAdd`` accepts the
pod. :class:`ExistingIndex` returns that same node without trying the nodes that certainly refuse:

* nodes are **grouped** by their schedulable taints and by their label requirements on the keys
  pods select on (every non-hostname key of any pod requirement seen so far; a pod selecting on a
  new key regroups). Within a group every node answers alike to the taints and labels of any pod
  seen so far, so a group is tried only when its taints are tolerated and its labels are compatible
  with the pod's requirements;
* within a group, nodes keep their trial order in a **max tree** per resource (remaining cpu
  millicores, memory bytes, pods, ...): a subtree whose largest headroom for some requested resource
  is below the request is skipped whole;
* a pod whose requirements pin ``kubernetes.io/hostname`` to a set of values tries only those hosts.

Groups are merged by trial position, and each surviving candidate still goes through
:meth:`SimExistingNode.can_add` (host ports, topology, the hostname requirement), so the first
accepted node is exactly the one a linear scan over all nodes would accept.
"""

from __future__ import annotations

import heapq
from typing import TYPE_CHECKING

from nodesmith.core.requirements import LABEL_HOSTNAME
from nodesmith.core.scheduling.taints import first_untolerated

if TYPE_CHECKING:
    from collections.abc import Sequence

    from nodesmith.core.model import Pod
    from nodesmith.core.requirement import Requirement
    from nodesmith.core.requirements import Requirements
    from nodesmith.core.scheduling.existing import SimExistingNode
    from nodesmith.core.scheduling.pods import PodData
    from nodesmith.core.scheduling.topology import Topology

__all__ = ["ExistingIndex"]

Demand = list[tuple[str, int]]
"""The positive requests of a pod: ``(resource name, amount)`` (cpu millicores, memory bytes, ...)."""


class _Group:
    """Nodes with the same taints and the same requirements on the selected label keys, in trial order,
    with a max tree of their remaining headroom per resource (missing resources count as 0)."""

    __slots__ = ("_size", "_trees", "members", "nodes", "positions")

    def __init__(self, members: list[tuple[int, SimExistingNode]]) -> None:
        self.positions = [pos for pos, _ in members]
        self.nodes = [node for _, node in members]
        self.members: dict[int, int] = {pos: i for i, pos in enumerate(self.positions)}
        size = 1
        while size < len(self.nodes):
            size *= 2
        self._size = size
        self._trees: dict[str, list[int]] = {}
        for name in sorted({name for node in self.nodes for name in node.remaining}):
            self._build(name)

    def _build(self, name: str) -> None:
        size = self._size
        tree = [0] * (2 * size)
        for i, node in enumerate(self.nodes):
            tree[size + i] = node.remaining.get(name, 0)
        for i in range(size - 1, 0, -1):
            tree[i] = max(tree[2 * i], tree[2 * i + 1])
        self._trees[name] = tree

    @property
    def representative(self) -> SimExistingNode:
        """Any member: all answer alike to the taints and selected labels."""
        return self.nodes[0]

    def refresh(self, member: int) -> None:
        """Re-read one member's remaining headroom after a pod was placed on it."""
        node = self.nodes[member]
        for name in node.remaining:
            if name not in self._trees:
                self._build(name)
        size = self._size
        for name, tree in self._trees.items():
            i = size + member
            tree[i] = node.remaining.get(name, 0)
            i //= 2
            while i:
                tree[i] = max(tree[2 * i], tree[2 * i + 1])
                i //= 2

    def first(self, start: int, demand: Demand) -> int | None:
        """The lowest member index ``>= start`` whose headroom covers ``demand``, else None."""
        trees: list[tuple[list[int], int]] = []
        for name, amount in demand:
            tree = self._trees.get(name)
            if tree is None or tree[1] < amount:
                return None
            trees.append((tree, amount))
        if start >= len(self.nodes):
            return None
        return self._descend(1, 0, self._size, start, trees)

    def _descend(self, at: int, lo: int, hi: int, start: int, trees: list[tuple[list[int], int]]) -> int | None:
        if hi <= start:
            return None
        for tree, amount in trees:
            if tree[at] < amount:
                return None
        if hi - lo == 1:
            return lo if lo < len(self.nodes) else None
        mid = (lo + hi) // 2
        found = self._descend(2 * at, lo, mid, start, trees)
        if found is not None:
            return found
        return self._descend(2 * at + 1, mid, hi, start, trees)


class ExistingIndex:
    """The schedulable existing nodes of a pass, in trial order (``nodes``), indexed by headroom,
    taints and selected labels.

    ``nodes`` must not change during the pass except through :meth:`SimExistingNode.add` followed by
    :meth:`placed`. Pure; raises nothing.
    """

    __slots__ = ("_built", "_compatible", "_group_of", "_groups", "_hosts", "_keys", "_nodes", "_positions")

    def __init__(self, nodes: Sequence[SimExistingNode]) -> None:
        self._nodes = list(nodes)
        self._positions = {id(node): pos for pos, node in enumerate(self._nodes)}
        self._hosts: dict[str, list[int]] = {}
        for pos, node in enumerate(self._nodes):
            self._hosts.setdefault(node.hostname, []).append(pos)
        self._keys: frozenset[str] = frozenset()
        self._groups: list[_Group] = []
        self._group_of: dict[int, _Group] = {}
        self._compatible: dict[int, list[_Group]] = {}
        self._built = False  # groups are built for the first pod that reaches the index

    def __len__(self) -> int:
        return len(self._nodes)

    @property
    def nodes(self) -> Sequence[SimExistingNode]:
        """The nodes in trial order."""
        return self._nodes

    def _regroup(self) -> None:
        keys = sorted(self._keys)
        by_signature: dict[tuple[object, ...], list[tuple[int, SimExistingNode]]] = {}
        for pos, node in enumerate(self._nodes):
            selected: tuple[Requirement | None, ...] = tuple(node.requirements.peek(key) for key in keys)
            by_signature.setdefault((node.taints, selected), []).append((pos, node))
        self._groups = [_Group(members) for members in by_signature.values()]
        self._group_of = {pos: group for group in self._groups for pos in group.positions}
        self._compatible.clear()
        self._built = True

    def _groups_for(self, data: PodData) -> list[_Group]:
        """The groups whose taints the pod tolerates and whose selected labels its requirements accept."""
        hit = self._compatible.get(id(data))
        if hit is not None:
            return hit
        keys = frozenset(key for key in data.requirements if key != LABEL_HOSTNAME)
        if not self._built or not keys <= self._keys:
            self._keys |= keys
            self._regroup()
        wanted = data.requirements.without(LABEL_HOSTNAME)
        found = [
            group
            for group in self._groups
            if first_untolerated(group.representative.taints, data.tolerations) is None
            and group.representative.requirements.compatible(wanted) is None
        ]
        self._compatible[id(data)] = found
        return found

    def first_fit(self, pod: Pod, data: PodData, topology: Topology) -> tuple[SimExistingNode, Requirements] | None:
        """The first node in trial order that accepts the pod, with the requirements
        :meth:`SimExistingNode.can_add` narrowed for it; None when no node does.

        Equal to the first node of ``nodes`` whose ``can_add`` is not None (nodes skipped here are
        refused there by headroom, taints or labels).
        """
        demand: Demand = [(name, amount) for name, amount in data.requests.items() if amount > 0]
        host = data.requirements.peek(LABEL_HOSTNAME)
        if host is not None and not host.complement:
            positions = sorted(pos for value in host.values for pos in self._hosts.get(value, ()))
            for pos in positions:
                node = self._nodes[pos]
                reqs = node.can_add(pod, data, topology)
                if reqs is not None:
                    return node, reqs
            return None
        heap: list[tuple[int, int, int]] = []
        groups = self._groups_for(data)
        for g, group in enumerate(groups):
            member = group.first(0, demand)
            if member is not None:
                heap.append((group.positions[member], member, g))
        heapq.heapify(heap)
        while heap:
            pos, member, g = heapq.heappop(heap)
            node = self._nodes[pos]
            reqs = node.can_add(pod, data, topology)
            if reqs is not None:
                return node, reqs
            group = groups[g]
            member_next = group.first(member + 1, demand)
            if member_next is not None:
                heapq.heappush(heap, (group.positions[member_next], member_next, g))
        return None

    def placed(self, node: SimExistingNode) -> None:
        """Take the node's new headroom into account after :meth:`SimExistingNode.add` placed a pod on it."""
        if not self._built:
            return  # the groups, built later, read the headroom then
        pos = self._positions[id(node)]
        group = self._group_of[pos]
        group.refresh(group.members[pos])
