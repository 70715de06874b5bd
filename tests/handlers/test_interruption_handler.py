"""The interruption Lambda reports exactly the failing records to SQS, acknowledges malformed, no-op and
foreign ones, emits the metrics the dashboard reads, and does not import kubernetes at import time."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from infra.metric_names import MetricName
from nodesmith.handlers import interruption, wiring
from nodesmith.handlers.settings import Settings

if TYPE_CHECKING:
    from collections.abc import Iterator
    from types import ModuleType

EVENTS = Path(__file__).resolve().parents[1] / "events"
FAILING_MESSAGE_ID = "4d5c7f9b-0a1e-4e2f-9b3c-6d7e8f9a0b1c"


def load_services_module(filename: str) -> ModuleType:
    """A helper module of ``tests/services`` (the test folders are not packages), loaded once."""
    name = f"nodesmith_tests_{filename.removesuffix('.py')}"
    if name not in sys.modules:
        path = Path(__file__).resolve().parents[1] / "services" / filename
        spec = importlib.util.spec_from_file_location(name, path)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


fakes = load_services_module("interruption_fakes.py")


@dataclass
class Context:
    """The attributes of a Lambda context that Powertools reads."""

    function_name: str = "nodesmith-interruption"
    function_version: str = "$LATEST"
    invoked_function_arn: str = "arn:aws:lambda:us-west-2:123456789012:function:nodesmith-interruption"
    memory_limit_in_mb: int = 512
    aws_request_id: str = "c6af9ac6-7b61-11e6-9a41-93e8deadbeef"
    log_group_name: str = "/aws/lambda/nodesmith-interruption"
    log_stream_name: str = "2026/11/22/[$LATEST]abcdef"
    remaining_ms: int = 300_000

    def get_remaining_time_in_millis(self) -> int:
        return self.remaining_ms


@dataclass
class Ports:
    cluster: Any
    cloud: Any


@pytest.fixture
def ports() -> Iterator[Ports]:
    clock = fakes.FakeClock()
    cluster = fakes.FakeCluster(
        clock=clock,
        nodes=[fakes.make_node("node-a", "i-1234567890abcdef0"), fakes.make_node("node-bad", "i-0badc0ffee0000001")],
        pods=[fakes.make_pod("web-1", grace=0), fakes.make_pod("web-2", node="node-bad", grace=0)],
        instant_termination=True,
        fail_nodes={"node-bad"},
    )
    cloud = fakes.FakeCloud(
        [
            fakes.make_instance("i-1234567890abcdef0"),
            fakes.make_instance("i-0badc0ffee0000001", nodeclaim="default-bad"),
            fakes.make_instance("i-0fedcba9876543210", ours=False),
        ]
    )
    settings = Settings(
        cluster_name=fakes.CLUSTER, cluster_endpoint="https://example.invalid", drain_timeout_seconds=30
    )
    wiring.reset()
    wiring.set_ports(cluster=cluster, cloud=cloud, settings=settings)
    yield Ports(cluster=cluster, cloud=cloud)
    wiring.reset()


def batch() -> dict[str, Any]:
    """The golden SQS batch, its events stamped as just sent (the spot deadline is two minutes away)."""
    event = json.loads((EVENTS / "sqs_batch.json").read_text())
    now = time.time()
    for record in event["Records"]:
        record["attributes"]["SentTimestamp"] = str(int((now - 2) * 1000))
        try:
            body = json.loads(record["body"])
        except ValueError:
            continue
        body["time"] = datetime.fromtimestamp(now - 3, tz=UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        record["body"] = json.dumps(body)
    return event


def emf_metrics(stdout: str) -> list[tuple[str, float, dict[str, str]]]:
    """(name, value, dimensions) of every metric in the EMF documents printed to stdout."""
    found = []
    for line in stdout.splitlines():
        try:
            doc = json.loads(line)
        except ValueError:
            continue
        if not isinstance(doc, dict) or "_aws" not in doc:
            continue
        for directive in doc["_aws"]["CloudWatchMetrics"]:
            dims = {d: doc[d] for group in directive["Dimensions"] for d in group}
            for metric in directive["Metrics"]:
                value = doc[metric["Name"]]
                for v in value if isinstance(value, list) else [value]:
                    found.append((metric["Name"], float(v), dims))
    return found


def total(metrics: list[tuple[str, float, dict[str, str]]], name: str, **dims: str) -> float:
    return sum(v for n, v, d in metrics if n == name and all(d.get(k) == val for k, val in dims.items()))


def test_batch_reports_exactly_the_failing_record(ports: Ports, capsys: pytest.CaptureFixture[str]) -> None:
    response = interruption.handler(batch(), Context())

    assert response == {"batchItemFailures": [{"itemIdentifier": FAILING_MESSAGE_ID}]}
    # the good record did its work; the foreign one touched nothing
    assert ports.cluster.args("evict") == ["default/web-1"]
    assert ("terminate", ("i-1234567890abcdef0",)) in ports.cloud.calls
    assert "node-a" not in ports.cluster.nodes
    assert sorted(ports.cluster.args("taint_and_cordon")) == ["node-a", "node-bad"]  # cordoned in parallel

    metrics = emf_metrics(capsys.readouterr().out)
    assert total(metrics, "InterruptionMessagesMalformed") == 1
    assert total(metrics, "InterruptionMessagesReceived", MessageType="spot_interrupted") == 3
    assert total(metrics, "InterruptionMessagesReceived", MessageType="no_op") == 1
    assert total(metrics, "InterruptionMessagesIgnored", Reason="unhandled_state") == 1
    assert total(metrics, "InterruptionMessagesIgnored", Reason="foreign") == 1
    assert total(metrics, "NodesCordoned") == 1
    assert total(metrics, "PodsEvicted") == 1
    assert total(metrics, "NodeClaimsTerminated") == 1
    assert [n for n, _, _ in metrics].count("InterruptionQueueAgeSeconds") == 5
    assert [n for n, _, _ in metrics].count("DrainDurationSeconds") == 1
    # the dashboard and alarms read only the names in infra/metric_names.py
    assert {n for n, _, _ in metrics} <= {m.value for m in MetricName}


def test_a_batch_of_only_malformed_and_ignored_records_acknowledges_everything(ports: Ports) -> None:
    event = batch()
    # the broken body, the foreign instance and the 'running' state change
    event["Records"] = [r for r in event["Records"] if r["messageId"].startswith(("2e14", "3c4b", "5e6d"))]
    assert len(event["Records"]) == 3
    assert interruption.handler(event, Context()) == {"batchItemFailures": []}
    assert ports.cluster.count("evict") == 0


def test_when_every_record_fails_each_is_reported_without_raising(ports: Ports) -> None:
    event = batch()
    event["Records"] = [r for r in event["Records"] if r["messageId"] == FAILING_MESSAGE_ID] * 2
    event["Records"][1] = {**event["Records"][1], "messageId": "second"}
    response = interruption.handler(event, Context())
    assert response == {"batchItemFailures": [{"itemIdentifier": FAILING_MESSAGE_ID}, {"itemIdentifier": "second"}]}


def test_an_unfinished_drain_fails_the_record_so_sqs_delivers_it_again(ports: Ports) -> None:
    ports.cluster.pdb_blocks["default/web-1"] = -1
    event = batch()
    event["Records"] = [event["Records"][0]]
    response = interruption.handler(event, Context(remaining_ms=10_500))  # 0.5 s of budget left after the margin
    assert response == {"batchItemFailures": [{"itemIdentifier": event["Records"][0]["messageId"]}]}
    assert "node-a" in ports.cluster.nodes  # not removed while pods remain


def test_importing_the_handler_does_not_import_kubernetes() -> None:
    code = (
        "import sys, nodesmith.handlers.interruption as h; "
        "assert callable(h.handler); "
        "bad = [m for m in ('kubernetes', 'boto3', 'nodesmith.adapters.kube.cluster') if m in sys.modules]; "
        "print(bad); sys.exit(1 if bad else 0)"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr


def _memory_state() -> Any:
    """The tests' in-memory state store (``tests/services/memory_state.py``)."""
    path = Path(__file__).resolve().parents[1] / "services" / "memory_state.py"
    spec = importlib.util.spec_from_file_location("nodesmith_tests_memory_state", path)
    assert spec is not None and spec.loader is not None
    memory = sys.modules.setdefault(spec.name, importlib.util.module_from_spec(spec))
    spec.loader.exec_module(memory)  # registered first: its dataclasses look their module up
    return memory.MemoryStateStore()


def test_with_a_reconcile_function_the_batch_wakes_it_for_the_replacement_pass(ports: Ports) -> None:
    state = _memory_state()
    woken: list[float] = []
    before = time.time()
    wiring.set_ports(state=state, waker=woken.append)
    event = batch()
    event["Records"] = [r for r in event["Records"] if r["messageId"] != FAILING_MESSAGE_ID]

    interruption.handler(event, Context())

    assert len(woken) == 1 and before <= woken[0] <= time.time()  # one batch, one wake, at its cordon time
    assert ports.cluster.args("taint_and_cordon") == ["node-a"]
    assert state.lease_holder(name="reconcile", now=time.time()) is None  # the batch took no lease


@pytest.mark.parametrize(("with_waker", "with_state"), [(True, True), (True, False), (False, True)])
def test_a_burst_asks_for_its_replacements_at_once_only_when_the_reconcile_function_runs_them(
    ports: Ports, monkeypatch: pytest.MonkeyPatch, with_waker: bool, with_state: bool
) -> None:
    real = interruption.handle_batch
    seen: dict[str, Any] = {}

    def spy(**kwargs: Any) -> Any:
        seen.update(kwargs)
        return real(**kwargs)

    monkeypatch.setattr(interruption, "handle_batch", spy)
    if with_waker:
        wiring.set_ports(waker=lambda after: None)
    if with_state:
        wiring.set_ports(state=_memory_state())
    event = batch()
    event["Records"] = [r for r in event["Records"] if r["messageId"] != FAILING_MESSAGE_ID]

    interruption.handler(event, Context())

    # without a waker, or without the lease's state table, the pass would run in this invocation
    assert seen["replace_at_handoff"] is (with_waker and with_state)


@pytest.mark.parametrize(("receive_count", "reads"), [("1", 0), ("2", 1), (None, 1)])
def test_stored_drain_progress_is_read_unless_sqs_delivers_the_record_for_the_first_time(
    ports: Ports, receive_count: str | None, reads: int
) -> None:
    state = load_services_module("memory_state.py").MemoryStateStore()
    wiring.set_ports(state=state)
    event = batch()
    record = event["Records"][0]  # the spot interruption warning for node-a's instance
    if receive_count is None:
        del record["attributes"]["ApproximateReceiveCount"]
    else:
        record["attributes"]["ApproximateReceiveCount"] = receive_count

    result = interruption.handler({"Records": [record]}, Context())

    assert result == {"batchItemFailures": []}
    assert ports.cluster.count("evict") == 1  # drained either way: web-1 left node-a
    assert len(state.reads) == reads  # a redelivery (or an unknown count) may resume a drain that died


def test_a_burst_hands_its_drains_off_a_few_seconds_late_behind_the_originals_still_arriving() -> None:
    clock = fakes.FakeClock()
    ids = [f"i-00000000000010{n:02d}" for n in range(interruption.HANDOFF_MIN_DRAINS)]
    nodes = [fakes.make_node(f"node-{n}", iid) for n, iid in enumerate(ids)]
    pods = [fakes.make_pod(f"web-{n}", node=f"node-{n}", grace=0) for n in range(len(ids))]
    cluster = fakes.FakeCluster(clock=clock, nodes=nodes, pods=pods, instant_termination=True)
    cloud = fakes.FakeCloud([fakes.make_instance(iid, nodeclaim=f"nc-{n}") for n, iid in enumerate(ids)])
    sent: list[tuple[dict[str, Any], int]] = []
    wiring.reset()
    wiring.set_ports(
        cluster=cluster,
        cloud=cloud,
        settings=Settings(cluster_name=fakes.CLUSTER, cluster_endpoint="https://example.invalid"),
        requeue=lambda body, delay: sent.append((dict(body), delay)),
    )
    now = time.time()
    stamp = datetime.fromtimestamp(now - 1, tz=UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    records = [
        {"messageId": f"msg-{n}", "receiptHandle": f"rh-{n}", "body": json.dumps(fakes.event(iid, time=stamp)),
         "attributes": {"SentTimestamp": str(int(now * 1000)), "ApproximateReceiveCount": "1"},
         "eventSource": "aws:sqs"}
        for n, iid in enumerate(ids)
    ]  # fmt: skip
    try:
        result = interruption.handler({"Records": records}, Context())
    finally:
        wiring.reset()

    assert result == {"batchItemFailures": []}
    assert cluster.count("taint_and_cordon") == len(ids) and cluster.count("evict") == 0  # cordoned, not drained
    assert [body["nodesmith-continuation"]["handoff"] for body, _ in sent] == [True] * len(ids)
    # not receivable at once: the pollers take the burst's later originals first
    assert {delay for _, delay in sent} == {interruption.HANDOFF_DELAY_SECONDS}
    assert 0 < interruption.HANDOFF_DELAY_SECONDS <= 5


class SlowEvictions(fakes.FakeCluster):  # type: ignore[name-defined,misc]
    """Each eviction takes 2 s of real time (the handler times its drains on the real clock)."""

    def evict(self, *, pod: Any, grace_period_seconds: int | None = None) -> str:
        time.sleep(2.0)
        return str(super().evict(pod=pod, grace_period_seconds=grace_period_seconds))


class Queue:
    """The interruption queue as the handler's requeue sees it: ``send`` and ``send_batch``."""

    def __init__(self) -> None:
        self.sent: list[tuple[dict[str, Any], int]] = []

    def send(self, body: Any, delay_seconds: int) -> str:
        self.sent.append((json.loads(json.dumps(body)), delay_seconds))
        return "sent"

    def send_batch(self, messages: Any) -> list[str | None]:
        for body, delay in messages:
            self.send(body, delay)
        return [None] * len(messages)


def test_hand_offs_whose_drains_cannot_begin_in_the_first_half_of_the_budget_go_back_to_the_queue() -> None:
    clock = fakes.FakeClock()
    ids = [f"i-00000000000020{n:02d}" for n in range(20)]
    nodes = [fakes.make_node(f"node-{n}", iid) for n, iid in enumerate(ids)]
    pods = [fakes.make_pod(f"web-{n}", node=f"node-{n}", grace=0) for n in range(len(ids))]
    cluster = SlowEvictions(clock=clock, nodes=nodes, pods=pods, instant_termination=True)
    cloud = fakes.FakeCloud([fakes.make_instance(iid, nodeclaim=f"nc-{n}") for n, iid in enumerate(ids)])
    queue = Queue()
    wiring.reset()
    settings = Settings(cluster_name=fakes.CLUSTER, cluster_endpoint="https://example.invalid")
    wiring.set_ports(cluster=cluster, cloud=cloud, requeue=queue.send, settings=settings)
    now = time.time()
    stamp = datetime.fromtimestamp(now - 1, tz=UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    bodies = [
        {
            **fakes.event(iid, time=stamp),
            "nodesmith-continuation": {"attempt": 1, "instance-ids": [iid], "handoff": True},
        }
        for iid in ids
    ]
    records = [
        {"messageId": f"msg-{n}", "receiptHandle": f"rh-{n}", "body": json.dumps(body),
         "attributes": {"SentTimestamp": str(int(now * 1000)), "ApproximateReceiveCount": "1"},
         "eventSource": "aws:sqs"}
        for n, body in enumerate(bodies)
    ]  # fmt: skip
    # 3 s of drain budget (10 s are kept back): a drain not begun within 1.5 s goes back. At most DRAIN_WORKERS
    # drains run at once, each 2 s long, so the others cannot begin in time; those that begin end 1 s within budget.
    try:
        result = interruption.handler({"Records": records}, Context(remaining_ms=13_000))
    finally:
        wiring.reset()

    assert result == {"batchItemFailures": []}  # every record acknowledged: drained, or carried on by its copy
    sent_back = [body for body, delay in queue.sent if delay == 0]
    assert len(sent_back) >= len(ids) - interruption.DRAIN_WORKERS and len(queue.sent) == len(sent_back)
    assert all(body in bodies for body in sent_back)  # as they came
    drained = {n.name for n in nodes} - set(cluster.nodes)
    assert len(drained) + len(sent_back) == len(ids)


def test_a_warm_container_writes_an_interrupted_offerings_mark_once_and_a_new_one_again(ports: Ports) -> None:
    state = _memory_state()
    wiring.set_ports(state=state)
    event = batch()
    event["Records"] = [r for r in event["Records"] if r["messageId"] != FAILING_MESSAGE_ID]

    interruption.handler(event, Context())
    interruption.handler(event, Context())  # the same warm container
    writes_warm = [w for w in state.writes if w.startswith("offering#")]
    settings = wiring.get_settings()
    wiring.reset()  # a new container
    wiring.set_ports(cluster=ports.cluster, cloud=ports.cloud, settings=settings, state=state)
    interruption.handler(event, Context())

    assert len(writes_warm) == 1
    assert [w for w in state.writes if w.startswith("offering#")] == writes_warm * 2
