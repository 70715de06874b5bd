"""``map_ordered``: the services' fan-out keeps the items' order whatever finishes first, never runs more
than ``workers`` calls at once, and runs in the calling thread when there is nothing to overlap."""

from __future__ import annotations

import threading
import time

from nodesmith.services.parallel import map_ordered


def test_results_keep_the_items_order_when_later_items_finish_first() -> None:
    def slow_first(n: int) -> int:
        time.sleep(0.05 * (4 - n))
        return n * 10

    assert map_ordered(slow_first, [0, 1, 2, 3], workers=4, name="t") == [0, 10, 20, 30]


def test_no_more_than_workers_calls_run_at_once() -> None:
    running, most, lock = [0], [0], threading.Lock()

    def call(_: int) -> None:
        with lock:
            running[0] += 1
            most[0] = max(most[0], running[0])
        time.sleep(0.02)
        with lock:
            running[0] -= 1

    map_ordered(call, list(range(12)), workers=3, name="t")

    assert most[0] == 3


def test_one_worker_or_one_item_runs_in_the_calling_thread() -> None:
    me = threading.current_thread()

    assert map_ordered(lambda _: threading.current_thread(), [1, 2], workers=1, name="t") == [me, me]
    assert map_ordered(lambda _: threading.current_thread(), [1], workers=8, name="t") == [me]
    assert map_ordered(lambda _: threading.current_thread(), [], workers=8, name="t") == []
