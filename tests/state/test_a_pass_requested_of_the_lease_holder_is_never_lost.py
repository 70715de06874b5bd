"""DynamoStateStore's pass requests on moto: a caller that finds the reconcile lease held records a
request (only while it is held); the holder's release is refused while a request newer than its
pass's start is pending, and re-taking the lease keeps the request; a request on a free or expired
lease is refused (the caller takes the lease itself). Between the two conditional writes no request
can be lost: either the holder sees it at release, or it was made on a free lease and refused."""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from nodesmith.adapters.aws.state import DynamoStateStore

NOW = 1_795_327_200.0


def test_a_request_on_a_held_lease_blocks_its_release_until_a_later_pass(store: DynamoStateStore) -> None:
    assert store.acquire_lease(name="reconcile", holder="a", ttl_seconds=60, now=NOW)
    assert store.request_pass(name="reconcile", after=NOW + 5, now=NOW + 4)
    assert store.lease_info(name="reconcile", now=NOW + 4).requested_at == NOW + 5

    assert not store.release_unless_requested(name="reconcile", holder="a", since=NOW)  # its pass began earlier
    assert store.lease_holder(name="reconcile", now=NOW + 6) == "a"  # still held
    assert store.acquire_lease(name="reconcile", holder="a", ttl_seconds=60, now=NOW + 6)  # rerun
    assert store.lease_info(name="reconcile", now=NOW + 6).requested_at == NOW + 5  # the re-take kept it
    assert store.release_unless_requested(name="reconcile", holder="a", since=NOW + 6)
    assert store.lease_holder(name="reconcile", now=NOW + 7) is None


def test_requests_only_move_forward_and_an_earlier_one_counts_as_made(store: DynamoStateStore) -> None:
    assert store.acquire_lease(name="reconcile", holder="a", ttl_seconds=60, now=NOW)
    assert store.request_pass(name="reconcile", after=NOW + 9, now=NOW + 1)
    assert store.request_pass(name="reconcile", after=NOW + 3, now=NOW + 2)  # covered by the later request
    assert store.lease_info(name="reconcile", now=NOW + 2).requested_at == NOW + 9


def test_a_request_on_a_free_or_expired_lease_is_refused(store: DynamoStateStore) -> None:
    assert not store.request_pass(name="reconcile", after=NOW, now=NOW)
    assert store.acquire_lease(name="reconcile", holder="a", ttl_seconds=10, now=NOW)
    assert not store.request_pass(name="reconcile", after=NOW + 20, now=NOW + 20)  # expired at NOW + 10
    assert store.release_lease(name="reconcile", holder="a")
    assert not store.request_pass(name="reconcile", after=NOW + 1, now=NOW + 1)


def test_release_unless_requested_is_true_for_a_lease_that_is_no_longer_the_callers(
    store: DynamoStateStore,
) -> None:
    assert store.acquire_lease(name="reconcile", holder="a", ttl_seconds=10, now=NOW)
    assert store.acquire_lease(name="reconcile", holder="b", ttl_seconds=60, now=NOW + 11)  # a's expired
    assert store.request_pass(name="reconcile", after=NOW + 12, now=NOW + 12)
    assert store.release_unless_requested(name="reconcile", holder="a", since=NOW)  # not a's to run again
    assert store.lease_holder(name="reconcile", now=NOW + 12) == "b"


def test_racing_requests_and_release_never_lose_a_request(store: DynamoStateStore) -> None:
    """Each round: the holder releases while a caller requests; either the release is refused (the
    holder runs again) or the request is refused (the caller takes the lease) -- never both succeed."""
    for round_ in range(20):
        start = NOW + round_ * 100
        assert store.acquire_lease(name="reconcile", holder="h", ttl_seconds=60, now=start)
        results = _race(store, start)
        assert results["released"] != results["requested"], results
        if not results["released"]:
            assert store.release_lease(name="reconcile", holder="h")


def _race(store: DynamoStateStore, start: float) -> dict[str, bool]:
    barrier = threading.Barrier(2)
    results: dict[str, bool] = {}

    def release() -> None:
        barrier.wait()
        results["released"] = store.release_unless_requested(name="reconcile", holder="h", since=start)

    def request() -> None:
        barrier.wait()
        results["requested"] = store.request_pass(name="reconcile", after=start + 1, now=start + 1)

    threads = [threading.Thread(target=release), threading.Thread(target=request)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return results


def test_a_refused_request_is_answered_from_the_item_the_failed_write_returns(store: DynamoStateStore) -> None:
    """In a burst most requests find as late a pass already asked for: the failed conditional write's
    own answer (the item as it was) says so, without a second read of the lease."""
    calls: list[str] = []
    store.client.meta.events.register("before-call.dynamodb.*", lambda model, **_: calls.append(model.name))
    assert store.acquire_lease(name="reconcile", holder="a", ttl_seconds=10, now=NOW)
    assert store.request_pass(name="reconcile", after=NOW + 5, now=NOW + 1)
    calls.clear()

    assert store.request_pass(name="reconcile", after=NOW + 4, now=NOW + 2)  # as late a pass is owed
    assert not store.request_pass(name="reconcile", after=NOW + 30, now=NOW + 30)  # expired at NOW + 10
    assert calls == ["UpdateItem", "UpdateItem"]
    assert store.release_lease(name="reconcile", holder="a")
    calls.clear()
    assert not store.request_pass(name="reconcile", after=NOW + 6, now=NOW + 6)  # no lease item at all
    assert calls == ["UpdateItem"]
