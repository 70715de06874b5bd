"""After a Lambda container's first invocation, its warm heap (modules, clients, catalogue) leaves the garbage
collector's full collections (``gc.freeze``), once; outside Lambda nothing is frozen, and ``wiring.reset``
gives the heap back to the collector."""

from __future__ import annotations

import gc
import sys
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "services"))

from reconcile_fakes import FakeCloud, FakeCluster, make_nodeclass, make_nodepool

from nodesmith.handlers import interruption, reconcile, wiring
from nodesmith.handlers.settings import Settings


class Context:
    function_name = "nodesmith-reconcile"
    function_version = "$LATEST"
    memory_limit_in_mb = 1024
    invoked_function_arn = "arn:aws:lambda:us-east-1:123456789012:function:nodesmith-reconcile"
    aws_request_id = "req-1"

    def get_remaining_time_in_millis(self) -> int:
        return 60_000


@pytest.fixture
def ports() -> Any:
    wiring.reset()
    wiring.set_ports(
        cluster=FakeCluster(nodepools=[make_nodepool()], nodeclasses=[make_nodeclass()]),
        cloud=FakeCloud(),
        settings=Settings(cluster_name="test", cluster_endpoint="http://kube"),
    )
    yield
    wiring.reset()


@pytest.mark.parametrize(
    "invoke",
    [
        pytest.param(lambda: reconcile.handler({}, Context()), id="reconcile"),
        pytest.param(lambda: interruption.handler({"Records": []}, Context()), id="interruption"),
    ],
)
def test_the_first_invocation_in_lambda_freezes_the_warm_heap_once(
    ports: None, monkeypatch: pytest.MonkeyPatch, invoke: Any
) -> None:
    monkeypatch.setenv("AWS_LAMBDA_FUNCTION_NAME", Context.function_name)
    assert gc.get_freeze_count() == 0

    invoke()
    frozen = gc.get_freeze_count()
    assert frozen > 0  # the modules and clients the invocation used are out of full collections

    since = [[] for _ in range(1000)]  # tracked objects a second freeze would take too
    invoke()
    assert gc.get_freeze_count() <= frozen  # what later invocations allocate stays collectable
    assert gc.is_tracked(since[0])

    wiring.reset()
    assert gc.get_freeze_count() == 0


def test_outside_lambda_nothing_is_frozen(ports: None, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("AWS_LAMBDA_FUNCTION_NAME", raising=False)
    reconcile.handler({}, Context())
    assert gc.get_freeze_count() == 0
    assert wiring.freeze_warm_heap() is False
