"""The NodeClaims planned in a pass, kept in the order pods try them: fewest pods first, then oldest.

Karpenter sorts its new NodeClaims by pod count before every pod (``scheduler.go add``); here the
order is maintained incrementally, overall and per pinned zone, so a pod that may only use some
zones (topology) or some hostnames (hostname anti-affinity) walks only those NodeClaims.
"""

from __future__ import annotations

import bisect
import heapq
from typing import TYPE_CHECKING

from nodesmith.core.requirements import LABEL_ZONE

if TYPE_CHECKING:
    from collections.abc import Collection, Iterable

    from nodesmith.core.scheduling.nodeclaim import SimNodeClaim
    from nodesmith.core.scheduling.topology import TopologyGroup

__all__ = ["ClaimIndex", "Entry"]

Entry = tuple[int, int, "SimNodeClaim"]
"""``(pod count, creation sequence, NodeClaim)``; the first two are unique together."""


class ClaimIndex:
    """Planned NodeClaims by load, with per-zone and per-hostname views."""

    __slots__ = ("_all", "_by_host", "_by_zone")

    def __init__(self) -> None:
        self._all: list[Entry] = []
        self._by_zone: dict[str | None, list[Entry]] = {}
        self._by_host: dict[str, SimNodeClaim] = {}

    def __len__(self) -> int:
        return len(self._all)

    @staticmethod
    def entry(nc: SimNodeClaim) -> Entry:
        """The index entry of ``nc`` for its current pod count."""
        return (len(nc.pods), nc.seq, nc)

    def add(self, nc: SimNodeClaim) -> None:
        """Index a NodeClaim that just received its first pod."""
        entry = self.entry(nc)
        # Entries compare as tuples; (pod count, sequence) is unique, so the NodeClaim is never compared.
        bisect.insort(self._all, entry)
        bisect.insort(self._by_zone.setdefault(nc.single(LABEL_ZONE), []), entry)
        self._by_host[nc.hostname] = nc

    def remove(self, entry: Entry, zone: str | None) -> None:
        """Drop ``entry`` (as it was indexed, under ``zone``) before the NodeClaim changes."""
        for items in (self._all, self._by_zone[zone]):
            del items[bisect.bisect_left(items, entry[:2])]

    def ordered(self) -> list[Entry]:
        """Every planned NodeClaim, fewest pods first."""
        return self._all

    def in_zones(self, zones: Collection[str]) -> Iterable[Entry]:
        """NodeClaims pinned to one of ``zones`` or not pinned to a zone, fewest pods first (lazy)."""
        lists = [self._by_zone[z] for z in sorted(zones) if z in self._by_zone]
        if None in self._by_zone:
            lists.append(self._by_zone[None])
        return heapq.merge(*lists)

    def on_free_hosts(self, groups: Collection[TopologyGroup]) -> list[Entry] | None:
        """NodeClaims whose hostname has no pod of any of ``groups`` (hostname anti-affinity), fewest
        pods first; None when that would not narrow the walk.
        """
        free = min((tg.empty for tg in groups), key=len)
        if len(free) >= len(self._all):
            return None
        picked = [
            self.entry(nc)
            for host in free
            if (nc := self._by_host.get(host)) is not None and all(host in tg.empty for tg in groups)
        ]
        picked.sort()
        return picked
