"""Parse each emulator snapshot once: a cache of parsed objects keyed by the snapshot's identity.

The emulator's store hands out shared snapshots (``Store.objects``) that are replaced, never
mutated, on every write; so a snapshot parsed once (a :class:`~nodesmith.core.model.Pod` or
:class:`~nodesmith.core.model.Node`) stays valid as long as the store returns that same dict.
The simulated scheduler re-reads every pod and node on each step; parsing them afresh each time
costs in proportion to the cluster. Only snapshots written since the last step are parsed again.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Generic, TypeVar

if TYPE_CHECKING:
    from collections.abc import Callable

__all__ = ["ParseCache"]

T = TypeVar("T")


class ParseCache(Generic[T]):
    """``parse(obj)`` for store snapshots, memoised by ``id(obj)`` for one step at a time.

    ``parse`` may raise; its exception propagates and nothing is cached for that snapshot.
    Call :meth:`sweep` once per step: entries not used since the previous sweep are dropped (the
    cache holds a reference to each snapshot it keys, so an id is never reused while cached).
    """

    def __init__(self, parse: Callable[[dict[str, Any]], T]) -> None:
        self._parse = parse
        self._entries: dict[int, tuple[dict[str, Any], T]] = {}
        self._used: dict[int, tuple[dict[str, Any], T]] = {}

    def __call__(self, obj: dict[str, Any]) -> T:
        """The parsed ``obj``; parsed now if this snapshot was not seen at the previous step."""
        key = id(obj)
        entry = self._used.get(key) or self._entries.get(key)
        if entry is None or entry[0] is not obj:
            entry = (obj, self._parse(obj))
        self._used[key] = entry
        return entry[1]

    def sweep(self) -> None:
        """Keep only the snapshots used since the last sweep."""
        self._entries, self._used = self._used, {}
