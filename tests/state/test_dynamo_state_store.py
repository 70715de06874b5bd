"""DynamoStateStore on moto: leases are exclusive until they expire, drain progress round-trips, offering
marks are listed only while they last, and expiry is checked on read (DynamoDB TTL deletes late)."""

from __future__ import annotations

import threading

import boto3
import pytest

from nodesmith.adapters.aws.state import DynamoStateStore
from nodesmith.core.ports import DrainProgress

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


def test_drain_progress_round_trips_with_and_without_a_deadline(store: DynamoStateStore, table: str) -> None:
    assert store.get_drain(instance_id="i-0123456789abcdef0") is None
    progress = DrainProgress(
        instance_id="i-0123456789abcdef0",
        event_id="evt-1",
        node_name="ip-10-0-0-1.ec2.internal",
        deadline=NOW + 120,
        started_at=NOW,
        updated_at=NOW + 3.5,
        attempts=2,
        evicted=7,
        force_deleted=1,
        blocked_responses=4,
        replaced=True,
    )
    assert store.put_drains(progress=[progress], expires_at=NOW + 86_400) == []
    assert store.get_drain(instance_id="i-0123456789abcdef0") == progress

    no_deadline = DrainProgress(instance_id="i-0fedcba9876543210", event_id="evt-2", done=True)
    assert store.put_drains(progress=[no_deadline], expires_at=NOW + 60) == []
    assert store.get_drain(instance_id="i-0fedcba9876543210") == no_deadline

    item = boto3.client("dynamodb", region_name="us-east-1").get_item(
        TableName=table, Key={"pk": {"S": "drain#i-0fedcba9876543210"}, "sk": {"S": "progress"}}
    )["Item"]
    assert item["expires_at"] == {"N": str(int(NOW + 60))}  # TTL attribute in whole epoch seconds


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


def test_progress_of_many_drains_is_written_25_items_a_request_and_the_last_of_one_instance_wins(
    table: str,
) -> None:
    client = boto3.client("dynamodb", region_name="us-east-1")
    requests: list[int] = []
    client.meta.events.register(
        "before-parameter-build.dynamodb.BatchWriteItem",
        lambda params, **_: requests.append(len(params["RequestItems"][table])),
    )
    store = DynamoStateStore(table_name=table, client=client)
    many = [DrainProgress(instance_id=f"i-{n:017x}", event_id="evt-1", evicted=n) for n in range(30)]
    again = DrainProgress(instance_id=many[0].instance_id, event_id="evt-1", evicted=99, done=True)
    assert store.put_drains(progress=[*many, again], expires_at=NOW + 60) == []
    assert requests == [25, 5]  # one key written twice would be refused by DynamoDB: only the last is sent
    assert store.get_drain(instance_id=many[0].instance_id) == again
    assert all(store.get_drain(instance_id=p.instance_id) == p for p in many[1:])


class _Unprocessing:
    """A DynamoDB client whose ``BatchWriteItem`` leaves the items of ``stuck`` unprocessed ``times`` times
    (each, then writes them), as DynamoDB does for a throttled partition; the other calls go to moto."""

    def __init__(self, table: str, stuck: set[str], times: int) -> None:
        self.real = boto3.client("dynamodb", region_name="us-east-1")
        self.table, self.stuck, self.times = table, stuck, times
        self.sent: list[list[str]] = []

    def batch_write_item(self, *, RequestItems: dict[str, list[dict]]) -> dict[str, object]:
        writes = RequestItems[self.table]
        ids = [w["PutRequest"]["Item"]["pk"]["S"].split("#", 1)[1] for w in writes]
        self.sent.append(ids)
        refused = self.times > 0
        self.times -= 1
        keep = [w for w, i in zip(writes, ids, strict=True) if not (refused and i in self.stuck)]
        back = [w for w, i in zip(writes, ids, strict=True) if refused and i in self.stuck]
        if keep:
            self.real.batch_write_item(RequestItems={self.table: keep})
        return {"UnprocessedItems": {self.table: back} if back else {}}

    def __getattr__(self, name: str) -> object:
        return getattr(self.real, name)


@pytest.mark.parametrize(("times", "left"), [(2, []), (4, ["i-00000000000000001"])])
def test_unprocessed_progress_is_sent_again_with_backoff_and_named_when_it_never_goes(
    table: str, times: int, left: list[str]
) -> None:
    stuck = "i-00000000000000001"
    client = _Unprocessing(table, {stuck}, times)
    waits: list[float] = []
    store = DynamoStateStore(table_name=table, client=client, sleep=waits.append)
    progress = [DrainProgress(instance_id=f"i-{n:017x}", event_id="evt-1") for n in range(3)]
    assert store.put_drains(progress=progress, expires_at=NOW + 60) == left
    assert client.sent[0] == [p.instance_id for p in progress]
    assert client.sent[1:] == [[stuck]] * min(times, 3)  # only what came back, at most 3 more times
    assert waits == [0.05, 0.1, 0.2][: min(times, 3)]
    assert (store.get_drain(instance_id=stuck) is None) == bool(left)
    assert store.get_drain(instance_id="i-00000000000000002") == progress[2]


def test_a_table_name_is_required() -> None:
    with pytest.raises(ValueError, match="NODESMITH_STATE_TABLE"):
        DynamoStateStore(table_name="")
