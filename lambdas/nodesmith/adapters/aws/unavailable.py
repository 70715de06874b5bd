"""Karpenter's unavailable-offerings cache (``pkg/cache/unavailableofferings.go``), in memory: a (type,
zone, capacity type) that hit a capacity error, or a spot offering that was interrupted, is unavailable
for :data:`UNAVAILABLE_OFFERINGS_TTL_SECONDS`, so the next scheduling pass plans around it. The shared
layer in the DynamoDB state table is :mod:`nodesmith.adapters.aws.unavailable_shared`.
"""

from __future__ import annotations

import logging
import threading
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Callable, Collection

__all__ = ["UNAVAILABLE_OFFERINGS_TTL_SECONDS", "UnavailableOfferings"]

LOG = logging.getLogger(__name__)

UNAVAILABLE_OFFERINGS_TTL_SECONDS = 180.0
"""Karpenter ``UnavailableOfferingsTTL``: 3 minutes."""


class UnavailableOfferings:
    """In-memory (type, zone, capacity type) -> expiry cache; ``clock`` returns seconds (monotonic)."""

    def __init__(self, *, ttl_seconds: float = UNAVAILABLE_OFFERINGS_TTL_SECONDS, clock: Callable[[], float]) -> None:
        self._ttl = ttl_seconds
        self._clock = clock
        self._lock = threading.Lock()
        self._until: dict[tuple[str, str, str], float] = {}
        self._capacity_types: dict[str, float] = {}

    def mark(self, *, instance_type: str, zone: str, capacity_type: str, reason: str = "") -> None:
        """Make the offering unavailable for the TTL (``reason`` is the EC2 error code, logged)."""
        with self._lock:
            self._until[(instance_type, zone, capacity_type)] = self._clock() + self._ttl
        LOG.info("offering %s/%s/%s unavailable for %.0fs: %s", instance_type, zone, capacity_type, self._ttl, reason)

    def merge(self, *, instance_type: str, zone: str, capacity_type: str, seconds: float) -> None:
        """Make the offering unavailable for ``seconds`` more unless already marked longer (no log line)."""
        if seconds <= 0:
            return
        key = (instance_type, zone, capacity_type)
        with self._lock:
            until = self._clock() + seconds
            if self._until.get(key, float("-inf")) < until:
                self._until[key] = until

    def mark_capacity_type(self, *, capacity_type: str, reason: str = "") -> None:
        """Make a whole capacity type unavailable (spot without its service-linked role)."""
        with self._lock:
            self._capacity_types[capacity_type] = self._clock() + self._ttl
        LOG.warning("capacity type %s unavailable for %.0fs: %s", capacity_type, self._ttl, reason)

    def is_unavailable(self, instance_type: str, zone: str, capacity_type: str) -> bool:
        """True while the offering (or its whole capacity type) is marked."""
        now = self._clock()
        return (
            self._until.get((instance_type, zone, capacity_type), float("-inf")) > now
            or self._capacity_types.get(capacity_type, float("-inf")) > now
        )

    def keys(self, *, universe: Collection[tuple[str, str, str]] = ()) -> frozenset[tuple[str, str, str]]:
        """The offerings marked now (plus ``universe`` entries of a marked capacity type); drops expired ones."""
        now = self._clock()
        with self._lock:
            self._until = {k: v for k, v in self._until.items() if v > now}
            self._capacity_types = {k: v for k, v in self._capacity_types.items() if v > now}
            marked = set(self._until)
            if self._capacity_types:
                marked.update(k for k in universe if k[2] in self._capacity_types)
            return frozenset(marked)
