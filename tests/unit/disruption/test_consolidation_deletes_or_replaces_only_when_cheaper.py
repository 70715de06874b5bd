"""Consolidation (``WhenEmptyOrUnderutilized``): delete when the pods fit elsewhere, replace with one
strictly cheaper NodeClaim, never split into several; multi-node merges before single-node;
spot-to-spot needs 15 cheaper spot types (Karpenter ``consolidation.go``, ``multinodeconsolidation.go``)."""

from __future__ import annotations

from typing import Any

import pytest
from disruption_factories import NOW, catalogue, make_node, make_nodepool, make_pod

from nodesmith.core.disruption import ClusterNode, DisruptionSettings, DisruptionSnapshot, decide
from nodesmith.core.disruption.consolidation import worst_launch_price

TYPES = catalogue()
PRICES = {it.name: it.cheapest_price(capacity_types=frozenset({"on-demand"})) for it in TYPES}
ALL = [{"nodes": "100%"}]


def anchor(name: str = "anchor", **kwargs: Any) -> ClusterNode:
    """A roomy m5.2xlarge whose one pod is protected, so the node stays and can receive pods."""
    pinned = make_pod(
        f"{name}-db", cpu="2", memory="4Gi", node=name, annotations={"karpenter.sh/do-not-disrupt": "true"}
    )
    return make_node(name, instance_type="m5.2xlarge", pods=(pinned,), **kwargs)


def test_node_is_deleted_when_its_pods_fit_on_the_remaining_nodes() -> None:
    pool = make_nodepool(budgets=ALL)
    n1 = make_node("n1", instance_type="m5.xlarge", pods=(make_pod("web", cpu="1", memory="2Gi", node="n1"),))
    plan = decide(DisruptionSnapshot(nodes=[anchor(), n1], nodepools=[pool], instance_types=TYPES), now=NOW)
    cmd = plan.command
    assert cmd is not None and cmd.method == "single-node-consolidation"
    assert cmd.nodes == ("n1",) and cmd.replacement is None and cmd.is_delete
    assert dict(cmd.placements) == {"default/web": "anchor"}
    assert cmd.savings_per_hour == pytest.approx(PRICES["m5.xlarge"])


def test_node_is_replaced_by_a_strictly_cheaper_nodeclaim() -> None:
    pool = make_nodepool(budgets=ALL)
    node = make_node("n1", instance_type="m5.2xlarge", pods=(make_pod("web", cpu="1500m", memory="3Gi", node="n1"),))
    plan = decide(DisruptionSnapshot(nodes=[node], nodepools=[pool], instance_types=TYPES), now=NOW)
    cmd = plan.command
    assert cmd is not None and cmd.method == "single-node-consolidation" and cmd.nodes == ("n1",)
    replacement = cmd.replacement
    assert replacement is not None
    names = [it.name for it in replacement.instance_types]
    assert "m5.2xlarge" not in names and names[0] == "t3.medium"
    for it in replacement.instance_types:
        assert (
            worst_launch_price(it, zones=replacement.zones, capacity_types=replacement.capacity_types)
            < PRICES["m5.2xlarge"]
        )
    assert cmd.cost_after == pytest.approx(PRICES["t3.medium"])
    assert cmd.savings_per_hour == pytest.approx(PRICES["m5.2xlarge"] - PRICES["t3.medium"])


def test_no_replacement_when_nothing_cheaper_fits() -> None:
    pool = make_nodepool(budgets=ALL)
    node = make_node("n1", instance_type="t3.medium", pods=(make_pod("web", cpu="1500m", memory="2Gi", node="n1"),))
    plan = decide(DisruptionSnapshot(nodes=[node], nodepools=[pool], instance_types=TYPES), now=NOW)
    assert plan.command is None
    assert [r.reason for r in plan.rejected if r.node == "n1"] == ["can't replace with a cheaper node"]


def test_no_op_when_the_pods_would_need_more_than_one_new_nodeclaim() -> None:
    capped = make_nodepool("default", budgets=ALL)
    capped = capped.model_copy(update={"spec": capped.spec.model_copy(update={"limits": {"cpu": "4"}, "weight": 10})})
    overflow = make_nodepool(
        "overflow",
        requirements=[{"key": "node.kubernetes.io/instance-type", "operator": "In", "values": ["c5.large"]}],
        budgets=ALL,
    )
    pods = tuple(make_pod(f"web-{i}", cpu="1500m", memory="1Gi", node="n1") for i in range(3))
    node = make_node("n1", instance_type="m5.2xlarge", pods=pods)
    plan = decide(DisruptionSnapshot(nodes=[node], nodepools=[capped, overflow], instance_types=TYPES), now=NOW)
    assert plan.command is None
    assert [r.reason for r in plan.rejected if r.node == "n1"] == ["can't remove without creating 2 NodeClaims"]


def test_multi_node_merges_two_underutilised_nodes_into_one_cheaper_node() -> None:
    pool = make_nodepool(budgets=ALL)
    n1 = make_node("n1", instance_type="m5.xlarge", pods=(make_pod("a", cpu="1", memory="2Gi", node="n1"),))
    n2 = make_node("n2", instance_type="m5.xlarge", pods=(make_pod("b", cpu="1", memory="2Gi", node="n2"),))
    plan = decide(DisruptionSnapshot(nodes=[n1, n2], nodepools=[pool], instance_types=TYPES), now=NOW)
    cmd = plan.command
    assert cmd is not None and cmd.method == "multi-node-consolidation"
    assert set(cmd.nodes) == {"n1", "n2"} and cmd.replacement is not None
    assert cmd.cost_before == pytest.approx(2 * PRICES["m5.xlarge"])
    assert 0 < cmd.cost_after < cmd.cost_before
    assert {dest for _, dest in cmd.placements} == {"new:0"}


def test_multi_node_does_not_replace_with_a_candidates_own_type_unless_cheaper() -> None:
    pool = make_nodepool(budgets=ALL)
    small = make_node(
        "small", instance_type="t3.xlarge", pods=(make_pod("a", cpu="1500m", memory="2Gi", node="small"),)
    )
    big = make_node("big", instance_type="m5.2xlarge", pods=(make_pod("b", cpu="500m", memory="1Gi", node="big"),))
    plan = decide(DisruptionSnapshot(nodes=[small, big], nodepools=[pool], instance_types=TYPES), now=NOW)
    cmd = plan.command
    assert cmd is not None
    assert (cmd.method, cmd.nodes, cmd.is_delete) == ("single-node-consolidation", ("big",), True), (
        "replacing both with another t3.xlarge is just deleting big with more pods moved"
    )


def test_on_demand_node_replaced_by_a_spot_pinned_nodeclaim_when_spot_is_allowed() -> None:
    pool = make_nodepool(capacity_types=("spot", "on-demand"), budgets=ALL)
    node = make_node("n1", instance_type="m5.2xlarge", pods=(make_pod("web", cpu="1", memory="2Gi", node="n1"),))
    cmd = decide(DisruptionSnapshot(nodes=[node], nodepools=[pool], instance_types=TYPES), now=NOW).command
    assert cmd is not None and cmd.replacement is not None
    assert cmd.replacement.capacity_types == frozenset({"spot"})
    assert any(r.key == "karpenter.sh/capacity-type" and r.values == ("spot",) for r in cmd.replacement.requirements)


def test_spot_to_spot_needs_fifteen_cheaper_spot_types() -> None:
    pool = make_nodepool(capacity_types=("spot",), budgets=ALL)
    few = make_node(
        "few",
        instance_type="c5.xlarge",
        capacity_type="spot",
        pods=(make_pod("a", cpu="1500m", memory="2Gi", node="few"),),
    )
    plan = decide(DisruptionSnapshot(nodes=[few], nodepools=[pool], instance_types=TYPES), now=NOW)
    assert plan.command is None
    [why] = [r.reason for r in plan.rejected if r.node == "few"]
    assert why.startswith("spot-to-spot consolidation requires 15 cheaper instance type options") and "got 10" in why

    many = make_node(
        "many",
        instance_type="m5.4xlarge",
        capacity_type="spot",
        pods=(make_pod("b", cpu="1500m", memory="2Gi", node="many"),),
    )
    cmd = decide(DisruptionSnapshot(nodes=[many], nodepools=[pool], instance_types=TYPES), now=NOW).command
    assert cmd is not None and cmd.replacement is not None
    assert len(cmd.replacement.instance_types) == 15, "launch is cut to the 15 cheapest so it is not consolidated again"
    assert cmd.replacement.capacity_types == frozenset({"spot"})

    off = decide(
        DisruptionSnapshot(nodes=[many], nodepools=[pool], instance_types=TYPES),
        now=NOW,
        settings=DisruptionSettings(spot_to_spot=False),
    )
    assert off.command is None


def test_minimum_savings_setting_keeps_small_wins_out() -> None:
    pool = make_nodepool(budgets=ALL)
    node = make_node("n1", instance_type="m5.2xlarge", pods=(make_pod("web", cpu="1500m", memory="3Gi", node="n1"),))
    plan = decide(
        DisruptionSnapshot(nodes=[node], nodepools=[pool], instance_types=TYPES),
        now=NOW,
        settings=DisruptionSettings(min_savings_per_hour=0.5),
    )
    assert plan.command is None
    assert any("below the minimum" in r.reason for r in plan.rejected)


def test_pods_never_move_onto_an_uninitialized_node() -> None:
    pool = make_nodepool(budgets=ALL)
    launching = make_node(
        "launching", instance_type="m5.4xlarge", labels={"karpenter.sh/initialized": "false"}, daemonsets=False
    )
    n1 = make_node("n1", instance_type="t3.medium", pods=(make_pod("web", cpu="1500m", memory="2Gi", node="n1"),))
    plan = decide(DisruptionSnapshot(nodes=[launching, n1], nodepools=[pool], instance_types=TYPES), now=NOW)
    assert plan.command is None
    assert any(r.node == "n1" and "uninitialized node launching" in r.reason for r in plan.rejected)


def test_nodes_inside_their_consolidate_after_window_receive_no_moved_pods() -> None:
    pool = make_nodepool(consolidate_after="10m", budgets=ALL)
    busy_recently = anchor(last_pod_event=NOW - 60)
    n1 = make_node("n1", instance_type="m5.xlarge", pods=(make_pod("web", cpu="1", memory="2Gi", node="n1"),))
    cmd = decide(DisruptionSnapshot(nodes=[busy_recently, n1], nodepools=[pool], instance_types=TYPES), now=NOW).command
    assert cmd is not None and cmd.nodes == ("n1",)
    assert cmd.replacement is not None, "the anchor is off limits, so the pod needs a (cheaper) new node"


def test_budget_caps_how_many_nodes_multi_node_takes() -> None:
    pool = make_nodepool(budgets=[{"nodes": "2"}])
    cluster = [
        make_node(f"n{i}", instance_type="m5.xlarge", pods=(make_pod(f"p{i}", cpu="500m", memory="1Gi", node=f"n{i}"),))
        for i in range(5)
    ]
    cmd = decide(DisruptionSnapshot(nodes=cluster, nodepools=[pool], instance_types=TYPES), now=NOW).command
    assert cmd is not None and cmd.method == "multi-node-consolidation" and len(cmd.nodes) == 2


def test_a_tight_budget_takes_the_node_that_saves_most_per_pod_disrupted_first() -> None:
    """Karpenter v1.14 orders consolidation candidates by price per reschedule cost (``SavingsRatio``), highest
    first: with room for one disruption, the dear node goes before the cheap one evicting as many pods."""
    pool = make_nodepool(budgets=[{"nodes": "1"}])
    cheap = make_node(
        "a-cheap", instance_type="t3.medium", pods=(make_pod("web-a", cpu="500m", memory="1Gi", node="a-cheap"),)
    )
    dear = make_node(
        "b-dear", instance_type="m5.xlarge", pods=(make_pod("web-b", cpu="500m", memory="1Gi", node="b-dear"),)
    )
    plan = decide(DisruptionSnapshot(nodes=[anchor(), cheap, dear], nodepools=[pool], instance_types=TYPES), now=NOW)
    cmd = plan.command
    assert cmd is not None and cmd.method == "single-node-consolidation" and cmd.nodes == ("b-dear",)
