"""Scheduling pending pods against a large cluster of existing nodes, most of them full.

The catalogue and NodePool are :mod:`scheduling`'s (``fake.InstanceTypes``). The cluster has
``--nodes`` existing nodes (``fake-it-4``/``-8``/``-16``, zones test-zone-1..3, spot and
on-demand), each with bound pods of the ``my-label``/``app`` shapes the pending pods select on:

* every 10th node belongs to a ``gpu`` NodePool: label ``example.com/accelerator=gpu``, taint
  ``example.com/accelerator=gpu:NoSchedule``, half its cpu free (room, but only for pods that
  select and tolerate it);
* a ``--free-fraction`` of the others have half their cpu free;
* the rest are full: their bound pods leave less than 100m cpu.

Pending pods (``--pending``): with ``--shape diverse`` (the default) :func:`scheduling.diverse_pods`
(generic, zone and hostname topology spread, zone self-affinity, hostname anti-affinity), every 8th
one pinned to spot by node selector and every 16th one to the gpu nodes (selector and toleration);
with ``--shape plain`` pods of 1 CPU and 1 GiB without constraints.

Only :func:`solve` is timed (``--repeat N``: the fastest of N runs), in wall-clock ``seconds`` and in
``cpu_seconds`` of this process (less sensitive to other work on a shared machine). ``can_add_calls`` counts
``SimExistingNode.can_add`` calls in one pass. ``decisions_sha256`` is
:func:`scheduling.decisions_sha256`: two runs decided alike exactly when their digests are equal.
Prints one JSON line.

    python bench/existing_nodes.py --nodes 5000 --pending 2000 --json
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from scheduling import decisions, decisions_sha256, diverse_pods, instance_types, nodepool

from nodesmith.core.model import Pod, Taint, Toleration
from nodesmith.core.scheduling import SchedulingInput, solve
from nodesmith.core.scheduling.existing import SimExistingNode
from nodesmith.core.scheduling.types import ExistingNode

GIB = 2**30
ZONES = ("test-zone-1", "test-zone-2", "test-zone-3")
GPU_LABEL = "example.com/accelerator"
SIZES = (4, 8, 16)


def _bound_pods(rng: random.Random, node: str, cpu_used: int, memory: int) -> tuple[Pod, ...]:
    """Running pods on ``node`` using ``cpu_used`` millicores in 500m pods (the last one takes the rest)."""
    out: list[Pod] = []
    left = cpu_used
    while left > 0:
        cpu = min(500, left)
        left -= cpu
        labels = {"my-label": rng.choice("abcdefg")}
        if rng.random() < 0.05:
            labels = {"app": "nginx"}
        out.append(
            Pod(
                namespace="default",
                name=f"{node}-run-{len(out)}",
                uid=f"{node}-run-{len(out)}",
                labels=labels,
                requests={"cpu": cpu, "memory": memory, "pods": 1},
                node_name=node,
                phase="Running",
                creation_timestamp=0.5,
            )
        )
    return tuple(out)


def existing_nodes(count: int, free_fraction: float, seed: int) -> list[ExistingNode]:
    """The cluster described in the module docstring, deterministic for ``seed``."""
    rng = random.Random(seed)
    out: list[ExistingNode] = []
    for i in range(count):
        name = f"ip-10-{i // 250}-{i % 250}-1.ec2.internal"
        size = SIZES[i % len(SIZES)]
        cpu = 1000 * size - 100
        gpu = i % 10 == 0
        roomy = gpu or rng.random() < free_fraction
        used = cpu // 2 if roomy else cpu - rng.randrange(0, 100)
        labels = {
            "kubernetes.io/hostname": name,
            "topology.kubernetes.io/zone": ZONES[(i // 3) % len(ZONES)],
            "node.kubernetes.io/instance-type": f"fake-it-{size}",
            "kubernetes.io/arch": "amd64",
            "kubernetes.io/os": "linux",
            "karpenter.sh/capacity-type": "spot" if i % 2 else "on-demand",
            "karpenter.sh/nodepool": "gpu" if gpu else "default",
        }
        taints: tuple[Taint, ...] = ()
        if gpu:
            labels[GPU_LABEL] = "gpu"
            taints = (Taint(GPU_LABEL, "NoSchedule", "gpu"),)
        out.append(
            ExistingNode(
                name=name,
                labels=labels,
                taints=taints,
                allocatable={"cpu": cpu, "memory": 2 * size * GIB - 10 * 2**20, "pods": 10 * size},
                pods=_bound_pods(rng, name, used, 256 * 2**20),
                nodepool=labels["karpenter.sh/nodepool"],
            )
        )
    return out


def pending_pods(count: int, seed: int, shape: str = "diverse") -> list[Pod]:
    """``shape="diverse"``: :func:`scheduling.diverse_pods`, every 8th pinned to spot and every 16th to
    the gpu nodes. ``shape="plain"``: pods of 1 CPU and 1 GiB without constraints.

    Raises ``ValueError`` for another shape."""
    if shape == "plain":
        return [
            Pod(
                namespace="default",
                name=f"plain-{i:06d}",
                uid=f"plain-{i:06d}",
                labels={"app": "plain"},
                requests={"cpu": 1000, "memory": GIB, "pods": 1},
                unschedulable=True,
                creation_timestamp=1.0,
            )
            for i in range(count)
        ]
    if shape != "diverse":
        raise ValueError(f"unknown pod shape {shape!r} (expected diverse or plain)")
    out: list[Pod] = []
    toleration = Toleration(key=GPU_LABEL, operator="Equal", value="gpu", effect="NoSchedule")
    for i, base in enumerate(diverse_pods(count, seed)):
        pod = base
        if i % 16 == 0:
            pod = replace(base, node_selector={GPU_LABEL: "gpu"}, tolerations=(toleration,))
        elif i % 8 == 0:
            pod = replace(base, node_selector={"karpenter.sh/capacity-type": "spot"})
        out.append(pod)
    return out


def run(
    nodes: int, pending: int, *, shape: str = "diverse", free_fraction: float = 0.05, seed: int = 42, repeat: int = 1
) -> dict[str, Any]:
    """Build the input, time :func:`solve` ``repeat`` times (fastest run reported) and count ``can_add`` calls.

    The report's ``decisions`` key holds :func:`decisions` of the pass (``main`` writes it apart).
    """
    inp = SchedulingInput(
        pods=pending_pods(pending, seed, shape),
        nodepools=[nodepool()],
        instance_types=instance_types(),
        existing_nodes=existing_nodes(nodes, free_fraction, seed),
    )
    seconds = cpu_seconds = float("inf")
    for _ in range(max(1, repeat)):
        start, cpu_start = time.perf_counter(), time.process_time()
        result = solve(inp)
        seconds = min(seconds, time.perf_counter() - start)
        cpu_seconds = min(cpu_seconds, time.process_time() - cpu_start)
    calls = 0
    can_add = SimExistingNode.can_add

    def counting(self: SimExistingNode, *args: Any) -> Any:
        nonlocal calls
        calls += 1
        return can_add(self, *args)

    SimExistingNode.can_add = counting  # type: ignore[method-assign,assignment]
    try:
        counted = solve(inp)
    finally:
        SimExistingNode.can_add = can_add  # type: ignore[method-assign]
    decided = decisions(result)
    digest = decisions_sha256(result)
    if digest != decisions_sha256(counted):
        raise SystemExit("two passes over the same input decided differently")
    return {
        "nodes": nodes,
        "pending": pending,
        "shape": shape,
        "free_fraction": free_fraction,
        "seed": seed,
        "placed_on_existing": sum(len(p) for p in result.existing.values()),
        "existing_nodes_used": len(result.existing),
        "nodeclaims": len(result.nodeclaims),
        "unscheduled": len(result.unschedulable),
        "can_add_calls": calls,
        "seconds": round(seconds, 4),
        "cpu_seconds": round(cpu_seconds, 4),
        "decisions_sha256": digest,
        "decisions": decided,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--nodes", type=int, default=5000, help="existing nodes (default 5000)")
    parser.add_argument("--pending", type=int, default=2000, help="pending pods (default 2000)")
    parser.add_argument("--shape", choices=("diverse", "plain"), default="diverse", help="pending pods (diverse)")
    parser.add_argument("--free-fraction", type=float, default=0.05, help="share of non-gpu nodes with room (0.05)")
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--repeat", type=int, default=1, help="solve this many times, report the fastest (default 1)")
    parser.add_argument("--decisions", type=Path, help="also write every decision to this JSON file")
    parser.add_argument("--json", action="store_true", help="print one JSON line (the default output anyway)")
    args = parser.parse_args(argv)
    out = run(
        args.nodes,
        args.pending,
        shape=args.shape,
        free_fraction=args.free_fraction,
        seed=args.seed,
        repeat=args.repeat,
    )
    decided = out.pop("decisions")
    if args.decisions is not None:
        args.decisions.write_text(json.dumps(decided, indent=1, sort_keys=True) + "\n")
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
