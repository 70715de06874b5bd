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
from dataclasses import dataclass
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
    _coarsened,
    _Instance,
    bin_types,
    class_lp_bound,
    plain_lp_bound,
    pod_classes,
)
from bounds_pricing import _Pricer, _separate

if TYPE_CHECKING:
    from collections.abc import Sequence

__all__ = [
    "BinType",
    "BoundLimits",
    "BoundResult",
    "PodClass",
    "bin_types",
    "class_lp_bound",
    "configuration_lp_bound",
    "plain_lp_bound",
    "pod_classes",
]
# -------------------------------------------------------------------------- configuration LP


@dataclass(frozen=True, slots=True)
class BoundLimits:
    """How far :func:`configuration_lp_bound` searches (see its steps).

    ``tolerance``: relative gap between the Farley bound and the restricted master at which column generation
    stops. ``max_seconds`` and ``max_iterations``: column generation's budget; ``cut_seconds`` more for the
    knapsack-cut rounds. ``milp_seconds``: time limit of each HiGHS MILP pricing problem. ``alpha``: Wentges
    smoothing weight of the best Farley duals. ``exact_every``: price exactly (MILPs) every this many iterations.
    ``lp_columns``: LP-rounded columns tried per iteration, on the most promising types. ``cut_types``: types a
    cut round separates on. ``max_classes``: more pod classes than this are first coarsened.
    """

    tolerance: float = 1e-3
    max_seconds: float = 30.0
    max_iterations: int = 500
    milp_seconds: float = 0.3
    alpha: float = 0.7
    exact_every: int = 3
    lp_columns: int = 30
    cut_seconds: float = 15.0
    cut_types: int = 12
    max_classes: int = 250


def configuration_lp_bound(
    classes: Sequence[PodClass],
    types: Sequence[BinType],
    *,
    limits: BoundLimits | None = None,
    initial_patterns: Sequence[Sequence[int]] = (),
) -> BoundResult:
    """A valid lower bound (USD/hour) on packing ``classes`` onto ``types``, from the
    configuration LP (module docstring): the best of three, each valid on its own, searched as far as
    ``limits`` allow (:class:`BoundLimits`, whose fields the steps below name; None: its defaults).

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

    lim = limits or BoundLimits()
    start = time.perf_counter()
    classes, mapping = _coarsened(classes, lim.max_classes)
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
    pricer = _Pricer(inst, milp_seconds=lim.milp_seconds)
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
    smoothing = lim.alpha
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
        exact_now = stalled or iterations % lim.exact_every == 0

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
        for t in promising[np.argsort(-upper[promising] / inst.price[promising])][: lim.lp_columns]:
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
        if master - best_lb <= lim.tolerance * master:
            converged = True
            break
        if iterations >= lim.max_iterations or time.perf_counter() - start > lim.max_seconds:
            break
        if not new:  # mispricing: the smoothed duals found nothing the master can use
            if smoothing == 0.0 and exact_now:
                break  # nothing to add even by exact pricing at the master's duals
            smoothing, stalled = 0.0, True
        else:
            smoothing, stalled = lim.alpha, False
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
        if flat >= 2 or master - with_cuts <= lim.tolerance * master:
            break
        if time.perf_counter() - start > lim.max_seconds + lim.cut_seconds:
            break
        busiest = sorted(usage, key=lambda t: -inst.price[t] * usage[t][1])[: lim.cut_types]
        separated = sum(_separate(pricer, t, usage[t][0] / usage[t][1], known.get(t, [])) for t in busiest)
        if separated:
            continue
        loose = np.flatnonzero(pricer.dantzig(duals) > inst.price * (1 + 1e-6))
        ratio = {int(t): pricer.relaxed(int(t), duals)[1] / inst.price[t] for t in loose}
        candidates = sorted((t for t, r in ratio.items() if r > 1 + 1e-6), key=lambda t: -ratio[t])
        if not candidates:
            break  # the duals price no pattern above its type: the configuration LP is reached
        for t in candidates[: lim.cut_types]:
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
