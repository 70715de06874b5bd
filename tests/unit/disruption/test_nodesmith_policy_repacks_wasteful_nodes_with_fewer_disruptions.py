"""The ``nodesmith`` consolidation policy: on a fragmented cluster it takes out the big half-empty
nodes and re-packs their pods, reaching a cheaper cluster than Karpenter's policy while disrupting
fewer nodes; it never evicts more pods of a PodDisruptionBudget in one command than the budget
allows; Karpenter's policy stays the default."""

from __future__ import annotations

from disruption_factories import NOW, catalogue, make_node, make_nodepool, make_pod

from nodesmith.core.disruption import ClusterNode, DisruptionSettings, DisruptionSnapshot, decide, plan_disruptions
from nodesmith.core.model import LabelSelector, PodDisruptionBudget

TYPES = catalogue()
ALL = [{"nodes": "100%"}]
NODESMITH = DisruptionSettings(policy="nodesmith")
KARPENTER = DisruptionSettings(policy="karpenter")


def price(cn: ClusterNode) -> float:
    it = next(t for t in TYPES if t.name == cn.node.labels["node.kubernetes.io/instance-type"])
    return it.cheapest_price(capacity_types=frozenset({"on-demand"}))


def fragmented() -> list[ClusterNode]:
    """Two m5.4xlarge ($0.768/h each) holding two 1-cpu pods each, and four t3.medium holding one
    1.5-cpu pod each (the cheapest type that holds it: well used)."""
    big = [make_node(f"big-{i}", instance_type="m5.4xlarge", pod_specs=[("1", "2Gi"), ("1", "2Gi")]) for i in range(2)]
    small = [make_node(f"small-{i}", instance_type="t3.medium", pod_specs=[("1500m", "2Gi")]) for i in range(4)]
    return big + small


def outcome(settings: DisruptionSettings, nodes: list[ClusterNode]) -> tuple[float, set[str]]:
    """Cluster cost after every command of the pass (USD/hour) and the nodes disrupted."""
    plan = plan_disruptions(
        DisruptionSnapshot(nodes=nodes, nodepools=[make_nodepool(budgets=ALL)], instance_types=TYPES),
        now=NOW,
        settings=settings,
    )
    cost = sum(price(cn) for cn in nodes) - sum(cmd.savings_per_hour for cmd in plan.commands)
    return cost, {n for cmd in plan.commands for n in cmd.nodes}


def test_nodesmith_reaches_a_cheaper_cluster_with_fewer_disruptions_than_karpenter() -> None:
    nodes = fragmented()
    ours, ours_disrupted = outcome(NODESMITH, nodes)
    theirs, theirs_disrupted = outcome(KARPENTER, nodes)
    assert ours < theirs - 0.01
    assert len(ours_disrupted) < len(theirs_disrupted)
    assert ours_disrupted == {"big-0", "big-1"}  # the well-used small nodes stay


def test_the_command_may_launch_several_cheaper_replacements_at_worst_case_prices() -> None:
    nodes = fragmented()
    plan = decide(
        DisruptionSnapshot(nodes=nodes, nodepools=[make_nodepool(budgets=ALL)], instance_types=TYPES),
        now=NOW,
        settings=NODESMITH,
    )
    cmd = plan.command
    assert cmd is not None and cmd.cause == "Underutilized" and "nodesmith policy" in cmd.reason
    assert set(cmd.nodes) == {"big-0", "big-1"}
    assert cmd.cost_after < cmd.cost_before
    assert {dest for _, dest in cmd.placements} <= {f"new:{i}" for i in range(len(cmd.replacements))} | {
        f"small-{i}" for i in range(4)
    }
    for repl in cmd.replacements:
        assert repl.capacity_types == frozenset({"on-demand"})
        assert repl.instance_types  # still flexible, cheapest first
    kept = {r.node for r in plan.rejected if r.method == "consolidation"}
    assert kept == {f"small-{i}" for i in range(4)}


def test_one_command_does_not_drain_two_nodes_into_the_same_pdb() -> None:
    nodes = [
        make_node(
            f"big-{i}",
            instance_type="m5.4xlarge",
            pods=(make_pod(f"web-{i}", cpu="1", memory="2Gi", node=f"big-{i}", labels={"app": "web"}),),
        )
        for i in range(3)
    ]
    pdb = PodDisruptionBudget(
        namespace="default", name="web", selector=LabelSelector(match_labels=(("app", "web"),)), max_unavailable=1
    )

    def first(settings: DisruptionSettings) -> tuple[str, ...]:
        plan = decide(
            DisruptionSnapshot(nodes=nodes, nodepools=[make_nodepool(budgets=ALL)], instance_types=TYPES, pdbs=[pdb]),
            now=NOW,
            settings=settings,
        )
        assert plan.command is not None
        return plan.command.pods

    assert len(first(NODESMITH)) == 1  # the PDB allows one disruption: one web pod per command
    assert len(first(KARPENTER)) >= 2  # Karpenter leaves it to the Eviction API's 429s


def test_budgets_and_do_not_disrupt_still_bind_the_nodesmith_policy() -> None:
    nodes = fragmented()
    pinned = make_pod("db", cpu="1", memory="1Gi", node="big-1", annotations={"karpenter.sh/do-not-disrupt": "true"})
    nodes[1] = make_node("big-1", instance_type="m5.4xlarge", pods=(pinned,), pod_specs=[("1", "2Gi")])
    plan = decide(
        DisruptionSnapshot(nodes=nodes, nodepools=[make_nodepool(budgets=[{"nodes": "1"}])], instance_types=TYPES),
        now=NOW,
        settings=NODESMITH,
    )
    cmd = plan.command
    assert cmd is not None and cmd.nodes == ("big-0",)


def test_karpenter_is_the_default_policy() -> None:
    assert DisruptionSettings().policy == "karpenter"
    nodes = fragmented()
    default = decide(
        DisruptionSnapshot(nodes=nodes, nodepools=[make_nodepool(budgets=ALL)], instance_types=TYPES), now=NOW
    )
    karpenter = decide(
        DisruptionSnapshot(nodes=nodes, nodepools=[make_nodepool(budgets=ALL)], instance_types=TYPES),
        now=NOW,
        settings=KARPENTER,
    )
    assert default.command == karpenter.command
    assert default.command is not None and "nodesmith policy" not in default.command.reason


def test_capacity_that_is_not_initialized_is_no_destination_rather_than_a_veto() -> None:
    nodes = fragmented()
    nodes.append(make_node("launching", instance_type="m5.4xlarge", labels={"karpenter.sh/initialized": "false"}))
    plan = decide(
        DisruptionSnapshot(nodes=nodes, nodepools=[make_nodepool(budgets=ALL)], instance_types=TYPES),
        now=NOW,
        settings=NODESMITH,
    )
    cmd = plan.command
    assert cmd is not None and set(cmd.nodes) == {"big-0", "big-1"}
    assert "launching" not in {dest for _, dest in cmd.placements}


def test_a_charge_per_evicted_pod_can_hold_back_a_command_that_moves_many_pods() -> None:
    nodes = fragmented()
    cheap = decide(
        DisruptionSnapshot(nodes=nodes, nodepools=[make_nodepool(budgets=ALL)], instance_types=TYPES),
        now=NOW,
        settings=NODESMITH,
    )
    assert cheap.command is not None
    saving = cheap.command.savings_per_hour
    strict = DisruptionSettings(policy="nodesmith", min_savings_per_evicted_pod=saving)  # more than any pod is worth
    held = decide(
        DisruptionSnapshot(nodes=nodes, nodepools=[make_nodepool(budgets=ALL)], instance_types=TYPES),
        now=NOW,
        settings=strict,
    )
    assert held.command is None


def test_spot_to_spot_replacements_follow_karpenters_fifteen_type_rule() -> None:
    """A spot node replaced by spot needs 15 cheaper spot types (Karpenter
    ``computeSpotToSpotConsolidation``) and launches with the 15 cheapest, so the nodesmith policy's
    replacement keeps spot fallbacks instead of the one or two types within 10 % of the cheapest."""
    pool = make_nodepool(capacity_types=("spot",), budgets=ALL)
    few = make_node("few", instance_type="c5.xlarge", capacity_type="spot", pod_specs=[("1500m", "2Gi")])
    plan = decide(DisruptionSnapshot(nodes=[few], nodepools=[pool], instance_types=TYPES), now=NOW, settings=NODESMITH)
    assert plan.command is None
    assert any("requires 15 cheaper instance type options" in r.reason for r in plan.rejected if r.node == "few")

    many = make_node("many", instance_type="m5.4xlarge", capacity_type="spot", pod_specs=[("1500m", "2Gi")])
    cmd = decide(
        DisruptionSnapshot(nodes=[many], nodepools=[pool], instance_types=TYPES), now=NOW, settings=NODESMITH
    ).command
    assert cmd is not None and "nodesmith policy" in cmd.reason
    [replacement] = cmd.replacements
    assert replacement.capacity_types == frozenset({"spot"})
    assert len(replacement.instance_types) == 15
    assert cmd.cost_after < cmd.cost_before
