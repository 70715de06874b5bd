"""The per-cluster rebalance setting, end to end through the interruption Lambda handler: ``ignore``
touches nothing, ``event`` only posts the Event, ``cordon`` (the default) cordons and keeps the pods,
``drain`` evicts them but never terminates the instance. Every record is acknowledged."""

from __future__ import annotations

import importlib.util
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from nodesmith.core.drain import DISRUPTED_TAINT
from nodesmith.handlers import interruption, wiring
from nodesmith.handlers.settings import Settings, load_settings

if TYPE_CHECKING:
    from collections.abc import Iterator
    from types import ModuleType

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
    aws_request_id = "req-rebalance"
    log_group_name = "/aws/lambda/nodesmith-interruption"
    log_stream_name = "2026/11/22/[$LATEST]abcdef"

    def get_remaining_time_in_millis(self) -> int:
        return 60_000


@pytest.fixture
def ports() -> Iterator[tuple[Any, Any]]:
    clock = fakes.FakeClock()
    cluster = fakes.FakeCluster(
        clock=clock,
        nodes=[fakes.make_node("node-a", IID)],
        pods=[fakes.make_pod("web-1", grace=0), fakes.make_pod("web-2", grace=0),
              fakes.make_pod("aws-node", namespace="kube-system", owner_kind="DaemonSet")],
        instant_termination=True,
    )  # fmt: skip
    cloud = fakes.FakeCloud([fakes.make_instance(IID)])
    yield cluster, cloud
    wiring.reset()


def deliver(cluster: Any, cloud: Any, action: str) -> list[Any]:
    # the setting as the stack passes it: an environment variable, validated
    settings = load_settings(
        {
            "NODESMITH_CLUSTER_NAME": fakes.CLUSTER,
            "NODESMITH_CLUSTER_ENDPOINT": "https://example.invalid",
            "NODESMITH_REBALANCE_ACTION": action,
        }
    )
    wiring.reset()
    wiring.set_ports(cluster=cluster, cloud=cloud, settings=settings)
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    body = fakes.event(IID, kind="rebalance", time=now)
    return interruption.handler({"Records": [fakes.sqs_record(body, message_id="m-1")]}, Context())["batchItemFailures"]


def test_ignore_touches_nothing(ports: tuple[Any, Any]) -> None:
    cluster, cloud = ports
    assert deliver(cluster, cloud, "ignore") == []
    assert cluster.calls == [] and cloud.calls == []


def test_event_posts_only_the_event(ports: tuple[Any, Any]) -> None:
    cluster, cloud = ports
    assert deliver(cluster, cloud, "event") == []
    assert [e[2] for e in cluster.events] == ["SpotRebalanceRecommendation"]
    assert cluster.count("taint_and_cordon") == 0 and not cluster.nodes["node-a"].unschedulable


def test_cordon_is_the_default_and_keeps_the_pods(ports: tuple[Any, Any]) -> None:
    cluster, cloud = ports
    assert Settings(cluster_name="c", cluster_endpoint="https://e").rebalance_action == "cordon"
    assert deliver(cluster, cloud, "cordon") == []
    node = cluster.nodes["node-a"]
    assert node.unschedulable and DISRUPTED_TAINT in node.taints
    assert cluster.count("evict") == 0 and len(cluster.pods) == 3
    assert [e[2] for e in cluster.events] == ["SpotRebalanceRecommendation"]


def test_drain_evicts_but_never_terminates(ports: tuple[Any, Any]) -> None:
    cluster, cloud = ports
    assert deliver(cluster, cloud, "drain") == []
    assert sorted(cluster.args("evict")) == ["default/web-1", "default/web-2"]
    assert list(cluster.pods) == ["kube-system/aws-node"]  # the DaemonSet pod stays
    assert "node-a" in cluster.nodes and cluster.nodes["node-a"].unschedulable
    assert all(c[0] != "terminate" for c in cloud.calls) and cluster.count("delete_nodeclaim") == 0
    assert cluster.lost == []
