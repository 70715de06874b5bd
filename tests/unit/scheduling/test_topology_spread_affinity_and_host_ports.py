"""Topology spread (zone, hostname), pod affinity/anti-affinity and host ports never produce a plan
that kube-scheduler would refuse; what is not supported is refused with a reason."""

from __future__ import annotations

from collections import Counter

from scheduling_support import make_input, make_node, make_nodepool, make_pod

from nodesmith.core.model import (
    LabelSelector,
    PodAffinityTerm,
    TopologySpreadConstraint,
    WeightedPodAffinityTerm,
)
from nodesmith.core.scheduling import solve

ZONE = "topology.kubernetes.io/zone"
HOST = "kubernetes.io/hostname"
WEB = {"app": "web"}
SELECT_WEB = LabelSelector(match_labels=(("app", "web"),))


def spread(key: str, *, when: str = "DoNotSchedule", skew: int = 1) -> tuple[TopologySpreadConstraint, ...]:
    return (
        TopologySpreadConstraint(max_skew=skew, topology_key=key, when_unsatisfiable=when, label_selector=SELECT_WEB),
    )


def term(key: str, selector: LabelSelector = SELECT_WEB) -> PodAffinityTerm:
    return PodAffinityTerm(topology_key=key, label_selector=selector)


def zones_of(result: object) -> Counter[str]:
    out: Counter[str] = Counter()
    for nc in result.nodeclaims:  # type: ignore[attr-defined]
        assert nc.zone is not None, "a spread pod's NodeClaim must be pinned to one zone"
        out[nc.zone] += len(nc.pods)
    return out


def test_zone_spread_puts_pods_evenly_across_the_nodepool_zones() -> None:
    pods = [make_pod(labels=WEB, topology_spread=spread(ZONE)) for _ in range(6)]
    result = solve(make_input(pods))
    assert zones_of(result) == Counter({"us-west-2a": 2, "us-west-2b": 2, "us-west-2c": 2})


def test_zone_spread_counts_matching_pods_already_running() -> None:
    running = tuple(make_pod(f"old-{i}", labels=WEB, unschedulable=False, node_name="n1") for i in range(2))
    node = make_node("n1", cpu="1", zone="us-west-2a", bound=running)
    pods = [make_pod(labels=WEB, topology_spread=spread(ZONE)) for _ in range(4)]
    result = solve(make_input(pods, nodes=[node]))
    assert zones_of(result) == Counter({"us-west-2b": 2, "us-west-2c": 2})


def test_zone_spread_only_uses_zones_the_nodepool_allows() -> None:
    pool = make_nodepool(requirements=[{"key": ZONE, "operator": "In", "values": ["us-west-2a", "us-west-2b"]}])
    pods = [make_pod(labels=WEB, topology_spread=spread(ZONE)) for _ in range(4)]
    assert zones_of(solve(make_input(pods, nodepools=[pool]))) == Counter({"us-west-2a": 2, "us-west-2b": 2})


def test_unsatisfiable_spread_is_refused_but_schedule_anyway_is_relaxed() -> None:
    pool = make_nodepool(requirements=[{"key": ZONE, "operator": "In", "values": ["us-west-2b"]}])
    running = tuple(make_pod(f"old-{i}", labels=WEB, unschedulable=False, node_name="b1") for i in range(3))
    nodes = [make_node("a1", cpu="0", zone="us-west-2a"), make_node("b1", cpu="1", zone="us-west-2b", bound=running)]
    strict = make_pod(labels=WEB, topology_spread=spread(ZONE))
    result = solve(make_input([strict], nodepools=[pool], nodes=nodes))
    assert (
        "topology spread on topology.kubernetes.io/zone (maxSkew 1) cannot be satisfied"
        in result.unschedulable[strict.key]
    )
    soft = make_pod(labels=WEB, topology_spread=spread(ZONE, when="ScheduleAnyway"))
    result = solve(make_input([soft], nodepools=[pool], nodes=nodes))
    assert result.unschedulable == {} and result.nodeclaims[0].zone == "us-west-2b"


def test_hostname_spread_with_skew_one_gives_each_pod_its_own_node() -> None:
    pods = [make_pod(cpu="100m", labels=WEB, topology_spread=spread(HOST)) for _ in range(4)]
    result = solve(make_input(pods))
    assert [len(nc.pods) for nc in result.nodeclaims] == [1, 1, 1, 1]


def test_required_hostname_anti_affinity_puts_each_pod_on_its_own_node() -> None:
    pods = [make_pod(cpu="100m", labels=WEB, pod_anti_affinity=(term(HOST),)) for _ in range(3)]
    others = [make_pod(cpu="100m") for _ in range(3)]
    result = solve(make_input(pods + others))
    per_node = [sum(1 for p in nc.pods if p.labels.get("app") == "web") for nc in result.nodeclaims]
    assert sorted(per_node) == [1, 1, 1]


def test_anti_affinity_avoids_nodes_running_a_matching_pod_in_both_directions() -> None:
    web_running = make_pod("web-0", labels=WEB, unschedulable=False, node_name="n1")
    guarded = make_pod(
        "guard-0", labels={"app": "guard"}, pod_anti_affinity=(term(HOST),), unschedulable=False, node_name="n2"
    )
    nodes = [make_node("n1", bound=(web_running,)), make_node("n2", bound=(guarded,))]
    new_web = make_pod(cpu="100m", labels=WEB, pod_anti_affinity=(term(HOST),))
    result = solve(make_input([new_web], nodes=nodes))
    assert result.existing == {} and len(result.nodeclaims) == 1  # n1 has a web pod; n2's guard repels web pods
    plain = make_pod(cpu="100m", labels={"app": "other"})
    assert list(solve(make_input([plain], nodes=nodes)).existing) == ["n1"]


def test_zone_self_affinity_keeps_the_group_in_one_zone() -> None:
    pods = [make_pod(cpu="10", labels=WEB, pod_affinity=(term(ZONE),)) for _ in range(5)]
    result = solve(make_input(pods))
    assert len({nc.zone for nc in result.nodeclaims}) == 1
    assert len(result.nodeclaims) > 1 and not result.unschedulable


def test_zone_affinity_follows_pods_already_running() -> None:
    db = make_pod("db-0", labels={"app": "db"}, unschedulable=False, node_name="n1")
    node = make_node("n1", cpu="0", zone="us-west-2c", bound=(db,))
    pod = make_pod(pod_affinity=(term(ZONE, LabelSelector(match_labels=(("app", "db"),))),))
    (nc,) = solve(make_input([pod], nodes=[node])).nodeclaims
    assert nc.zone == "us-west-2c"


def test_affinity_to_pods_that_do_not_exist_is_unschedulable_with_a_reason() -> None:
    pod = make_pod(pod_affinity=(term(ZONE, LabelSelector(match_labels=(("app", "db"),))),))
    result = solve(make_input([pod]))
    assert "pod affinity on topology.kubernetes.io/zone cannot be satisfied" in result.unschedulable[pod.key]


def test_preferred_anti_affinity_spreads_when_possible_and_relaxes_at_the_node_limit() -> None:
    pref = (WeightedPodAffinityTerm(weight=10, term=term(HOST)),)
    pods = [make_pod(cpu="100m", labels=WEB, preferred_pod_anti_affinity=pref) for _ in range(3)]
    assert len(solve(make_input(pods)).nodeclaims) == 3
    capped = make_nodepool(limits={"nodes": "1"})
    result = solve(make_input(pods, nodepools=[capped]))
    assert [len(nc.pods) for nc in result.nodeclaims] == [3] and result.unschedulable == {}


def test_unsupported_namespace_selector_is_refused_honestly() -> None:
    selector = LabelSelector(match_labels=(("team", "a"),))
    bad = PodAffinityTerm(topology_key=ZONE, label_selector=SELECT_WEB, namespace_selector=selector)
    pod = make_pod(pod_affinity=(bad,))
    result = solve(make_input([pod]))
    assert result.unschedulable[pod.key] == "podAffinity with a non-empty namespaceSelector is not supported yet"


def test_spread_on_a_key_no_nodepool_defines_is_unschedulable() -> None:
    tsc = (
        TopologySpreadConstraint(
            max_skew=1, topology_key="example.com/rack", when_unsatisfiable="DoNotSchedule", label_selector=SELECT_WEB
        ),
    )
    pod = make_pod(labels=WEB, topology_spread=tsc)
    result = solve(make_input([pod]))
    assert "example.com/rack" in result.unschedulable[pod.key]


def test_spread_on_a_custom_key_defined_by_the_nodepool_works() -> None:
    pool = make_nodepool(requirements=[{"key": "example.com/rack", "operator": "In", "values": ["r1", "r2"]}])
    tsc = (
        TopologySpreadConstraint(
            max_skew=1, topology_key="example.com/rack", when_unsatisfiable="DoNotSchedule", label_selector=SELECT_WEB
        ),
    )
    pods = [make_pod(labels=WEB, topology_spread=tsc) for _ in range(4)]
    result = solve(make_input(pods, nodepools=[pool]))
    assert Counter(nc.labels["example.com/rack"] for nc in result.nodeclaims for _ in nc.pods) == Counter(
        {"r1": 2, "r2": 2}
    )


def test_pending_pods_sharing_a_host_port_go_to_different_nodes() -> None:
    pods = [make_pod(cpu="100m", host_ports=((443, "TCP", ""),)) for _ in range(3)]
    assert [len(nc.pods) for nc in solve(make_input(pods)).nodeclaims] == [1, 1, 1]
    distinct_ips = [make_pod(cpu="100m", host_ports=((443, "TCP", f"10.0.0.{i}"),)) for i in range(2)]
    assert [len(nc.pods) for nc in solve(make_input(distinct_ips)).nodeclaims] == [2]
