"""``karpenter.sh/do-not-disrupt`` on pods (``"true"`` or a duration) and nodes, and
PodDisruptionBudgets that allow no eviction, keep a node out of every graceful method
(Karpenter ``statenode.go ValidateNodeDisruptable``/``ValidatePodsDisruptable``, ``pdb.go``)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from disruption_factories import HOUR, NOW, catalogue, make_node, make_nodepool, make_pdb, make_pod

from nodesmith.core.disruption import ClusterNode, DisruptionPlan, DisruptionSnapshot, decide, select_candidates

if TYPE_CHECKING:
    from nodesmith.core.model import PodDisruptionBudget

POOL = make_nodepool(budgets=[{"nodes": "100%"}])
TYPES = catalogue()


def underused(name: str, **pod_kwargs: Any) -> ClusterNode:
    """An m5.2xlarge running one small pod: a textbook consolidation candidate."""
    pod = make_pod(f"{name}-app", cpu="500m", memory="1Gi", node=name, **pod_kwargs)
    return make_node(name, instance_type="m5.2xlarge", pods=(pod,))


def plan_for(*nodes: ClusterNode, pdbs: tuple[PodDisruptionBudget, ...] = ()) -> DisruptionPlan:
    return decide(
        DisruptionSnapshot(nodes=list(nodes), nodepools=[POOL], instance_types=TYPES, pdbs=list(pdbs)),
        now=NOW,
        expire=False,
    )


def test_underused_node_is_consolidated_without_protection() -> None:
    plan = plan_for(underused("n1"))
    assert plan.command is not None and plan.command.nodes == ("n1",)


def test_pod_do_not_disrupt_true_blocks_the_node() -> None:
    plan = plan_for(underused("n1", annotations={"karpenter.sh/do-not-disrupt": "true"}))
    assert plan.command is None
    reasons = [r.reason for r in plan.rejected if r.node == "n1"]
    assert any("do-not-disrupt" in r and "default/n1-app" in r for r in reasons), reasons


def test_pod_do_not_disrupt_duration_blocks_only_until_it_elapses() -> None:
    young = underused("n1", annotations={"karpenter.sh/do-not-disrupt": "2h"}, created=NOW - HOUR)
    assert plan_for(young).command is None
    old = underused("n1", annotations={"karpenter.sh/do-not-disrupt": "2h"}, created=NOW - 3 * HOUR)
    assert plan_for(old).command is not None


def test_do_not_disrupt_on_a_finished_pod_does_not_block() -> None:
    done = underused("n1", annotations={"karpenter.sh/do-not-disrupt": "true"}, phase="Succeeded")
    assert plan_for(done).command is not None


def test_node_do_not_disrupt_annotation_blocks_even_an_empty_node() -> None:
    node = make_node("n1", annotations={"karpenter.sh/do-not-disrupt": "true"})
    plan = plan_for(node)
    assert plan.command is None
    assert [r.reason for r in plan.rejected] == ['node has "karpenter.sh/do-not-disrupt: true"']


def test_daemonset_pod_with_do_not_disrupt_blocks_emptiness() -> None:
    ds = make_pod("agent", node="n1", owner_kind="DaemonSet", annotations={"karpenter.sh/do-not-disrupt": "true"})
    node = make_node("n1", pods=(ds,), daemonsets=False)
    assert plan_for(node).command is None


def test_pdb_allowing_zero_disruptions_blocks_the_node() -> None:
    node = underused("n1", labels={"app": "web"})
    blocked = plan_for(node, pdbs=(make_pdb("web", app="web", allowed=0),))
    assert blocked.command is None
    assert any("PodDisruptionBudget default/web allows 0" in r.reason for r in blocked.rejected)
    allowed = plan_for(node, pdbs=(make_pdb("web", app="web", allowed=1),))
    assert allowed.command is not None


def test_pdb_without_status_is_computed_from_the_matching_pods() -> None:
    a = make_node("n1", instance_type="m5.2xlarge", pods=(make_pod("web-a", node="n1", labels={"app": "web"}),))
    b = make_node("n2", instance_type="m5.2xlarge", pods=(make_pod("web-b", node="n2", labels={"app": "web"}),))
    at_minimum = make_pdb("web", app="web", min_available=2)  # 2 healthy, 2 required -> 0 allowed
    sel = select_candidates(
        DisruptionSnapshot(nodes=[a, b], nodepools=[POOL], instance_types=TYPES, pdbs=[at_minimum]), now=NOW
    )
    assert all(c.pod_block is not None for c in sel.candidates)
    slack = make_pdb("web", app="web", max_unavailable="50%")  # ceil(50% of 2) = 1 allowed
    sel = select_candidates(
        DisruptionSnapshot(nodes=[a, b], nodepools=[POOL], instance_types=TYPES, pdbs=[slack]), now=NOW
    )
    assert all(c.pod_block is None for c in sel.candidates)


def test_a_pod_selected_by_two_pdbs_cannot_be_evicted() -> None:
    node = underused("n1", labels={"app": "web"})
    plan = plan_for(node, pdbs=(make_pdb("one", app="web", allowed=5), make_pdb("two", app="web", allowed=5)))
    assert plan.command is None
    assert any("several PodDisruptionBudgets" in r.reason for r in plan.rejected)


def test_uninitialized_and_deleting_nodes_are_not_candidates() -> None:
    fresh = make_node("fresh", labels={"karpenter.sh/initialized": "false"})
    leaving = make_node("leaving", instance_type="m5.2xlarge", pod_specs=[("500m", "1Gi")])
    sel = select_candidates(
        DisruptionSnapshot(nodes=[fresh, leaving], nodepools=[POOL], instance_types=TYPES),
        now=NOW,
        deleting={"leaving"},
    )
    assert not sel.candidates
    assert {r.node: r.reason for r in sel.rejected} == {
        "fresh": "node is not initialized",
        "leaving": "node is deleting or already being disrupted",
    }


def test_unmanaged_nodes_are_neither_candidates_nor_rejections() -> None:
    sel = select_candidates(
        DisruptionSnapshot(nodes=[make_node("self-managed", nodepool=None)], nodepools=[POOL], instance_types=TYPES),
        now=NOW,
    )
    assert not sel.candidates and not sel.rejected
