"""Merge calls made at about the same time from several threads into one batched call.

Karpenter sends EC2 ``TerminateInstances`` through a batcher ([aws]:``pkg/batcher/terminateinstances.go``:
requests are collected until none has come for 100 ms, for at most 1 s, at most 500 ids, then sent as
one call, and every caller gets its own instance's answer: after a failed call each is tried alone, since
one instance's failure can fail the whole call). A batch of interruption messages removes its nodes
from parallel drain threads that finish within moments of each other; one call for all of them
instead of one per node spares EC2's mutating-call rate limit in a burst (1,000 removals were 1,086
``TerminateInstances`` calls at 1,000 interrupted nodes).
"""

from __future__ import annotations

import copy
import threading
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Generic, TypeVar

if TYPE_CHECKING:
    from collections.abc import Callable, Hashable, Mapping

__all__ = ["IDLE_SECONDS", "MAX_ITEMS", "MAX_SECONDS", "Batcher"]

IDLE_SECONDS = 0.1
"""A batch is sent once no item has been added for this long (seconds; Karpenter's ``IdleTimeout``)."""
MAX_SECONDS = 1.0
"""... or once it has been open this long (seconds; Karpenter's ``MaxTimeout``)."""
MAX_ITEMS = 500
"""... or once it holds this many items (Karpenter's ``MaxItems`` for TerminateInstances)."""

T = TypeVar("T", bound="Hashable")


@dataclass(slots=True)
class _Batch(Generic[T]):
    opened: float
    last: float
    items: list[T] = field(default_factory=list)
    done: threading.Event = field(default_factory=threading.Event)
    error: BaseException | None = None
    failed: dict[T, BaseException] = field(default_factory=dict)


class Batcher(Generic[T]):
    """Collect the items :meth:`submit` is called with, from any thread, and pass each batch to ``send``.

    The first item of a batch makes its caller the batch's sender: it waits until no item has come for
    ``idle_seconds``, the batch has been open ``max_seconds``, or it holds ``max_items``, then calls
    ``send(items)`` (items in the order they came) while the next items start a new batch. ``send`` returns
    the items that failed, each with its error (None or empty: none did). Every caller of :meth:`submit`
    returns when its batch's ``send`` has returned, or raises a copy of its item's error, or of what
    ``send`` raised. Times are seconds of ``clock`` (monotonic). Thread-safe. Raises ``ValueError`` when
    ``max_items`` is below 1.
    """

    def __init__(
        self,
        send: Callable[[list[T]], Mapping[T, BaseException] | None],
        *,
        idle_seconds: float = IDLE_SECONDS,
        max_seconds: float = MAX_SECONDS,
        max_items: int = MAX_ITEMS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if max_items < 1:
            raise ValueError(f"max_items must be at least 1, not {max_items}")
        self._send = send
        self._idle = idle_seconds
        self._max = max_seconds
        self._max_items = max_items
        self._clock = clock
        self._cond = threading.Condition()
        self._open: _Batch[T] | None = None

    def submit(self, item: T) -> None:
        """Add ``item`` to the open batch (opening one if none is) and return once that batch is sent.

        Raises a copy (caused by the original) of the error ``send`` reported for ``item``, or of the
        exception it raised for the whole batch.
        """
        with self._cond:
            now = self._clock()
            batch = self._open
            sender = batch is None
            if batch is None:
                batch = self._open = _Batch(opened=now, last=now)
            batch.items.append(item)
            batch.last = now
            if len(batch.items) >= self._max_items:
                self._open = None  # full: the next item opens a new batch
            self._cond.notify_all()
        if sender:
            self._wait_and_send(batch)
        else:
            batch.done.wait()
        error = batch.error if batch.error is not None else batch.failed.get(item)
        if error is not None:
            raise copy.copy(error) from error

    def _wait_and_send(self, batch: _Batch[T]) -> None:
        with self._cond:
            while len(batch.items) < self._max_items:
                now = self._clock()
                until = min(batch.last + self._idle, batch.opened + self._max)
                if now >= until:
                    break
                self._cond.wait(timeout=until - now)
            if self._open is batch:
                self._open = None
            items = list(batch.items)
        try:
            batch.failed = dict(self._send(items) or {})
        except BaseException as exc:  # every caller of the batch hears it, the sender included
            batch.error = exc
        finally:
            batch.done.set()
