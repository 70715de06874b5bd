"""The interruption Lambda on moto (DynamoDB state table + SQS queue) with fake Kubernetes/EC2 ports:
the same event delivered twice drains once, a crash in the middle of a drain is resumed by the
redelivery without losing a pod, and a drain longer than one invocation continues through a delayed
message on the queue instead of failing its record."""

from __future__ import annotations

import importlib.util
import json
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import boto3
import pytest

from nodesmith.adapters.aws.state import DynamoStateStore
from nodesmith.handlers import interruption, wiring
from nodesmith.handlers.settings import Settings

if TYPE_CHECKING:
    from collections.abc import Iterator
    from types import ModuleType

REGION = "us-east-1"
IID = "i-0123456789abcdef0"


def load_fakes() -> ModuleType:
    name = "nodesmith_tests_interruption_fakes"
    if name not in sys.modules:
        path = Path(__file__).resolve().parents[1] / "services" / "interruption_fakes.py"
        spec = importlib.util.spec_from_file_location(name, path)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


fakes = load_fakes()


class Crash(BaseException):
    """What a Lambda timeout looks like from inside: the process stops; nothing gets to clean up."""


class Context:
    function_name = "nodesmith-interruption"
    function_version = "$LATEST"
    invoked_function_arn = "arn:aws:lambda:us-east-1:123456789012:function:nodesmith-interruption"
    memory_limit_in_mb = 512
    log_group_name = "/aws/lambda/nodesmith-interruption"
    log_stream_name = "2026/11/22/[$LATEST]abcdef"

    def __init__(self, request_id: str = "req-1", remaining_ms: int = 60_000) -> None:
        self.aws_request_id = request_id
        self.remaining_ms = remaining_ms

    def get_remaining_time_in_millis(self) -> int:
        return self.remaining_ms


class World:
    def __init__(self, table: str, queue_url: str, cluster: Any, cloud: Any) -> None:
        self.table, self.queue_url, self.cluster, self.cloud = table, queue_url, cluster, cloud
        self.store = DynamoStateStore(table_name=table, region=REGION)

    def deliver(self, *records: dict[str, Any], ctx: Context | None = None) -> list[str]:
        response = interruption.handler({"Records": list(records)}, ctx or Context())
        return [f["itemIdentifier"] for f in response["batchItemFailures"]]

    def idempotency_items(self) -> list[dict[str, Any]]:
        items = boto3.client("dynamodb", region_name=REGION).scan(TableName=self.table)["Items"]
        return [i for i in items if i["pk"]["S"].startswith("idempotency#")]


def build(table: str, *, pods: int = 4, rebalance_action: str = "cordon", **cluster_kwargs: Any) -> World:
    sqs = boto3.client("sqs", region_name=REGION)
    queue_url = sqs.create_queue(QueueName="nodesmith-interruption")["QueueUrl"]
    clock = fakes.FakeClock()
    node = fakes.make_node("node-a", IID)
    cluster = fakes.FakeCluster(
        clock=clock,
        nodes=[node],
        pods=[fakes.make_pod(f"web-{i}", grace=0) for i in range(pods)],
        instant_termination=True,
        **cluster_kwargs,
    )
    cluster.nodeclaims.add("default-abcde")
    cloud = fakes.FakeCloud([fakes.make_instance(IID)])
    settings = Settings(
        cluster_name=fakes.CLUSTER,
        cluster_endpoint="https://example.invalid",
        state_table=table,
        interruption_queue_url=queue_url,
        rebalance_action=rebalance_action,  # type: ignore[arg-type]
        drain_timeout_seconds=30,
    )
    wiring.reset()
    wiring.set_ports(cluster=cluster, cloud=cloud, settings=settings)
    return World(table, queue_url, cluster, cloud)


@pytest.fixture(autouse=True)
def _forget_ports(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setenv("AWS_LAMBDA_FUNCTION_NAME", "nodesmith-interruption")
    yield
    wiring.reset()


def record(
    message_id: str, *, kind: str = "spot", body: dict[str, Any] | None = None, receive_count: int = 1
) -> dict[str, Any]:
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    event = body or fakes.event(IID, kind=kind, event_id="evt-1", time=now)
    return fakes.sqs_record(event, message_id=message_id, receive_count=receive_count)


def test_the_same_event_delivered_twice_drains_once(table: str) -> None:
    world = build(table, rebalance_action="drain")  # drained but not removed: the duplicate still finds the node
    assert world.deliver(record("m-1", kind="rebalance")) == []
    assert world.cluster.count("evict") == 4 and "node-a" in world.cluster.nodes
    lists_after_first = world.cluster.args("list_pods").count("node-a")

    assert world.deliver(record("m-2", kind="rebalance")) == []  # EventBridge/SQS at-least-once: same event again

    assert world.cluster.args("list_pods").count("node-a") == lists_after_first  # no second drain at all
    assert world.store.get_drain(instance_id=IID).attempts == 1
    [item] = world.idempotency_items()
    assert item["status"]["S"] == "COMPLETED" and int(item["expires_at"]["N"]) > time.time()


def test_the_same_event_twice_in_one_batch_drains_once(table: str) -> None:
    world = build(table, pods=6)
    failures = world.deliver(record("m-1"), record("m-2"))
    assert failures == []
    assert world.cluster.count("evict") == 6  # each pod evicted exactly once
    assert world.store.get_drain(instance_id=IID).attempts == 1
    assert world.cluster.lost == [] and "node-a" not in world.cluster.nodes


def test_a_crash_mid_drain_is_resumed_by_the_redelivery_without_losing_a_pod(table: str) -> None:
    world = build(table, pods=6, pdb_blocks={"default/web-5": 1})
    evict = world.cluster.evict
    calls = {"n": 0}

    def evict_then_crash(**kwargs: Any) -> str:
        calls["n"] += 1
        if calls["n"] == 7:  # five evicted, web-5 refused once by its PDB; its retry is where Lambda dies
            raise Crash
        return evict(**kwargs)

    world.cluster.evict = evict_then_crash
    with pytest.raises(Crash):
        world.deliver(record("m-1"))
    progress = world.store.get_drain(instance_id=IID)
    assert (progress.attempts, progress.evicted, progress.done) == (1, 5, False)
    [item] = world.idempotency_items()
    assert item["status"]["S"] == "INPROGRESS"  # the dead invocation could not clean up

    # SQS redelivers after the visibility timeout (6 x the function timeout), by which time the
    # in-progress marker (good for the dead invocation's remaining time) has expired.
    boto3.client("dynamodb", region_name=REGION).update_item(
        TableName=table,
        Key={"pk": item["pk"], "sk": item["sk"]},
        UpdateExpression="SET in_progress_expiration = :past",
        ExpressionAttributeValues={":past": {"N": str(int((time.time() - 1) * 1000))}},
    )
    world.cluster.evict = evict
    assert world.deliver(record("m-1", receive_count=2), ctx=Context("req-2")) == []

    progress = world.store.get_drain(instance_id=IID)
    assert (progress.attempts, progress.evicted, progress.done) == (2, 6, True)
    assert world.cluster.lost == []  # every pod left through the Eviction API before the node went
    assert sorted(world.cluster.args("evict")).count("default/web-0") == 1  # resumed, not restarted
    assert "node-a" not in world.cluster.nodes and ("terminate", (IID,)) in world.cloud.calls


def test_a_drain_longer_than_one_invocation_continues_through_a_delayed_message(
    table: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    world = build(table, pods=3, pdb_blocks={"default/web-2": 3})
    sqs = boto3.client("sqs", region_name=REGION)

    short = Context(remaining_ms=10_300)  # 0.3 s of work left after the safety margin
    assert world.deliver(record("m-1"), ctx=short) == []  # acknowledged: a continuation carries the drain on
    attrs = sqs.get_queue_attributes(QueueUrl=world.queue_url, AttributeNames=["ApproximateNumberOfMessagesDelayed"])
    assert attrs["Attributes"]["ApproximateNumberOfMessagesDelayed"] == "1"  # sent with DelaySeconds=5
    assert "node-a" in world.cluster.nodes

    monkeypatch.setattr(interruption, "CONTINUATION_DELAY_SECONDS", 0)
    hops = 0
    while "node-a" in world.cluster.nodes and hops < 10:
        received = sqs.receive_message(QueueUrl=world.queue_url, MaxNumberOfMessages=10, WaitTimeSeconds=6)
        messages = received.get("Messages", [])
        assert messages, "no continuation on the queue"
        body = json.loads(messages[0]["Body"])
        assert body["id"] == "evt-1" and body["nodesmith-continuation"]["instance-ids"] == [IID]
        failures = world.deliver(fakes.sqs_record(body, message_id=messages[0]["MessageId"]), ctx=short)
        assert failures == []
        sqs.delete_message(QueueUrl=world.queue_url, ReceiptHandle=messages[0]["ReceiptHandle"])
        hops += 1

    assert "node-a" not in world.cluster.nodes and world.cluster.lost == []
    progress = world.store.get_drain(instance_id=IID)
    assert progress.done and progress.evicted == 3 and progress.attempts == hops + 1
    assert [i["status"]["S"] for i in world.idempotency_items()] == ["COMPLETED"] * (hops + 1)
