"""Pod classes, bin types and the simple LP bounds (plain LP, class LP with knapsack cuts) behind
``bench/bounds.py``; split out of it so each file stays one concern. See ``bounds``'s docstring for
the maths and why every bound here is valid (never above the cheapest real packing)."""

from __future__ import annotations

import contextlib
import os
import sys
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Iterable, Iterator, Mapping, Sequence

_DEBUG = bool(os.environ.get("NODESMITH_BOUNDS_DEBUG"))

__all__ = [
    "BinType",
    "BoundResult",
    "PodClass",
    "bin_types",
    "class_lp_bound",
    "plain_lp_bound",
    "pod_classes",
]


@dataclass(frozen=True, slots=True)
class PodClass:
    """``count`` pods that each request ``demand`` (one int per resource, in the caller's order)."""

    demand: tuple[int, ...]
    count: int


@dataclass(frozen=True, slots=True)
class BinType:
    """An instance type: ``capacity`` (allocatable per resource, same order as the pod classes'
    ``demand``) at ``price`` USD/hour."""

    name: str
    capacity: tuple[int, ...]
    price: float


@dataclass(frozen=True, slots=True)
class BoundResult:
    """What :func:`configuration_lp_bound` found (all costs USD/hour).

    ``lower_bound`` is valid for every packing: the best of the bounds
    :func:`configuration_lp_bound` computes, named by ``kind``: ``"configuration-lp"`` when column
    generation converged (``lower_bound`` within ``tolerance`` of ``master_cost``: the
    configuration LP's optimum up to that tolerance), ``"configuration-lp-farley"`` when it stopped
    early (time or iteration budget), ``"class-lp-knapsack-cuts"`` when the class LP strengthened
    by the knapsack cuts was higher, ``"class-count-lp"`` when the class LP with count cuts alone
    was. ``master_cost`` is the restricted master LP's value (the configuration LP optimum is
    between ``lower_bound`` and it; it is not a bound on packings); ``gap = master_cost /
    lower_bound - 1``. ``classes`` is the number of pod classes bounded, ``demands_rounded``
    whether they were coarsened (demands rounded down) to get there.
    """

    lower_bound: float
    kind: str
    master_cost: float
    gap: float
    class_bound: float
    class_count_bound: float
    plain_bound: float
    classes: int
    demands_rounded: bool
    iterations: int
    cut_rounds: int
    columns: int
    types: int
    seconds: float

    def as_json(self) -> dict[str, Any]:
        """The fields as JSON-ready values (costs rounded to 1e-4 USD/hour)."""
        return {
            "lower_bound_cost_per_hour": round(self.lower_bound, 4),
            "bound_kind": self.kind,
            "bound_master_cost_per_hour": round(self.master_cost, 4),
            "bound_gap": round(self.gap, 6),
            "class_lower_bound_cost_per_hour": round(self.class_bound, 4),
            "class_count_lower_bound_cost_per_hour": round(self.class_count_bound, 4),
            "plain_lower_bound_cost_per_hour": round(self.plain_bound, 4),
            "bound_classes": self.classes,
            "bound_demands_rounded": self.demands_rounded,
            "bound_iterations": self.iterations,
            "bound_cut_rounds": self.cut_rounds,
            "bound_columns": self.columns,
            "bound_types": self.types,
            "bound_seconds": round(self.seconds, 3),
        }


def pod_classes(requests: Iterable[Mapping[str, int]], resources: Sequence[str]) -> list[PodClass]:
    """Group request maps (resource name -> int amount) into classes of identical vectors over
    ``resources``, in order of first appearance."""
    counts: dict[tuple[int, ...], int] = {}
    for req in requests:
        key = tuple(int(req.get(r, 0)) for r in resources)
        counts[key] = counts.get(key, 0) + 1
    return [PodClass(k, n) for k, n in counts.items()]


def bin_types(instance_types: Iterable[Any], resources: Sequence[str]) -> list[BinType]:
    """``BinType`` of each instance type (anything with ``name``, ``allocatable`` (resource ->
    int) and ``offerings`` with ``price``), at its cheapest offering; types without offerings
    are skipped. Filter the offerings (capacity type, availability) before calling."""
    out = []
    for it in instance_types:
        prices = [o.price for o in it.offerings]
        if prices:
            out.append(BinType(it.name, tuple(int(it.allocatable.get(r, 0)) for r in resources), min(prices)))
    return out


# ---------------------------------------------------------------------------------------- shared


@contextlib.contextmanager
def _native_stdout_silenced() -> Iterator[None]:
    """Send file descriptor 1 to /dev/null: HiGHS's MIP solver prints debug lines from C++ that
    ``disp=False`` does not stop, and the benchmarks' stdout must stay one JSON line."""
    sys.stdout.flush()
    try:
        saved = os.dup(1)
    except OSError:  # no real stdout (e.g. captured): nothing to protect
        yield
        return
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        try:
            os.dup2(devnull, 1)
        finally:
            os.close(devnull)
        yield
    finally:
        sys.stdout.flush()
        os.dup2(saved, 1)
        os.close(saved)


class _Instance:
    """Classes and kept types as scaled numpy arrays (every resource divided by its largest
    capacity, so memory bytes and GPU counts are both O(1) in the LPs)."""

    def __init__(self, classes: Sequence[PodClass], types: Sequence[BinType], *, useful_only: bool = True) -> None:
        import numpy as np

        classes = [c for c in classes if c.count > 0]
        if not classes:
            raise ValueError("no pods to bound")
        dims = {len(c.demand) for c in classes} | {len(t.capacity) for t in types}
        if len(dims) != 1:
            raise ValueError(f"demand and capacity vectors differ in length: {sorted(dims)}")
        self.demand_int = np.array([c.demand for c in classes], dtype=np.int64)
        self.count = np.array([c.count for c in classes], dtype=float)
        cap_all = np.array([t.capacity for t in types], dtype=np.int64).reshape(len(types), -1)
        price_all = np.array([t.price for t in types], dtype=float)
        fits_all = np.all(cap_all[:, None, :] >= self.demand_int[None, :, :], axis=2)  # [t, k]
        unplaceable = np.flatnonzero(~fits_all.any(axis=0))
        if unplaceable.size:
            raise ValueError(f"{unplaceable.size} pod class(es) fit no type, e.g. {classes[int(unplaceable[0])]}")
        kept: list[int] = []
        for t in sorted(range(len(types)), key=lambda i: (price_all[i], i)):
            if useful_only and not fits_all[t].any():
                continue
            if kept and bool(np.any(np.all(cap_all[kept] >= cap_all[t], axis=1))):
                continue
            kept.append(t)
        self.names = [types[t].name for t in kept]
        self.cap_int = cap_all[kept]
        self.price = price_all[kept]
        self.fits = fits_all[kept]
        self.scale = np.maximum(1, self.cap_int.max(axis=0)).astype(float)
        self.demand = self.demand_int / self.scale
        self.cap = self.cap_int / self.scale
        # most pods of class k one instance of type t holds (capped at the class count)
        with np.errstate(divide="ignore"):
            per = np.where(
                self.demand_int[None, :, :] > 0,
                self.cap_int[:, None, :] // np.maximum(self.demand_int[None, :, :], 1),
                np.iinfo(np.int64).max,
            ).min(axis=2)
        self.most = np.minimum(per, self.count[None, :].astype(np.int64)).astype(float)  # [t, k]


def plain_lp_bound(classes: Sequence[PodClass], types: Sequence[BinType]) -> float:
    """``min sum_t price_t x_t  s.t.  sum_t capacity_{t,r} x_t >= sum_k count_k demand_{k,r}``, x >= 0
    (USD/hour). Loose: a GPU pod's cpu may be covered by a cheap CPU-only type."""
    from scipy.optimize import linprog

    inst = _Instance(classes, types, useful_only=False)
    need = inst.count @ inst.demand
    res = linprog(inst.price, A_ub=-inst.cap.T, b_ub=-need, bounds=(0, None), method="highs")
    if res.status != 0:
        raise RuntimeError(f"plain bound LP failed: {res.message}")
    return float(res.fun)


def class_lp_bound(classes: Sequence[PodClass], types: Sequence[BinType]) -> float:
    """Pods whole per class, fractional instances (USD/hour): ``z_{k,t} >= 0`` pods of class k on
    type t only where one fits, ``sum_t z_{k,t} >= count_k``, ``sum_k demand_{k,r} z_{k,t} <=
    capacity_{t,r} x_t``, minimise ``sum_t price_t x_t``."""
    return float(_class_lp(_Instance(classes, types))[0])


def _class_lp(
    inst: _Instance, *, count_cuts: bool = False, cuts: Sequence[tuple[int, Any, float]] = ()
) -> tuple[float, Any, dict[int, tuple[Any, float]]]:
    """The class LP's value, the duals of its cover rows (one per class, >= 0) and, per type it
    uses, ``(pods of each class on it, instances of it)``.

    With ``count_cuts``, also ``z_{k,t} <= most_{t,k} x_t``: an instance of type t never holds more
    than ``most_{t,k}`` (the integer number that fits) pods of class k, so no packing violates it;
    it stops the LP from splitting a large pod over the fractional remainder of an instance.
    Each of ``cuts``, ``(t, w, u)`` with ``w >= 0`` per class and ``u`` at least the largest
    ``w . a`` over the patterns ``a`` that fit type t, adds ``sum_k w_k z_{k,t} <= u x_t``: every
    instance of t holds some pattern, so no packing violates it either.
    """
    import numpy as np
    from scipy.optimize import linprog
    from scipy.sparse import csr_matrix

    ncls, ntyp, nres = len(inst.count), len(inst.price), inst.cap.shape[1]
    pairs = [(k, t) for t in range(ntyp) for k in range(ncls) if inst.fits[t, k]]
    nz = len(pairs)
    rows: list[int] = []
    cols: list[int] = []
    vals: list[float] = []
    for j, (k, t) in enumerate(pairs):
        rows.append(k)  # -sum_t z_kt <= -count_k
        cols.append(j)
        vals.append(-1.0)
        for r in range(nres):  # sum_k d_kr z_kt - cap_tr x_t <= 0
            if inst.demand[k, r]:
                rows.append(ncls + t * nres + r)
                cols.append(j)
                vals.append(float(inst.demand[k, r]))
    for t in range(ntyp):
        for r in range(nres):
            rows.append(ncls + t * nres + r)
            cols.append(nz + t)
            vals.append(-float(inst.cap[t, r]))
    nrows = ncls + ntyp * nres
    if count_cuts:
        for j, (k, t) in enumerate(pairs):  # z_kt - most_tk x_t <= 0
            rows.extend((nrows + j, nrows + j))
            cols.extend((j, nz + t))
            vals.extend((1.0, -float(inst.most[t, k])))
        nrows += nz
    at = {(k, t): j for j, (k, t) in enumerate(pairs)}
    for t, w, u in cuts:
        for k in np.flatnonzero(w > 0).tolist():
            col = at.get((k, t))
            if col is not None:
                rows.append(nrows)
                cols.append(col)
                vals.append(float(w[k]))
        rows.append(nrows)
        cols.append(nz + t)
        vals.append(-float(u))
        nrows += 1
    a_ub = csr_matrix((vals, (rows, cols)), shape=(nrows, nz + ntyp))
    rhs = np.concatenate([-inst.count, np.zeros(nrows - ncls)])
    res = linprog(np.concatenate([np.zeros(nz), inst.price]), A_ub=a_ub, b_ub=rhs, bounds=(0, None), method="highs")
    if res.status != 0:
        raise RuntimeError(f"class bound LP failed: {res.message}")
    usage: dict[int, tuple[Any, float]] = {}  # type -> (pods per class on it, instances)
    for t in np.flatnonzero(res.x[nz:] > 1e-9).tolist():
        usage[t] = (np.zeros(ncls), float(res.x[nz + t]))
    for j, (k, t) in enumerate(pairs):
        if t in usage:
            usage[t][0][k] += res.x[j]
    return float(res.fun), np.maximum(-np.asarray(res.ineqlin.marginals[:ncls], dtype=float), 0.0), usage


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
