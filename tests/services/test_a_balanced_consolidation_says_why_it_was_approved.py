"""An executed consolidation that a ``Balanced`` NodePool's score approved posts Karpenter's ``ConsolidationApproved``
Event with the score on the node and its NodeClaim, and its decision record carries it; other commands post none."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from reconcile_fakes import FakeCloud, FakeCluster, FakeQueue, make_nodeclass, make_nodepool, make_pod, node_for

from nodesmith.core.disruption.types import Decision, DisruptionSettings
from nodesmith.services.disruption.command import _execute
from nodesmith.services.disruption.run import DisruptionPass
from nodesmith.services.ports import Ports
from nodesmith.services.provisioning.reconcile import reconcile

if TYPE_CHECKING:
    from nodesmith.core.model import Taint


@dataclass
class TaintableCluster(FakeCluster):
    def taint_and_cordon(self, *, node_name: str, taint: Taint) -> bool:
        self.nodes = [
            replace(n, taints=(*n.taints, taint), unschedulable=True) if n.name == node_name else n for n in self.nodes
        ]
        return True


APPROVAL = 'NodePool "default" is Balanced: the move scores 2.47 >= 0.50 (saves 82.2% of its cost, disrupts 33.3%)'


def _one_node() -> tuple[TaintableCluster, Ports, str]:
    cluster = TaintableCluster(nodepools=[make_nodepool()], nodeclasses=[make_nodeclass()])
    cloud = FakeCloud()
    ports = Ports(cluster=cluster, cloud=cloud, cluster_name="test", queue=FakeQueue())
    cluster.pods = [make_pod("web")]
    reconcile(ports=ports, now=1000.0)
    (claim,) = cluster.nodeclaims.values()
    (instance,) = cloud.instances.values()
    node = node_for(instance, claim, ready=True)
    cluster.nodes.append(node)
    return cluster, ports, node.name


def _executed(approval: str) -> list[tuple[str, str]]:
    """The (kind, message) of each ``ConsolidationApproved`` Event executing a delete of the one node posts."""
    cluster, ports, node = _one_node()
    run = DisruptionPass(ports=ports, now=2000.0, settings=DisruptionSettings(), recent_events={})
    run.snapshot()
    decision = Decision(
        method="single-node-consolidation", nodes=(node,), cause="Underutilized", reason="delete",
        nodepools=("default",), cost_before=0.1, approval=approval,
    )  # fmt: skip
    _execute(run, decision)
    assert run.out.decisions[-1].get("approval", "") == approval
    return [(kind, message) for kind, _, reason, message in cluster.events if reason == "ConsolidationApproved"]


def test_an_approved_balanced_move_posts_its_score() -> None:
    posted = _executed(APPROVAL)
    assert sorted(kind for kind, _ in posted) == ["Node", "NodeClaim"]
    assert all(message == APPROVAL for _, message in posted)


def test_a_move_without_a_score_posts_no_approval() -> None:
    assert _executed("") == []
