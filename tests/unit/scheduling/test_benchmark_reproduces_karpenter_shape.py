"""bench/scheduling.py builds Karpenter's benchmark shape and every class of pod schedules."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from types import ModuleType

BENCH = Path(__file__).resolve().parents[3] / "bench" / "scheduling.py"


@pytest.fixture(scope="module")
def bench() -> ModuleType:
    spec = importlib.util.spec_from_file_location("nodesmith_bench_scheduling", BENCH)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def test_catalogue_matches_fake_instance_types(bench: ModuleType) -> None:
    types = bench.instance_types(400)
    assert len(types) == 400
    t7 = types[6]
    assert (t7.capacity["cpu"], t7.capacity["memory"], t7.capacity["pods"]) == (7000, 14 * 2**30, 70)
    assert len(t7.offerings) == 5
    assert t7.offerings[0].price == pytest.approx(0.1 * 7 + 0.1 * 14 * 2**30 / 1e9)


def test_diverse_pods_are_five_equal_classes(bench: ModuleType) -> None:
    pods = bench.diverse_pods(52)
    assert len(pods) == 52
    assert sum(1 for p in pods if p.pod_anti_affinity) == 10
    assert sum(1 for p in pods if p.pod_affinity) == 10
    assert sum(1 for p in pods if p.topology_spread) == 20


def test_every_pod_schedules_and_anti_affinity_sets_the_node_count(
    bench: ModuleType, capsys: pytest.CaptureFixture[str]
) -> None:
    assert bench.main(["--pods", "100", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert set(report) == {
        "pods",
        "nodeclaims",
        "unscheduled",
        "seconds",
        "pods_per_second",
        "peak_rss_mib",
        "decisions_sha256",
    }
    assert report["pods"] == 100 and report["unscheduled"] == 0
    assert report["nodeclaims"] == 20  # one NodeClaim per hostname anti-affinity pod, like Karpenter's run
    assert report["decisions_sha256"] == bench.decisions_sha256(
        bench.solve(
            bench.SchedulingInput(
                pods=bench.diverse_pods(100), nodepools=[bench.nodepool()], instance_types=bench.instance_types()
            )
        )
    )


def test_the_decisions_digest_tells_passes_apart(bench: ModuleType) -> None:
    def digest(pods: int) -> str:
        inp = bench.SchedulingInput(
            pods=bench.diverse_pods(pods), nodepools=[bench.nodepool()], instance_types=bench.instance_types(50)
        )
        return str(bench.decisions_sha256(bench.solve(inp)))

    assert digest(20) == digest(20)
    assert digest(20) != digest(21)
