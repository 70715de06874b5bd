"""In a batch of several interruptions, each line about one of them carries that one's keys.

The batch is worked in thread pools (cordon, then drain, one task per instance). A line logged
inside a task -- here a service's own warning when the drain of the second node fails -- must carry
its own ``event_id``, ``instance_id``, ``node`` and ``nodeclaim``, never the batch's list of event
ids; the handler's per-message lines (and the missed-deadline warning) carry their message's keys;
only the batch-wide lines carry ``event_ids``. Every line is captured as the JSON the Powertools handler writes.
"""

from __future__ import annotations

import io
import json
import time
from typing import TYPE_CHECKING, Any

import pytest
from test_one_interruption_can_be_followed_in_the_logs import Context, fakes, spot_record

from nodesmith.core.errors import KubernetesError
from nodesmith.handlers import interruption, wiring
from nodesmith.handlers.observability import logger, tracer
from nodesmith.handlers.settings import Settings

if TYPE_CHECKING:
    from collections.abc import Iterator

A, B = "i-1234567890abcdef0", "i-0fedcba9876543210"
EXPECTED = {
    "evt-a": {"instance_id": A, "node": "node-a", "nodeclaim": "default-a", "message_id": "m-a"},
    "evt-b": {"instance_id": B, "node": "node-b", "nodeclaim": "default-b", "message_id": "m-b"},
}
TRACE = ("instance_id", "node", "nodeclaim", "message_id")


class DrainOfBFails(fakes.FakeCluster):  # type: ignore[misc,name-defined]
    """Listing node-b's pods fails once it is cordoned, so its drain task raises and a service logs it."""

    def list_pods(self, *, node_name: str | None = None) -> list[Any]:
        node = self.nodes.get("node-b")
        if node_name == "node-b" and node is not None and node.unschedulable:
            raise KubernetesError("list pods on node-b: 503 Service Unavailable", status=503)
        return list(super().list_pods(node_name=node_name))


@pytest.fixture
def annotations(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, str]]:
    seen: list[tuple[str, str]] = []
    monkeypatch.setattr(tracer, "put_annotation", lambda key, value: seen.append((key, value)))
    return seen


@pytest.fixture
def written(annotations: list[tuple[str, str]]) -> Iterator[list[dict[str, Any]]]:
    """The JSON lines the Powertools handler writes during one two-message invocation."""
    handler = logger.registered_handler
    stream = io.StringIO()
    previous = handler.setStream(stream)  # type: ignore[attr-defined]
    cluster = DrainOfBFails(
        clock=fakes.FakeClock(),
        nodes=[fakes.make_node("node-a", A), fakes.make_node("node-b", B)],
        pods=[fakes.make_pod("web-1", grace=0), fakes.make_pod("web-2", node="node-b", grace=0)],
        instant_termination=True,
    )
    cloud = fakes.FakeCloud(
        [fakes.make_instance(A, nodeclaim="default-a"), fakes.make_instance(B, nodeclaim="default-b")]
    )
    wiring.reset()
    wiring.set_ports(
        cluster=cluster,
        cloud=cloud,
        settings=Settings(cluster_name=fakes.CLUSTER, cluster_endpoint="https://example.invalid"),
    )
    now = time.time()
    records = [
        spot_record(event_id="evt-a", instance_id=A, sent=now - 150, message_id="m-a"),  # handled too late
        spot_record(event_id="evt-b", instance_id=B, sent=now - 2, message_id="m-b"),
    ]
    try:
        response = interruption.handler({"Records": records}, Context())
    finally:
        wiring.reset()
        handler.setStream(previous)  # type: ignore[attr-defined]
    assert response == {"batchItemFailures": [{"itemIdentifier": "m-b"}]}
    yield [json.loads(line) for line in stream.getvalue().splitlines() if line.startswith("{")]


def test_a_line_logged_inside_one_instance_task_carries_that_instance_keys(written: list[dict[str, Any]]) -> None:
    (failed,) = [line for line in written if line["message"].startswith("interruption work failed for m-b")]
    assert {key: failed.get(key) for key in ("event_id", *TRACE)} == {"event_id": "evt-b", **EXPECTED["evt-b"]}
    assert "event_ids" not in failed


def test_every_line_about_one_interruption_carries_only_its_own_keys(written: list[dict[str, Any]]) -> None:
    about_one = [line for line in written if "event_id" in line]
    assert {line["event_id"] for line in about_one} == {"evt-a", "evt-b"}
    for line in about_one:
        assert "event_ids" not in line, line
        expected = EXPECTED[line["event_id"]]
        mismatched = {key: line[key] for key in TRACE if key in line and line[key] != expected[key]}
        assert mismatched == {}, line
    (handled_a,) = [line for line in about_one if line["message"] == "interruption handled"]
    assert {key: handled_a[key] for key in TRACE} == EXPECTED["evt-a"]
    (late_a,) = [line for line in about_one if "missed the interruption deadline" in line["message"]]
    assert {key: late_a[key] for key in ("instance_id", "node", "nodeclaim")} == {
        key: EXPECTED["evt-a"][key] for key in ("instance_id", "node", "nodeclaim")
    }
    (failed_b,) = [line for line in about_one if line["message"].startswith("interruption message failed")]
    assert failed_b["event_id"] == "evt-b" and failed_b["message_id"] == "m-b"


def test_only_the_batch_wide_lines_carry_the_list_of_event_ids(written: list[dict[str, Any]]) -> None:
    batch_wide = [line for line in written if "event_id" not in line]
    assert batch_wide, "the batch summary line is missing"
    assert all(line.get("event_ids") == ["evt-a", "evt-b"] for line in batch_wide), batch_wide
    assert any(line["message"] == "interruption batch handled" for line in batch_wide)


def test_the_trace_of_the_batch_names_every_interruption_in_it(
    written: list[dict[str, Any]], annotations: list[tuple[str, str]]
) -> None:
    assert ("event_ids", "evt-a,evt-b") in annotations and ("instance_ids", f"{A},{B}") in annotations
