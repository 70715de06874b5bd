"""Consolidation benchmark: a fragmented cluster from the Alibaba trace, consolidated until stable.

1. Pods from ``../shared/data/alibaba-openb-pods-default.csv`` (``--pods`` sampled with a fixed
   seed; CPU-only and GPU pods: ``cpu_milli``, ``memory_mib``, ``num_gpu`` whole NVIDIA GPUs) are
   packed onto NodeClaims with the provisioning scheduler (:func:`solve`) over the us-east-1
   catalogue (the simulate catalogue, priced from ``ec2-ondemand-prices-us-east-1.json``).
2. A random 40 % of the pods is deleted (fixed seed): the cluster is fragmented.
3. Consolidation runs until a pass finds nothing: :func:`plan_disruptions` plays every command of a
   pass; its moves are applied (pods to their simulated destinations, replacements become nodes) and
   the clock moves one hour, so every node is past ``consolidateAfter``. Twice, from the same start:
   **nodesmith** (the ``nodesmith`` consolidation policy, :mod:`nodesmith.core.disruption.repack`:
   ``--min-savings`` USD/hour per command, ``--per-node`` USD/hour per disrupted node, ``--per-pod``
   USD/hour per evicted pod, spot-to-spot allowed) and **karpenter** (the ``karpenter`` policy with
   Karpenter's defaults: multi- then single-node consolidation, spot-to-spot off, no minimum
   saving).

Reported: the lower bound for the remaining pods, ``bound_usd_per_hour``: the configuration-LP
bound of ``bench/bounds.py`` (column generation, Farley's bound, or the class LP when higher: pods
whole, only on types that hold them) over the instance types the NodePool can launch at their
cheapest spot or on-demand offering, resources cpu, memory, GPUs and pods; no packing can beat it.
When ``bench/bounds.py`` is absent it is the plain LP (``plain_lp_bound_usd_per_hour``: continuous
instance counts covering total cpu, memory and GPUs, HiGHS via ``scipy.optimize.linprog``), which is
always reported too. Per policy: cost per hour before/after (USD), the gap to the bound, nodes
disrupted (``empty_nodes_deleted`` of them by emptiness, ``replacements_disrupted_again`` of them
replacements an earlier command launched), pods evicted, rounds, commands and
seconds. Every workload (4 pods) has a ``maxUnavailable: 1`` PodDisruptionBudget; the candidate
filter refuses nodes whose pods a PDB blocks, and commands are executed through the Eviction API,
which enforces PDBs, so ``pdb_violations`` is 0 by construction; ``pdb_waits`` counts the evictions
that would have to wait for a sibling pod of the same workload evicted by the same command to be
running again (the concurrency a command asks of the PDBs); ``pods_lost`` counts pods no longer on
any node at the end (0: every eviction was planned a destination). ``targets`` says whether the
nodesmith run is within 10 % of the bound and disrupted fewer nodes than the karpenter run. One
JSON line with ``--json``.

    python bench/consolidation.py --json
"""

from __future__ import annotations

import argparse
import csv
import json
import random
import sys
import time
from collections import Counter
from dataclasses import replace
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "lambdas"))

from nodesmith.core.api.nodepool import NodePool
from nodesmith.core.disruption import ClusterNode, DisruptionSettings, DisruptionSnapshot, plan_disruptions
from nodesmith.core.disruption.sequence import REPLACEMENT_PREFIX, _advance, replacement_node
from nodesmith.core.model import InstanceType, LabelSelector, Node, Pod, PodDisruptionBudget
from nodesmith.core.requirements import LABEL_CAPACITY_TYPE, LABEL_INITIALIZED, LABEL_INSTANCE_TYPE, LABEL_ZONE
from nodesmith.core.resources import CPU, GPU_NVIDIA, MEMORY
from nodesmith.core.scheduling import SchedulingInput, solve

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT.parent / "shared" / "data"
MIB = 2**20
WORKLOAD_SIZE = 4


def _nodepool() -> NodePool:
    return NodePool.model_validate(
        {
            "apiVersion": "karpenter.sh/v1",
            "kind": "NodePool",
            "metadata": {"name": "default", "uid": "uid-default"},
            "spec": {
                "template": {
                    "spec": {
                        "requirements": [
                            {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand", "spot"]},
                            {"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64"]},
                            {"key": "kubernetes.io/os", "operator": "In", "values": ["linux"]},
                        ],
                        "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
                        "expireAfter": "Never",
                    }
                },
                "disruption": {
                    "consolidationPolicy": "WhenEmptyOrUnderutilized",
                    "consolidateAfter": "30s",
                    "budgets": [{"nodes": "100%"}],
                },
            },
        }
    )


def _pods(path: Path, count: int, rng: random.Random) -> list[Pod]:
    with path.open(newline="", encoding="utf-8") as fh:
        rows = list(csv.DictReader(fh))
    rows = rng.sample(rows, min(count, len(rows)))
    pods: list[Pod] = []
    for i, row in enumerate(rows):
        requests = {CPU: int(row["cpu_milli"]), MEMORY: int(row["memory_mib"]) * MIB, "pods": 1}
        gpus = int(row["num_gpu"] or 0)
        if gpus:
            requests[GPU_NVIDIA] = gpus
        workload = f"w{i // WORKLOAD_SIZE}"
        pods.append(
            Pod(
                namespace="default",
                name=row["name"],
                uid=row["name"],
                labels={"workload": workload},
                requests=requests,
                unschedulable=True,
                owner_kind="ReplicaSet",
                owner_name=workload,
                phase="Pending",
            )
        )
    return pods


def _pdbs(pods: list[Pod]) -> list[PodDisruptionBudget]:
    names = sorted({p.labels["workload"] for p in pods})
    return [
        PodDisruptionBudget(
            namespace="default",
            name=n,
            selector=LabelSelector(match_labels=(("workload", n),)),
            max_unavailable=1,
        )
        for n in names
    ]


def _price(node: Node, catalogue: dict[str, InstanceType]) -> float:
    it = catalogue.get(node.labels.get(LABEL_INSTANCE_TYPE, ""))
    if it is None:
        return 0.0
    ct, zone = node.labels.get(LABEL_CAPACITY_TYPE), node.labels.get(LABEL_ZONE)
    prices = [o.price for o in it.offerings if o.capacity_type == ct and o.zone == zone]
    return min(prices) if prices else 0.0


def _initialized(cn: ClusterNode, *, at: float) -> ClusterNode:
    node = replace(cn.node, ready=True, labels={**cn.node.labels, LABEL_INITIALIZED: "true"})
    if cn.node.creation_timestamp == 0 or not cn.node.ready:
        node = replace(node, creation_timestamp=at)
    return replace(cn, node=node, last_pod_event_time=cn.last_pod_event_time or at)


def pack(pods: list[Pod], catalogue: list[InstanceType], pool: NodePool, *, now: float) -> list[ClusterNode]:
    """The cluster the provisioning scheduler would build for ``pods``: one initialized node per NodeClaim."""
    result = solve(SchedulingInput(pods=pods, nodepools=[pool], instance_types=catalogue))
    nodes: list[ClusterNode] = []
    for i, plan in enumerate(result.nodeclaims):
        name = f"node-{i:04d}"
        node = replacement_node(plan, name=name, now=now)
        bound = tuple(replace(p, node_name=name, unschedulable=False, phase="Running") for p in plan.pods)
        nodes.append(_initialized(ClusterNode(node=node, pods=bound, last_pod_event_time=now), at=now))
    return nodes


def configuration_bound(pods: list[Pod], catalogue: list[InstanceType], pool: NodePool) -> dict[str, Any] | None:
    """``bench/bounds.py``'s configuration-LP lower bound for ``pods`` (its JSON fields), None when absent.

    Instance types: those the NodePool can launch (:func:`usable_types`), each at its cheapest
    available spot or on-demand offering; resources cpu, memory, NVIDIA GPUs and pods.
    """
    try:
        import bounds
    except ImportError:
        return None
    from nodesmith.core.disruption.simulation import usable_types

    resources = [CPU, MEMORY, GPU_NVIDIA, "pods"]
    types = [
        replace(
            it, offerings=tuple(o for o in it.offerings if o.available and o.capacity_type in {"on-demand", "spot"})
        )
        for it in usable_types(catalogue, [pool])
    ]
    result = bounds.configuration_lp_bound(
        bounds.pod_classes([p.requests for p in pods], resources),
        bounds.bin_types(types, resources),
        limits=bounds.BoundLimits(max_seconds=30.0),
    )
    return dict(result.as_json())


def lp_bound(pods: list[Pod], catalogue: list[InstanceType], pool: NodePool) -> float:
    """LP lower bound (USD/hour) on any cluster holding ``pods``: min Σ price_t x_t, x >= 0, covering cpu/memory/gpu."""
    import numpy as np
    from scipy.optimize import linprog

    allowed_ct = {"on-demand", "spot"}
    arch = "amd64"
    types = [it for it in catalogue if it.labels.get("kubernetes.io/arch") == arch]
    cost, cols = [], []
    for it in types:
        prices = [o.price for o in it.offerings if o.available and o.capacity_type in allowed_ct]
        if not prices:
            continue
        alloc = it.allocatable
        cost.append(min(prices))
        cols.append([alloc.get(CPU, 0), alloc.get(MEMORY, 0) / MIB, alloc.get(GPU_NVIDIA, 0)])
    need = [
        sum(p.requests.get(CPU, 0) for p in pods),
        sum(p.requests.get(MEMORY, 0) for p in pods) / MIB,
        sum(p.requests.get(GPU_NVIDIA, 0) for p in pods),
    ]
    a_ub = -np.array(cols, dtype=float).T
    res = linprog(c=np.array(cost), A_ub=a_ub, b_ub=-np.array(need, dtype=float), bounds=(0, None), method="highs")
    if not res.success:
        raise RuntimeError(f"LP failed: {res.message}")
    return float(res.fun)


def consolidate(
    start: list[ClusterNode],
    *,
    catalogue: list[InstanceType],
    pool: NodePool,
    pdbs: list[PodDisruptionBudget],
    settings: DisruptionSettings,
    now: float,
    max_rounds: int = 50,
) -> dict[str, Any]:
    """Consolidate ``start`` until a pass finds nothing; returns the run's figures."""
    by_name = {it.name: it for it in catalogue}
    state = list(start)
    disrupted = evicted = waits = rounds = commands = empties = churn = 0
    pods_before = {p.key for cn in start for p in cn.pods}
    methods: Counter[str] = Counter()
    started = time.perf_counter()
    for rounds in range(1, max_rounds + 1):
        plan = plan_disruptions(
            DisruptionSnapshot(nodes=state, nodepools=[pool], instance_types=catalogue, pdbs=pdbs),
            now=now,
            settings=settings,
        )
        if not plan.commands:
            break
        for seq, cmd in enumerate(plan.commands, start=1):
            commands += 1
            methods[cmd.method] += 1
            disrupted += len(cmd.nodes)
            empties += len(cmd.nodes) if cmd.method == "emptiness" else 0
            churn += sum(1 for n in cmd.nodes if n.startswith(REPLACEMENT_PREFIX))
            evicted += len(cmd.pods)
            per_workload = Counter(p.split("/", 1)[1] for p in cmd.pods)
            workloads = {p.name: p.labels.get("workload") for cn in state for p in cn.pods}
            hit = Counter(workloads.get(name) for name in per_workload.elements())
            waits += sum(count - 1 for count in hit.values() if count > 1)
            state, _ = _advance(state, cmd, seq=rounds * 1000 + seq, now=now)
            state = [cn for cn in state if cn.name not in set(cmd.nodes)]
        now += 3600.0
        state = [_initialized(cn, at=now - 3600.0) for cn in state]
    return {
        "cost_before_usd_per_hour": round(sum(_price(cn.node, by_name) for cn in start), 4),
        "cost_after_usd_per_hour": round(sum(_price(cn.node, by_name) for cn in state), 4),
        "nodes_before": len(start),
        "nodes_after": len(state),
        "nodes_disrupted": disrupted,
        "empty_nodes_deleted": empties,
        "replacements_disrupted_again": churn,
        "pods_evicted": evicted,
        "pdb_violations": 0,
        "pdb_waits": waits,
        "pods_lost": len(pods_before - {p.key for cn in state for p in cn.pods}),
        "commands": commands,
        "methods": dict(methods),
        "rounds": rounds,
        "seconds": round(time.perf_counter() - started, 2),
        "_state": state,
    }


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--pods", type=int, default=300, help="pods sampled from the trace")
    parser.add_argument("--delete", type=float, default=0.4, help="fraction of pods deleted")
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--min-savings", type=float, default=0.05, help="nodesmith's minimum saving, USD/hour")
    parser.add_argument(
        "--per-node", type=float, default=0.05, help="nodesmith's minimum saving per disrupted node, USD/hour"
    )
    parser.add_argument(
        "--per-pod", type=float, default=0.0, help="nodesmith's minimum saving per evicted pod, USD/hour"
    )
    parser.add_argument("--trace", type=Path, default=DATA / "alibaba-openb-pods-default.csv")
    parser.add_argument("--price-table", type=Path, default=DATA / "ec2-ondemand-prices-us-east-1.json")
    args = parser.parse_args(argv)
    started = time.perf_counter()

    import logging

    logging.disable(logging.WARNING)
    from nodesmith.cli.simulate_catalogue import load_catalogue

    catalogue = load_catalogue(region="us-east-1", price_table=args.price_table, use_aws=False)
    rng = random.Random(args.seed)
    pool = _nodepool()
    pods = _pods(args.trace, args.pods, rng)
    now = 1_800_000_000.0
    packed = pack(pods, catalogue, pool, now=now - 7200.0)
    by_name = {it.name: it for it in catalogue}
    packed_cost = sum(_price(cn.node, by_name) for cn in packed)
    gone = set(rng.sample([p.name for p in pods], round(args.delete * len(pods))))
    fragmented = [replace(cn, pods=tuple(p for p in cn.pods if p.name not in gone)) for cn in packed]
    remaining = [p for cn in fragmented for p in cn.pods]
    pdbs = _pdbs(remaining)
    before = sum(_price(cn.node, by_name) for cn in fragmented)
    plain = lp_bound(remaining, catalogue, pool)
    config = configuration_bound(remaining, catalogue, pool)
    bound = float(config["lower_bound_cost_per_hour"]) if config is not None else plain
    runs = {
        "nodesmith": DisruptionSettings(
            min_savings_per_hour=args.min_savings,
            spot_to_spot=True,
            policy="nodesmith",
            min_savings_per_disrupted_node=args.per_node,
            min_savings_per_evicted_pod=args.per_pod,
        ),
        "karpenter": DisruptionSettings(min_savings_per_hour=0.0, spot_to_spot=False, policy="karpenter"),
    }
    out: dict[str, Any] = {
        "pods_packed": len(pods),
        "gpu_pods": sum(1 for p in pods if p.requests.get(GPU_NVIDIA)),
        "nodes_packed": len(packed),
        "cost_packed_usd_per_hour": round(packed_cost, 4),
        "pods_remaining": len(remaining),
        "cost_before_usd_per_hour": round(before, 4),
        "bound_usd_per_hour": round(bound, 4),
        "bound_kind": config["bound_kind"] if config is not None else "plain-lp (bench/bounds.py absent)",
        "plain_lp_bound_usd_per_hour": round(plain, 4),
        "bound": config,
        "seed": args.seed,
    }
    for label, settings in runs.items():
        result = consolidate(fragmented, catalogue=catalogue, pool=pool, pdbs=pdbs, settings=settings, now=now)
        result.pop("_state")
        result["gap_to_bound"] = round(result["cost_after_usd_per_hour"] / bound - 1.0, 4) if bound else None
        result["policy"] = settings.policy
        result["min_savings_usd_per_hour"] = settings.min_savings_per_hour
        if settings.policy == "nodesmith":
            result["min_savings_per_disrupted_node_usd_per_hour"] = settings.min_savings_per_disrupted_node
            result["min_savings_per_evicted_pod_usd_per_hour"] = settings.min_savings_per_evicted_pod
        result["spot_to_spot"] = settings.spot_to_spot
        out[label] = result
    ours, theirs = out["nodesmith"], out["karpenter"]
    out["targets"] = {
        "nodesmith_within_10pct_of_bound": bool(ours["gap_to_bound"] is not None and ours["gap_to_bound"] <= 0.10),
        "nodesmith_fewer_disruptions_than_karpenter": ours["nodes_disrupted"] < theirs["nodes_disrupted"],
        "nodesmith_cheaper_than_karpenter": ours["cost_after_usd_per_hour"] < theirs["cost_after_usd_per_hour"],
        "nodesmith_fewer_evictions_than_karpenter": ours["pods_evicted"] < theirs["pods_evicted"],
        "pdb_violations": ours["pdb_violations"] + theirs["pdb_violations"],
    }
    out["seconds"] = round(time.perf_counter() - started, 2)
    print(json.dumps(out) if args.json else json.dumps(out, indent=2), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
