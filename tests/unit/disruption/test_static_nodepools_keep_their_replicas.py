"""Static NodePools (``spec.replicas``): how many NodeClaims a pass creates and which a scale-down removes,
as Karpenter's static provisioning and deprovisioning controllers decide (``karpenter-1.15-features.md`` §1.2-1.3),
and the NodeClaim a static pool launches from its template alone."""

from __future__ import annotations

from typing import Any

import pytest
from disruption_factories import DAY, NOW, catalogue, daemon_pod, make_node, make_nodeclaim, make_nodepool, make_pod

from nodesmith.core.api.nodepool import NodePool
from nodesmith.core.disruption import ClusterNode, DisruptionSnapshot, decide
from nodesmith.core.disruption.drift_basis import NODEPOOL_HASH_VERSION
from nodesmith.core.disruption.static import (
    StaticMember,
    is_static,
    scale_down_order,
    static_decision,
    static_nodeclaim_plan,
)

TYPES = catalogue()


def static_pool(replicas: int, *, nodes_limit: int | None = None, **kwargs: Any) -> NodePool:
    """A static NodePool: ``make_nodepool``'s with ``spec.replicas`` (and ``limits.nodes``)."""
    doc = make_nodepool(**kwargs).model_dump(by_alias=True, exclude_none=True)
    doc["spec"]["replicas"] = replicas
    if nodes_limit is not None:
        doc["spec"]["limits"] = {"nodes": str(nodes_limit)}
    return NodePool.model_validate(doc)


def members(count: int, **kwargs: Any) -> list[StaticMember]:
    return [StaticMember(name=f"static-{i}", **kwargs) for i in range(count)]


def test_a_pool_with_replicas_is_static_and_zero_replicas_still_is() -> None:
    assert is_static(static_pool(3)) and is_static(static_pool(0))
    assert not is_static(make_nodepool())


def test_a_new_static_pool_launches_all_its_replicas_with_no_pod_pending() -> None:
    decision = static_decision(pool=static_pool(4), members=[], now=NOW)
    assert (decision.launch, decision.remove, decision.blocked) == (4, (), "")


def test_a_pool_at_its_replicas_does_nothing() -> None:
    decision = static_decision(pool=static_pool(3), members=members(3), now=NOW)
    assert (decision.launch, decision.remove) == (0, ())


def test_scale_up_launches_only_the_missing_nodeclaims() -> None:
    decision = static_decision(pool=static_pool(5), members=members(2), now=NOW)
    assert decision.launch == 3


def test_a_deleting_nodeclaim_is_refilled_but_counts_against_the_node_limit() -> None:
    held = [*members(2), StaticMember(name="old", deleting=True)]
    unlimited = static_decision(pool=static_pool(3), members=held, now=NOW)
    assert unlimited.launch == 1, "the deleting NodeClaim is not active: its replacement is launched at once"
    capped = static_decision(pool=static_pool(3, nodes_limit=3), members=held, now=NOW)
    assert capped.launch == 0, "limits.nodes counts the deleting NodeClaim until it is gone"
    assert "node limit reached" in capped.blocked


def test_the_node_limit_caps_a_scale_up_counting_deleting_and_pending_disruption() -> None:
    held = [*members(1), StaticMember(name="going", deleting=True)]
    decision = static_decision(pool=static_pool(6, nodes_limit=4), members=held, now=NOW)
    assert decision.launch == 2, "4 allowed, 2 held (one deleting)"
    assert decision.blocked


def test_nodes_pending_disruption_hold_off_a_scale_up() -> None:
    held = [*members(2), StaticMember(name="drifted", pending_disruption=True)]
    decision = static_decision(pool=static_pool(3), members=held, now=NOW)
    assert decision.launch == 0, "its replacement comes from the disruption command, not from static provisioning"


def test_scale_down_removes_unlaunched_then_empty_nodes_before_busy_ones() -> None:
    busy = StaticMember(name="a-busy", pods=(make_pod(node="a-busy"),))
    daemons_only = StaticMember(name="b-daemons", pods=(daemon_pod("b-daemons"),))
    empty = StaticMember(name="c-empty")
    unlaunched = StaticMember(name="d-unlaunched", launched=False)
    held = [busy, daemons_only, empty, unlaunched]
    decision = static_decision(pool=static_pool(1), members=held, now=NOW)
    assert decision.launch == 0
    assert decision.remove == ("d-unlaunched", "b-daemons", "c-empty")
    assert static_decision(pool=static_pool(3), members=held, now=NOW).remove == ("d-unlaunched",)


def test_scale_down_spares_do_not_disrupt_pods_and_prefers_cheap_short_lived_nodes() -> None:
    protected = StaticMember(
        name="a-protected",
        pods=(make_pod(node="a-protected", annotations={"karpenter.sh/do-not-disrupt": "true"}),),
    )
    three_pods = StaticMember(name="b-three", pods=tuple(make_pod(node="b-three") for _ in range(3)))
    one_pod = StaticMember(name="c-one", pods=(make_pod(node="c-one"),))
    nearly_expired = StaticMember(
        name="d-old",
        pods=tuple(make_pod(node="d-old") for _ in range(3)),
        created=NOW - 29 * DAY,
        expire_after=30 * DAY,
    )
    order = [m.name for m in scale_down_order([protected, three_pods, one_pod, nearly_expired], now=NOW)]
    assert order == ["d-old", "c-one", "b-three", "a-protected"]


def test_a_daemonset_pod_with_do_not_disrupt_makes_a_node_not_empty() -> None:
    guarded = StaticMember(
        name="a-guarded",
        pods=(
            make_pod(
                "agent",
                node="a-guarded",
                owner_kind="DaemonSet",
                annotations={"karpenter.sh/do-not-disrupt": "true"},
            ),
        ),
    )
    plain = StaticMember(name="b-plain", pods=(make_pod(node="b-plain"),))
    assert [m.name for m in scale_down_order([guarded, plain], now=NOW)] == ["b-plain", "a-guarded"]


def test_scale_down_is_not_held_by_the_node_limit_or_pending_disruption() -> None:
    held = [*members(4), StaticMember(name="drifted", pending_disruption=True)]
    decision = static_decision(pool=static_pool(2, nodes_limit=2), members=held, now=NOW)
    assert len(decision.remove) == 2 and "drifted" not in decision.remove


def test_zero_replicas_removes_every_active_nodeclaim() -> None:
    held = [*members(3), StaticMember(name="gone", deleting=True)]
    decision = static_decision(pool=static_pool(0), members=held, now=NOW)
    assert sorted(decision.remove) == ["static-0", "static-1", "static-2"]


def test_a_dynamic_pool_has_no_static_decision() -> None:
    with pytest.raises(ValueError, match="not static"):
        static_decision(pool=make_nodepool(), members=[], now=NOW)


def test_the_static_nodeclaim_keeps_every_type_the_template_allows_cheapest_first() -> None:
    pool = static_pool(
        2,
        requirements=[
            {"key": "karpenter.k8s.aws/instance-category", "operator": "In", "values": ["m"]},
            {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]},
        ],
    )
    plan = static_nodeclaim_plan(pool, TYPES)
    assert not isinstance(plan, str)
    names = [it.name for it in plan.instance_types]
    assert set(names) == {spec.name for spec in TYPES if spec.name.startswith("m")}
    assert names[0] == "m5.large" and names.index("m5.large") < names.index("m5.4xlarge")
    assert plan.pods == () and plan.requests == {}
    assert plan.capacity_types == frozenset({"on-demand"}) and plan.capacity_type == "on-demand"
    assert plan.price_per_hour == pytest.approx(0.096)


def test_a_static_template_that_allows_no_type_says_why() -> None:
    pool = static_pool(
        1, requirements=[{"key": "karpenter.k8s.aws/instance-category", "operator": "In", "values": ["x"]}]
    )
    why = static_nodeclaim_plan(pool, TYPES)
    assert isinstance(why, str) and "no instance type" in why and '"default"' in why


STALE = {"karpenter.sh/nodepool-hash": "0", "karpenter.sh/nodepool-hash-version": NODEPOOL_HASH_VERSION}


def static_node(name: str, *, drifted: bool = False, **kwargs: Any) -> ClusterNode:
    claim = make_nodeclaim(f"{name}-claim", node=name, annotations=STALE if drifted else None)
    node: ClusterNode = make_node(name, nodeclaim=claim, instance_type="m5.large", **kwargs)
    return node


def drift_pool(replicas: int, **kwargs: Any) -> NodePool:
    return static_pool(replicas, budgets=[{"nodes": "100%"}], consolidate_after="0s", **kwargs)


def test_a_drifted_static_node_is_replaced_one_for_one_by_a_template_nodeclaim() -> None:
    nodes = [static_node("a", drifted=True, pod_specs=[("1", "1Gi")]), static_node("b")]
    plan = decide(DisruptionSnapshot(nodes=nodes, nodepools=[drift_pool(2)], instance_types=TYPES), now=NOW)
    command = plan.command
    assert command is not None and command.method == "drift" and command.nodes == ("a",)
    [replacement] = command.replacements
    assert replacement.nodepool == "default" and replacement.pods == ()
    assert "replace 1:1" in command.reason


def test_static_nodes_are_never_emptied_or_consolidated() -> None:
    nodes = [static_node("a", daemonsets=False), static_node("b", pod_specs=[("100m", "128Mi")])]
    plan = decide(DisruptionSnapshot(nodes=nodes, nodepools=[drift_pool(2)], instance_types=TYPES), now=NOW)
    assert plan.command is None
    assert any("static" in r.reason for r in plan.rejected if r.node == "a")


def test_static_drift_waits_while_the_pool_is_scaling_down() -> None:
    nodes = [static_node("a", drifted=True), static_node("b"), static_node("c")]
    plan = decide(DisruptionSnapshot(nodes=nodes, nodepools=[drift_pool(2)], instance_types=TYPES), now=NOW)
    assert plan.command is None
    assert any("scaling down to 2" in r.reason for r in plan.rejected if r.node == "a")


def test_static_drift_needs_room_under_the_node_limit_to_stage_its_replacement() -> None:
    nodes = [static_node("a", drifted=True), static_node("b")]
    plan = decide(
        DisruptionSnapshot(nodes=nodes, nodepools=[drift_pool(2, nodes_limit=2)], instance_types=TYPES), now=NOW
    )
    assert plan.command is None
    assert any("limits.nodes 2 reached" in r.reason for r in plan.rejected if r.node == "a")
    roomy = decide(
        DisruptionSnapshot(nodes=nodes, nodepools=[drift_pool(2, nodes_limit=3)], instance_types=TYPES), now=NOW
    )
    assert roomy.command is not None and roomy.command.nodes == ("a",)


def test_static_drift_stays_within_the_drifted_budget() -> None:
    nodes = [static_node("a", drifted=True), static_node("b")]
    pool = static_pool(2, budgets=[{"nodes": "0", "reasons": ["Drifted"]}])
    plan = decide(DisruptionSnapshot(nodes=nodes, nodepools=[pool], instance_types=TYPES), now=NOW)
    assert plan.command is None
    assert any("Drifted budget exhausted" in r.reason for r in plan.rejected if r.node == "a")


def test_a_consolidation_simulation_never_plans_a_static_nodeclaim() -> None:
    only_big = [
        {"key": "node.kubernetes.io/instance-type", "operator": "In", "values": ["m5.2xlarge"]},
        {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]},
    ]
    dynamic = make_nodepool("dynamic", requirements=only_big, budgets=[{"nodes": "100%"}])
    nodes = [
        make_node("busy", nodepool="dynamic", instance_type="m5.2xlarge", pod_specs=[("500m", "512Mi")]),
        static_node("full", pod_specs=[("1500m", "6Gi")]),
    ]
    plan = decide(DisruptionSnapshot(nodes=nodes, nodepools=[drift_pool(1), dynamic], instance_types=TYPES), now=NOW)
    assert plan.command is None, "only a static NodeClaim would be cheaper, and no simulation may plan one"
