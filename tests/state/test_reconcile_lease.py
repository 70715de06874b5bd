"""Two reconcile passes at once never launch twice: the handler takes the DynamoDB lease (moto) before it
solves, and the pass that does not get it returns "skipped: lease held by <request id>"."""

from __future__ import annotations

import sys
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any

import boto3
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "services"))

from reconcile_fakes import FakeCloud, FakeCluster, make_nodeclass, make_nodepool, make_pod

from nodesmith.adapters.aws.state import DynamoStateStore
from nodesmith.handlers import wiring
from nodesmith.handlers.settings import Settings
from nodesmith.services.provisioning.leases import LEASE_MARGIN_SECONDS, RECONCILE_LEASE, lease_ttl
from nodesmith.services.reconciler.container import WarmContainer

if TYPE_CHECKING:
    from collections.abc import Iterator

    from nodesmith.core.ports import LaunchRequest, LaunchResult


class Context:
    function_name = "nodesmith-reconcile"
    memory_limit_in_mb = 1024
    invoked_function_arn = "arn:aws:lambda:us-east-1:123456789012:function:nodesmith-reconcile"

    def __init__(self, request_id: str, remaining_ms: int = 60_000) -> None:
        self.aws_request_id = request_id
        self.remaining_ms = remaining_ms

    def get_remaining_time_in_millis(self) -> int:
        return self.remaining_ms


class SlowCloud(FakeCloud):
    """A cloud whose first CreateFleet waits until ``release`` is set: the pass is held mid-launch."""

    def __init__(self) -> None:
        super().__init__()
        self.launching = threading.Event()
        self.release = threading.Event()
        self.waiting = 0

    def create(self, *, request: LaunchRequest) -> LaunchResult:
        self.waiting += 1
        self.launching.set()
        assert self.release.wait(timeout=30), "the test never released the launch"
        return super().create(request=request)


@pytest.fixture
def world(table: str) -> Iterator[tuple[FakeCluster, SlowCloud, str]]:
    cluster = FakeCluster(nodepools=[make_nodepool()], nodeclasses=[make_nodeclass()])
    cluster.pods = [make_pod(f"inflate-{i}") for i in range(3)]
    cloud = SlowCloud()
    wiring.reset()
    wiring.set_ports(
        cluster=cluster,
        cloud=cloud,
        settings=Settings(cluster_name="test", cluster_endpoint="http://kube", state_table=table),
    )
    yield cluster, cloud, table
    wiring.reset()


def run_concurrently(cloud: SlowCloud, first: Context, second: Context) -> tuple[Any, Any]:
    """Start ``first``; once it is inside CreateFleet run ``second`` to completion, then let ``first`` finish."""
    from nodesmith.handlers.reconcile import handler

    results: dict[str, Any] = {}

    def call(ctx: Context) -> None:
        try:
            results[ctx.aws_request_id] = handler({}, ctx)
        except Exception as exc:  # the control test's overlapping passes trip over each other
            results[ctx.aws_request_id] = exc

    a = threading.Thread(target=call, args=(first,))
    a.start()
    assert cloud.launching.wait(timeout=30)
    b = threading.Thread(target=call, args=(second,))
    b.start()
    for _ in range(3000):  # until the second call returned, or is held in CreateFleet too (no lease)
        b.join(timeout=0.01)
        if not b.is_alive() or cloud.waiting >= 2:
            break
    cloud.release.set()
    b.join(timeout=30)
    a.join(timeout=30)
    return results[first.aws_request_id], results[second.aws_request_id]


def test_two_passes_at_once_launch_once_and_the_second_says_who_holds_the_lease(
    world: tuple[FakeCluster, SlowCloud, str],
) -> None:
    cluster, cloud, table = world
    first, second = run_concurrently(cloud, Context("req-a"), Context("req-b"))

    assert first["nodeclaims_launched"] == 1 and first["pods_scheduled"] == 3
    assert second == {"status": "skipped: lease held by req-a", "lease_holder": "req-a"}
    assert len(cloud.requests) == 1 and len(cluster.created) == 1

    # released when the pass finished: the next tick runs, and finds the capacity in flight
    store = DynamoStateStore(table_name=table, region="us-east-1")
    assert store.lease_holder(name=RECONCILE_LEASE, now=0.0) is None
    cloud.release.set()
    from nodesmith.handlers.reconcile import handler

    third = handler({}, Context("req-c"))
    assert third["nodeclaims_created"] == 0 and third["pods_awaiting_capacity"] == 3
    assert len(cloud.requests) == 1


def test_without_the_lease_the_same_overlap_launches_twice(world: tuple[FakeCluster, SlowCloud, str]) -> None:
    """The control: no state table, same timing -> both passes snapshot before either launches, and both
    call CreateFleet for the same three pods (the second even collects the first's NodeClaim)."""
    cluster, cloud, _ = world
    wiring.set_ports(settings=Settings(cluster_name="test", cluster_endpoint="http://kube"))
    run_concurrently(cloud, Context("req-a"), Context("req-b"))
    assert len(cloud.requests) == 2 and len(cluster.created) == 2


def test_a_crashed_holder_blocks_only_until_its_lease_expires(world: tuple[FakeCluster, SlowCloud, str]) -> None:
    from nodesmith.handlers.reconcile import handler

    _, cloud, table = world
    cloud.release.set()
    client = boto3.client("dynamodb", region_name="us-east-1")
    # req-dead took the lease and was killed by Lambda; its item is still there, already expired
    client.put_item(
        TableName=table,
        Item={
            "pk": {"S": "lease#reconcile"},
            "sk": {"S": "lease"},
            "holder": {"S": "req-dead"},
            "expires_at": {"N": "1"},
        },
    )
    assert handler({}, Context("req-new"))["nodeclaims_launched"] == 1


def test_the_lease_outlives_the_invocation_by_a_margin() -> None:
    assert lease_ttl(900.0) == 900.0 + LEASE_MARGIN_SECONDS
    assert lease_ttl(None) == 900.0 + LEASE_MARGIN_SECONDS


def test_a_wake_from_an_interruption_batch_runs_a_provisioning_pass_at_once_without_disruption(
    world: tuple[FakeCluster, SlowCloud, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    import time

    from nodesmith.adapters.aws.wake import provision_event
    from nodesmith.handlers import reconcile

    _, cloud, table = world
    cloud.release.set()
    disruptions: list[int] = []
    monkeypatch.setattr(reconcile, "run_disruption", lambda *a, **k: disruptions.append(1))

    # 30 s left: all of it the exit margin, so no burst watch follows the pass
    out = reconcile.handler(provision_event(time.time()), Context("req-wake", remaining_ms=30_000))

    assert out["burst"]["passes"] == 1
    assert out["nodeclaims_launched"] >= 1 and len(cloud.requests) >= 1 and "woken_for" in out
    assert disruptions == []  # the schedule runs disruption, not a wake
    assert (
        DynamoStateStore(table_name=table, region="us-east-1").lease_holder(name=RECONCILE_LEASE, now=time.time())
        is None
    )


def test_a_wake_keeps_provisioning_through_the_window_for_a_pod_left_unschedulable_then_lets_go(
    world: tuple[FakeCluster, SlowCloud, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The kube-scheduler does not always place the evicted pods where the woken pass packed them: a pod
    left over gets its NodeClaim from the same invocation within the batch window, not from the next tick."""
    import time

    from nodesmith.adapters.aws.wake import provision_event
    from nodesmith.handlers import reconcile
    from nodesmith.services.reconciler import watching as watch_mode

    cluster, cloud, table = world
    cloud.release.set()
    monkeypatch.setattr(watch_mode, "BURST_WATCH_SECONDS", 3.0)
    passes = reconcile._provision_only

    def pass_then_a_pod_is_left_over() -> Any:
        out = passes()
        if not any(p.name == "left-over" for p in cluster.pods):
            cluster.pods.append(make_pod("left-over", cpu="2"))
        return out

    monkeypatch.setattr(reconcile, "_provision_only", pass_then_a_pod_is_left_over)
    t0 = time.monotonic()

    out = reconcile.handler(provision_event(time.time()), Context("req-wake", remaining_ms=900_000))

    assert out["burst"]["passes"] == 2 and out["burst"]["batches"] == [4]  # the left-over pod (+ 3 in flight)
    assert len(cloud.requests) == 2 and len(cluster.created) == 2  # the second launch is for the left-over pod
    assert time.monotonic() - t0 >= 2.5  # it watched the window out
    store = DynamoStateStore(table_name=table, region="us-east-1")
    assert store.lease_holder(name=RECONCILE_LEASE, now=time.time()) is None


def test_a_wake_while_another_invocation_holds_the_lease_is_skipped_naming_it(
    world: tuple[FakeCluster, SlowCloud, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The holder (a scheduled pass, a watcher) provisions for the cordoned nodes itself: the watch's cordons
    owe it a pass, and a scheduled pass that began after them saw them."""
    import time

    from nodesmith.adapters.aws.wake import provision_event
    from nodesmith.handlers import reconcile

    monkeypatch.setattr(reconcile, "_CONTAINER", WarmContainer())  # no pass of this container covers the wake
    _, cloud, table = world
    cloud.release.set()
    store = DynamoStateStore(table_name=table, region="us-east-1")
    cordoned = time.time()
    assert store.acquire_lease(name=RECONCILE_LEASE, holder="other-pass", ttl_seconds=60, now=cordoned)

    out = reconcile.handler(provision_event(cordoned), Context("req-wake"))

    assert out == {"status": "skipped: lease held by other-pass", "lease_holder": "other-pass"}
    assert cloud.requests == []
    assert store.lease_holder(name=RECONCILE_LEASE, now=time.time()) == "other-pass"  # not taken or released


def test_a_malformed_wake_is_logged_and_dropped_without_a_pass_or_an_error(
    world: tuple[FakeCluster, SlowCloud, str],
) -> None:
    from nodesmith.adapters.aws.wake import PROVISION_EVENT_KEY
    from nodesmith.handlers.reconcile import handler

    _, cloud, _ = world
    cloud.release.set()

    out = handler({PROVISION_EVENT_KEY: {"after": "soon"}}, Context("req-broken-wake"))

    assert out["status"].startswith("ignored: nodesmith-provision.after") and cloud.requests == []
