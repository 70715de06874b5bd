"""The existing-node index decides exactly as trying every existing node in order would.

Karpenter's ``Scheduler.add`` tries the existing nodes one by one and takes the first ``CanAdd``
accepts. ``ExistingIndex.first_fit`` skips nodes by headroom, taints and labels; on random clusters
(full and roomy nodes, taints, startup taints, cordons, labels selected by In/NotIn/Exists/
DoesNotExist/Gt/Lt, hostname selectors, extended resources, host ports, topology spread, pod
(anti-)affinity, preferred affinity relaxed, DaemonSets, volume topology) every single choice and the
whole pass must equal a linear scan's.
"""

from __future__ import annotations

import random
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from scheduling_support import catalogue, make_daemonset, make_input, make_node, make_nodepool, make_pod

from nodesmith.core.model import (
    LabelSelector,
    NodeSelectorRequirement,
    NodeSelectorTerm,
    Pod,
    PodAffinityTerm,
    Taint,
    Toleration,
    TopologySpreadConstraint,
    WeightedNodeSelectorTerm,
)
from nodesmith.core.scheduling import SchedulingInput, SchedulingResult, solve
from nodesmith.core.scheduling.existing import SimExistingNode
from nodesmith.core.scheduling.existingindex import ExistingIndex

if TYPE_CHECKING:
    import pytest

    from nodesmith.core.requirements import Requirements
    from nodesmith.core.scheduling.pods import PodData
    from nodesmith.core.scheduling.topology import Topology
    from nodesmith.core.scheduling.types import ExistingNode

ZONES = ("us-west-2a", "us-west-2b", "us-west-2c")
HOSTNAME = "kubernetes.io/hostname"
ZONE = "topology.kubernetes.io/zone"
DEDICATED = Taint("dedicated", "NoSchedule", "batch")
BOOTING = Taint("example.com/booting", "NoSchedule")
SEEDS = range(300)
KINDS = (
    *("plain", "plain", "gpu", "team", "affinity", "tier", "zone", "host"),
    *("tolerant", "port", "solo", "spread", "hostspread", "preferred", "together"),
)

Fit = tuple[SimExistingNode, "Requirements"] | None


def linear_first_fit(index: ExistingIndex, pod: Pod, data: PodData, topology: Topology) -> Fit:
    """The straightforward scan: every node in trial order until one accepts."""
    for node in index.nodes:
        reqs = node.can_add(pod, data, topology)
        if reqs is not None:
            return node, reqs
    return None


def _node(rng: random.Random, i: int) -> ExistingNode:
    name = f"n{i:03d}"
    cpu = rng.choice([1, 2, 4, 8])
    labels: dict[str, str] = {"karpenter.sh/capacity-type": rng.choice(["spot", "on-demand"])}
    if rng.random() < 0.5:
        labels["team"] = rng.choice(["a", "b"])
    if rng.random() < 0.4:
        labels["tier"] = str(rng.randint(1, 5))
    if rng.random() < 0.15:
        labels["example.com/id"] = name  # a label no two nodes share
    if rng.random() < 0.1:
        labels[HOSTNAME] = rng.choice([name, "shared-host"])
    taints: tuple[Taint, ...] = ()
    roll = rng.random()
    if roll < 0.2:
        taints = (DEDICATED,)
    elif roll < 0.25:
        taints = (Taint("soft", "PreferNoSchedule"),)
    initialized = rng.random() > 0.15
    startup = (BOOTING,) if not initialized and rng.random() < 0.5 else ()
    bound: list[Pod] = []
    used = 0
    fill = rng.choice([0.0, 0.5, 0.9, 1.0, 1.0])
    while used < cpu * 1000 * fill:
        amount = rng.choice([250, 500, 1000])
        used += amount
        kwargs: dict[str, Any] = {
            "labels": {"app": rng.choice(["web", "db", "solo"])},
            "unschedulable": False,
            "node_name": name,
            "phase": rng.choice(["Running"] * 9 + ["Succeeded"]),
        }
        if rng.random() < 0.1:
            kwargs["host_ports"] = ((8443, "TCP", ""),)
        if kwargs["labels"]["app"] == "solo" and rng.random() < 0.5:
            kwargs["pod_anti_affinity"] = (_anti(),)
        bound.append(make_pod(f"{name}-b{len(bound)}", cpu=f"{amount}m", memory="256Mi", **kwargs))
    node = make_node(
        name,
        cpu=str(cpu),
        memory=rng.choice(["4Gi", "8Gi", "16Gi"]),
        pods=rng.choice([4, 10, 58]),
        zone=rng.choice(ZONES),
        labels=labels,
        taints=taints + startup,
        bound=tuple(bound),
        initialized=initialized,
        unschedulable=rng.random() < 0.1,
        startup_taints=startup,
    )
    if rng.random() < 0.2:
        node = replace(node, allocatable={**node.allocatable, "nvidia.com/gpu": rng.randint(1, 4)})
    return node


def _anti() -> PodAffinityTerm:
    return PodAffinityTerm(topology_key=HOSTNAME, label_selector=LabelSelector(match_labels=(("app", "solo"),)))


def _term(*exprs: tuple[str, str, tuple[str, ...]]) -> NodeSelectorTerm:
    return NodeSelectorTerm(tuple(NodeSelectorRequirement(k, op, v) for k, op, v in exprs))


def _pod(rng: random.Random, i: int, nodes: list[ExistingNode]) -> Pod:
    kwargs: dict[str, Any] = {
        "cpu": f"{rng.choice([100, 250, 500, 1000, 1500, 3000])}m",
        "memory": f"{rng.choice([128, 512, 1024, 4096])}Mi",
        "created": float(rng.randint(0, 3)),
        "labels": {"app": rng.choice(["web", "db"])},
    }
    kind = rng.choice(KINDS)
    if kind == "gpu":
        kwargs["extra"] = {"nvidia.com/gpu": rng.randint(1, 2)}
    elif kind == "team":
        kwargs["node_selector"] = {"team": rng.choice(["a", "b"])}
    elif kind == "affinity":
        kwargs["affinity"] = [
            [("team", rng.choice(["NotIn", "In"]), ("a",)), ("karpenter.sh/capacity-type", "In", ("spot",))],
            [("team", rng.choice(["DoesNotExist", "Exists"]), ())],
        ]
    elif kind == "tier":
        kwargs["affinity"] = [[("tier", rng.choice(["Gt", "Lt"]), (str(rng.randint(1, 5)),))]]
    elif kind == "zone":
        kwargs["node_selector"] = {ZONE: rng.choice(ZONES)}
    elif kind == "host" and nodes:
        host = rng.choice([*(n.labels[HOSTNAME] for n in nodes), "gone"])
        if rng.random() < 0.5:
            kwargs["node_selector"] = {HOSTNAME: host}
        else:
            kwargs["affinity"] = [[(HOSTNAME, "NotIn", (host,))]]
    elif kind == "tolerant":
        kwargs["tolerations"] = (Toleration(key="dedicated", operator="Exists"),)
    elif kind == "port":
        kwargs["host_ports"] = ((8443, "TCP", ""),)
    elif kind == "solo":
        kwargs["labels"] = {"app": "solo"}
        kwargs["pod_anti_affinity"] = (_anti(),)
    elif kind in ("spread", "hostspread"):
        kwargs["labels"] = {"app": "spread"}
        kwargs["topology_spread"] = (
            TopologySpreadConstraint(
                max_skew=1,
                topology_key=ZONE if kind == "spread" else HOSTNAME,
                when_unsatisfiable=rng.choice(["DoNotSchedule", "ScheduleAnyway"]),
                label_selector=LabelSelector(match_labels=(("app", "spread"),)),
            ),
        )
    elif kind == "preferred":
        kwargs["preferred_node_affinity"] = (
            WeightedNodeSelectorTerm(50, _term(("example.com/id", "In", (f"n{rng.randint(0, 30):03d}",)))),
            WeightedNodeSelectorTerm(10, _term(("team", "In", ("b",)))),
        )
    elif kind == "together":
        kwargs["labels"] = {"app": "db"}
        kwargs["pod_affinity"] = (
            PodAffinityTerm(topology_key=ZONE, label_selector=LabelSelector(match_labels=(("app", "db"),))),
        )
    return make_pod(f"p{i:03d}", **kwargs)


def random_cluster(seed: int) -> SchedulingInput:
    """A random cluster of up to 40 existing nodes and up to 40 pending pods."""
    rng = random.Random(seed)
    nodes = [_node(rng, i) for i in range(rng.randint(0, 40))]
    pods = [_pod(rng, i, nodes) for i in range(rng.randint(1, 40))]
    pools = rng.choice([[], [make_nodepool("general", limits={"cpu": "16"})], [make_nodepool("general")]])
    daemonsets = []
    if rng.random() < 0.3:
        daemonsets.append(make_daemonset("agent", cpu="200m", memory="256Mi"))
    if rng.random() < 0.3:
        daemonsets.append(make_daemonset("team-a", cpu="300m", node_selector={"team": "a"}))
    inp = make_input(pods, nodepools=pools, nodes=nodes, daemonsets=daemonsets, types=catalogue())
    volumes = {
        pod.key: (NodeSelectorRequirement(ZONE, "In", (rng.choice(ZONES),)),) for pod in pods if rng.random() < 0.1
    }
    return replace(inp, volume_requirements=volumes)


def decisions(result: SchedulingResult) -> tuple[object, ...]:
    return (
        {node: [p.key for p in pods] for node, pods in result.existing.items()},
        [
            (plan.nodepool, [p.key for p in plan.pods], [it.name for it in plan.instance_types])
            for plan in result.nodeclaims
        ],
        result.unschedulable,
    )


def test_every_choice_equals_the_first_node_a_linear_scan_accepts(monkeypatch: pytest.MonkeyPatch) -> None:
    indexed = ExistingIndex.first_fit
    compared = {"placed": 0, "refused": 0, "skipped": 0}

    def checked(self: ExistingIndex, pod: Pod, data: PodData, topology: Topology) -> Fit:
        expected = linear_first_fit(self, pod, data, topology)
        calls = 0
        can_add = SimExistingNode.can_add

        def counting(node: SimExistingNode, *args: Any) -> Requirements | None:
            nonlocal calls
            calls += 1
            return can_add(node, *args)

        monkeypatch.setattr(SimExistingNode, "can_add", counting)
        try:
            got = indexed(self, pod, data, topology)
        finally:
            monkeypatch.setattr(SimExistingNode, "can_add", can_add)
        assert (got is None) == (expected is None), f"{pod.key}: index {got}, linear scan {expected}"
        if got is not None and expected is not None:
            assert got[0] is expected[0], f"{pod.key}: index chose {got[0].name}, linear scan {expected[0].name}"
            assert got[1] == expected[1]
        compared["placed" if got is not None else "refused"] += 1
        compared["skipped"] += len(self.nodes) - calls
        return got

    monkeypatch.setattr(ExistingIndex, "first_fit", checked)
    for seed in SEEDS:
        solve(random_cluster(seed))
    # The clusters exercise both outcomes and the index does skip nodes.
    assert compared["placed"] > 500 and compared["refused"] > 500 and compared["skipped"] > 10_000, compared


def test_whole_passes_equal_a_linear_scan(monkeypatch: pytest.MonkeyPatch) -> None:
    inputs = [random_cluster(seed) for seed in SEEDS]
    with_index = [decisions(solve(inp)) for inp in inputs]
    monkeypatch.setattr(ExistingIndex, "first_fit", linear_first_fit)
    for seed, inp, expected in zip(SEEDS, inputs, with_index, strict=True):
        assert decisions(solve(inp)) == expected, f"seed {seed}"


def test_full_and_tainted_nodes_are_not_tried(monkeypatch: pytest.MonkeyPatch) -> None:
    full = [make_node(f"full-{i:03d}", cpu="1", bound=(make_pod(cpu="1", unschedulable=False),)) for i in range(50)]
    tainted = [make_node(f"tainted-{i:03d}", cpu="8", taints=(DEDICATED,)) for i in range(50)]
    roomy = make_node("z-roomy", cpu="8")
    tried: list[str] = []
    can_add = SimExistingNode.can_add

    def recording(node: SimExistingNode, *args: Any) -> Requirements | None:
        tried.append(node.name)
        return can_add(node, *args)

    monkeypatch.setattr(SimExistingNode, "can_add", recording)
    result = solve(make_input([make_pod(cpu="1")], nodes=[*full, *tainted, roomy], nodepools=[]))
    assert list(result.existing) == ["z-roomy"]
    assert tried == ["z-roomy"]


def test_a_pod_selecting_a_new_label_key_still_finds_its_node() -> None:
    nodes = [
        make_node("a", labels={"team": "a"}),
        make_node("b", labels={"team": "b", "disk": "ssd"}),
        make_node("c", labels={"disk": "ssd"}),
    ]
    pods = [
        make_pod("first", cpu="1", node_selector={"team": "b"}, created=1.0),
        make_pod("second", cpu="1", affinity=[[("disk", "In", ("ssd",)), ("team", "DoesNotExist", ())]], created=2.0),
        make_pod("third", cpu="1", node_selector={"kubernetes.io/hostname": "a"}, created=3.0),
    ]
    result = solve(make_input(pods, nodes=nodes, nodepools=[]))
    assert {node: [p.name for p in placed] for node, placed in result.existing.items()} == {
        "a": ["third"],
        "b": ["first"],
        "c": ["second"],
    }


def test_a_pod_pinned_to_a_host_first_then_others_see_that_hosts_headroom() -> None:
    nodes = [make_node("a", cpu="2"), make_node("b", cpu="2")]
    pods = [
        make_pod("pinned", cpu="1500m", node_selector={HOSTNAME: "a"}, created=1.0),
        make_pod("next", cpu="1", created=2.0),
    ]
    result = solve(make_input(pods, nodes=nodes, nodepools=[]))
    assert {node: [p.name for p in placed] for node, placed in result.existing.items()} == {
        "a": ["pinned"],
        "b": ["next"],
    }
