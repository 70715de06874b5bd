"""Watch events, list results and subscriptions of the emulator's store."""

from __future__ import annotations

import time
from collections import deque
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Iterator

    from nodesmith.sim.kube.store import Store

__all__ = ["ListResult", "Subscription", "WatchEvent"]


@dataclass(frozen=True, slots=True)
class WatchEvent:
    """One change: ``type`` ADDED, MODIFIED or DELETED of ``resource`` (store key, e.g. ``pods``).

    ``object`` is the new state (for DELETED, the last state with the deletion's version) and
    ``old`` the previous one (None for ADDED). Both are shared snapshots: do not mutate them.
    """

    type: str
    resource: str
    object: dict[str, Any]
    old: dict[str, Any] | None
    resource_version: int


@dataclass(frozen=True, slots=True)
class ListResult:
    """A list call's answer: detached ``items``, the store version and a ``continue_token``."""

    items: list[dict[str, Any]]
    resource_version: int
    continue_token: str = ""


class Subscription:
    """A queue of :class:`WatchEvent` for in-process controllers and HTTP watches.

    Use :meth:`get` (blocking with timeout) or :meth:`drain`; iterate to block until closed.
    Close it (or use ``with``) when done so the store stops feeding it.
    """

    def __init__(self, store: Store, resources: frozenset[str] | None, since: int | None) -> None:
        self._store = store
        self.resources = resources
        self.since = since
        self.queue: deque[WatchEvent] = deque()
        self.closed = False

    def accepts(self, event: WatchEvent) -> bool:
        """True when the event's resource and version are wanted by this subscription."""
        if self.resources is not None and event.resource not in self.resources:
            return False
        return self.since is None or event.resource_version > self.since

    def get(self, timeout: float | None = None) -> WatchEvent | None:
        """The next event, waiting up to ``timeout`` seconds (None: forever); None on timeout or close."""
        cond = self._store.condition
        deadline = None if timeout is None else time.monotonic() + timeout
        with cond:
            while not self.queue:
                if self.closed or self._store.closed:
                    return None
                remaining = None if deadline is None else deadline - time.monotonic()
                if remaining is not None and remaining <= 0:
                    return None
                cond.wait(remaining)
            return self.queue.popleft()

    def idle_version(self) -> int | None:
        """The store's current version when every event owed to this subscription has been taken (a watch may
        then bookmark it), else None."""
        with self._store.condition:
            return None if self.queue else self._store.resource_version

    def drain(self) -> list[WatchEvent]:
        """Every queued event, without waiting."""
        with self._store.condition:
            out = list(self.queue)
            self.queue.clear()
            return out

    def close(self) -> None:
        """Stop receiving events and wake a blocked :meth:`get`."""
        self._store.unsubscribe(self)

    def __iter__(self) -> Iterator[WatchEvent]:
        while (event := self.get()) is not None:
            yield event

    def __enter__(self) -> Subscription:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
