"""``packing.pack``: every pod packed exactly once, no bin over capacity, cheap mixes found."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nodesmith.core.scheduling.packing import pack, packing_cost

# (cpu millicores, memory MiB, GPUs)
CPU_TYPES = [(1930, 3000, 0), (3920, 6500, 0), (7910, 14000, 0), (15890, 29000, 0)]
CPU_PRICES = [0.085, 0.17, 0.34, 0.68]


def test_mixes_a_memory_heavy_and_a_cpu_heavy_pod_on_one_node_when_that_is_cheaper() -> None:
    types = [(4000, 4000), (1000, 16000), (4000, 16000)]
    prices = [0.15, 0.15, 0.20]
    bins = pack(demands=[(3000, 1000), (500, 12000)], counts=[1, 1], capacities=types, prices=prices)
    assert bins is not None
    assert [b.type_index for b in bins] == [2]
    assert packing_cost(bins, prices) == pytest.approx(0.20)


def test_splits_when_two_small_nodes_cost_less_than_one_big_one() -> None:
    bins = pack(demands=[(3000, 1000, 0), (1000, 1000, 0)], counts=[1, 1], capacities=CPU_TYPES, prices=CPU_PRICES)
    assert bins is not None
    assert sorted(b.type_index for b in bins) == [0, 1]


def test_gpu_pods_only_go_to_gpu_types_and_impossible_classes_give_none() -> None:
    types = [*CPU_TYPES, (3920, 15000, 1), (47000, 180000, 4)]
    prices = [*CPU_PRICES, 0.526, 3.912]
    bins = pack(demands=[(1000, 2000, 1), (500, 500, 0)], counts=[2, 3], capacities=types, prices=prices)
    assert bins is not None
    for b in bins:
        if b.counts[0]:
            assert types[b.type_index][2] >= b.counts[0]
    assert pack(demands=[(1000, 2000, 8)], counts=[1], capacities=types, prices=prices) is None
    assert pack(demands=[(1000, 2000, 8)], counts=[0], capacities=types, prices=prices) == []


def test_mismatched_lengths_are_a_programming_error() -> None:
    with pytest.raises(ValueError, match="equal lengths"):
        pack(demands=[(1, 1)], counts=[1, 2], capacities=[(2, 2)], prices=[1.0])


@settings(max_examples=200, deadline=None)
@given(
    demands=st.lists(
        st.tuples(st.integers(1, 16000), st.integers(1, 30000), st.integers(0, 1)), min_size=1, max_size=8
    ),
    counts=st.lists(st.integers(0, 40), min_size=8, max_size=8),
    extra=st.lists(
        st.tuples(
            st.tuples(st.integers(500, 64000), st.integers(500, 260000), st.integers(0, 8)),
            st.floats(0.01, 20.0, allow_nan=False),
        ),
        max_size=5,
    ),
)
def test_every_pod_is_packed_once_and_no_bin_is_overfull(
    demands: list[tuple[int, int, int]], counts: list[int], extra: list[tuple[tuple[int, int, int], float]]
) -> None:
    counts = counts[: len(demands)]
    capacities = [*CPU_TYPES, (16000, 64000, 1), *(c for c, _ in extra)]
    prices = [*CPU_PRICES, 1.2, *(p for _, p in extra)]
    bins = pack(demands=demands, counts=counts, capacities=capacities, prices=prices)
    fits_somewhere = [any(all(d <= c for d, c in zip(dem, cap, strict=True)) for cap in capacities) for dem in demands]
    if not all(f or n == 0 for f, n in zip(fits_somewhere, counts, strict=True)):
        assert bins is None
        return
    assert bins is not None
    packed = [0] * len(demands)
    for b in bins:
        assert any(b.counts)
        for r, cap in enumerate(capacities[b.type_index]):
            assert sum(n * demands[k][r] for k, n in enumerate(b.counts)) <= cap
        for k, n in enumerate(b.counts):
            packed[k] += n
    assert packed == counts
    # Never dearer than one pod per node on its cheapest fitting type.
    singles = sum(
        n
        * min(
            p for cap, p in zip(capacities, prices, strict=True) if all(x <= c for x, c in zip(dem, cap, strict=True))
        )
        for dem, n in zip(demands, counts, strict=True)
        if n
    )
    assert packing_cost(bins, prices) <= singles + 1e-9
