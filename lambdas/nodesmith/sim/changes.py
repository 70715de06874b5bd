"""What a simulated component's informer would report: the store's events since its last step, or "resync".

Real controllers and kube-scheduler act on what their informers report changed and look at everything
again only at a periodic resync. :class:`ChangeFeed` gives a simulated component the same two cases from
the emulator's store: the events since the previous call, or None when the component must read everything
(its first step, and every ``resync_seconds``).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Sequence

    from nodesmith.sim.kube.store import Store, Subscription, WatchEvent

__all__ = ["RESYNC_SECONDS", "ChangeFeed"]

RESYNC_SECONDS = 10.0
"""Every object is looked at again at least this often (seconds), changed or not (an informer's resync)."""


class ChangeFeed:
    """The store's events on ``resources`` since the last :meth:`since_last` call, or None for a full read.

    ``resync_seconds`` (0: always a full read) is how often a full read is asked for. The subscription is
    opened on the first call, before the caller's full read, so no write falls between the two (a write
    seen by both is applied again, which the callers' updates tolerate: the latest state wins).
    """

    def __init__(self, store: Store, resources: Sequence[str], *, resync_seconds: float = RESYNC_SECONDS) -> None:
        self.store = store
        self.resources = list(resources)
        self.resync_seconds = resync_seconds
        self._subscription: Subscription | None = None
        self._synced_at = -math.inf

    def since_last(self, now: float) -> list[WatchEvent] | None:
        """The events since the last call (oldest first), or None when everything must be read as of ``now``
        (epoch seconds): on the first call and once ``resync_seconds`` have passed since the last full read."""
        if self._subscription is None:
            self._subscription = self.store.subscribe(resources=self.resources)
            events = None
        else:
            events = self._subscription.drain()
        if events is not None and 0 <= now - self._synced_at < self.resync_seconds:
            return events
        self._synced_at = now
        return None
