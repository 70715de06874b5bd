"""One interruption can be followed end to end in the structured logs: every JSON line the
interruption Lambda writes while handling it -- the handler's and the services' (standard-library
loggers under ``nodesmith.``) -- carries the EventBridge event id, the outcome line also the
instance id, node and NodeClaim, and the X-Ray trace is annotated with the same ids."""

from __future__ import annotations

import importlib.util
import io
import json
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from nodesmith.core.errors import KubernetesError
from nodesmith.handlers import interruption, wiring
from nodesmith.handlers.observability import logger, tracer
from nodesmith.handlers.settings import Settings

if TYPE_CHECKING:
    from collections.abc import Iterator
    from types import ModuleType

EVENTS = Path(__file__).resolve().parents[1] / "events"
IID = "i-1234567890abcdef0"


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


class Context:
    function_name = "nodesmith-interruption"
    function_version = "$LATEST"
    invoked_function_arn = "arn:aws:lambda:us-west-2:123456789012:function:nodesmith-interruption"
    memory_limit_in_mb = 512
    aws_request_id = "req-follow"
    log_group_name = "/aws/lambda/nodesmith-interruption"
    log_stream_name = "2026/11/22/[$LATEST]follow"

    def get_remaining_time_in_millis(self) -> int:
        return 60_000


def spot_record(*, event_id: str, instance_id: str, sent: float, message_id: str) -> dict[str, Any]:
    """An SQS record carrying the documented spot warning for ``instance_id``, sent at ``sent`` (epoch s)."""
    body = json.loads((EVENTS / "spot_interruption_warning.json").read_text())
    body["id"] = event_id
    body["time"] = datetime.fromtimestamp(sent, tz=UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    body["detail"]["instance-id"] = instance_id
    body["resources"] = [f"arn:aws:ec2:us-west-2:123456789012:instance/{instance_id}"]
    return {
        "messageId": message_id,
        "receiptHandle": f"rh-{message_id}",
        "body": json.dumps(body),
        "attributes": {"ApproximateReceiveCount": "1", "SentTimestamp": str(int(sent * 1000))},
        "messageAttributes": {},
        "md5OfBody": "",
        "eventSource": "aws:sqs",
        "eventSourceARN": "arn:aws:sqs:us-west-2:123456789012:nodesmith-interruption",
        "awsRegion": "us-west-2",
    }


class NoDaemonSetsCluster(fakes.FakeCluster):  # type: ignore[misc,name-defined]
    """The fake cluster whose DaemonSet list fails: the replacement pass fails and a service logs it."""

    def list_daemonsets(self) -> list[Any]:
        raise KubernetesError("list daemonsets: 503 Service Unavailable", status=503)


@pytest.fixture
def logs() -> Iterator[io.StringIO]:
    """What the Powertools logger (and every ``nodesmith.*`` logger under it) writes, one JSON per line."""
    handler = logger.registered_handler
    stream = io.StringIO()
    previous = handler.setStream(stream)  # type: ignore[attr-defined]
    try:
        yield stream
    finally:
        handler.setStream(previous)  # type: ignore[attr-defined]


@pytest.fixture
def annotations(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, str]]:
    seen: list[tuple[str, str]] = []
    monkeypatch.setattr(tracer, "put_annotation", lambda key, value: seen.append((key, value)))
    return seen


def lines(stream: io.StringIO) -> list[dict[str, Any]]:
    return [json.loads(line) for line in stream.getvalue().splitlines() if line.startswith("{")]


def ports(pods: list[Any], instances: list[Any], nodes: list[Any]) -> tuple[Any, Any]:
    clock = fakes.FakeClock()
    cluster = NoDaemonSetsCluster(clock=clock, nodes=nodes, pods=pods, instant_termination=True)
    cloud = fakes.FakeCloud(instances)
    wiring.reset()
    wiring.set_ports(
        cluster=cluster,
        cloud=cloud,
        settings=Settings(cluster_name=fakes.CLUSTER, cluster_endpoint="https://example.invalid"),
    )
    return cluster, cloud


def test_every_line_of_one_interruption_carries_its_event_id(
    logs: io.StringIO, annotations: list[tuple[str, str]]
) -> None:
    ports(
        pods=[fakes.make_pod("web-1", grace=0), fakes.make_pod("web-2", grace=0)],
        instances=[fakes.make_instance(IID, nodeclaim="default-x7k2p")],
        nodes=[fakes.make_node("node-a", IID)],
    )
    # handled late, so the missed-deadline warning is among the lines
    record = spot_record(event_id="evt-follow-me", instance_id=IID, sent=time.time() - 150, message_id="m-1")
    try:
        response = interruption.handler({"Records": [record]}, Context())
    finally:
        wiring.reset()

    assert response == {"batchItemFailures": []}
    written = lines(logs)
    messages = [line["message"] for line in written]
    assert any("replacement capacity pass failed" in m for m in messages), messages  # a service's own logger
    assert any("missed the interruption deadline" in m for m in messages), messages
    assert [line["message"] for line in written if line.get("event_id") != "evt-follow-me"] == []
    (handled,) = [line for line in written if line["message"] == "interruption handled"]
    assert (handled["instance_id"], handled["node"], handled["nodeclaim"]) == (IID, "node-a", "default-x7k2p")
    assert ("event_id", "evt-follow-me") in annotations and ("instance_id", IID) in annotations


def test_in_a_batch_of_two_each_outcome_line_carries_its_own_event_id(logs: io.StringIO) -> None:
    other = "i-0fedcba9876543210"
    ports(
        pods=[fakes.make_pod("web-1", grace=0), fakes.make_pod("web-2", node="node-b", grace=0)],
        instances=[fakes.make_instance(IID), fakes.make_instance(other, nodeclaim="default-b")],
        nodes=[fakes.make_node("node-a", IID), fakes.make_node("node-b", other)],
    )
    now = time.time()
    records = [
        spot_record(event_id="evt-a", instance_id=IID, sent=now - 2, message_id="m-a"),
        spot_record(event_id="evt-b", instance_id=other, sent=now - 2, message_id="m-b"),
    ]
    try:
        interruption.handler({"Records": records}, Context())
    finally:
        wiring.reset()

    written = lines(logs)
    handled = {line["event_id"]: line["node"] for line in written if line["message"] == "interruption handled"}
    assert handled == {"evt-a": "node-a", "evt-b": "node-b"}
    (batch,) = [line for line in written if line["message"] == "interruption batch handled"]
    assert batch["event_ids"] == ["evt-a", "evt-b"]
