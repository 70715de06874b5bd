"""Cost-aware packing: a bin is filled in several orders (largest share, summed share, Euclidean
size) and the fullest kept, so a large pod's leftover room takes a small pod along; the least
efficient bins are re-packed together and kept when cheaper."""

from __future__ import annotations

from nodesmith.core.scheduling.packing import pack, packing_cost


def test_each_large_pod_takes_a_small_one_along() -> None:
    # One type, 8 cpu x 8 GiB. Two large pods (5, 2) never share an instance, so four instances
    # are the minimum; two small pods (2, 2) fit beside two of the large ones. Filling by largest
    # share alone puts both small pods together first and needs a fifth instance.
    bins = pack(demands=[(2, 2), (5, 2)], counts=[2, 4], capacities=[(8, 8)], prices=[1.22])
    assert bins is not None
    assert len(bins) == 4
    assert packing_cost(bins, [1.22]) == 4 * 1.22
    assert sorted(b.counts for b in bins) == [(0, 1), (0, 1), (1, 1), (1, 1)]


def test_repair_re_packs_the_least_efficient_bins_together() -> None:
    # 17 cpu in all needs two instances; two of the cheaper (10, 10) type hold them (two large pods
    # on one, the medium and a large pod on the other). The greedy alone takes a (12, 12) first and
    # a (10, 10) for the rest; re-packing its least efficient bins finds the cheaper pair.
    capacities, prices = [(12, 12), (10, 10)], [1.93, 1.64]
    bins = pack(demands=[(2, 4), (5, 1)], counts=[1, 3], capacities=capacities, prices=prices)
    assert bins is not None
    assert packing_cost(bins, prices) == 2 * 1.64
    assert sorted((b.type_index, b.counts) for b in bins) == [(1, (0, 2)), (1, (1, 1))]
