"""Parse each version of an API object once: parsed pods and Nodes reused while their ``resourceVersion`` stands.

The API server gives every write of an object a new ``metadata.resourceVersion``, so an object listed again
with the same uid and version is the same object, and its parse (an immutable
:class:`~nodesmith.core.model.Pod` or :class:`~nodesmith.core.model.Node`) is still right. A reconcile pass
lists every pod, Node and NodeClaim, most of them unchanged since the pass before, so a warm container keeps
the cache between invocations and parses only what changed. Mutable parses (pydantic models such as
NodeClaim) are not cached.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any, Generic, TypeVar

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

__all__ = ["MAX_PARSED", "ParsedObjects"]

T = TypeVar("T")

MAX_PARSED = 250_000
"""Parsed objects kept at most per kind (a full list also drops the ones no longer listed): the pods of a
cluster of 20,000 nodes at 10 pods each, with room to spare. Past it, new objects are parsed without being kept,
so a larger cluster still reuses the parses it holds instead of starting over at every list."""


class ParsedObjects(Generic[T]):
    """``parse(item)`` of API objects, memoised by ``(metadata.uid, metadata.resourceVersion)``.

    ``parse`` must return an immutable value that depends on the item alone; its exceptions propagate and
    nothing is cached for the item. An item without a uid or version is parsed every time. Thread-safe.
    """

    def __init__(self, parse: Callable[[Mapping[str, Any]], T], *, limit: int = MAX_PARSED) -> None:
        self._parse = parse
        self._limit = limit
        self._entries: dict[str, tuple[str, T]] = {}
        self._lock = threading.Lock()
        self.parsed = 0
        """How many items were parsed (cache misses), for tests and measurements."""

    def __call__(self, item: Mapping[str, Any]) -> T:
        """The parse of ``item``: the cached one when this uid was parsed at this ``resourceVersion``."""
        meta = item.get("metadata") or {}
        uid, version = meta.get("uid"), meta.get("resourceVersion")
        if not uid or not version:
            self.parsed += 1
            return self._parse(item)
        hit = self._entries.get(uid)
        if hit is not None and hit[0] == version:
            return hit[1]
        value = self._parse(item)
        with self._lock:
            self.parsed += 1
            if uid in self._entries or len(self._entries) < self._limit:
                self._entries[uid] = (version, value)
        return value

    def keep_only(self, items: list[dict[str, Any]]) -> None:
        """Drop the objects not among ``items`` (a complete list of the kind): deleted ones go."""
        listed = {(i.get("metadata") or {}).get("uid") for i in items}
        with self._lock:
            self._entries = {uid: entry for uid, entry in self._entries.items() if uid in listed}

    def clear(self) -> None:
        """Drop every parse kept."""
        with self._lock:
            self._entries = {}

    def __len__(self) -> int:
        return len(self._entries)
