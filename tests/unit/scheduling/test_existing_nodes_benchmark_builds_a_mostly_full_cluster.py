"""bench/existing_nodes.py builds a cluster of mostly full nodes and reports the pass's decisions and can_add calls."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from types import ModuleType

BENCH = Path(__file__).resolve().parents[3] / "bench"


@pytest.fixture(scope="module")
def bench() -> ModuleType:
    sys.path.insert(0, str(BENCH))
    spec = importlib.util.spec_from_file_location("nodesmith_bench_existing_nodes", BENCH / "existing_nodes.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def test_most_nodes_are_full_and_every_tenth_is_a_tainted_gpu_node_with_room(bench: ModuleType) -> None:
    nodes = bench.existing_nodes(200, 0.05, 7)
    free = {n.name: n.allocatable["cpu"] - sum(p.requests["cpu"] for p in n.pods) for n in nodes}
    gpu = [n for n in nodes if n.labels.get(bench.GPU_LABEL) == "gpu"]
    assert len(gpu) == 20 and all(n.taints and free[n.name] >= 1000 for n in gpu)
    full = [n for n in nodes if free[n.name] < 100]
    assert 160 <= len(full) < 180


def test_the_report_counts_can_add_calls_and_writes_every_decision(
    bench: ModuleType, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    out = tmp_path / "decisions.json"
    assert bench.main(["--nodes", "60", "--pending", "40", "--decisions", str(out)]) == 0
    report = json.loads(capsys.readouterr().out)
    decided = json.loads(out.read_text())
    placed = sum(len(pods) for pods in decided["existing"].values())
    assert report["placed_on_existing"] == placed > 0
    assert report["nodeclaims"] == len(decided["nodeclaims"]) > 0
    assert report["can_add_calls"] >= placed
    assert len(report["decisions_sha256"]) == 64


def test_plain_pods_ask_one_cpu_and_nothing_else(bench: ModuleType) -> None:
    pods = bench.pending_pods(5, 1, "plain")
    assert [p.requests for p in pods] == [{"cpu": 1000, "memory": 2**30, "pods": 1}] * 5
    assert not any(p.node_selector or p.topology_spread or p.pod_anti_affinity or p.pod_affinity for p in pods)
    with pytest.raises(ValueError, match="unknown pod shape 'odd'"):
        bench.pending_pods(5, 1, "odd")
