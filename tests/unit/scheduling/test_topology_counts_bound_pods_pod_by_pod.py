"""Topology groups start from the bound pods each existing node holds (Karpenter ``countDomains``).

The counts are built from bound pods grouped by namespace and labels; on random clusters (several
namespaces, label selectors with every operator, terminal, deleting and pending pods that must not
count, node filters honouring affinity and taints) every group's per-domain counts must equal
counting each bound pod of each node in turn.
"""

from __future__ import annotations

import random
from typing import Any

from scheduling_support import make_node, make_pod

from nodesmith.core.model import (
    LabelSelector,
    LabelSelectorRequirement,
    Pod,
    PodAffinityTerm,
    Taint,
    Toleration,
    TopologySpreadConstraint,
)
from nodesmith.core.requirements import Requirement, Requirements
from nodesmith.core.scheduling.pods import Constraints, PodDataCache, pod_id
from nodesmith.core.scheduling.topology import DomainNode, Topology, TopologyGroup

ZONES = ("us-west-2a", "us-west-2b", "us-west-2c")
HOSTNAME = "kubernetes.io/hostname"
ZONE = "topology.kubernetes.io/zone"
APPS = ("web", "db", "cache")
SPOT = Taint("spot", "NoSchedule")


def _selector(rng: random.Random) -> LabelSelector:
    roll = rng.random()
    if roll < 0.4:
        return LabelSelector(match_labels=(("app", rng.choice(APPS)),))
    operator = rng.choice(["In", "NotIn", "Exists", "DoesNotExist"])
    values = (rng.choice(APPS),) if operator in ("In", "NotIn") else ()
    expr = LabelSelectorRequirement(rng.choice(["app", "tier"]), operator, values)
    return LabelSelector(match_expressions=(expr,))


def _cluster(rng: random.Random) -> tuple[list[DomainNode], list[Pod]]:
    nodes: list[DomainNode] = []
    pending = [make_pod(f"pending-{i}", labels={"app": rng.choice(APPS)}) for i in range(3)]
    for i in range(rng.randint(1, 25)):
        labels = {"team": "a"} if rng.random() < 0.5 else {}
        taints = (SPOT,) if rng.random() < 0.3 else ()
        bound: list[Pod] = []
        for j in range(rng.randint(0, 8)):
            pod_labels = {"app": rng.choice(APPS)}
            if rng.random() < 0.3:
                pod_labels["tier"] = rng.choice(["front", "back"])
            kwargs: dict[str, Any] = {
                "namespace": rng.choice(["default", "default", "other"]),
                "labels": pod_labels,
                "unschedulable": False,
                "node_name": f"n{i}",
                "phase": rng.choice(["Running"] * 8 + ["Succeeded", "Failed"]),
            }
            if rng.random() < 0.1:
                kwargs["deletion_timestamp"] = 5.0
            bound.append(make_pod(f"n{i}-p{j}", **kwargs))
        if rng.random() < 0.2:
            bound.append(pending[0])  # a pending pod listed on a node still does not count
        node = make_node(f"n{i}", zone=rng.choice(ZONES), labels=labels, taints=taints, bound=tuple(bound))
        reqs = Requirements.from_labels(node.labels)
        reqs.add(Requirement(HOSTNAME, complement=False, values=frozenset((node.name,))))
        nodes.append(DomainNode(node.name, node.labels, node.taints, reqs, node.pods))
    return nodes, pending


def _owner(rng: random.Random, n: int) -> Pod:
    key = rng.choice([ZONE, HOSTNAME])
    namespace = rng.choice(["default", "other"])
    if rng.random() < 0.6:
        tsc = TopologySpreadConstraint(
            max_skew=1,
            topology_key=key,
            when_unsatisfiable="DoNotSchedule",
            label_selector=_selector(rng),
            node_taints_policy=rng.choice(["Honor", "Ignore"]),
        )
        affinity = [[("team", "In", ("a",))]] if rng.random() < 0.4 else None
        tolerations = (Toleration(key="spot", operator="Exists"),) if rng.random() < 0.5 else ()
        return make_pod(
            f"owner-{n}",
            namespace=namespace,
            topology_spread=(tsc,),
            affinity=affinity,
            tolerations=tolerations,
        )
    term = PodAffinityTerm(
        topology_key=key, label_selector=_selector(rng), namespaces=rng.choice([(), ("default", "other")])
    )
    kind = rng.choice(["pod_affinity", "pod_anti_affinity"])
    return make_pod(f"owner-{n}", namespace=namespace, **{kind: (term,)})


def _pod_by_pod(tg: TopologyGroup, nodes: list[DomainNode], excluded: set[str]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for node in nodes:
        if tg.node_filter is not None and not tg.node_filter.matches(node.taints, node.requirements, ()):
            continue
        value = node.labels.get(tg.key) or (node.name if tg.key == HOSTNAME else None)
        if value is None:
            continue
        counts.setdefault(value, 0)
        for pod in node.pods:
            if pod_id(pod) in excluded or pod.is_terminal or pod.deletion_timestamp is not None:
                continue
            if tg.selects_pod(pod.namespace, pod.labels):
                counts[value] += 1
    return counts


def test_group_counts_equal_counting_every_bound_pod() -> None:
    checked = 0
    for seed in range(200):
        rng = random.Random(seed)
        nodes, pending = _cluster(rng)
        owners = [_owner(rng, n) for n in range(4)]
        excluded = {pod_id(p) for p in [*pending, *owners]}
        topology = Topology(universe=lambda _key: {}, nodes=nodes, excluded=excluded)
        cache = PodDataCache()
        for pod in owners:
            topology.update(pod, cache.get(pod, Constraints.from_pod(pod)))
        for tg in topology.groups.values():
            expected = _pod_by_pod(tg, nodes, excluded)
            assert tg.domains == expected, f"seed {seed}: {tg.kind} on {tg.key}"
            assert tg.empty == {d for d, c in expected.items() if c == 0}, f"seed {seed}"
            checked += sum(expected.values())
    assert checked > 1000


def test_a_node_filter_leaves_out_the_pods_of_nodes_outside_the_spread() -> None:
    web = {"namespace": "default", "labels": {"app": "web"}, "unschedulable": False}
    team = make_node("team", zone=ZONES[0], labels={"team": "a"}, bound=(make_pod("t1", **web),))
    other = make_node("other", zone=ZONES[0], bound=(make_pod("o1", **web), make_pod("o2", **web)))
    nodes = []
    for node in (team, other):
        reqs = Requirements.from_labels(node.labels)
        nodes.append(DomainNode(node.name, node.labels, node.taints, reqs, node.pods))
    tsc = TopologySpreadConstraint(
        max_skew=1,
        topology_key=ZONE,
        when_unsatisfiable="DoNotSchedule",
        label_selector=LabelSelector(match_labels=(("app", "web"),)),
    )
    owner = make_pod("owner", topology_spread=(tsc,), affinity=[[("team", "In", ("a",))]])
    topology = Topology(universe=lambda _key: {}, nodes=nodes, excluded={pod_id(owner)})
    topology.update(owner, PodDataCache().get(owner, Constraints.from_pod(owner)))
    (group,) = topology.groups.values()
    assert group.domains == {ZONES[0]: 1}
