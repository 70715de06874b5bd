"""The pricing side of the configuration LP in :mod:`bounds`: the per-type integer knapsack
(:class:`_Pricer`: a fractional upper bound, a greedy pattern, the exact HiGHS MILP with its dual
bound) and the separation of knapsack cuts for the class LP (:func:`_separate`)."""

from __future__ import annotations

import math
import sys
from pathlib import Path
from typing import Any

if str(Path(__file__).resolve().parent) not in sys.path:  # loaded by path (tests) rather than as bench/ module
    sys.path.insert(0, str(Path(__file__).resolve().parent))

from bounds_core import _Instance, _native_stdout_silenced


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
