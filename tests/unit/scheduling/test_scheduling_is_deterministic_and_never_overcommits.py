"""Properties over random clusters: the plan does not depend on input order, every pending pod is
accounted for exactly once, and nothing is placed beyond allocatable (DaemonSets included)."""

from __future__ import annotations

import random
from collections import Counter
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from scheduling_support import catalogue, make_daemonset, make_input, make_node, make_nodepool, make_pod

from nodesmith.core.model import LabelSelector, Pod, PodAffinityTerm, TopologySpreadConstraint
from nodesmith.core.scheduling import SchedulingInput, SchedulingResult, solve

ZONES = ("us-west-2a", "us-west-2b", "us-west-2c")
ANTI = PodAffinityTerm(
    topology_key="kubernetes.io/hostname", label_selector=LabelSelector(match_labels=(("app", "solo"),))
)
SPREAD = TopologySpreadConstraint(
    max_skew=1,
    topology_key="topology.kubernetes.io/zone",
    when_unsatisfiable="DoNotSchedule",
    label_selector=LabelSelector(match_labels=(("app", "spread"),)),
)


@st.composite
def clusters(draw: Any) -> SchedulingInput:
    pods: list[Pod] = []
    for i in range(draw(st.integers(1, 40))):
        kind = draw(st.sampled_from(["plain", "plain", "arm", "zone", "gpu", "port", "solo", "spread", "huge"]))
        kwargs: dict[str, Any] = {
            "cpu": f"{draw(st.sampled_from([100, 250, 500, 1000, 1500, 3000, 7000]))}m",
            "memory": f"{draw(st.sampled_from([128, 512, 1024, 4096, 12288]))}Mi",
            "created": float(draw(st.integers(0, 3))),
        }
        if kind == "arm":
            kwargs["node_selector"] = {"kubernetes.io/arch": "arm64"}
        elif kind == "zone":
            kwargs["node_selector"] = {"topology.kubernetes.io/zone": draw(st.sampled_from(ZONES))}
        elif kind == "gpu":
            kwargs["extra"] = {"nvidia.com/gpu": draw(st.integers(1, 4))}
        elif kind == "port":
            kwargs["host_ports"] = ((8443, "TCP", ""),)
        elif kind == "solo":
            kwargs["labels"] = {"app": "solo"}
            kwargs["pod_anti_affinity"] = (ANTI,)
        elif kind == "spread":
            kwargs["labels"] = {"app": "spread"}
            kwargs["topology_spread"] = (SPREAD,)
        elif kind == "huge":
            kwargs["cpu"] = "100"
        pods.append(make_pod(f"p{i:03d}", **kwargs))
    nodes = [
        make_node(f"n{i}", cpu=draw(st.sampled_from(["1", "2", "4"])), memory="8Gi", zone=draw(st.sampled_from(ZONES)))
        for i in range(draw(st.integers(0, 3)))
    ]
    pools = [make_nodepool("general", limits=draw(st.sampled_from([None, {"cpu": "40"}, {"nodes": "3"}])))]
    if draw(st.booleans()):
        pools.append(
            make_nodepool(
                "arm", weight=20, requirements=[{"key": "kubernetes.io/arch", "operator": "In", "values": ["arm64"]}]
            )
        )
    daemonsets = [make_daemonset("agent", cpu="200m", memory="256Mi")] if draw(st.booleans()) else []
    return make_input(pods, nodepools=pools, nodes=nodes, daemonsets=daemonsets, types=catalogue())


def shuffled(inp: SchedulingInput, seed: int) -> SchedulingInput:
    rng = random.Random(seed)

    def mix(items: Any) -> list[Any]:
        out = list(items)
        rng.shuffle(out)
        return out

    return SchedulingInput(
        pods=mix(inp.pods),
        nodepools=mix(inp.nodepools),
        instance_types=mix(inp.instance_types),
        existing_nodes=mix(inp.existing_nodes),
        daemonsets=mix(inp.daemonsets),
        nodepool_usage=inp.nodepool_usage,
    )


def add(total: Counter[str], requests: dict[str, int]) -> None:
    for name, amount in requests.items():
        total[name] += amount


def check_invariants(inp: SchedulingInput, result: SchedulingResult) -> None:
    seen = Counter(p.key for nc in result.nodeclaims for p in nc.pods)
    seen.update(p.key for pods in result.existing.values() for p in pods)
    seen.update(result.unschedulable.keys())
    assert seen == Counter(p.key for p in inp.pods), "every pending pod exactly once"
    daemon: Counter[str] = Counter()
    for ds in inp.daemonsets:
        add(daemon, {**ds.pod.requests, "pods": 1})
    for nc in result.nodeclaims:
        used: Counter[str] = Counter()
        for pod in nc.pods:
            add(used, pod.requests)
        assert nc.requests == dict(used + daemon)
        assert nc.instance_types, "a NodeClaim always has an instance type"
        for it in nc.instance_types:
            for name, amount in (used + daemon).items():
                assert amount <= it.allocatable.get(name, 0), (it.name, name, amount)
        assert sum(1 for p in nc.pods if p.labels.get("app") == "solo") <= 1
        ports = [hp for p in nc.pods for hp in p.host_ports]
        assert len(ports) == len(set(ports))
    nodes = {n.name: n for n in inp.existing_nodes}
    for name, placed in result.existing.items():
        used = Counter()
        for pod in (*nodes[name].pods, *placed):
            add(used, pod.requests)
        for res, amount in (used + daemon).items():
            assert amount <= nodes[name].allocatable.get(res, 0), (name, res)
    prices = [nc.price_per_hour for nc in result.nodeclaims]
    assert all(p > 0 for p in prices)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(inp=clusters(), seed=st.integers(0, 2**16))
def test_plan_is_independent_of_input_order_and_respects_allocatable(inp: SchedulingInput, seed: int) -> None:
    result = solve(inp)
    check_invariants(inp, result)
    assert solve(shuffled(inp, seed)) == result


def test_zone_spread_never_exceeds_max_skew_in_random_batches() -> None:
    rng = random.Random(7)
    for _ in range(20):
        pods = [
            make_pod(cpu=f"{rng.choice([250, 1000, 4000])}m", labels={"app": "spread"}, topology_spread=(SPREAD,))
            for _ in range(rng.randint(1, 25))
        ]
        result = solve(make_input(pods))
        per_zone = Counter(dict.fromkeys(ZONES, 0))
        for nc in result.nodeclaims:
            assert nc.zone is not None
            per_zone[nc.zone] += len(nc.pods)
        assert max(per_zone.values()) - min(per_zone.values()) <= 1
        assert not result.unschedulable
