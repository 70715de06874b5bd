"""NodePool taints, weight ordering with fallback, and limits (cpu, nodes) as Karpenter applies them."""

from __future__ import annotations

from scheduling_support import make_input, make_node, make_nodepool, make_pod, make_type

from nodesmith.core.model import Toleration
from nodesmith.core.scheduling import solve

GPU_TAINT = {"key": "nvidia.com/gpu", "value": "true", "effect": "NoSchedule"}
TOLERATE_GPU = (Toleration(key="nvidia.com/gpu", operator="Exists", effect="NoSchedule"),)


def test_pods_must_tolerate_nodepool_taints() -> None:
    gpu = make_nodepool("gpu", taints=[GPU_TAINT])
    plain, tolerant = make_pod(), make_pod(tolerations=TOLERATE_GPU)
    result = solve(make_input([plain, tolerant], nodepools=[gpu]))
    assert [p.name for nc in result.nodeclaims for p in nc.pods] == [tolerant.name]
    assert (
        result.unschedulable[plain.key] == 'nodepool "gpu": pod does not tolerate taint nvidia.com/gpu=true:NoSchedule'
    )
    assert result.nodeclaims[0].taints[0].key == "nvidia.com/gpu"


def test_startup_taints_need_no_toleration_and_are_passed_on() -> None:
    pool = make_nodepool(startup_taints=[{"key": "example.com/agent-not-ready", "effect": "NoSchedule"}])
    (nc,) = solve(make_input([make_pod()], nodepools=[pool])).nodeclaims
    assert [t.key for t in nc.startup_taints] == ["example.com/agent-not-ready"]


def test_prefer_no_schedule_taints_are_tolerated_after_relaxation() -> None:
    pool = make_nodepool(taints=[{"key": "spot-only", "effect": "PreferNoSchedule"}])
    result = solve(make_input([make_pod()], nodepools=[pool]))
    assert result.unschedulable == {} and len(result.nodeclaims) == 1


def test_heavier_nodepool_is_used_first() -> None:
    pools = [make_nodepool("a-light", weight=10), make_nodepool("z-heavy", weight=50), make_nodepool("b-unweighted")]
    (nc,) = solve(make_input([make_pod()], nodepools=pools)).nodeclaims
    assert nc.nodepool == "z-heavy"


def test_equal_weights_are_ordered_by_name() -> None:
    pools = [make_nodepool("beta", weight=5), make_nodepool("alpha", weight=5)]
    assert solve(make_input([make_pod()], nodepools=pools)).nodeclaims[0].nodepool == "alpha"


def test_falls_back_to_a_lighter_nodepool_when_the_heavier_cannot_fit_the_pod() -> None:
    small_only = make_nodepool(
        "small", weight=100, requirements=[{"key": "karpenter.k8s.aws/instance-cpu", "operator": "Lt", "values": ["4"]}]
    )
    anything = make_nodepool("general", weight=1)
    assert solve(make_input([make_pod(cpu="1")], nodepools=[small_only, anything])).nodeclaims[0].nodepool == "small"
    assert solve(make_input([make_pod(cpu="6")], nodepools=[small_only, anything])).nodeclaims[0].nodepool == "general"


def test_a_planned_nodeclaim_of_a_lighter_pool_is_filled_before_a_heavier_pool_opens_one() -> None:
    small_only = make_nodepool(
        "small", weight=100, requirements=[{"key": "karpenter.k8s.aws/instance-cpu", "operator": "Lt", "values": ["4"]}]
    )
    anything = make_nodepool("general", weight=1)
    result = solve(make_input([make_pod(cpu="1"), make_pod(cpu="6")], nodepools=[small_only, anything]))
    assert [(nc.nodepool, len(nc.pods)) for nc in result.nodeclaims] == [("general", 2)]


def test_cpu_limit_stops_provisioning_with_a_reason() -> None:
    types = [make_type("m5.xlarge", 4, 16, od_price=0.192)]
    pool = make_nodepool(limits={"cpu": "8"})
    pods = [make_pod(cpu="3") for _ in range(4)]
    result = solve(make_input(pods, nodepools=[pool], types=types))
    assert len(result.nodeclaims) == 2  # each m5.xlarge counts 4 cpu against the 8-cpu limit
    assert len(result.unschedulable) == 2
    reason = next(iter(result.unschedulable.values()))
    assert reason == 'nodepool "default": limits.cpu would be exceeded: 0 of 8 left, smallest instance type has 4'


def test_limits_count_what_the_nodepool_already_uses() -> None:
    pool = make_nodepool(limits={"cpu": "10"})
    types = [make_type("m5.xlarge", 4, 16, od_price=0.192)]
    result = solve(make_input([make_pod(cpu="1")], nodepools=[pool], types=types, usage={"default": {"cpu": 8000}}))
    assert result.nodeclaims == ()
    assert "limits.cpu would be exceeded: 2 of 10 left" in next(iter(result.unschedulable.values()))


def test_limits_subtract_the_largest_candidate_type() -> None:
    types = [make_type("m5.large", 2, 8, pods=29, od_price=0.096), make_type("m5.2xlarge", 8, 32, od_price=0.384)]
    pool = make_nodepool(limits={"cpu": "10"})
    port = ((9000, "TCP", ""),)
    pods = [make_pod(cpu="1500m", host_ports=port), make_pod(cpu="1500m", host_ports=port)]  # cannot share a node
    first, second = solve(make_input(pods, nodepools=[pool], types=types)).nodeclaims
    assert [t.name for t in first.instance_types] == ["m5.large", "m5.2xlarge"]
    # The first NodeClaim may become an m5.2xlarge (8 cpu): 2 cpu are left, enough for an m5.large only.
    assert [t.name for t in second.instance_types] == ["m5.large"]


def test_node_limit_stops_provisioning_with_a_reason() -> None:
    pool = make_nodepool(limits={"nodes": "2"})
    big = [make_pod(cpu="40") for _ in range(3)]
    result = solve(make_input(big, nodepools=[pool]))
    assert len(result.nodeclaims) == 2
    (reason,) = result.unschedulable.values()
    assert reason == 'nodepool "default": limits.nodes reached (2 of 2 in use or planned)'


def test_node_limit_counts_existing_usage_and_falls_back_to_another_pool() -> None:
    capped = make_nodepool("capped", weight=10, limits={"nodes": "1"})
    spare = make_nodepool("spare")
    result = solve(
        make_input(
            [make_pod(cpu="40")],
            nodepools=[capped, spare],
            usage={"capped": {"nodes": 1}},
            nodes=[make_node("full", cpu="1")],
        )
    )
    assert [nc.nodepool for nc in result.nodeclaims] == ["spare"]
