"""The reconcile Lambda handler: runs a pass on the wired ports, emits the dashboard's metrics as EMF,
reports a failed pass as ReconcileErrors and re-raises, and imports no Kubernetes client. After a Lambda
container's first invocation (of either handler) its warm heap leaves the garbage collector's full collections
(``gc.freeze``), once; outside Lambda nothing is frozen, and ``wiring.reset`` gives the heap back."""

from __future__ import annotations

import gc
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "services"))

from reconcile_fakes import FakeCloud, FakeCluster, make_nodeclass, make_nodepool, make_pod

from nodesmith.handlers import wiring
from nodesmith.handlers.settings import Settings


class Context:
    function_name = "nodesmith-reconcile"
    memory_limit_in_mb = 1024
    invoked_function_arn = "arn:aws:lambda:us-east-1:123456789012:function:nodesmith-reconcile"
    aws_request_id = "req-1"

    def get_remaining_time_in_millis(self) -> int:
        return 60_000


@pytest.fixture
def ports() -> Any:
    cluster = FakeCluster(nodepools=[make_nodepool()], nodeclasses=[make_nodeclass()])
    cluster.pods = [make_pod(f"inflate-{i}") for i in range(3)]
    cloud = FakeCloud()
    wiring.reset()
    wiring.set_ports(
        cluster=cluster, cloud=cloud, settings=Settings(cluster_name="test", cluster_endpoint="http://kube")
    )
    yield cluster, cloud
    wiring.reset()


def emitted(out: str) -> dict[str, list[tuple[Any, dict[str, str], str]]]:
    """Metric name -> [(value, dimensions, unit)] from the EMF documents printed on stdout."""
    found: dict[str, list[tuple[Any, dict[str, str], str]]] = {}
    for line in out.splitlines():
        if '"_aws"' not in line:
            continue
        doc = json.loads(line)
        for directive in doc["_aws"]["CloudWatchMetrics"]:
            dims = {d: doc[d] for group in directive["Dimensions"] for d in group}
            for metric in directive["Metrics"]:
                value = doc[metric["Name"]]
                value = sum(value) if isinstance(value, list) else value
                found.setdefault(metric["Name"], []).append((value, dims, metric.get("Unit", "")))
    return found


def test_a_pass_emits_the_provisioning_metrics(ports: Any, capsys: pytest.CaptureFixture[str]) -> None:
    from nodesmith.handlers.reconcile import handler

    summary = handler({"source": "aws.events", "detail-type": "Scheduled Event"}, Context())

    assert summary["nodeclaims_launched"] == 1 and summary["pods_pending"] == 3
    metrics = emitted(capsys.readouterr().out)
    assert metrics["PodsPending"][0][0] == 3
    assert metrics["PodsScheduled"][0][0] == 3
    assert metrics["NodeClaimsCreated"][0][0] == 1
    assert metrics["NodeClaimsLaunched"][0][0] == 1
    assert metrics["ReconcileErrors"][0][0] == 0
    cost, _, unit = metrics["ClusterCostUSDPerHour"][0]
    assert cost == pytest.approx(0.17 * 0.3) and unit == "None"
    for name in ("OldestPendingPodAgeSeconds", "SchedulingDurationSeconds", "ReconcileDurationSeconds"):
        assert metrics[name][0][2] == "Seconds"


def test_disabled_metrics_print_nothing_not_even_the_per_dimension_ones(
    ports: Any, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """``POWERTOOLS_METRICS_DISABLED`` (local runs, the bench) silences the by-dimension metrics too: they
    would be printed among a caller's output (the bench's ``--json``) otherwise."""
    from nodesmith.handlers.reconcile import handler

    monkeypatch.setenv("POWERTOOLS_METRICS_DISABLED", "true")

    summary = handler({}, Context())

    assert summary["nodeclaims_launched"] == 1
    assert emitted(capsys.readouterr().out) == {}


def test_launch_failures_are_counted_by_error_code(ports: Any, capsys: pytest.CaptureFixture[str]) -> None:
    from nodesmith.handlers.reconcile import handler

    _, cloud = ports
    cloud.ice = {(it.name, o.zone, "spot") for it in cloud.types for o in it.offerings}

    handler({}, Context())

    failures = emitted(capsys.readouterr().out)["LaunchFailures"]
    # One CreateFleet per spot NodeClaim tried (how many depends on the packing policy).
    assert [d["ErrorCode"] for _, d, _ in failures] == ["InsufficientInstanceCapacity"]
    assert failures[0][0] >= 1


def test_a_failed_pass_is_counted_and_raised(ports: Any, capsys: pytest.CaptureFixture[str]) -> None:
    from nodesmith.core.errors import KubernetesError
    from nodesmith.handlers.reconcile import handler

    cluster, _ = ports

    def broken() -> list[Any]:
        raise KubernetesError("apiserver unavailable", status=503)

    cluster.list_nodes = broken  # type: ignore[method-assign]
    with pytest.raises(KubernetesError):
        handler({}, Context())
    metrics = emitted(capsys.readouterr().out)
    assert metrics["ReconcileErrors"][0][0] == 1


def test_importing_the_handler_does_not_import_kubernetes() -> None:
    code = "import sys, nodesmith.handlers.reconcile; sys.exit('kubernetes' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], check=False).returncode == 0


@pytest.mark.parametrize("name", ["reconcile", "interruption"])
def test_the_first_invocation_in_lambda_freezes_the_warm_heap_once(
    ports: Any, monkeypatch: pytest.MonkeyPatch, name: str
) -> None:
    from nodesmith.handlers import interruption, reconcile

    invoke = {
        "reconcile": lambda: reconcile.handler({}, Context()),
        "interruption": lambda: interruption.handler({"Records": []}, Context()),
    }[name]
    monkeypatch.setenv("AWS_LAMBDA_FUNCTION_NAME", Context.function_name)
    assert gc.get_freeze_count() == 0

    invoke()
    frozen = gc.get_freeze_count()
    assert frozen > 0  # the modules and clients the invocation used are out of full collections

    since = [[] for _ in range(1000)]  # tracked objects a second freeze would take too
    invoke()
    assert gc.get_freeze_count() <= frozen  # what later invocations allocate stays collectable
    del since

    wiring.reset()
    assert gc.get_freeze_count() == 0


def test_outside_lambda_nothing_is_frozen(ports: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    from nodesmith.handlers.reconcile import handler

    monkeypatch.delenv("AWS_LAMBDA_FUNCTION_NAME", raising=False)
    handler({}, Context())
    assert gc.get_freeze_count() == 0
    assert wiring.freeze_warm_heap() is False
