"""RecordBudget runs a record's work in a thread bounded by the invocation's time left less REPORT_SECONDS: the
result when it ends in time, TimeoutError when it does not (the thread left running), and the work never started
when no time is left."""

from __future__ import annotations

import asyncio
import threading

import pytest

from nodesmith.handlers.budget import REPORT_SECONDS, RecordBudget


class Context:
    def __init__(self, seconds: float) -> None:
        self.seconds = seconds

    def get_remaining_time_in_millis(self) -> int:
        return int(self.seconds * 1000)


def test_work_that_ends_in_time_gives_its_result_and_raises_its_error() -> None:
    def fails() -> int:
        raise ValueError("boom")

    with RecordBudget(context=Context(REPORT_SECONDS + 5), workers=2) as budget:
        assert asyncio.run(budget.run(lambda: 7)) == 7
        with pytest.raises(ValueError, match="boom"):
            asyncio.run(budget.run(fails))


def test_work_still_running_at_the_budget_is_given_up_and_work_without_time_never_starts() -> None:
    release, started = threading.Event(), threading.Event()

    def hangs() -> None:
        started.set()
        release.wait(30)

    try:
        with RecordBudget(context=Context(REPORT_SECONDS + 0.2), workers=1) as budget, pytest.raises(TimeoutError):
            asyncio.run(budget.run(hangs))
        assert started.is_set() and not release.is_set()  # given up while it still ran
    finally:
        release.set()

    ran = threading.Event()
    with RecordBudget(context=Context(REPORT_SECONDS), workers=1) as budget, pytest.raises(TimeoutError):
        asyncio.run(budget.run(ran.set))
    assert not ran.is_set()
