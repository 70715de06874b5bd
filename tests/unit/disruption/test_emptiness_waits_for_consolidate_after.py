"""Emptiness: nodes running only DaemonSet/mirror pods are deleted once ``consolidateAfter`` has
passed since the last pod event, in one command per pass, for every consolidation policy."""

from __future__ import annotations

import pytest
from disruption_factories import NOW, catalogue, iso, make_node, make_nodeclaim, make_nodepool, make_pod

from nodesmith.core.disruption import DisruptionSnapshot, decide

TYPES = catalogue()
MINUTE = 60.0


def test_empty_node_is_kept_until_consolidate_after_has_passed_since_the_last_pod_event() -> None:
    pool = make_nodepool(consolidate_after="30m", budgets=[{"nodes": "100%"}])
    recent = make_node("n1", last_pod_event=NOW - 10 * MINUTE)
    plan = decide(DisruptionSnapshot(nodes=[recent], nodepools=[pool], instance_types=TYPES), now=NOW)
    assert plan.command is None
    [why] = [r for r in plan.rejected if r.node == "n1"]
    assert why.method == "emptiness" and "1200s left" in why.reason
    quiet = make_node("n1", last_pod_event=NOW - 31 * MINUTE)
    plan = decide(DisruptionSnapshot(nodes=[quiet], nodepools=[pool], instance_types=TYPES), now=NOW)
    assert plan.command is not None
    assert (plan.command.method, plan.command.nodes, plan.command.cause) == ("emptiness", ("n1",), "Empty")
    assert plan.command.savings_per_hour == pytest.approx(0.192) and plan.command.replacement is None


def test_last_pod_event_time_falls_back_to_the_nodeclaim_status() -> None:
    pool = make_nodepool(consolidate_after="30m", budgets=[{"nodes": "100%"}])
    claim = make_nodeclaim("c1", node="n1")
    claim.status.last_pod_event_time = iso(NOW - 5 * MINUTE)
    plan = decide(
        DisruptionSnapshot(nodes=[make_node("n1", nodeclaim=claim)], nodepools=[pool], instance_types=TYPES), now=NOW
    )
    assert plan.command is None


def test_consolidate_after_never_disables_emptiness() -> None:
    pool = make_nodepool(consolidate_after="Never", budgets=[{"nodes": "100%"}])
    plan = decide(DisruptionSnapshot(nodes=[make_node("n1")], nodepools=[pool], instance_types=TYPES), now=NOW)
    assert plan.command is None
    assert any("consolidation disabled" in r.reason for r in plan.rejected)


@pytest.mark.parametrize("policy", ["WhenEmpty", "WhenEmptyOrUnderutilized"])
def test_every_empty_node_goes_in_one_command_whatever_the_policy(policy: str) -> None:
    pool = make_nodepool(policy=policy, budgets=[{"nodes": "100%"}])
    cluster = [
        make_node("small", instance_type="m5.large"),
        make_node("big", instance_type="m5.2xlarge"),
        make_node("busy", instance_type="m5.xlarge", pod_specs=[("3", "12Gi")]),
    ]
    plan = decide(DisruptionSnapshot(nodes=cluster, nodepools=[pool], instance_types=TYPES), now=NOW)
    assert plan.command is not None and plan.command.method == "emptiness"
    assert plan.command.nodes == ("big", "small"), "most expensive first"
    assert plan.command.cost_before == pytest.approx(0.384 + 0.096)


def test_a_node_with_only_daemonset_mirror_and_finished_pods_is_empty() -> None:
    pool = make_nodepool(budgets=[{"nodes": "100%"}])
    mirror = make_pod("kube-proxy", node="n1", owner_kind="Node", is_mirror=True)
    done = make_pod("job-1", node="n1", owner_kind="Job", phase="Succeeded")
    plan = decide(
        DisruptionSnapshot(nodes=[make_node("n1", pods=(mirror, done))], nodepools=[pool], instance_types=TYPES),
        now=NOW,
    )
    assert plan.command is not None and plan.command.method == "emptiness"


def test_when_empty_policy_never_consolidates_a_busy_node() -> None:
    pool = make_nodepool(policy="WhenEmpty", budgets=[{"nodes": "100%"}])
    plan = decide(
        DisruptionSnapshot(
            nodes=[make_node("n1", instance_type="m5.4xlarge", pod_specs=[("100m", "128Mi")])],
            nodepools=[pool],
            instance_types=TYPES,
        ),
        now=NOW,
    )
    assert plan.command is None
    assert any("WhenEmpty" in r.reason for r in plan.rejected)
