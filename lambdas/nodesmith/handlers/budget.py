"""The records of one SQS batch worked at once, each bounded by the time the invocation has left.

Lambda ends an invocation at its timeout with every record of the batch unreported, so SQS delivers them all
again only after the queue's visibility timeout, even those whose work was done. :class:`RecordBudget` runs each
record's blocking work in a thread of its own and stops waiting for it :data:`REPORT_SECONDS` before the timeout:
the handler then reports that record as failed and the others as they ended. Python cannot stop a thread, so an
overrunning one is left to finish alone (its work must be idempotent, as a redelivery repeats it).
"""

from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:
    from collections.abc import Callable
    from types import TracebackType

__all__ = ["REPORT_SECONDS", "RecordBudget"]

T = TypeVar("T")

REPORT_SECONDS = 2.0
"""Kept back from the function's timeout for reporting the batch (seconds)."""


class RecordBudget:
    """Threads for one batch's records (``workers`` at once) bounded by ``context``'s remaining time (a Lambda
    context: ``get_remaining_time_in_millis()``). Use as a context manager; leaving it never waits for a thread."""

    def __init__(self, *, context: Any, workers: int) -> None:
        self._context = context
        self._pool = ThreadPoolExecutor(max_workers=max(1, workers), thread_name_prefix="record")

    async def run(self, work: Callable[[], T]) -> T:
        """``work()``'s result. Raises what it raises, or ``TimeoutError`` when it is still running
        :data:`REPORT_SECONDS` before the invocation's timeout (without starting it when that time has come)."""
        budget = self._context.get_remaining_time_in_millis() / 1000 - REPORT_SECONDS
        if budget <= 0:
            raise TimeoutError("no time left in the invocation to start this record's work")
        return await asyncio.wait_for(asyncio.get_running_loop().run_in_executor(self._pool, work), budget)

    def __enter__(self) -> RecordBudget:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        self._pool.shutdown(wait=False)
