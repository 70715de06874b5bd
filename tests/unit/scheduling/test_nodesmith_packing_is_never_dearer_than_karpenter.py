"""The ``nodesmith`` packing policy: same pods placed, never a higher USD/hour than ``karpenter``'s."""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from scheduling_support import catalogue, make_input, make_nodepool, make_pod, make_type

from nodesmith.core.model import LabelSelector, TopologySpreadConstraint
from nodesmith.core.scheduling import SchedulingInput, SchedulingResult, solve

# kubernetes-sigs/karpenter#2457: prices linear in size, on-demand only.
COMPUTE = [
    make_type("c5.large", 2, 4, pods=29, od_price=0.085),
    make_type("c5.xlarge", 4, 8, od_price=0.17),
    make_type("c5.2xlarge", 8, 16, od_price=0.34),
    make_type("c5.4xlarge", 16, 32, pods=234, od_price=0.68),
]
ON_DEMAND = make_nodepool(
    requirements=[{"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]}]
)


def both(inp: SchedulingInput) -> tuple[SchedulingResult, SchedulingResult]:
    return solve(replace(inp, packing="karpenter")), solve(replace(inp, packing="nodesmith"))


def placed(result: SchedulingResult) -> set[str]:
    return {p.key for nc in result.nodeclaims for p in nc.pods} | {
        p.key for pods in result.existing.values() for p in pods
    }


def test_three_plus_one_vcpu_goes_on_a_4_core_and_a_2_core_not_one_8_core() -> None:
    # 3 + 1 vCPU exceed a 4-core node's 3.92 allocatable, so Karpenter keeps only the 8-core type.
    inp = make_input([make_pod("three", cpu="3"), make_pod("one", cpu="1")], nodepools=[ON_DEMAND], types=COMPUTE)
    karpenter, nodesmith = both(inp)
    assert [nc.instance_types[0].name for nc in karpenter.nodeclaims] == ["c5.2xlarge"]
    assert karpenter.cost_per_hour == pytest.approx(0.34)
    assert sorted(nc.instance_types[0].name for nc in nodesmith.nodeclaims) == ["c5.large", "c5.xlarge"]
    assert nodesmith.cost_per_hour == pytest.approx(0.255)
    by_pod = {p.name: nc.instance_types[0].name for nc in nodesmith.nodeclaims for p in nc.pods}
    assert by_pod == {"three": "c5.xlarge", "one": "c5.large"}


def test_default_policy_is_nodesmith_and_unknown_policies_are_refused() -> None:
    inp = make_input([make_pod(cpu="3"), make_pod(cpu="1")], nodepools=[ON_DEMAND], types=COMPUTE)
    assert inp.packing == "nodesmith"
    assert solve(inp).cost_per_hour == pytest.approx(0.255)
    with pytest.raises(ValueError, match="unknown packing policy 'cheapest'"):
        solve(replace(inp, packing="cheapest"))  # type: ignore[arg-type]


def test_each_repacked_nodeclaim_keeps_every_type_that_fits_it_cheapest_first() -> None:
    inp = make_input([make_pod(cpu="3"), make_pod(cpu="1")], nodepools=[ON_DEMAND], types=COMPUTE)
    small = next(nc for nc in solve(inp).nodeclaims if len(nc.pods) == 1 and nc.requests["cpu"] == 1000)
    assert [t.name for t in small.instance_types] == ["c5.large", "c5.xlarge", "c5.2xlarge", "c5.4xlarge"]
    by_key = {r.key: r for r in small.requirements}
    assert by_key["node.kubernetes.io/instance-type"].values == ("c5.2xlarge", "c5.4xlarge", "c5.large", "c5.xlarge")
    assert "kubernetes.io/hostname" not in by_key


def test_pods_with_topology_or_host_ports_keep_karpenter_grouping() -> None:
    spread = TopologySpreadConstraint(
        max_skew=1,
        topology_key="kubernetes.io/hostname",
        when_unsatisfiable="DoNotSchedule",
        label_selector=LabelSelector(match_labels=(("app", "web"),)),
    )
    web = [make_pod(f"web-{i}", cpu="3", labels={"app": "web"}, topology_spread=(spread,)) for i in range(2)]
    ports = [make_pod(f"port-{i}", cpu="1", host_ports=((8080, "TCP", ""),)) for i in range(2)]
    karpenter, nodesmith = both(make_input([*web, *ports], nodepools=[ON_DEMAND], types=COMPUTE))
    shape = [sorted(p.name for p in nc.pods) for nc in karpenter.nodeclaims]
    assert [sorted(p.name for p in nc.pods) for nc in nodesmith.nodeclaims] == shape


def test_pods_another_pods_spread_counts_are_not_moved() -> None:
    # "plain" pods carry app=web, so the web pods' hostname spread counts them: moving them would
    # change the counts the spread was checked against.
    spread = TopologySpreadConstraint(
        max_skew=1,
        topology_key="kubernetes.io/hostname",
        when_unsatisfiable="DoNotSchedule",
        label_selector=LabelSelector(match_labels=(("app", "web"),)),
    )
    pods = [make_pod("spread", cpu="3", labels={"app": "web"}, topology_spread=(spread,))]
    pods += [make_pod(f"plain-{i}", cpu="1", labels={"app": "web"}) for i in range(3)]
    karpenter, nodesmith = both(make_input(pods, nodepools=[ON_DEMAND], types=COMPUTE))
    assert nodesmith.cost_per_hour == pytest.approx(karpenter.cost_per_hour)
    assert sorted(sorted(p.name for p in nc.pods) for nc in nodesmith.nodeclaims) == sorted(
        sorted(p.name for p in nc.pods) for nc in karpenter.nodeclaims
    )


def _cpu_limited(cpu: str) -> list[SchedulingResult]:
    pool = make_nodepool(
        requirements=[{"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]}],
        limits={"cpu": cpu},
    )
    return list(both(make_input([make_pod(cpu="3"), make_pod(cpu="1")], nodepools=[pool], types=COMPUTE)))


def test_repacking_is_charged_against_nodepool_limits_like_karpenter() -> None:
    # Karpenter charges a NodeClaim the largest type it may launch (subtractMax). With 12 cpu left,
    # the 3-vCPU pod's NodeClaim (types up to 8 vCPU) leaves 4, enough for a 2-vCPU one.
    karpenter, nodesmith = _cpu_limited("12")
    assert len(karpenter.nodeclaims) == 1 and len(nodesmith.nodeclaims) == 2
    assert sum(max(t.capacity["cpu"] for t in nc.instance_types) for nc in nodesmith.nodeclaims) <= 12_000
    # With 9 cpu the second NodeClaim would have no type left within the limit: Karpenter's grouping stays.
    karpenter, nodesmith = _cpu_limited("9")
    assert [nc.instance_types[0].name for nc in nodesmith.nodeclaims] == ["c5.2xlarge"]
    assert nodesmith.unschedulable == karpenter.unschedulable == {}


def test_a_cheaper_grouping_that_breaks_limits_nodes_is_not_used() -> None:
    pool = make_nodepool(
        requirements=[{"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]}],
        limits={"nodes": "1"},
    )
    karpenter, nodesmith = both(make_input([make_pod(cpu="3"), make_pod(cpu="1")], nodepools=[pool], types=COMPUTE))
    assert len(nodesmith.nodeclaims) == 1
    assert nodesmith.cost_per_hour == pytest.approx(karpenter.cost_per_hour)


def test_min_values_nodeclaims_are_not_repacked() -> None:
    pool = make_nodepool(
        requirements=[
            {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]},
            {"key": "node.kubernetes.io/instance-type", "operator": "Exists", "minValues": 2},
        ]
    )
    karpenter, nodesmith = both(make_input([make_pod(cpu="3"), make_pod(cpu="1")], nodepools=[pool], types=COMPUTE))
    assert [len(nc.instance_types) for nc in nodesmith.nodeclaims] == [
        len(nc.instance_types) for nc in karpenter.nodeclaims
    ]
    assert nodesmith.cost_per_hour == pytest.approx(karpenter.cost_per_hour)


_TYPES = catalogue()[:12]  # no GPU types: simple pods never ask for GPUs


@st.composite
def simple_batches(draw: st.DrawFn) -> SchedulingInput:
    shapes = st.tuples(
        st.sampled_from([100, 250, 500, 1000, 1500, 2000, 3000, 3500, 6000, 7000, 14000]),
        st.sampled_from([64, 256, 512, 1024, 2048, 4096, 7000, 12000, 30000]),
        st.integers(min_value=1, max_value=6),
    )
    pods = []
    for i, (cpu, mem, count) in enumerate(draw(st.lists(shapes, min_size=1, max_size=6))):
        pods += [make_pod(f"p{i}-{j}", cpu=f"{cpu}m", memory=f"{mem}Mi", created=float(i)) for j in range(count)]
    names = draw(st.sets(st.sampled_from([t.name for t in _TYPES]), min_size=1))
    types = [t for t in _TYPES if t.name in names]
    spot = draw(st.booleans())
    pool = make_nodepool(
        requirements=[
            {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["spot"] if spot else ["on-demand"]}
        ]
    )
    return make_input(pods, nodepools=[pool], types=types)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(simple_batches())
def test_nodesmith_is_never_dearer_than_karpenter_and_places_the_same_pods(inp: SchedulingInput) -> None:
    karpenter, nodesmith = both(inp)
    assert nodesmith.cost_per_hour <= karpenter.cost_per_hour + 1e-9
    assert placed(nodesmith) == placed(karpenter)
    assert set(nodesmith.unschedulable) == set(karpenter.unschedulable)
    for nc in nodesmith.nodeclaims:
        cheapest = nc.instance_types[0]
        for resource, amount in nc.requests.items():
            assert amount <= cheapest.allocatable.get(resource, 0), (resource, nc)
        assert nc.price_per_hour == min(
            o.price for o in cheapest.offerings if o.available and o.capacity_type in nc.capacity_types
        )
