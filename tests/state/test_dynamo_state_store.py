"""DynamoStateStore on moto: leases are exclusive until they expire, offering marks are listed only while
they last, and expiry is checked on read (DynamoDB TTL deletes late)."""

from __future__ import annotations

import threading

import pytest

from nodesmith.adapters.aws.state import DynamoStateStore

NOW = 1_795_327_200.0


def test_a_held_lease_is_refused_to_others_until_it_expires(store: DynamoStateStore) -> None:
    assert store.acquire_lease(name="reconcile", holder="req-a", ttl_seconds=60, now=NOW)
    assert not store.acquire_lease(name="reconcile", holder="req-b", ttl_seconds=60, now=NOW + 30)
    assert store.lease_holder(name="reconcile", now=NOW + 30) == "req-a"
    # the holder may take it again (extend); expired, anyone may
    assert store.acquire_lease(name="reconcile", holder="req-a", ttl_seconds=60, now=NOW + 30)
    assert not store.acquire_lease(name="reconcile", holder="req-b", ttl_seconds=60, now=NOW + 89)
    assert store.acquire_lease(name="reconcile", holder="req-b", ttl_seconds=60, now=NOW + 91)
    assert store.lease_holder(name="reconcile", now=NOW + 91) == "req-b"


def test_renew_and_release_only_work_for_the_holder(store: DynamoStateStore) -> None:
    assert store.acquire_lease(name="reconcile", holder="req-a", ttl_seconds=10, now=NOW)
    assert not store.renew_lease(name="reconcile", holder="req-b", ttl_seconds=100, now=NOW + 5)
    assert store.renew_lease(name="reconcile", holder="req-a", ttl_seconds=100, now=NOW + 5)
    assert store.lease_holder(name="reconcile", now=NOW + 50) == "req-a"  # renewed past the first 10 s
    assert not store.release_lease(name="reconcile", holder="req-b")
    assert store.release_lease(name="reconcile", holder="req-a")
    assert store.lease_holder(name="reconcile", now=NOW + 50) is None
    assert store.acquire_lease(name="reconcile", holder="req-b", ttl_seconds=10, now=NOW + 50)
    assert not store.renew_lease(name="reconcile", holder="req-a", ttl_seconds=10, now=NOW + 51)


def test_leases_are_independent_by_name(store: DynamoStateStore) -> None:
    assert store.acquire_lease(name="reconcile", holder="a", ttl_seconds=60, now=NOW)
    assert store.acquire_lease(name="other", holder="b", ttl_seconds=60, now=NOW)


def test_of_many_racing_callers_exactly_one_gets_a_free_lease(store: DynamoStateStore) -> None:
    wins: list[str] = []
    barrier = threading.Barrier(8)

    def race(holder: str) -> None:
        barrier.wait()
        if store.acquire_lease(name="reconcile", holder=holder, ttl_seconds=60, now=NOW):
            wins.append(holder)

    threads = [threading.Thread(target=race, args=(f"req-{i}",)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(wins) == 1
    assert store.lease_holder(name="reconcile", now=NOW) == wins[0]


def test_offering_marks_are_listed_until_they_expire_and_a_later_mark_wins(store: DynamoStateStore) -> None:
    store.mark_unavailable(
        instance_type="m5.large", zone="us-east-1a", capacity_type="spot", expires_at=NOW + 180, reason="ICE"
    )
    store.mark_unavailable(instance_type="c5.large", zone="us-east-1b", capacity_type="on-demand", expires_at=NOW + 10)
    marks = {(m.instance_type, m.zone, m.capacity_type): m for m in store.list_unavailable(now=NOW)}
    assert set(marks) == {("m5.large", "us-east-1a", "spot"), ("c5.large", "us-east-1b", "on-demand")}
    assert marks[("m5.large", "us-east-1a", "spot")].reason == "ICE"
    assert marks[("m5.large", "us-east-1a", "spot")].expires_at == NOW + 180

    # expired items are filtered on read even though TTL has not deleted them
    assert {m.instance_type for m in store.list_unavailable(now=NOW + 11)} == {"m5.large"}
    store.mark_unavailable(instance_type="m5.large", zone="us-east-1a", capacity_type="spot", expires_at=NOW + 400)
    assert [m.expires_at for m in store.list_unavailable(now=NOW + 300)] == [NOW + 400]


def test_a_table_name_is_required() -> None:
    with pytest.raises(ValueError, match="NODESMITH_STATE_TABLE"):
        DynamoStateStore(table_name="")
