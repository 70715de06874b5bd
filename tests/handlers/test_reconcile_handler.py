"""The reconcile Lambda handler: runs a pass on the wired ports, emits the dashboard's metrics as EMF,
reports a failed pass as ReconcileErrors and re-raises, and imports no Kubernetes client. A wake from the
interruption function runs a provisioning pass, unless a pass of this container began after the wake's
cordons (that pass saw them)."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "services"))

from reconcile_fakes import FakeCloud, FakeCluster, make_nodeclass, make_nodepool, make_pod

from nodesmith.handlers import wiring
from nodesmith.handlers.settings import Settings
from nodesmith.services.reconciler.container import WarmContainer


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


def test_a_pass_failed_by_the_api_server_is_counted_and_answered_failed(
    ports: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    from nodesmith.core.errors import KubernetesError
    from nodesmith.handlers.reconcile import handler

    cluster, _ = ports

    def broken() -> list[Any]:
        raise KubernetesError("apiserver unavailable", status=503)

    cluster.list_nodes = broken  # type: ignore[method-assign]
    answer = handler({}, Context())
    assert answer == {"status": "failed: apiserver unavailable"}
    assert emitted(capsys.readouterr().out)["ReconcileErrors"][0][0] == 1


def test_a_fault_of_nodesmith_itself_is_counted_and_raised(ports: Any, capsys: pytest.CaptureFixture[str]) -> None:
    from nodesmith.handlers.reconcile import handler

    cluster, _ = ports

    def broken() -> list[Any]:
        raise TypeError("a bug")

    cluster.list_nodes = broken  # type: ignore[method-assign]
    with pytest.raises(TypeError):
        handler({}, Context())
    assert emitted(capsys.readouterr().out)["ReconcileErrors"][0][0] == 1


def test_importing_the_handler_does_not_import_kubernetes() -> None:
    code = "import sys, nodesmith.handlers.reconcile; sys.exit('kubernetes' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], check=False).returncode == 0


class AlmostDone(Context):
    """An invocation with 30 s left: all of it is the exit margin, so a wake's burst watch ends at once."""

    def get_remaining_time_in_millis(self) -> int:
        return 30_000


def test_a_wake_is_skipped_when_a_pass_of_this_container_began_after_its_cordons(
    ports: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    from nodesmith.adapters.aws.wake import provision_event
    from nodesmith.handlers import reconcile

    monkeypatch.setattr(reconcile, "_CONTAINER", WarmContainer())  # a new container
    cluster, cloud = ports
    cordoned_at = time.time()  # nodes cordoned, then a scheduled pass begins and sees them
    reconcile.handler({}, Context())
    assert len(cloud.requests) == 1
    cluster.pods.append(make_pod("late", cpu="2"))  # a pass would launch for it

    skipped = reconcile.handler(provision_event(cordoned_at), AlmostDone())

    assert skipped["status"].startswith("skipped") and skipped["woken_for"] == cordoned_at
    assert len(cloud.requests) == 1  # no pass ran

    woken = reconcile.handler(provision_event(time.time()), AlmostDone())  # cordons after the last pass began

    assert woken["nodeclaims_launched"] == 1 and len(cloud.requests) == 2
    assert woken["woken_for"] > cordoned_at and woken["burst"]["passes"] == 1


def test_a_new_container_serves_any_wake(ports: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    from nodesmith.adapters.aws.wake import provision_event
    from nodesmith.handlers import reconcile

    monkeypatch.setattr(reconcile, "_CONTAINER", WarmContainer())

    woken = reconcile.handler(provision_event(time.time() - 3600.0), AlmostDone())

    assert woken["nodeclaims_launched"] == 1
