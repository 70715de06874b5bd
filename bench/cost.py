"""Cost benchmark: a real pod trace on the real EC2 catalogue at us-east-1 on-demand list prices.

Pods come from a CSV in the Alibaba ``cluster-trace-gpu-v2023`` ``openb_pod_list`` format: columns
``cpu_milli`` (millicores), ``memory_mib`` (MiB) and ``num_gpu`` (any value > 0 is that many whole
``nvidia.com/gpu``: GPU sharing has no Kubernetes equivalent); other columns are ignored, ``name``
is used when present. The catalogue is the embedded AWS's (moto's copy of the real
``DescribeInstanceTypes``/offerings, read through the adapters; moto's answers are cached under
``${XDG_CACHE_HOME:-~/.cache}/nodesmith``), priced from ``--prices`` (a price table, on-demand
USD/hour by type); only on-demand offerings with a listed price are kept. One NodePool allows every
Linux type, on-demand only, no limits and no DaemonSets.

Both packing policies are solved on the same input (only :func:`solve` is timed):
``karpenter`` (Karpenter's grouping, cheapest fitting type per NodeClaim) and ``nodesmith``
(the default, cost-aware re-packing). Lower bounds come from ``bench/bounds.py`` (LPs solved with
HiGHS through scipy; pods grouped into classes of identical request vectors, dominated types left
out):

* ``lower_bound_cost_per_hour``: the configuration LP bound (:func:`bounds.configuration_lp_bound`):
  one variable per (type, pattern of pods that fits it in cpu, memory, GPUs and pods at once), by
  column generation seeded with both policies' NodeClaims, for at most ``--bound-seconds``.
  Valid even when stopped early; ``bound_kind`` says which bound it is (``configuration-lp``
  converged, ``configuration-lp-farley`` stopped early (Farley's bound),
  ``class-lp-knapsack-cuts`` the class LP with count cuts and cuts from the pricing knapsacks,
  ``class-count-lp`` with count cuts only), ``bound_gap`` how far the restricted master's value
  (``bound_master_cost_per_hour``, not a bound) is above it.
* ``class_lower_bound_cost_per_hour``: pods kept whole per class, only on types that hold one,
  fractional instances (GPU pods go to GPU types, a 32-vCPU pod to types with 32 vCPU free).
* ``plain_lower_bound_cost_per_hour``: fractional instance counts covering the pods' total cpu,
  memory, GPUs and pods; loose (a GPU pod's cpu may sit on a cheap CPU-only type).

Pods that fit no instance type at all are excluded from both policies and both bounds, and
counted. Prints one JSON line::

    {"pods", "nodesmith_cost_per_hour", "karpenter_policy_cost_per_hour", "lower_bound_cost_per_hour",
     "nodesmith_over_bound", "karpenter_policy_over_bound", "seconds", "bound_kind", "bound_gap",
     "bound_master_cost_per_hour", "bound_iterations", "bound_cut_rounds", "bound_classes",
     "bound_demands_rounded", "bound_seconds",
     "class_lower_bound_cost_per_hour", "nodesmith_over_class_bound", "plain_lower_bound_cost_per_hour",
     "nodesmith_over_plain_bound",
     "nodeclaims", "karpenter_policy_nodeclaims", "karpenter_policy_seconds", "excluded_pods",
     "instance_types"}

``*_over_*`` are fractions above the bound (0.05 = 5% dearer); ``seconds`` is the nodesmith solve.

    python bench/cost.py --pods ../shared/data/alibaba-openb-pods-default.csv \\
        --prices ../shared/data/ec2-ondemand-prices-us-east-1.json --json
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import sys
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Sequence

    from nodesmith.core.model import InstanceType, Pod

MIB = 2**20
GPU = "nvidia.com/gpu"
RESOURCES = ("cpu", "memory", GPU, "pods")
REQUIRED_COLUMNS = ("cpu_milli", "memory_mib", "num_gpu")


class BenchInputError(ValueError):
    """A trace or price table the benchmark cannot use (exit 2, message on stderr)."""


@dataclass(frozen=True, slots=True)
class TracePod:
    """One row of the trace: name, cpu millicores, memory MiB, whole GPUs."""

    name: str
    cpu_milli: int
    memory_mib: int
    gpus: int

    def requests(self) -> dict[str, int]:
        """Kubernetes requests: cpu millicores, memory bytes, GPUs when any, ``pods: 1``."""
        out = {"cpu": self.cpu_milli, "memory": self.memory_mib * MIB, "pods": 1}
        if self.gpus > 0:
            out[GPU] = self.gpus
        return out


def _count(value: str, *, column: str, where: str) -> int:
    try:
        number = float(value)
    except ValueError:
        raise BenchInputError(f"{where}: {column} is not a number: {value!r}") from None
    if number < 0 or math.isnan(number) or math.isinf(number):
        raise BenchInputError(f"{where}: {column} must be >= 0, got {value!r}")
    return int(number)


def read_trace(path: Path, limit: int | None = None) -> list[TracePod]:
    """The pods of a trace CSV (format in the module docstring), in file order.

    Raises ``BenchInputError`` naming the file (and line) when it is missing, has no
    ``cpu_milli``/``memory_mib``/``num_gpu`` column, or a value is not a non-negative number.
    """
    try:
        with path.open(newline="", encoding="utf-8") as fh:
            reader = csv.DictReader(fh)
            missing = [c for c in REQUIRED_COLUMNS if c not in (reader.fieldnames or ())]
            if missing:
                raise BenchInputError(
                    f"{path}: missing column(s) {', '.join(missing)} (need {', '.join(REQUIRED_COLUMNS)})"
                )
            pods: list[TracePod] = []
            for line, row in enumerate(reader, start=2):
                if limit is not None and len(pods) >= limit:
                    break
                where = f"{path}:{line}"
                pods.append(
                    TracePod(
                        name=(row.get("name") or "").strip() or f"pod-{line - 1:06d}",
                        cpu_milli=_count(row["cpu_milli"] or "0", column="cpu_milli", where=where),
                        memory_mib=_count(row["memory_mib"] or "0", column="memory_mib", where=where),
                        gpus=_count(row["num_gpu"] or "0", column="num_gpu", where=where),
                    )
                )
    except FileNotFoundError:
        raise BenchInputError(f"{path}: trace not found (the shared data lives in ../shared/data)") from None
    except (OSError, UnicodeDecodeError, csv.Error) as exc:
        raise BenchInputError(f"{path}: cannot read the trace: {exc}") from exc
    return pods


def on_demand_catalogue(*, prices: Path, region: str) -> list[InstanceType]:
    """The embedded EC2 catalogue with only its available, listed-price, on-demand Linux offerings."""
    from nodesmith.cli.exits import BadInput
    from nodesmith.cli.simulate_catalogue import load_catalogue

    if not prices.is_file():
        raise BenchInputError(f"{prices}: price table not found (the shared data lives in ../shared/data)")
    try:
        catalogue = load_catalogue(region=region, price_table=prices, use_aws=False)
    except BadInput as exc:
        raise BenchInputError(str(exc)) from exc
    out = []
    for it in catalogue:
        if it.labels.get("kubernetes.io/os", "linux") != "linux":
            continue
        offerings = tuple(
            o for o in it.offerings if o.capacity_type == "on-demand" and o.available and not o.price_estimated
        )
        if offerings:
            out.append(replace(it, offerings=offerings))
    if not out:
        raise BenchInputError(f"{prices}: no instance type of {region} has a listed on-demand price")
    return out


def _fits(requests: dict[str, int], it: InstanceType) -> bool:
    alloc = it.allocatable
    return all(alloc.get(r, 0) >= amount for r, amount in requests.items())


def split_fitting(trace: Sequence[TracePod], types: Sequence[InstanceType]) -> tuple[list[TracePod], list[TracePod]]:
    """``(pods some type holds, pods no type holds)``, each in trace order."""
    verdict: dict[tuple[int, int, int], bool] = {}
    kept: list[TracePod] = []
    excluded: list[TracePod] = []
    for p in trace:
        key = (p.cpu_milli, p.memory_mib, p.gpus)
        ok = verdict.get(key)
        if ok is None:
            ok = verdict[key] = any(_fits(p.requests(), it) for it in types)
        (kept if ok else excluded).append(p)
    return kept, excluded


def nodepool() -> Any:
    """One NodePool: on-demand, Linux, every instance type, no limits."""
    from nodesmith.core.api.nodepool import NodePool

    return NodePool.model_validate(
        {
            "apiVersion": "karpenter.sh/v1",
            "kind": "NodePool",
            "metadata": {"name": "default"},
            "spec": {
                "template": {
                    "spec": {
                        "requirements": [
                            {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]},
                            {"key": "kubernetes.io/os", "operator": "In", "values": ["linux"]},
                        ],
                        "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
                    }
                }
            },
        }
    )


def to_pods(trace: Sequence[TracePod]) -> list[Pod]:
    """Pending (Unschedulable) pods with the trace's requests, created in trace order."""
    from nodesmith.core.model import Pod

    return [
        Pod(
            namespace="default",
            name=p.name,
            uid=f"{i:06d}-{p.name}",
            requests=p.requests(),
            unschedulable=True,
            creation_timestamp=float(i),
        )
        for i, p in enumerate(trace)
    ]


# ----------------------------------------------------------------------------------------- bounds


def _bounds() -> Any:
    """``bench/bounds.py`` (shared with the other benchmarks), importable however this file was loaded."""
    here = str(Path(__file__).resolve().parent)
    if here not in sys.path:
        sys.path.insert(0, here)
    import bounds

    return bounds


def _classes_and_types(trace: Sequence[TracePod], types: Sequence[InstanceType]) -> tuple[list[Any], list[Any]]:
    b = _bounds()
    return b.pod_classes((p.requests() for p in trace), RESOURCES), b.bin_types(types, RESOURCES)


def plain_bound(trace: Sequence[TracePod], types: Sequence[InstanceType]) -> float:
    """LP: cheapest fractional instance counts covering the total cpu, memory, GPUs and pods (USD/hour)."""
    return float(_bounds().plain_lp_bound(*_classes_and_types(trace, types)))


def class_bound(trace: Sequence[TracePod], types: Sequence[InstanceType]) -> float:
    """LP with pods whole per class and only on types that hold one (module docstring; USD/hour)."""
    return float(_bounds().class_lp_bound(*_classes_and_types(trace, types)))


def configuration_bound(
    trace: Sequence[TracePod], types: Sequence[InstanceType], *, plans: Sequence[Any] = (), max_seconds: float = 45.0
) -> Any:
    """The configuration LP bound (``bounds.BoundResult``), its master seeded with the pods of each
    ``NodeClaimPlan`` in ``plans`` (a known packing's instances); two thirds of ``max_seconds`` go
    to column generation, one third to the cutting-plane rounds."""
    b = _bounds()
    classes, bins = _classes_and_types(trace, types)
    index = {c.demand: i for i, c in enumerate(classes)}
    patterns = []
    for plan in plans:
        pattern = [0] * len(classes)
        for pod in plan.pods:
            pattern[index[tuple(pod.requests.get(r, 0) for r in RESOURCES)]] += 1
        patterns.append(pattern)
    limits = b.BoundLimits(max_seconds=max_seconds * 2 / 3, cut_seconds=max_seconds / 3)
    return b.configuration_lp_bound(classes, bins, initial_patterns=patterns, limits=limits)


# ------------------------------------------------------------------------------------------- run


def run(
    *, pods_csv: Path, prices: Path, region: str = "us-east-1", limit: int | None = None, bound_seconds: float = 45.0
) -> dict[str, Any]:
    """Read, solve with both policies, bound, and return the JSON object (keys in the module docstring)."""
    from nodesmith.core.scheduling import SchedulingInput, solve

    trace = read_trace(pods_csv, limit)
    types = on_demand_catalogue(prices=prices, region=region)
    kept, excluded = split_fitting(trace, types)
    inp = SchedulingInput(pods=to_pods(kept), nodepools=[nodepool()], instance_types=types)
    results: dict[str, Any] = {}
    timings: dict[str, float] = {}
    for policy in ("karpenter", "nodesmith"):
        start = time.perf_counter()
        results[policy] = solve(replace(inp, packing=policy))
        timings[policy] = time.perf_counter() - start
        if results[policy].unschedulable:
            some = next(iter(results[policy].unschedulable.items()))
            raise RuntimeError(f"{policy}: {len(results[policy].unschedulable)} pod(s) not placed, e.g. {some}")
    nodesmith, karpenter = results["nodesmith"].cost_per_hour, results["karpenter"].cost_per_hour
    plans = [*results["nodesmith"].nodeclaims, *results["karpenter"].nodeclaims]
    bound = configuration_bound(kept, types, plans=plans, max_seconds=bound_seconds).as_json() if kept else {}
    lower = bound.get("lower_bound_cost_per_hour", 0.0)
    plain = bound.get("plain_lower_bound_cost_per_hour", 0.0)
    per_class = bound.get("class_lower_bound_cost_per_hour", 0.0)

    def over(cost: float, bound: float) -> float | None:
        return round(cost / bound - 1, 4) if bound > 0 else None

    return {
        "pods": len(kept),
        "nodesmith_cost_per_hour": round(nodesmith, 4),
        "karpenter_policy_cost_per_hour": round(karpenter, 4),
        "lower_bound_cost_per_hour": lower,
        "nodesmith_over_bound": over(nodesmith, lower),
        "karpenter_policy_over_bound": over(karpenter, lower),
        "seconds": round(timings["nodesmith"], 3),
        "bound_kind": bound.get("bound_kind"),
        "bound_gap": bound.get("bound_gap"),
        "bound_master_cost_per_hour": bound.get("bound_master_cost_per_hour"),
        "bound_iterations": bound.get("bound_iterations"),
        "bound_cut_rounds": bound.get("bound_cut_rounds"),
        "bound_classes": bound.get("bound_classes"),
        "bound_demands_rounded": bound.get("bound_demands_rounded"),
        "bound_seconds": bound.get("bound_seconds"),
        "class_lower_bound_cost_per_hour": per_class,
        "nodesmith_over_class_bound": over(nodesmith, per_class),
        "plain_lower_bound_cost_per_hour": plain,
        "nodesmith_over_plain_bound": over(nodesmith, plain),
        "nodeclaims": len(results["nodesmith"].nodeclaims),
        "karpenter_policy_nodeclaims": len(results["karpenter"].nodeclaims),
        "karpenter_policy_seconds": round(timings["karpenter"], 3),
        "excluded_pods": len(excluded),
        "instance_types": len(types),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--pods", type=Path, required=True, help="trace CSV (cpu_milli, memory_mib, num_gpu)")
    parser.add_argument("--prices", type=Path, required=True, help="price table JSON (on-demand USD/hour by type)")
    parser.add_argument("--region", default="us-east-1")
    parser.add_argument("--limit", type=int, default=None, help="use only the first N pods of the trace")
    parser.add_argument(
        "--bound-seconds", type=float, default=45.0, help="column generation budget of the configuration LP bound"
    )
    parser.add_argument("--json", action="store_true", help="print one JSON line (the default output anyway)")
    args = parser.parse_args(argv)
    try:
        out = run(
            pods_csv=args.pods,
            prices=args.prices,
            region=args.region,
            limit=args.limit,
            bound_seconds=args.bound_seconds,
        )
    except BenchInputError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if out["excluded_pods"]:
        print(f"note: {out['excluded_pods']} pod(s) fit no instance type and were left out", file=sys.stderr)
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
