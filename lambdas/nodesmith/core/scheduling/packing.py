"""Cost-aware bin packing: pods into instances of variable size and price, cheapest total first.

Karpenter packs by "decreasing size + least-loaded NodeClaim first" and then launches the cheapest
type that fits each NodeClaim (``[core]:pkg/controllers/provisioning/scheduling/scheduler.go``).
That favours large instances (aws/karpenter-provider-aws#3063: "Node binpacking is an NP-hard
problem ... currently favors larger instance types"); kubernetes-sigs/karpenter#2457 shows a 3
vCPU + 1 vCPU pair put on one 8-core node instead of a 4-core plus a 2-core one.

:func:`pack` solves the multiple-choice vector bin packing problem behind it heuristically, in the
spirit of a column-generation greedy (Gilmore-Gomory patterns; Gabay & Zaourar, "Vector bin
packing with heterogeneous bins", Annals of OR 242, 2016):

1. **Types.** Only types that hold at least one pod class are kept, and of those only the ones no
   cheaper-or-equal type dominates (at least as much of every resource).
2. **Pod values.** Each pod class gets a fair price ``v_k``: the cheapest cost of its dominant
   share over the types that hold it, ``min_t price_t * max_r demand_{k,r} / free_{t,r}``.
3. **Greedy patterns.** A candidate bin for type ``t`` is filled with the remaining pods in
   decreasing order of value per size in ``t``, three times with three measures of size (largest
   share of a resource, sum of shares, their Euclidean norm), keeping the most valuable fill; its
   score is ``price_t / value(bin)`` (USD per USD of fair value; lower is better). The best bin is
   taken as many times as the remaining counts allow (the same fill would repeat), scores are
   refreshed lazily, until no pod is left.
4. **Re-typing and re-pricing.** Every bin is re-typed to the cheapest type that holds its
   contents. Then each class's value is re-estimated as its average share of the price of the bins
   it landed in (a cheap stand-in for the duals of the configuration LP), and step 3 runs again;
   the cheapest of a few rounds wins.
5. **Repair.** A few times, the least efficient fifth of the bins (fair value of their pods per USD
   of their price, values re-estimated from the best packing) is emptied and its pods packed
   again by step 3 alone, where leftovers of the whole-batch greedy can combine better; the new
   packing is kept only when cheaper (a large-neighbourhood search).

Everything is integer arithmetic on resource amounts (cpu millicores, memory bytes, pods, GPUs
...) with float prices (USD/hour), deterministic for a given input.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass
from operator import ge
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Sequence

__all__ = ["Bin", "pack", "packing_cost"]

_EPS = 1e-12
_PRICE_ROUNDS = 5
"""Greedy rounds; after each, the classes' values are re-estimated from the bins they ended up in."""
_DAMPING = 0.5
"""Weight of the re-estimated values against the previous ones."""
_SIZE_MEASURES = 3
"""Fill orders per type (:meth:`_Problem.sizes_of`): a pattern filled by largest share alone leaves
room a sum-of-shares order would use, and the other way round; the fuller pattern is kept."""
_REPAIR_ROUNDS = 6
"""Step 5 rounds: the least efficient bins are re-packed together, kept when cheaper."""
_REPAIR_SHARE = 0.2
"""Share of the bins (least fair value per USD first) that step 5 re-packs each round."""
_STEP_BUDGET = 30_000_000
"""Fill steps (one class looked at for one candidate bin) after which no new round starts: bounds
the time on very diverse batches (thousands of distinct pod shapes)."""


@dataclass(frozen=True, slots=True)
class Bin:
    """One instance to launch: ``type_index`` into the capacities given to :func:`pack`, and how
    many pods of each class it holds (``counts[k]`` for class ``k``)."""

    type_index: int
    counts: tuple[int, ...]


def packing_cost(bins: Sequence[Bin], prices: Sequence[float]) -> float:
    """Total USD/hour of ``bins``."""
    return sum(prices[b.type_index] for b in bins)


class _Problem:
    """The instance of one packing: pod classes, kept types, values and per-type fill orders."""

    def __init__(
        self,
        demands: Sequence[Sequence[int]],
        capacities: Sequence[Sequence[int]],
        prices: Sequence[float],
    ) -> None:
        self.demands = [tuple(d) for d in demands]
        self.capacities = [tuple(c) for c in capacities]
        self.prices = list(prices)
        self.nonzero = [tuple(r for r, a in enumerate(d) if a > 0) for d in self.demands]
        self.steps = 0
        self.types = self._kept_types()
        self.shares = {
            t: {k: self.share(k, t) for k in range(len(self.demands)) if self.fits(k, t)} for t in self.types
        }
        self.sizes = {t: {k: self.sizes_of(k, t) for k in shares} for t, shares in self.shares.items()}
        self.values: list[float] = []
        self.orders: dict[int, list[list[int]]] = {}
        self.set_values(self._values())

    def set_values(self, values: Sequence[float]) -> None:
        """Use ``values`` as the classes' fair prices (USD/hour per pod) and rebuild the fill orders."""
        self.values = [max(v, _EPS) for v in values]
        self.orders = {t: self._fill_orders(t) for t in self.types}

    def fits(self, k: int, t: int) -> bool:
        cap = self.capacities[t]
        d = self.demands[k]
        return all(d[r] <= cap[r] for r in self.nonzero[k])

    def share(self, k: int, t: int) -> float:
        """The largest fraction of one of type ``t``'s resources that one pod of class ``k`` takes."""
        cap = self.capacities[t]
        d = self.demands[k]
        return max((d[r] / cap[r] for r in self.nonzero[k]), default=0.0)

    def sizes_of(self, k: int, t: int) -> tuple[float, ...]:
        """How much of type ``t`` one pod of class ``k`` takes, three ways: its largest share of a
        resource, the sum of its shares, and their Euclidean norm."""
        cap = self.capacities[t]
        d = self.demands[k]
        shares = [d[r] / cap[r] for r in self.nonzero[k]]
        return (max(shares, default=0.0), sum(shares), sum(x * x for x in shares) ** 0.5)

    def _kept_types(self) -> list[int]:
        """Types that hold some class and that no cheaper-or-equal kept type dominates, cheapest first."""
        kept: list[int] = []
        for t in sorted(range(len(self.prices)), key=lambda i: (self.prices[i], i)):
            if not any(self.fits(k, t) for k in range(len(self.demands))):
                continue
            cap = self.capacities[t]
            if any(all(map(ge, self.capacities[u], cap)) for u in kept):
                continue
            kept.append(t)
        return kept

    def _values(self) -> list[float]:
        values = [float("inf")] * len(self.demands)
        for t, shares in self.shares.items():
            price = self.prices[t]
            for k, share in shares.items():
                values[k] = min(values[k], price * share)
        return [v if v != float("inf") else 0.0 for v in values]

    def _fill_orders(self, t: int) -> list[list[int]]:
        """Classes type ``t`` can hold, by fair value per size in ``t`` (most valuable use of room
        first), one order per measure of size (:meth:`sizes_of`), duplicates dropped."""
        values = self.values
        orders: list[list[int]] = []
        for m in range(_SIZE_MEASURES):
            dens = sorted((-(values[k] / max(sizes[m], _EPS)), k) for k, sizes in self.sizes[t].items())
            order = [k for _, k in dens]
            if order not in orders:
                orders.append(order)
        return orders

    def fill(self, t: int, counts: Sequence[int]) -> tuple[dict[int, int], float]:
        """Fill one instance of ``t`` from ``counts`` in each of its fill orders and keep the most
        valuable: ``({class: pods}, value)``."""
        best: tuple[dict[int, int], float] = ({}, 0.0)
        for order in self.orders[t]:
            take, value = self._fill_in(t, counts, order)
            if value > best[1]:
                best = (take, value)
        return best

    def _fill_in(self, t: int, counts: Sequence[int], order: Sequence[int]) -> tuple[dict[int, int], float]:
        """Greedy: as many pods of each class in ``order`` as still fit one instance of ``t``."""
        self.steps += len(order)
        rem = list(self.capacities[t])
        take: dict[int, int] = {}
        value = 0.0
        demands, nonzero, values = self.demands, self.nonzero, self.values
        for k in order:
            n = counts[k]
            if not n:
                continue
            d = demands[k]
            for r in nonzero[k]:
                q = rem[r] // d[r]
                if q < n:
                    n = q
                    if not n:
                        break
            if n:
                take[k] = n
                value += n * values[k]
                for r in nonzero[k]:
                    rem[r] -= n * d[r]
        return take, value

    def score(self, t: int, value: float) -> float:
        return self.prices[t] / value if value > 0 else float("inf")

    def cheapest_holding(self, totals: Sequence[int]) -> int | None:
        """The cheapest kept type whose capacity covers ``totals``, or None."""
        for t in self.types:
            if all(map(ge, self.capacities[t], totals)):
                return t
        return None


def _totals(problem: _Problem, counts: Sequence[int]) -> list[int]:
    dims = len(problem.capacities[0]) if problem.capacities else 0
    out = [0] * dims
    for k, n in enumerate(counts):
        if n:
            d = problem.demands[k]
            for r in problem.nonzero[k]:
                out[r] += n * d[r]
    return out


def _greedy(problem: _Problem, counts: list[int]) -> list[Bin] | None:
    """Step 3: best-scoring patterns, each repeated while the remaining counts allow."""
    ncls = len(counts)
    left = sum(counts)
    heap: list[tuple[float, float, int]] = []
    for t in problem.types:
        _, value = problem.fill(t, counts)
        if value > 0:
            heap.append((problem.score(t, value), -value, t))
    heapq.heapify(heap)
    bins: list[Bin] = []
    while left:
        if not heap:
            return None
        _, _, t = heapq.heappop(heap)
        take, value = problem.fill(t, counts)
        if not take:
            continue
        entry = (problem.score(t, value), -value, t)
        if heap and entry > heap[0]:
            heapq.heappush(heap, entry)  # stale score: someone else may be better now
            continue
        repeat = min(counts[k] // n for k, n in take.items())
        pattern = tuple(take.get(k, 0) for k in range(ncls))
        bins.extend([Bin(t, pattern)] * repeat)
        for k, n in take.items():
            counts[k] -= n * repeat
            left -= n * repeat
        _, value = problem.fill(t, counts)
        if value > 0:
            heapq.heappush(heap, (problem.score(t, value), -value, t))
    return bins


def _retype(problem: _Problem, bins: list[Bin]) -> list[Bin]:
    """Each bin on the cheapest type that holds its contents (computed once per distinct content)."""
    best: dict[tuple[int, ...], int] = {}
    out = []
    for b in bins:
        t = best.get(b.counts)
        if t is None:
            found = problem.cheapest_holding(_totals(problem, b.counts))
            t = b.type_index if found is None or problem.prices[found] >= problem.prices[b.type_index] else found
            best[b.counts] = t
        out.append(Bin(t, b.counts) if t != b.type_index else b)
    return out


def _attributed_values(problem: _Problem, bins: Sequence[Bin]) -> list[float]:
    """Each class's average share of the price of the bins holding it, shared by current value.

    A bin of price ``p`` holding pods of value ``V`` charges each pod ``p * v_k / V``: classes that
    end up in poorly filled bins become dearer, so the next greedy round places them earlier,
    where cheaper pods can fill the rest of their bins.
    """
    acc = [0.0] * len(problem.demands)
    num = [0] * len(problem.demands)
    values = problem.values
    for b in bins:
        total = sum(n * values[k] for k, n in enumerate(b.counts) if n)
        if total <= 0:
            continue
        unit = problem.prices[b.type_index] / total
        for k, n in enumerate(b.counts):
            if n:
                acc[k] += n * unit * values[k]
                num[k] += n
    return [acc[k] / num[k] if num[k] else values[k] for k in range(len(values))]


def _singletons(problem: _Problem, counts: Sequence[int]) -> list[Bin]:
    """One pod per instance, each on the cheapest type that holds it: the baseline any packing must beat."""
    out: list[Bin] = []
    for k, n in enumerate(counts):
        if n:
            t = problem.cheapest_holding(problem.demands[k])
            if t is not None:
                out.extend([Bin(t, tuple(1 if j == k else 0 for j in range(len(counts))))] * n)
    return out


def pack(
    *,
    demands: Sequence[Sequence[int]],
    counts: Sequence[int],
    capacities: Sequence[Sequence[int]],
    prices: Sequence[float],
) -> list[Bin] | None:
    """Pack ``counts[k]`` pods of each class ``k`` into instances, minimising the summed price.

    ``demands[k]`` is class ``k``'s request vector and ``capacities[t]`` type ``t``'s free room
    (allocatable after DaemonSets), over the same resource dimensions (integers: millicores,
    bytes, counts); ``prices[t]`` is USD/hour. Returns the bins (any order), or None when some
    class with a positive count fits no type. Heuristic (module docstring): no optimality
    guarantee, but every bin respects every dimension and the total is never above one pod per
    instance on its cheapest fitting type.
    """
    if len(demands) != len(counts) or len(capacities) != len(prices):
        raise ValueError("pack: demands/counts and capacities/prices must have equal lengths")
    remaining = list(counts)
    if not any(remaining):
        return []
    problem = _Problem(demands, capacities, prices)
    for k, n in enumerate(remaining):
        if n and not any(problem.fits(k, t) for t in problem.types):
            return None
    best = _singletons(problem, remaining)
    best_cost = packing_cost(best, problem.prices)
    for _ in range(_PRICE_ROUNDS):
        bins = _greedy(problem, list(remaining))
        if bins is None:
            return best
        bins = _retype(problem, bins)
        cost = packing_cost(bins, problem.prices)
        if cost < best_cost - 1e-9:
            best, best_cost = bins, cost
        if problem.steps > _STEP_BUDGET:
            break
        attributed = _attributed_values(problem, bins)
        problem.set_values([_DAMPING * a + (1 - _DAMPING) * v for a, v in zip(attributed, problem.values, strict=True)])
    return _repair(problem, best)


def _repair(problem: _Problem, bins: list[Bin]) -> list[Bin]:
    """Step 5 (module docstring): ``bins`` or a cheaper packing of the same pods."""
    best, best_cost = bins, packing_cost(bins, problem.prices)
    ncls = len(problem.demands)
    for _ in range(_REPAIR_ROUNDS):
        if problem.steps > _STEP_BUDGET or len(best) < 2:
            break
        attributed = _attributed_values(problem, best)
        problem.set_values([_DAMPING * a + (1 - _DAMPING) * v for a, v in zip(attributed, problem.values, strict=True)])
        values, prices = problem.values, problem.prices
        efficiency = sorted(
            (sum(n * values[k] for k, n in enumerate(b.counts) if n) / prices[b.type_index], i)
            for i, b in enumerate(best)
        )
        worst = {i for _, i in efficiency[: max(2, int(len(best) * _REPAIR_SHARE))]}
        counts = [0] * ncls
        for i in worst:
            for k, n in enumerate(best[i].counts):
                counts[k] += n
        again = _greedy(problem, counts)
        if again is None:
            break
        candidate = [b for i, b in enumerate(best) if i not in worst] + _retype(problem, again)
        cost = packing_cost(candidate, prices)
        if cost < best_cost - 1e-9:
            best, best_cost = candidate, cost
    return best
