"""The batcher merges calls made at about the same time from several threads into one (Karpenter's
TerminateInstances batcher: 100 ms idle, 1 s at most, 500 items), and every caller hears its own item's answer."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from nodesmith.core.errors import LaunchError
from nodesmith.services.batcher import Batcher


def submit_all(batcher: Batcher[str], items: list[str]) -> list[BaseException | None]:
    """Submit each item from its own thread, all released together; what each call raised (None: returned)."""
    start = threading.Barrier(len(items))
    raised: list[BaseException | None] = [None] * len(items)

    def one(n: int) -> None:
        start.wait()
        try:
            batcher.submit(items[n])
        except BaseException as exc:  # the test records whatever reached the caller
            raised[n] = exc

    threads = [threading.Thread(target=one, args=(n,)) for n in range(len(items))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=10)
    assert not any(t.is_alive() for t in threads), "a submit never returned"
    return raised


def test_calls_made_together_from_several_threads_are_sent_as_one_batch() -> None:
    sent: list[list[str]] = []
    batcher: Batcher[str] = Batcher(sent.append, idle_seconds=1.0, max_seconds=5.0)

    raised = submit_all(batcher, [f"i-{n}" for n in range(6)])

    assert raised == [None] * 6
    assert len(sent) == 1
    assert sorted(sent[0]) == [f"i-{n}" for n in range(6)]


def test_a_lone_call_is_sent_once_nothing_more_comes_and_the_next_opens_a_new_batch() -> None:
    sent: list[list[str]] = []
    batcher: Batcher[str] = Batcher(sent.append, idle_seconds=0.01)

    batcher.submit("i-a")
    batcher.submit("i-b")

    assert sent == [["i-a"], ["i-b"]]


def test_a_full_batch_is_sent_without_waiting_and_no_batch_exceeds_the_limit() -> None:
    sent: list[list[str]] = []
    lock = threading.Lock()

    def send(items: list[str]) -> None:
        with lock:
            sent.append(items)

    batcher: Batcher[str] = Batcher(send, idle_seconds=5.0, max_seconds=5.0, max_items=2)
    raised = submit_all(batcher, ["a", "b", "c", "d"])

    assert raised == [None] * 4
    assert sorted(x for batch in sent for x in batch) == ["a", "b", "c", "d"]
    assert all(len(batch) == 2 for batch in sent)  # full batches went at once, not after the 5 s waits


def test_every_caller_of_a_failed_batch_gets_its_error() -> None:
    def send(items: list[str]) -> None:
        raise LaunchError(f"TerminateInstances failed for {len(items)} ids", code="RequestLimitExceeded")

    batcher: Batcher[str] = Batcher(send, idle_seconds=1.0)
    raised = submit_all(batcher, ["i-1", "i-2", "i-3"])

    assert all(isinstance(e, LaunchError) and e.code == "RequestLimitExceeded" for e in raised)
    assert {str(e) for e in raised} == {"TerminateInstances failed for 3 ids"}
    assert all(isinstance(e, BaseException) and isinstance(e.__cause__, LaunchError) for e in raised)


@pytest.mark.parametrize("max_items", [0, -1])
def test_a_batch_limit_below_one_is_refused(max_items: int) -> None:
    sent: list[Any] = []
    with pytest.raises(ValueError, match="max_items must be at least 1"):
        Batcher(sent.append, max_items=max_items)


def test_an_item_send_reports_as_failed_fails_only_its_own_caller() -> None:
    def send(items: list[str]) -> dict[str, BaseException]:
        return {"i-2": LaunchError("i-2 has termination protection", code="OperationNotPermitted")}

    batcher: Batcher[str] = Batcher(send, idle_seconds=1.0)
    raised = submit_all(batcher, ["i-1", "i-2", "i-3"])

    assert raised[0] is None and raised[2] is None
    assert isinstance(raised[1], LaunchError) and raised[1].code == "OperationNotPermitted"
