"""plan_disruptions replays Karpenter's loop on a snapshot: one command per pass, each consuming
budget, later passes seeing earlier commands' nodes as disrupting and replacements as
uninitialized; ``still_valid`` re-validates a command against a later pass."""

from __future__ import annotations

from dataclasses import replace

from disruption_factories import DAY, NOW, catalogue, make_node, make_nodeclaim, make_nodeclass, make_nodepool, make_pod

from nodesmith.core.disruption import DisruptionSnapshot, decide, plan_disruptions, still_valid

TYPES = catalogue()


def test_emptiness_drift_and_consolidation_are_all_started_in_one_replay() -> None:
    pool = make_nodepool(budgets=[{"nodes": "100%"}])
    empty = make_node("empty")
    claim = make_nodeclaim("drifted-claim", node="drifted", image_id="ami-0old0000000000001", created=NOW - 2 * DAY)
    drifted = make_node(
        "drifted",
        nodeclaim=claim,
        pods=(make_pod("api", cpu="3", memory="8Gi", node="drifted"),),
        created=NOW - 2 * DAY,
    )
    idle = make_node("idle", instance_type="m5.2xlarge", pods=(make_pod("web", cpu="500m", memory="1Gi", node="idle"),))
    plan = plan_disruptions(
        DisruptionSnapshot(
            nodes=[empty, drifted, idle], nodepools=[pool], instance_types=TYPES, nodeclasses=[make_nodeclass()]
        ),
        now=NOW,
    )
    assert [(c.method, c.nodes) for c in plan.commands] == [
        ("emptiness", ("empty",)),
        ("drift", ("drifted",)),
        ("single-node-consolidation", ("idle",)),
    ]
    assert not plan.rejected


def test_later_passes_do_not_rely_on_replacements_that_are_still_launching() -> None:
    pool = make_nodepool(budgets=[{"nodes": "100%"}])
    claim = make_nodeclaim("d-claim", node="drifted", image_id="ami-0old0000000000001", created=NOW - 2 * DAY)
    drifted = make_node(
        "drifted",
        instance_type="m5.4xlarge",
        nodeclaim=claim,
        created=NOW - 2 * DAY,
        pods=(make_pod("big", cpu="10", memory="8Gi", node="drifted"),),
    )
    small = make_node(
        "small", instance_type="t3.medium", pods=(make_pod("tiny", cpu="1500m", memory="1Gi", node="small"),)
    )
    plan = plan_disruptions(
        DisruptionSnapshot(
            nodes=[drifted, small], nodepools=[pool], instance_types=TYPES, nodeclasses=[make_nodeclass()]
        ),
        now=NOW,
    )
    assert [c.method for c in plan.commands] == ["drift"]
    assert any(r.node == "small" and "uninitialized node replacement-1-0" in r.reason for r in plan.rejected), (
        plan.rejected
    )
    assert all(not r.node.startswith("replacement-") for r in plan.rejected)


def test_budget_is_shared_across_the_replayed_commands() -> None:
    pool = make_nodepool(budgets=[{"nodes": "1"}])
    nodes = [make_node("e1"), make_node("e2"), make_node("b1", instance_type="m5.2xlarge", pod_specs=[("500m", "1Gi")])]
    plan = plan_disruptions(DisruptionSnapshot(nodes=nodes, nodepools=[pool], instance_types=TYPES), now=NOW)
    assert len(plan.commands) == 1 and len(plan.commands[0].nodes) == 1


def test_a_command_stays_valid_only_if_a_later_pass_proposes_it_again() -> None:
    pool = make_nodepool(budgets=[{"nodes": "100%"}])
    node = make_node("n1", instance_type="m5.2xlarge", pods=(make_pod("web", cpu="1500m", memory="3Gi", node="n1"),))
    first = decide(DisruptionSnapshot(nodes=[node], nodepools=[pool], instance_types=TYPES), now=NOW)
    assert first.command is not None
    again = decide(DisruptionSnapshot(nodes=[node], nodepools=[pool], instance_types=TYPES), now=NOW + 15)
    assert still_valid(first.command, again)
    grown = replace(node, pods=(*node.pods, make_pod("late", cpu="5", memory="20Gi", node="n1")))
    changed = decide(DisruptionSnapshot(nodes=[grown], nodepools=[pool], instance_types=TYPES), now=NOW + 15)
    assert not still_valid(first.command, changed)
