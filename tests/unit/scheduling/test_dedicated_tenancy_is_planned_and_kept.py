"""Instance tenancy as Karpenter's AWS provider offers it: any instance type can run ``default`` or ``dedicated``, a
NodeClaim launches ``default`` unless its requirements rule that out, and a pod that asks for dedicated hardware
does not land on a node of unknown or shared tenancy."""

from __future__ import annotations

from scheduling_support import make_input, make_node, make_nodepool, make_pod

from nodesmith.core.requirements import Requirements
from nodesmith.core.scheduling import solve
from nodesmith.core.tenancy import tenancy_of

TENANCY = "karpenter.k8s.aws/instance-tenancy"


def tenancy(*values: str) -> dict[str, object]:
    return {"key": TENANCY, "operator": "In", "values": list(values)}


def test_a_nodepool_asking_for_dedicated_hardware_plans_dedicated_nodeclaims() -> None:
    pool = make_nodepool(requirements=[tenancy("dedicated")])
    (plan,) = solve(make_input([make_pod("p")], nodepools=[pool])).nodeclaims
    reqs = Requirements.from_node_selector_requirements(plan.requirements)
    assert tenancy_of(reqs) == "dedicated"


def test_a_requirement_no_tenancy_meets_leaves_the_pod_unschedulable() -> None:
    # Every type runs default or dedicated (Karpenter's instance-type requirement): NotIn both matches none.
    pool = make_nodepool(requirements=[{"key": TENANCY, "operator": "NotIn", "values": ["default", "dedicated"]}])
    result = solve(make_input([make_pod("p")], nodepools=[pool]))
    assert not result.nodeclaims
    assert "default/p" in result.unschedulable


def test_default_tenancy_wins_when_both_are_allowed_or_tenancy_is_not_mentioned() -> None:
    assert tenancy_of(Requirements()) == "default"
    both = Requirements.from_node_selector_requirements(
        solve(make_input([make_pod("p")], nodepools=[make_nodepool(requirements=[tenancy("default", "dedicated")])]))
        .nodeclaims[0]
        .requirements
    )
    assert tenancy_of(both) == "default"


def test_a_pod_selecting_dedicated_hardware_skips_shared_and_unlabelled_nodes() -> None:
    shared = make_node("shared", labels={TENANCY: "default"})
    unlabelled = make_node("unlabelled")
    dedicated = make_node("dedicated", labels={TENANCY: "dedicated"})
    pod = make_pod("p", node_selector={TENANCY: "dedicated"})
    result = solve(make_input([pod], nodes=[shared, unlabelled, dedicated]))
    assert result.existing == {"dedicated": (pod,)}
