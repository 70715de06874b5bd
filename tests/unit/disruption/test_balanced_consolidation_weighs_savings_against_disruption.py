"""``consolidationPolicy: Balanced`` (Karpenter v1.14, ``balanced.go``): a consolidation move of a Balanced NodePool
is carried out only when the share of the pool's cost it saves is at least half the share of the pool's pod
disruption it causes; ``WhenEmptyOrUnderutilized`` takes any cheaper move. Both consolidation policies of Nodesmith
(Karpenter's methods and the ``nodesmith`` repacking) score the same way; emptiness is never scored."""

from __future__ import annotations

import math

import pytest
from disruption_factories import NOW, catalogue, make_node, make_nodepool, make_pod

from nodesmith.core.disruption import ClusterNode, DisruptionSettings, DisruptionSnapshot, decide
from nodesmith.core.disruption.balanced import PoolTotals, score

TYPES = catalogue()
ALL = [{"nodes": "100%"}]
POLICIES = ["karpenter", "nodesmith"]


def anchor(name: str, instance_type: str) -> ClusterNode:
    """A node whose one pod is protected: it stays, takes pods, and counts in its pool's totals."""
    pinned = make_pod(
        f"{name}-db", cpu="1", memory="1Gi", node=name, annotations={"karpenter.sh/do-not-disrupt": "true"}
    )
    return make_node(name, instance_type=instance_type, pods=(pinned,))


def small_node_among_big_ones() -> list[ClusterNode]:
    """A busy m5.large among three m5.2xlarge: deleting it saves 8% of the pool's cost for a third of its pods."""
    pods = tuple(make_pod(f"web-{i}", cpu="700m", memory="1Gi", node="small") for i in range(2))
    return [
        *(anchor(f"big-{i}", "m5.2xlarge") for i in range(3)),
        make_node("small", instance_type="m5.large", pods=pods),
    ]


def big_node_among_small_ones() -> list[ClusterNode]:
    """An m5.2xlarge holding one small pod among two t3.medium: deleting it saves most of the pool's cost."""
    lone = make_pod("web", cpu="500m", memory="512Mi", node="big")
    return [
        *(anchor(f"small-{i}", "t3.medium") for i in range(2)),
        make_node("big", instance_type="m5.2xlarge", pods=(lone,)),
    ]


@pytest.mark.parametrize("policy", POLICIES)
def test_a_move_that_saves_little_for_the_pods_it_disrupts_is_not_made(policy: str) -> None:
    settings = DisruptionSettings(policy=policy)
    nodes = small_node_among_big_ones()
    pool = make_nodepool(policy="Balanced", budgets=ALL)
    balanced = decide(
        DisruptionSnapshot(nodes=nodes, nodepools=[pool], instance_types=TYPES), now=NOW, settings=settings
    )
    eager = decide(
        DisruptionSnapshot(nodes=nodes, nodepools=[make_nodepool(budgets=ALL)], instance_types=TYPES),
        now=NOW, settings=settings,
    )  # fmt: skip

    assert eager.command is not None and eager.command.nodes == ("small",) and eager.command.approval == ""
    assert balanced.command is None
    why = [r.reason for r in balanced.rejected if r.node == "small"]
    assert why and all('NodePool "default" is Balanced' in w and "< 0.50" in w for w in why), why


@pytest.mark.parametrize("policy", POLICIES)
def test_a_move_that_saves_much_for_little_disruption_is_made_with_its_score(policy: str) -> None:
    plan = decide(
        DisruptionSnapshot(
            nodes=big_node_among_small_ones(),
            nodepools=[make_nodepool(policy="Balanced", budgets=ALL)],
            instance_types=TYPES,
        ),
        now=NOW, settings=DisruptionSettings(policy=policy),
    )  # fmt: skip
    cmd = plan.command
    assert cmd is not None and cmd.nodes == ("big",)
    assert '"default" is Balanced: the move scores' in cmd.approval and ">= 0.50" in cmd.approval


def test_an_empty_node_is_deleted_without_a_score() -> None:
    nodes = [*small_node_among_big_ones(), make_node("idle", instance_type="t3.medium", pods=())]
    pool = make_nodepool(policy="Balanced", budgets=ALL)
    plan = decide(DisruptionSnapshot(nodes=nodes, nodepools=[pool], instance_types=TYPES), now=NOW)
    assert plan.command is not None and plan.command.method == "emptiness" and plan.command.nodes == ("idle",)


def test_the_score_is_the_share_of_cost_saved_over_the_share_of_disruption() -> None:
    totals = PoolTotals(cost=2.0, disruption=10.0)
    assert score(savings=0.5, disruption=5.0, totals=totals) == pytest.approx(0.5)  # 25% saved / 50% disrupted
    assert score(savings=0.0, disruption=1.0, totals=totals) == 0.0
    assert score(savings=-1.0, disruption=1.0, totals=totals) == 0.0
    assert score(savings=0.5, disruption=0.0, totals=totals) == math.inf
    assert score(savings=0.5, disruption=1.0, totals=PoolTotals(cost=0.0, disruption=10.0)) == 0.0
