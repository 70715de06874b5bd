"""One bounded, ordered fan-out for the services' parallel calls (evictions, launches, drains, garbage
collection, pod Events).

The services wait on the Kubernetes and EC2 APIs, not on the CPU, so a few threads cut a pass's wall
time in proportion: Karpenter fans the same work out with ``workqueue.ParallelizeUntil``. Results
come back in the order of the items, so outcomes never depend on thread timing.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, TypeVar

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

__all__ = ["map_ordered"]

T = TypeVar("T")
R = TypeVar("R")


def map_ordered(fn: Callable[[T], R], items: Sequence[T], *, workers: int, name: str) -> list[R]:
    """``[fn(item) for item in items]``, at most ``workers`` calls at a time in threads named ``name-<n>``.

    With fewer than two items or ``workers`` <= 1 the calls run one after another in the calling thread.
    An exception from ``fn`` propagates; in threads, only after every call already started has ended.
    """
    if workers <= 1 or len(items) <= 1:
        return [fn(item) for item in items]
    with ThreadPoolExecutor(max_workers=min(workers, len(items)), thread_name_prefix=name) as pool:
        return list(pool.map(fn, items))
