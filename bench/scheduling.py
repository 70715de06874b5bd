"""Scheduling benchmark in the shape of Karpenter's ``scheduling_benchmark_test.go``.

Catalogue (``fake.InstanceTypes(400)``): type *i* (1..400) has *i* vCPU, *2i* GiB, *10i* pods,
kube-reserved 100m cpu / 10Mi; five offerings (spot in test-zone-1/2, on-demand in test-zone-1/2/3)
priced ``0.1 * vCPU + 0.1 * GB``. One NodePool with effectively unlimited limits.

Pods (``makeDiversePods``): five equal classes — generic; zone topology spread; hostname topology
spread (maxSkew 1, DoNotSchedule, selector ``my-label`` in a..g); required zone self-affinity; required
hostname anti-affinity (``app=nginx``, one per node) — the remainder generic. cpu from
{100,250,500,1000,1500}m, memory from {100,256,512,1024,2048,4096}Mi, fixed seed (Python's RNG, so the
draws differ from Go's ``rand.NewSource(42)`` but the distribution is the same).

Only :func:`solve` is timed (``--repeat N``: the fastest of N runs). Prints one JSON line:
``{"pods", "nodeclaims", "unscheduled", "seconds", "pods_per_second", "peak_rss_mib", "decisions_sha256"}``
(:func:`decisions_sha256`: two runs decided alike exactly when their digests are equal).

    python bench/scheduling.py --pods 5000 --json
"""

from __future__ import annotations

import argparse
import hashlib
import json
import random
import resource
import sys
import time
from typing import Any

from nodesmith.core.api.nodepool import NodePool
from nodesmith.core.model import (
    InstanceType,
    LabelSelector,
    Offering,
    Pod,
    PodAffinityTerm,
    TopologySpreadConstraint,
)
from nodesmith.core.scheduling import SchedulingInput, SchedulingResult, solve

GIB = 2**30
MIB = 2**20
ZONE = "topology.kubernetes.io/zone"
HOSTNAME = "kubernetes.io/hostname"
OFFERINGS = (
    ("spot", "test-zone-1"),
    ("spot", "test-zone-2"),
    ("on-demand", "test-zone-1"),
    ("on-demand", "test-zone-2"),
    ("on-demand", "test-zone-3"),
)


def instance_types(count: int = 400) -> list[InstanceType]:
    """``fake.InstanceTypes(count)``: type i has i vCPU, 2i GiB, 10i pods; price 0.1*vCPU + 0.1*GB."""
    out = []
    for i in range(1, count + 1):
        memory = 2 * i * GIB
        price = 0.1 * i + 0.1 * memory / 1e9
        out.append(
            InstanceType(
                name=f"fake-it-{i}",
                labels={
                    "node.kubernetes.io/instance-type": f"fake-it-{i}",
                    "kubernetes.io/arch": "amd64",
                    "kubernetes.io/os": "linux",
                },
                capacity={"cpu": 1000 * i, "memory": memory, "pods": 10 * i},
                overhead={"cpu": 100, "memory": 10 * MIB},
                offerings=tuple(Offering(zone=z, capacity_type=ct, price=price) for ct, z in OFFERINGS),
            )
        )
    return out


def nodepool() -> NodePool:
    """The benchmark NodePool: no requirements, limits cpu 10,000,000 and memory 10,000,000Gi."""
    return NodePool.model_validate(
        {
            "apiVersion": "karpenter.sh/v1",
            "kind": "NodePool",
            "metadata": {"name": "default"},
            "spec": {
                "limits": {"cpu": "10000000", "memory": "10000000Gi"},
                "template": {
                    "spec": {
                        "requirements": [],
                        "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
                    }
                },
            },
        }
    )


class _Pods:
    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)
        self.n = 0

    def value(self) -> str:
        return self.rng.choice("abcdefg")

    def pod(self, labels: dict[str, str], **kwargs: Any) -> Pod:
        cpu = self.rng.choice((100, 250, 500, 1000, 1500))
        memory = self.rng.choice((100, 256, 512, 1024, 2048, 4096)) * MIB
        self.n += 1
        name = f"pod-{self.n:06d}"
        return Pod(
            namespace="default",
            name=name,
            uid=f"uid-{self.n:06d}",
            labels=labels,
            requests={"cpu": cpu, "memory": memory, "pods": 1},
            unschedulable=True,
            creation_timestamp=1.0,
            **kwargs,
        )

    def generic(self) -> Pod:
        return self.pod({"my-label": self.value()})

    def spread(self, key: str) -> Pod:
        labels = {"my-label": self.value()}
        selector = LabelSelector(match_labels=(("my-label", self.value()),))
        tsc = TopologySpreadConstraint(
            max_skew=1, topology_key=key, when_unsatisfiable="DoNotSchedule", label_selector=selector
        )
        return self.pod(labels, topology_spread=(tsc,))

    def self_affinity(self, key: str) -> Pod:
        value = self.value()
        labels = {"my-affininity": value}
        term = PodAffinityTerm(topology_key=key, label_selector=LabelSelector(match_labels=(("my-affininity", value),)))
        return self.pod(labels, pod_affinity=(term,))

    def anti_affinity(self, key: str) -> Pod:
        term = PodAffinityTerm(topology_key=key, label_selector=LabelSelector(match_labels=(("app", "nginx"),)))
        return self.pod({"app": "nginx"}, pod_anti_affinity=(term,))


def diverse_pods(count: int, seed: int = 42) -> list[Pod]:
    """``makeDiversePods(count)``: five equal classes, remainder generic."""
    gen = _Pods(seed)
    per = count // 5
    pods = [gen.generic() for _ in range(per)]
    pods += [gen.spread(ZONE) for _ in range(per)]
    pods += [gen.spread(HOSTNAME) for _ in range(per)]
    pods += [gen.self_affinity(ZONE) for _ in range(per)]
    pods += [gen.anti_affinity(HOSTNAME) for _ in range(per)]
    pods += [gen.generic() for _ in range(count - len(pods))]
    return pods


def decisions(result: SchedulingResult) -> dict[str, Any]:
    """Every decision of a pass in a canonical, JSON-serialisable form: the pods on each existing node,
    each planned NodeClaim's NodePool, pods and instance types, every unschedulable pod and its reason."""
    return {
        "existing": {node: sorted(p.key for p in pods) for node, pods in sorted(result.existing.items())},
        "nodeclaims": sorted(
            [plan.nodepool, sorted(p.key for p in plan.pods), [it.name for it in plan.instance_types]]
            for plan in result.nodeclaims
        ),
        "unschedulable": dict(sorted(result.unschedulable.items())),
    }


def decisions_sha256(result: SchedulingResult) -> str:
    """SHA-256 of :func:`decisions`: equal for two passes exactly when they decided alike."""
    return hashlib.sha256(json.dumps(decisions(result), sort_keys=True).encode()).hexdigest()


def run(pods: int, types: int = 400, seed: int = 42, repeat: int = 1) -> dict[str, Any]:
    """Build the input, time :func:`solve` ``repeat`` times (fastest run reported), and report the numbers."""
    inp = SchedulingInput(pods=diverse_pods(pods, seed), nodepools=[nodepool()], instance_types=instance_types(types))
    seconds = float("inf")
    for _ in range(max(1, repeat)):
        start = time.perf_counter()
        result = solve(inp)
        seconds = min(seconds, time.perf_counter() - start)
    peak_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return {
        "pods": pods,
        "nodeclaims": len(result.nodeclaims),
        "unscheduled": len(result.unschedulable),
        "seconds": round(seconds, 4),
        "pods_per_second": round(pods / seconds, 1) if seconds > 0 else None,
        "peak_rss_mib": round(peak_kib / 1024, 1),
        "decisions_sha256": decisions_sha256(result),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--pods", type=int, default=1000, help="number of pods (default 1000)")
    parser.add_argument("--types", type=int, default=400, help="number of synthetic instance types (default 400)")
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--repeat", type=int, default=1, help="solve this many times, report the fastest (default 1)")
    parser.add_argument("--json", action="store_true", help="print one JSON line (the default output anyway)")
    args = parser.parse_args(argv)
    print(json.dumps(run(args.pods, args.types, args.seed, args.repeat)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
