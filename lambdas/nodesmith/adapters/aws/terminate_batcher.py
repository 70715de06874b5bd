"""TerminateInstances calls made at about the same time go to EC2 as one request.

Karpenter's AWS provider batches its ``TerminateInstances`` calls (``[aws]:pkg/batcher/terminateinstances.go``): a
call waits until no other arrived for 100 ms (at most 1 s after the first, at most 500 instances), then one request
carries them all. EC2 rate-limits its mutating actions per account, so a burst of terminations (a termination
function's records, a spot interruption wave) costs one request per batch rather than one per instance.
:class:`TerminateBatcher` does the same for the threads of one Lambda container.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from nodesmith.core.errors import LaunchError, TerminationError

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

__all__ = ["BatchWindow", "TerminateBatcher"]


@dataclass(frozen=True, slots=True)
class BatchWindow:
    """When a batch goes: ``idle_seconds`` after its last call, ``max_seconds`` after its first, or at
    ``max_items`` instance ids, whichever comes first (Karpenter's terminate batcher: 0.1 s, 1 s, 500)."""

    idle_seconds: float = 0.1
    max_seconds: float = 1.0
    max_items: int = 500


@dataclass(slots=True)
class _Batch:
    """The ids gathered so far, when the first and the last call came (monotonic seconds), and the outcome."""

    first: float
    last: float
    ids: list[str] = field(default_factory=list)
    done: threading.Event = field(default_factory=threading.Event)
    error: BaseException | None = None


class TerminateBatcher:
    """Gathers concurrent :meth:`terminate` calls into one call of ``send`` (ids -> None; raises
    :class:`~nodesmith.core.errors.TerminationError` naming the ids EC2 refused, or another error for the whole
    request). The first call of a batch waits out the :class:`BatchWindow` and sends it; the others wait for it.
    ``clock`` (monotonic seconds) and ``sleep`` are injectable for tests. Thread-safe.
    """

    def __init__(
        self,
        *,
        send: Callable[[Sequence[str]], object],
        window: BatchWindow | None = None,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self._send, self._window, self._clock, self._sleep = send, window or BatchWindow(), clock, sleep
        self._lock = threading.Lock()
        self._open: _Batch | None = None

    def terminate(self, instance_ids: Sequence[str]) -> None:
        """Terminate ``instance_ids`` in the batch being gathered; returns when that batch was sent.

        Raises what ``send`` raised for the batch: a ``TerminationError`` only when some of *these* ids were
        refused (it then names just them), any other error as it is (the request failed for every id); a
        ``LaunchError`` when the call that was to send the batch was stopped before it did.
        """
        ids = [i for i in instance_ids if i]
        if not ids:
            return
        batch, leader = self._join(ids)
        if leader:
            self._wait_out(batch)
            try:
                self._send(list(dict.fromkeys(batch.ids)))
            except Exception as exc:  # handed to every caller of the batch
                batch.error = exc
            except BaseException:  # this caller was stopped (its invocation ended): the others try again
                batch.error = LaunchError("TerminateInstances was not sent: the call gathering it was stopped")
                raise
            finally:
                batch.done.set()
        else:
            batch.done.wait()
        self._raise_for(ids, batch.error)

    def _join(self, ids: list[str]) -> tuple[_Batch, bool]:
        """The open batch ``ids`` joined (a new one when none is open or it is full) and whether this call leads it."""
        with self._lock:
            now, batch = self._clock(), self._open
            leader = batch is None or len(batch.ids) + len(ids) > self._window.max_items
            if leader:
                batch = self._open = _Batch(first=now, last=now)
            assert batch is not None
            batch.ids.extend(ids)
            batch.last = now
            return batch, leader

    def _wait_out(self, batch: _Batch) -> None:
        """Sleep until ``batch``'s window closes, then close it to new calls."""
        window = self._window
        while True:
            with self._lock:
                now = self._clock()
                idle_left = window.idle_seconds - (now - batch.last)
                max_left = window.max_seconds - (now - batch.first)
                if idle_left <= 0 or max_left <= 0 or len(batch.ids) >= window.max_items:
                    if self._open is batch:
                        self._open = None
                    return
            self._sleep(min(idle_left, max_left))

    @staticmethod
    def _raise_for(ids: list[str], error: BaseException | None) -> None:
        if error is None:
            return
        if isinstance(error, TerminationError):
            mine = {i: e for i, e in error.failed.items() if i in ids}
            if mine:
                raise TerminationError(
                    "TerminateInstances failed for " + "; ".join(f"{i}: {e}" for i, e in mine.items()), failed=mine
                )
            return
        raise error
