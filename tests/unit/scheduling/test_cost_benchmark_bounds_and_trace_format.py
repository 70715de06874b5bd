"""bench/cost.py: the trace format, the plain and class LP lower bounds and one end-to-end run."""

from __future__ import annotations

import importlib.util
import json
import sys
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from scheduling_support import make_type

if TYPE_CHECKING:
    from types import ModuleType

    from nodesmith.core.model import InstanceType

REPO = Path(__file__).resolve().parents[3]
BENCH = REPO / "bench" / "cost.py"
SHARED = REPO.parent / "shared" / "data"
HEADER = (
    "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,deletion_time,scheduled_time\n"
)


@pytest.fixture(scope="module")
def bench() -> ModuleType:
    spec = importlib.util.spec_from_file_location("nodesmith_bench_cost", BENCH)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def on_demand(it: InstanceType) -> InstanceType:
    return replace(it, offerings=tuple(o for o in it.offerings if o.capacity_type == "on-demand"))


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "trace.csv"
    path.write_text(text, encoding="utf-8")
    return path


def test_trace_rows_become_requests_with_whole_gpus(bench: ModuleType, tmp_path: Path) -> None:
    path = write(tmp_path, HEADER + "a,12000,16384,1,460,,LS,Running,0,1,0\nb,500,100,0,0,,BE,Running,0,1,0\n")
    a, b = bench.read_trace(path)
    assert a.requests() == {"cpu": 12000, "memory": 16384 * 2**20, "pods": 1, "nvidia.com/gpu": 1}
    assert b.requests() == {"cpu": 500, "memory": 100 * 2**20, "pods": 1}
    assert [p.name for p in bench.read_trace(path, limit=1)] == ["a"]


def test_a_trace_without_the_needed_columns_or_numbers_is_bad_input(bench: ModuleType, tmp_path: Path) -> None:
    with pytest.raises(bench.BenchInputError, match=r"missing column.*num_gpu"):
        bench.read_trace(write(tmp_path, "cpu_milli,memory_mib\n1,1\n"))
    with pytest.raises(bench.BenchInputError, match=r"trace.csv:3: memory_mib is not a number: 'lots'"):
        bench.read_trace(write(tmp_path, "cpu_milli,memory_mib,num_gpu\n1,1,0\n1,lots,0\n"))
    with pytest.raises(bench.BenchInputError, match="not found"):
        bench.read_trace(tmp_path / "absent.csv")
    assert bench.main(["--pods", str(tmp_path / "absent.csv"), "--prices", str(tmp_path / "p.json")]) == 2


def test_plain_bound_covers_total_resources_and_class_bound_keeps_gpu_pods_on_gpu_types(
    bench: ModuleType, tmp_path: Path
) -> None:
    cpu_type = on_demand(make_type("c5.xlarge", 4, 8, od_price=0.17))
    gpu_type = on_demand(make_type("p9.xlarge", 4, 16, gpus=4, od_price=1.0))  # 4 GPUs, little cpu
    types = [cpu_type, gpu_type]
    trace = bench.read_trace(write(tmp_path, "cpu_milli,memory_mib,num_gpu\n" + "3000,1024,1\n" * 4))
    alloc_cpu, alloc_gpu_cpu = cpu_type.allocatable["cpu"], gpu_type.allocatable["cpu"]
    # Plain: one p9 covers the 4 GPUs; the 12 cpu asked come mostly from the cheap c5.
    plain = bench.plain_bound(trace, types)
    assert plain == pytest.approx(1.0 + (12000 - alloc_gpu_cpu) / alloc_cpu * 0.17, rel=1e-6)
    # Class: GPU pods may only sit on p9, so their 12 cpu must come from p9s.
    tight = bench.class_bound(trace, types)
    assert tight == pytest.approx(12000 / alloc_gpu_cpu * 1.0, rel=1e-6)
    assert tight > plain


def test_pods_no_type_can_hold_are_set_aside(bench: ModuleType, tmp_path: Path) -> None:
    types = [make_type("c5.xlarge", 4, 8, od_price=0.17)]
    trace = bench.read_trace(write(tmp_path, "cpu_milli,memory_mib,num_gpu\n1000,512,0\n1000,512,1\n64000,512,0\n"))
    kept, excluded = bench.split_fitting(trace, types)
    assert [p.cpu_milli for p in kept] == [1000]
    assert [(p.cpu_milli, p.gpus) for p in excluded] == [(1000, 1), (64000, 0)]


@pytest.mark.skipif(not (SHARED / "alibaba-openb-pods-default.csv").is_file(), reason="needs ../shared/data")
def test_end_to_end_on_a_slice_of_the_alibaba_trace(
    bench: ModuleType, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    lines = (SHARED / "alibaba-openb-pods-default.csv").read_text(encoding="utf-8").splitlines()
    trace = write(tmp_path, "\n".join([*lines[:41], "impossible,999000,512,0,0,,LS,Running,0,1,0"]) + "\n")
    prices = SHARED / "ec2-ondemand-prices-us-east-1.json"
    assert bench.main(["--pods", str(trace), "--prices", str(prices), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["pods"] == 40 and out["excluded_pods"] == 1
    for key in ("nodesmith_cost_per_hour", "karpenter_policy_cost_per_hour", "lower_bound_cost_per_hour", "seconds"):
        assert out[key] > 0
    assert out["plain_lower_bound_cost_per_hour"] <= out["class_lower_bound_cost_per_hour"] + 1e-6
    assert out["class_lower_bound_cost_per_hour"] <= out["lower_bound_cost_per_hour"] + 1e-6
    assert out["lower_bound_cost_per_hour"] <= out["nodesmith_cost_per_hour"] + 1e-6
    assert out["bound_kind"] in {
        "configuration-lp",
        "configuration-lp-farley",
        "class-lp-knapsack-cuts",
        "class-count-lp",
    }
    assert out["nodesmith_cost_per_hour"] <= out["karpenter_policy_cost_per_hour"] + 1e-6
    assert out["nodesmith_over_bound"] == pytest.approx(
        out["nodesmith_cost_per_hour"] / out["lower_bound_cost_per_hour"] - 1, abs=1e-3
    )
