"""Lower bounds on the cost of packing pods onto instances, for the benchmarks (HiGHS via scipy).

The problem: ``count_k`` pods of each class ``k`` (one request vector ``demand_k`` over some
resources: cpu millicores, memory bytes, GPUs, pods ...) must be placed on instances; an instance of
type ``t`` costs ``price_t`` USD/hour and holds any set of pods whose summed requests stay within
its ``capacity_t`` in every resource. Three valid lower bounds (USD/hour) on the cheapest packing,
each at least the previous one:

* :func:`plain_lp_bound`: fractional instance counts covering the total of every resource (types
  that hold no pod included: their cpu may cover a GPU pod's).
* :func:`class_lp_bound`: pods kept whole per class, only on types one of them fits, fractional
  instances (a GPU pod's cpu cannot sit on a CPU-only type).
* :func:`configuration_lp_bound`: the configuration LP (Gilmore & Gomory, "A linear programming
  approach to the cutting-stock problem", Operations Research 9, 1961; Gabay & Zaourar, "Vector bin
  packing with heterogeneous bins", Annals of OR 242, 2016): one variable per (type, pattern), a
  pattern being pod counts per class that fit the type in every resource at once,
  ``min sum price_t x_{t,p}  s.t.  sum a_{k,p} x_{t,p} >= count_k, x >= 0``. Solved by column
  generation, the pricing problem (an integer knapsack per type) by HiGHS MILP. The bound it
  reports is valid even when column generation stops early: Farley's bound ("A note on bounding a
  class of linear programming problems, including cutting stock problems", Operations Research 38,
  1990): for any duals ``pi >= 0`` of the cover rows, ``pi / theta`` with
  ``theta = max_t (max_pattern pi . a) / price_t`` is feasible for the dual of the full
  configuration LP, so ``pi . count / max(1, theta)`` bounds it from below. ``theta`` uses an upper
  bound of each knapsack's value (the MILP's dual bound), never a heuristic value, so the bound
  stays valid if a knapsack is not solved to optimality. Every knapsack solved also yields a cut
  for the class LP (``w . z_t <= u x_t``: no instance of t holds a pattern worth more than ``u`` at
  weights ``w``), and the class LP with these cuts, always a valid bound, is the fallback when
  the Farley bound has not caught up (Kelley's cutting planes: Kelley, "The cutting-plane method
  for solving convex programs", J. SIAM 8, 1960).

Types dominated by a cheaper-or-equal type with at least as much of every resource are left out,
and so are types that hold no pod (except in the plain bound): neither changes the bound. Pattern
counts are capped at the class counts (a real packing never puts more pods of a class on one
instance than exist), which keeps the configuration LP a relaxation of the packing.
"""

from __future__ import annotations

import heapq
import math
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

if str(Path(__file__).resolve().parent) not in sys.path:  # loaded by path (tests) rather than as bench/ module
    sys.path.insert(0, str(Path(__file__).resolve().parent))

from bounds_core import (
    _DEBUG,
    BinType,
    BoundResult,
    PodClass,
    _class_lp,
    _Instance,
    _native_stdout_silenced,
    bin_types,
    class_lp_bound,
    plain_lp_bound,
    pod_classes,
)

if TYPE_CHECKING:
    from collections.abc import Sequence

__all__ = [
    "BinType",
    "BoundResult",
    "PodClass",
    "bin_types",
    "class_lp_bound",
    "configuration_lp_bound",
    "plain_lp_bound",
    "pod_classes",
]
# -------------------------------------------------------------------------- configuration LP


class _Pricer:
    """The pricing problem of type ``t``: ``max pi . a  s.t.  demand^T a <= capacity_t``,
    ``0 <= a_k <= most_{t,k}``, ``a`` integer."""

    def __init__(self, inst: _Instance, *, milp_seconds: float) -> None:
        self.inst = inst
        self.milp_seconds = milp_seconds
        self.milps = 0
        self.cuts: list[tuple[int, Any, float]] = []  # (type, weights, upper bound of the knapsack)

    def dantzig(self, pi: Any) -> Any:
        """Per type, an upper bound of the knapsack's value: the best single-resource fractional
        knapsack bound (each resource alone is a relaxation), vectorised over types."""
        import numpy as np

        inst = self.inst
        ub = inst.most * pi[None, :]  # [t, k] value of the most that fit
        best = ub.sum(axis=1)
        for r in range(inst.cap.shape[1]):
            d = inst.demand[:, r]
            weight = inst.most * d[None, :]  # [t, k]
            free_value = np.where(d[None, :] > 0, 0.0, ub).sum(axis=1)
            order = np.argsort(-np.where(d > 0, pi / np.where(d > 0, d, 1.0), 0.0), kind="stable")
            order = order[d[order] > 0]
            if order.size == 0:
                continue
            w = weight[:, order]
            v = ub[:, order]
            cw = np.cumsum(w, axis=1)
            cap = inst.cap[:, r][:, None]
            full = cw <= cap
            taken = np.where(full, v, 0.0).sum(axis=1)
            # the first item that does not fit entirely is taken fractionally
            first = np.argmin(full, axis=1)
            partial = ~full[np.arange(len(first)), first]
            before = np.where(first > 0, cw[np.arange(len(first)), np.maximum(first - 1, 0)], 0.0)
            room = np.maximum(inst.cap[:, r] - before, 0.0)
            wf = w[np.arange(len(first)), first]
            frac = np.where(partial & (wf > 0), room / np.where(wf > 0, wf, 1.0), 0.0)
            taken = taken + np.minimum(frac, 1.0) * v[np.arange(len(first)), first] * partial
            best = np.minimum(best, free_value + taken)
        return best * (1 + 1e-9) + 1e-12

    def relaxed(self, t: int, pi: Any) -> tuple[Any, float]:
        """Type ``t``'s knapsack LP relaxation (HiGHS): ``(its solution rounded down, a pattern;
        the LP value padded for tolerances, an upper bound of the knapsack's value)``."""
        import numpy as np
        from scipy.optimize import linprog

        inst = self.inst
        items = np.flatnonzero((pi > 1e-12) & (inst.most[t] >= 1))
        pattern = np.zeros(len(pi))
        if items.size == 0:
            return pattern, 0.0
        rows = np.flatnonzero(inst.cap[t] > 0)
        a = (inst.demand[items][:, rows] / inst.cap[t, rows]).T
        res = linprog(
            -pi[items],
            A_ub=a,
            b_ub=np.ones(rows.size),
            bounds=np.c_[np.zeros(items.size), inst.most[t, items]],
            method="highs",
        )
        if res.status != 0:
            return pattern, float(pi[items] @ inst.most[t, items])
        pattern[items] = np.floor(res.x + 1e-9)
        return self.repair(t, pattern), -float(res.fun) * (1 + 1e-7) + 1e-9

    def exact(self, t: int, pi: Any) -> tuple[Any, float, float]:
        """HiGHS MILP on type ``t``: ``(pattern, its value, upper bound of the optimum)``; the upper
        bound is the MILP's dual bound, valid when the time limit cuts the search short."""
        import numpy as np
        from scipy.optimize import Bounds, LinearConstraint, milp

        inst = self.inst
        items = np.flatnonzero((pi > 1e-12) & (inst.most[t] >= 1))
        pattern = np.zeros(len(pi))
        if items.size == 0:
            return pattern, 0.0, 0.0
        rows = np.flatnonzero(inst.cap[t] > 0)
        a = (inst.demand[items][:, rows] / inst.cap[t, rows]).T
        self.milps += 1
        with _native_stdout_silenced():
            res = milp(
                -pi[items],
                integrality=np.ones(items.size),
                bounds=Bounds(0, inst.most[t, items]),
                constraints=LinearConstraint(a, -np.inf, 1.0),
                options={"time_limit": self.milp_seconds, "mip_rel_gap": 1e-3, "disp": False},
            )
        upper = float(pi[items] @ inst.most[t, items])
        dual = getattr(res, "mip_dual_bound", None)
        if dual is not None and math.isfinite(dual):
            upper = min(upper, -float(dual))
        if res.x is not None:
            pattern[items] = np.round(res.x)
            pattern = self.repair(t, pattern)
        value = float(pi @ pattern)
        bound = max(upper, value) * (1 + 1e-9) + 1e-12
        self.cuts.append((t, np.where(pi > 1e-12, pi, 0.0), bound))
        return pattern, value, bound

    def greedy(self, t: int, pi: Any) -> list[Any]:
        """Feasible patterns for ``t``: classes by value per summed share and per largest share of
        ``t`` (two orders), as many of each as still fit."""
        import numpy as np

        inst = self.inst
        ok = np.flatnonzero((pi > 1e-12) & (inst.most[t] >= 1))
        shares = inst.demand[ok] / np.where(inst.cap[t] > 0, inst.cap[t], 1.0)
        out = []
        for size in (shares.sum(axis=1), shares.max(axis=1)):
            order = ok[np.argsort(-pi[ok] / np.maximum(size, 1e-12), kind="stable")]
            room = inst.cap_int[t].copy()
            pattern = np.zeros(len(pi))
            for k in order:
                d = inst.demand_int[k]
                pos = d > 0
                n = int(min(inst.most[t, k], (room[pos] // d[pos]).min() if pos.any() else inst.most[t, k]))
                if n > 0:
                    pattern[k] = n
                    room -= n * d
            out.append(pattern)
        return out

    def complete(self, t: int, pattern: Any, pi: Any) -> Any:
        """``pattern`` (fits ``t``) with the room left filled greedily by value per summed share."""
        import numpy as np

        inst = self.inst
        counts = pattern.copy()
        room = inst.cap_int[t] - counts.astype(np.int64) @ inst.demand_int
        ok = np.flatnonzero((pi > 1e-12) & (inst.most[t] > counts))
        size = (inst.demand[ok] / np.where(inst.cap[t] > 0, inst.cap[t], 1.0)).sum(axis=1)
        for k in ok[np.argsort(-pi[ok] / np.maximum(size, 1e-12), kind="stable")]:
            d = inst.demand_int[k]
            pos = d > 0
            left = inst.most[t, k] - counts[k]
            n = int(min(left, (room[pos] // d[pos]).min() if pos.any() else left))
            if n > 0:
                counts[k] += n
                room -= n * d
        return counts

    def repair(self, t: int, pattern: Any) -> Any:
        """``pattern`` trimmed (last classes first) until it fits ``t`` in exact integer arithmetic
        (HiGHS checks constraints up to a tolerance)."""
        import numpy as np

        inst = self.inst
        counts = pattern.astype(np.int64)
        while np.any(counts @ inst.demand_int > inst.cap_int[t]):
            k = int(np.flatnonzero(counts)[-1])
            counts[k] -= 1
        return counts.astype(float)


def _coarsened(classes: Sequence[PodClass], max_classes: int) -> tuple[list[PodClass], list[int] | None]:
    """At most ``max_classes`` classes: unchanged (mapping None) when there are few enough, else
    every demand rounded down to a multiple of ``max demand / levels`` per resource (``levels``
    halved from 1024 until few enough remain) and equal ones merged, with the merged index of each
    original class (-1 for empty ones). Rounding demands down relaxes the packing, so every bound
    computed on the result is a valid bound for the original pods."""
    live = [(i, c) for i, c in enumerate(classes) if c.count > 0]
    if len(live) <= max_classes:
        return list(classes), None
    dims = len(live[0][1].demand)
    top = [max(c.demand[r] for _, c in live) for r in range(dims)]
    levels = 1024
    while True:
        quantum = [max(1, top[r] // levels) for r in range(dims)]
        index: dict[tuple[int, ...], int] = {}
        mapping = [-1] * len(classes)
        counts: list[int] = []
        for i, c in live:
            key = tuple(d - d % q for d, q in zip(c.demand, quantum, strict=True))
            j = index.setdefault(key, len(index))
            if j == len(counts):
                counts.append(0)
            counts[j] += c.count
            mapping[i] = j
        if len(index) <= max_classes or levels == 1:
            return [PodClass(key, counts[j]) for key, j in index.items()], mapping
        levels //= 2


def _separate(pricer: _Pricer, t: int, average: Any, known: list[Any], *, rounds: int = 4) -> bool:
    """Look for a cut of type ``t``'s pattern hull that ``average`` (the class LP's pods per
    instance of t) violates: weights ``w`` maximising ``w . average - max_known w . a`` over the
    ``known`` patterns (an LP), then the knapsack at ``w`` (MILP); a new pattern goes to ``known``
    and the search repeats. True when a violated cut was added to ``pricer.cuts``."""
    import numpy as np
    from scipy.optimize import linprog

    inst = pricer.inst
    items = np.flatnonzero(inst.most[t] >= 1)
    for _ in range(rounds):
        a = np.array([p[items] for p in known]) if known else np.zeros((1, items.size))
        # variables (w over items, eta): min eta - average.w  s.t.  a w - eta <= 0, 0 <= w <= 1
        cost = np.concatenate([-average[items], [1.0]])
        res = linprog(
            cost,
            A_ub=np.hstack([a, -np.ones((a.shape[0], 1))]),
            b_ub=np.zeros(a.shape[0]),
            bounds=[(0.0, 1.0)] * items.size + [(None, None)],
            method="highs",
        )
        if res.status != 0 or -res.fun <= 1e-7:
            return False  # average is within the hull of known patterns: nothing to cut
        w = np.zeros(len(average))
        w[items] = res.x[: items.size]
        pattern, _, bound = pricer.exact(t, w)
        if float(w @ average) > bound * (1 + 1e-6):
            return True
        known.append(pattern)
    return False


def configuration_lp_bound(
    classes: Sequence[PodClass],
    types: Sequence[BinType],
    *,
    tolerance: float = 1e-3,
    max_seconds: float = 30.0,
    max_iterations: int = 500,
    milp_seconds: float = 0.3,
    alpha: float = 0.7,
    exact_every: int = 3,
    lp_columns: int = 30,
    cut_seconds: float = 15.0,
    cut_types: int = 12,
    max_classes: int = 250,
    initial_patterns: Sequence[Sequence[int]] = (),
) -> BoundResult:
    """A valid lower bound (USD/hour) on packing ``classes`` onto ``types``, from the
    configuration LP (module docstring): the best of three, each valid on its own.

    1. Column generation (Wentges-smoothed duals, greedy and LP-rounded columns, HiGHS MILP pricing
       every ``exact_every`` iterations and whenever a round adds nothing) for ``max_seconds`` or
       ``max_iterations``; every exactly priced iteration gives a Farley bound. It stops early when
       that bound is within ``tolerance`` (relative) of the restricted master's value.
    2. The class LP with count cuts and, for every knapsack solved, the cut
       ``sum_k w_k z_{k,t} <= u x_t`` (``w`` the duals it was solved at, ``u`` its MILP upper bound);
       then rounds for up to ``cut_seconds`` more, until it stops rising: for the types that LP
       spends most on, a cut separating its average pods per instance from the type's pattern
       hull (:func:`_separate`), else knapsacks solved at that LP's own duals (Kelley).
    3. The class LP with count cuts alone.

    ``kind`` says which won: ``configuration-lp`` (converged: the configuration LP's optimum within
    ``tolerance``), ``configuration-lp-farley`` (stopped early), ``class-lp-knapsack-cuts`` or
    ``class-count-lp``. ``classes[k].demand`` and ``types[t].capacity`` are int vectors over the
    same resources. ``initial_patterns`` (pod counts per class, in ``classes`` order, e.g. the
    instances of a known packing) seed the master, each on the cheapest type that holds it; they
    speed convergence and never change the bound's validity. With more than ``max_classes``
    classes, demands are first rounded down to a coarser grid (:func:`_coarsened`; a relaxation,
    so still valid, reported as ``demands_rounded``) to keep the LPs small. Raises ``ValueError``
    when there is no pod or some class fits no type.
    """
    import numpy as np
    from scipy.optimize import linprog

    start = time.perf_counter()
    classes, mapping = _coarsened(classes, max_classes)
    rounded = mapping is not None
    if mapping is not None:
        merged = []
        for given in initial_patterns:
            pattern = [0] * len(classes)
            for i, n in enumerate(given):
                if mapping[i] >= 0:
                    pattern[mapping[i]] += n
            merged.append(pattern)
        initial_patterns = merged
    inst = _Instance(classes, types)
    plain = plain_lp_bound(classes, types)
    per_class = _class_lp(inst)[0]
    per_class_counted = _class_lp(inst, count_cuts=True)[0]
    pricer = _Pricer(inst, milp_seconds=milp_seconds)
    ncls = len(inst.count)
    col_type: list[int] = []
    col_pattern: list[Any] = []
    seen: set[tuple[int, bytes]] = set()

    def add(t: int, pattern: Any) -> bool:
        key = (t, pattern.astype(np.int64).tobytes())
        if key in seen or not pattern.any():
            return False
        seen.add(key)
        col_type.append(t)
        col_pattern.append(pattern)
        return True

    for k in range(ncls):  # every class alone on the cheapest type holding it (types are cheapest first)
        t = int(np.flatnonzero(inst.fits[:, k])[0])
        add(t, np.where(np.arange(ncls) == k, inst.most[t, k], 0.0))
    # a first mixed set: greedy fills valued by each class's cheapest dominant share
    share = (inst.demand[None, :, :] / np.where(inst.cap > 0, inst.cap, np.inf)[:, None, :]).max(axis=2)
    fair = np.where(inst.fits, inst.price[:, None] * share, np.inf).min(axis=0)
    for t in range(len(inst.price)):
        for pattern in pricer.greedy(t, fair):
            add(t, pattern)

    live = [i for i, c in enumerate(classes) if c.count > 0]
    for given in initial_patterns:
        pattern = np.minimum(np.array([given[i] for i in live], dtype=float), inst.count)
        holders = np.flatnonzero(np.all(pattern.astype(np.int64) @ inst.demand_int <= inst.cap_int, axis=1))
        if holders.size:
            add(int(holders[0]), pattern)

    best_lb, master, iterations = per_class_counted, math.inf, 0  # the class LP's duals give its value
    improved = False
    farley = 0.0
    # Wentges smoothing: pricing at a mix of the master's duals and the duals of the best Farley
    # bound so far (the class LP's duals are not used as a centre: mixes with them price poorly)
    center: Any = None
    smoothing = alpha
    stalled = False  # the last iteration added no column: price exactly (MILPs) in this one
    converged = False
    while True:
        iterations += 1
        res = linprog(
            inst.price[col_type], A_ub=-np.array(col_pattern).T, b_ub=-inst.count, bounds=(0, None), method="highs"
        )
        if res.status != 0:
            raise RuntimeError(f"configuration LP master failed: {res.message}")
        master = float(res.fun)
        pi_master = np.maximum(-np.asarray(res.ineqlin.marginals, dtype=float), 0.0)
        pi = pi_master if center is None else smoothing * center + (1 - smoothing) * pi_master
        new = 0
        exact_now = stalled or iterations % exact_every == 0

        def offer(t: int, pattern: Any, pi_master: Any = pi_master, pi: Any = pi) -> int:
            """Add ``pattern`` on ``t`` when its reduced cost is negative at either set of duals."""
            limit = inst.price[t] * (1 + 1e-9)
            return int((pi_master @ pattern > limit or pi @ pattern > limit) and add(t, pattern))

        upper = pricer.dantzig(pi)
        promising = np.flatnonzero(upper > inst.price * (1 + 1e-9))
        for t in promising.tolist():
            for pattern in pricer.greedy(t, pi):
                new += offer(t, pattern)
        relaxed: dict[int, float] = {}
        for t in promising[np.argsort(-upper[promising] / inst.price[promising])][:lp_columns]:
            pattern, relaxed[int(t)] = pricer.relaxed(int(t), pi)
            new += offer(int(t), pricer.complete(int(t), pattern, pi))
        # theta = max_t (knapsack value upper bound) / price_t, refined lazily: Dantzig, LP, MILP
        heap = [(-upper[t] / inst.price[t], t, 0) for t in range(len(inst.price))]
        heapq.heapify(heap)
        theta = 0.0
        while heap:
            neg, t, level = heapq.heappop(heap)
            if level == 2 or -neg <= 1.0 or (level == 1 and not exact_now):
                theta = -neg
                break
            if level == 0:
                if t in relaxed:
                    bound = relaxed[t]
                else:
                    pattern, bound = pricer.relaxed(t, pi)
                    new += offer(t, pricer.complete(t, pattern, pi))
            else:
                pattern, _, bound = pricer.exact(t, pi)
                new += offer(t, pattern)
            heapq.heappush(heap, (-bound / inst.price[t], t, level + 1))
        lb = float(pi @ inst.count) / max(1.0, theta)
        if lb > farley:
            farley, center = lb, pi
        if lb > best_lb:
            best_lb, improved = lb, True
        if _DEBUG:
            print(
                f"it={iterations} t={time.perf_counter() - start:.1f}s master={master:.2f} lb={lb:.2f} "
                f"best={best_lb:.2f} theta={theta:.4f} cols={len(col_type)} milps={pricer.milps} a={smoothing}",
                file=sys.stderr,
            )
        if master - best_lb <= tolerance * master:
            converged = True
            break
        if iterations >= max_iterations or time.perf_counter() - start > max_seconds:
            break
        if not new:  # mispricing: the smoothed duals found nothing the master can use
            if smoothing == 0.0 and exact_now:
                break  # nothing to add even by exact pricing at the master's duals
            smoothing, stalled = 0.0, True
        else:
            smoothing, stalled = alpha, False
    # Cutting planes on the class LP: separation of the busiest types' average patterns, else
    # knapsacks at the cut LP's own duals (Kelley); its value is a valid bound after every round.
    with_cuts, cut_rounds, flat = 0.0, 0, 0
    known: dict[int, list[Any]] = {}
    for t, pattern in zip(col_type, col_pattern, strict=True):
        known.setdefault(t, []).append(pattern)
    while pricer.cuts:
        value, duals, usage = _class_lp(inst, count_cuts=True, cuts=pricer.cuts)
        flat = flat + 1 if value <= with_cuts * (1 + 1e-5) else 0
        with_cuts = max(with_cuts, value)
        cut_rounds += 1
        if _DEBUG:
            print(f"cuts round {cut_rounds} t={time.perf_counter() - start:.1f}s lb={value:.2f}", file=sys.stderr)
        if flat >= 2 or master - with_cuts <= tolerance * master:
            break
        if time.perf_counter() - start > max_seconds + cut_seconds:
            break
        busiest = sorted(usage, key=lambda t: -inst.price[t] * usage[t][1])[:cut_types]
        separated = sum(_separate(pricer, t, usage[t][0] / usage[t][1], known.get(t, [])) for t in busiest)
        if separated:
            continue
        loose = np.flatnonzero(pricer.dantzig(duals) > inst.price * (1 + 1e-6))
        ratio = {int(t): pricer.relaxed(int(t), duals)[1] / inst.price[t] for t in loose}
        candidates = sorted((t for t, r in ratio.items() if r > 1 + 1e-6), key=lambda t: -ratio[t])
        if not candidates:
            break  # the duals price no pattern above its type: the configuration LP is reached
        for t in candidates[:cut_types]:
            pricer.exact(t, duals)
    if with_cuts > best_lb:
        kind, lower = "class-lp-knapsack-cuts", with_cuts
    elif not improved:
        kind, lower = "class-count-lp", per_class_counted
    else:
        kind, lower = ("configuration-lp" if converged else "configuration-lp-farley"), best_lb
    return BoundResult(
        lower_bound=lower,
        kind=kind,
        master_cost=master,
        gap=master / lower - 1 if lower > 0 else math.inf,
        class_bound=per_class,
        class_count_bound=per_class_counted,
        plain_bound=plain,
        classes=len(inst.count),
        demands_rounded=rounded,
        iterations=iterations,
        cut_rounds=cut_rounds,
        columns=len(col_type),
        types=len(inst.price),
        seconds=time.perf_counter() - start,
    )
