"""bench/bounds.py: the configuration LP bound is a valid lower bound, at least the simpler LP bounds."""

from __future__ import annotations

import importlib.util
import itertools
import sys
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from types import ModuleType

BOUNDS = Path(__file__).resolve().parents[3] / "bench" / "bounds.py"


@pytest.fixture(scope="module")
def bounds() -> ModuleType:
    spec = importlib.util.spec_from_file_location("nodesmith_bench_bounds", BOUNDS)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def brute_force_optimum(
    demands: list[tuple[int, ...]], counts: tuple[int, ...], types: list[tuple[tuple[int, ...], float]]
) -> float:
    """Cheapest packing by exhaustive search over the instance holding the first remaining pod."""
    patterns = []
    for capacity, price in types:
        for pattern in itertools.product(*(range(n + 1) for n in counts)):
            used = [sum(a * d[r] for a, d in zip(pattern, demands, strict=True)) for r in range(len(capacity))]
            if any(pattern) and all(u <= c for u, c in zip(used, capacity, strict=True)):
                patterns.append((pattern, price))

    @cache
    def best(left: tuple[int, ...]) -> float:
        if not any(left):
            return 0.0
        first = next(k for k, n in enumerate(left) if n)
        out = float("inf")
        for pattern, price in patterns:
            if pattern[first] and all(a <= n for a, n in zip(pattern, left, strict=True)):
                out = min(out, price + best(tuple(n - a for n, a in zip(left, pattern, strict=True))))
        return out

    return best(counts)


# cpu, memory, GPUs: a big pod (0.6 of the cpu), a small one (0.3), a GPU pod; a CPU type, a small
# CPU type that only holds the small pod, and a GPU type with little cpu.
DEMANDS = [(600, 100, 0), (300, 200, 0), (400, 300, 1)]
TYPES = [((1000, 1000, 0), 1.0), ((500, 400, 0), 0.55), ((1000, 700, 2), 2.0)]


@pytest.mark.parametrize("counts", [(2, 3, 0), (2, 3, 3), (3, 1, 2), (1, 4, 1)])
def test_bound_is_between_the_class_lp_and_the_cheapest_packing(bounds: ModuleType, counts: tuple[int, ...]) -> None:
    classes = [bounds.PodClass(d, n) for d, n in zip(DEMANDS, counts, strict=True)]
    types = [bounds.BinType(f"t{i}", cap, price) for i, (cap, price) in enumerate(TYPES)]
    result = bounds.configuration_lp_bound(classes, types)
    optimum = brute_force_optimum(DEMANDS, counts, TYPES)
    assert result.plain_bound <= result.class_bound + 1e-9
    assert result.class_bound <= result.class_count_bound + 1e-9
    assert result.class_count_bound <= result.lower_bound + 1e-9
    assert result.lower_bound <= optimum + 1e-9
    assert result.kind in {"configuration-lp", "class-lp-knapsack-cuts", "class-count-lp"}
    assert result.lower_bound == pytest.approx(result.master_cost, rel=1e-3)


def test_mixed_patterns_make_the_bound_tighter_than_the_class_lp(bounds: ModuleType) -> None:
    # Two big pods and three small ones on the CPU type: the class LP fills capacity fractionally
    # (2.1 instances), the configuration LP needs big+small pairs and a third of a small-only
    # instance (2 + 1/3); the best packing needs three instances.
    classes = [bounds.PodClass((600, 100), 2), bounds.PodClass((300, 200), 3)]
    types = [bounds.BinType("cpu", (1000, 1000), 1.0)]
    result = bounds.configuration_lp_bound(classes, types)
    assert result.class_bound == pytest.approx(2.1, rel=1e-6)
    assert result.class_count_bound == pytest.approx(2.1, rel=1e-6)
    assert result.lower_bound == pytest.approx(7 / 3, rel=1e-3)
    assert result.kind == "configuration-lp"
    assert brute_force_optimum([(600, 100), (300, 200)], (2, 3), [((1000, 1000), 1.0)]) == 3.0


def test_a_bound_stopped_after_one_iteration_is_still_valid(bounds: ModuleType) -> None:
    counts = (3, 4, 2)
    classes = [bounds.PodClass(d, n) for d, n in zip(DEMANDS, counts, strict=True)]
    types = [bounds.BinType(f"t{i}", cap, price) for i, (cap, price) in enumerate(TYPES)]
    early = bounds.configuration_lp_bound(classes, types, limits=bounds.BoundLimits(max_iterations=1))
    assert early.lower_bound <= brute_force_optimum(DEMANDS, counts, TYPES) + 1e-9
    assert early.lower_bound >= early.plain_bound
    assert early.iterations == 1


def test_many_classes_are_rounded_down_and_the_bound_stays_valid(bounds: ModuleType) -> None:
    demands = [(6000, 1000), (6010, 1000), (3000, 2000)]  # the first two merge when rounded down
    counts = (1, 2, 2)
    raw_types = [((10000, 10000), 1.0), ((5000, 4000), 0.55), ((6500, 8000), 0.8)]
    classes = [bounds.PodClass(d, n) for d, n in zip(demands, counts, strict=True)]
    types = [bounds.BinType(f"t{i}", cap, price) for i, (cap, price) in enumerate(raw_types)]
    exact = bounds.configuration_lp_bound(classes, types)
    coarse = bounds.configuration_lp_bound(classes, types, limits=bounds.BoundLimits(max_classes=2))
    assert not exact.demands_rounded and exact.classes == 3
    assert coarse.demands_rounded and coarse.classes == 2
    assert coarse.lower_bound <= exact.lower_bound + 1e-9
    assert coarse.lower_bound <= brute_force_optimum(demands, counts, raw_types) + 1e-9


def test_pods_that_fit_no_type_are_refused(bounds: ModuleType) -> None:
    with pytest.raises(ValueError, match="fit no type"):
        bounds.configuration_lp_bound([bounds.PodClass((5000, 1), 1)], [bounds.BinType("t", (1000, 1000), 1.0)])
