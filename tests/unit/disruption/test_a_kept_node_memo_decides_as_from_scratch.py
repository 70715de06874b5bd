"""The per-node memo a warm container keeps between decision passes (``NodeMemo``): an unchanged node view is not
derived or judged for drift again, and anything that changed (a pod, the NodePool, the EC2NodeClass, the clock
passing the instance-type age) is, so every plan is the one a pass from scratch makes."""

from __future__ import annotations

import importlib
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import pytest
from disruption_factories import DAY, HOUR, NOW, catalogue, make_node, make_nodeclaim, make_nodeclass, make_nodepool
from disruption_factories import make_pod as pod

from nodesmith.core.disruption import DisruptionSnapshot, decide
from nodesmith.core.disruption.memo import NodeMemo

if TYPE_CHECKING:
    from nodesmith.core.api.ec2nodeclass import EC2NodeClass
    from nodesmith.core.api.nodepool import NodePool
    from nodesmith.core.disruption import ClusterNode, DisruptionPlan
    from nodesmith.core.model import InstanceType

decide_module = importlib.import_module("nodesmith.core.disruption.decide")  # the package re-exports decide()
TYPES = catalogue()
AMI = "ami-0aaaaaaaaaaaaaaa1"


@pytest.fixture
def judged(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The names of the nodes drift was worked out for, pass after pass."""
    calls: list[str] = []
    real = decide_module.drift_of

    def counting(**kw: Any) -> Any:
        calls.append(kw["node"].name)
        return real(**kw)

    monkeypatch.setattr(decide_module, "drift_of", counting)
    return calls


def _node(
    name: str, *, busy: bool = True, created: float = NOW - 2 * DAY, instance_type: str = "m5.xlarge"
) -> ClusterNode:
    claim = make_nodeclaim(f"{name}-claim", node=name, created=created, image_id=AMI, instance_type=instance_type)
    pods = (pod(f"{name}-app", node=name, cpu="3", memory="12Gi"),) if busy else ()
    return make_node(name, nodeclaim=claim, created=created, pods=pods, instance_type=instance_type)


def _plan(
    nodes: list[ClusterNode],
    *,
    memo: NodeMemo | None,
    pool: NodePool | None = None,
    nodeclass: EC2NodeClass | None = None,
    types: list[InstanceType] = TYPES,
    now: float = NOW,
) -> DisruptionPlan:
    snapshot = DisruptionSnapshot(
        nodes=nodes,
        nodepools=[pool or make_nodepool(budgets=[{"nodes": "100%"}], policy="WhenEmpty")],
        instance_types=types,
        nodeclasses=[nodeclass or make_nodeclass(ami=AMI)],
    )
    return decide(snapshot, now=now, memo=memo)


def test_an_unchanged_cluster_reuses_every_nodes_basis_and_drift(judged: list[str]) -> None:
    nodes = [_node("n1"), _node("n2"), _node("n3")]
    memo = NodeMemo()
    first = _plan(nodes, memo=memo)
    assert memo.computed == 3 and sorted(judged) == ["n1", "n2", "n3"]
    again = _plan(nodes, memo=memo, now=NOW + 60)
    assert memo.computed == 3 and len(judged) == 3, "nothing was derived or judged again"
    assert again == _plan(nodes, memo=None, now=NOW + 60) and first.command is None


def test_a_node_whose_pods_changed_is_derived_again_and_the_plan_is_the_fresh_one(judged: list[str]) -> None:
    nodes = [_node("n1"), _node("n2"), _node("n3")]
    memo = NodeMemo()
    assert _plan(nodes, memo=memo).command is None
    emptied = replace(nodes[1], pods=())  # its pod went away: a new view of n2
    changed = [nodes[0], emptied, nodes[2]]
    plan = _plan(changed, memo=memo)
    assert memo.computed == 4, "only n2 was derived again"
    assert judged == ["n1", "n2", "n3"], "emptiness decided before drift was looked at again"
    assert plan == _plan(changed, memo=None)
    assert plan.command is not None and plan.command.method == "emptiness" and plan.command.nodes == ("n2",)


def test_a_changed_nodepool_or_nodeclass_judges_every_node_again(judged: list[str]) -> None:
    nodes = [_node("n1"), _node("n2")]
    memo = NodeMemo()
    assert _plan(nodes, memo=memo).command is None
    spot_only = make_nodepool(budgets=[{"nodes": "100%"}], capacity_types=("spot",), policy="WhenEmpty")
    plan = _plan(nodes, memo=memo, pool=spot_only)
    assert len(judged) == 4 and memo.computed == 2, "same views, new NodePool: drift judged again, bases kept"
    assert plan == _plan(nodes, memo=None, pool=spot_only)
    assert plan.command is not None and plan.command.cause == "RequirementsDrifted"

    new_ami = make_nodeclass(ami="ami-0bbbbbbbbbbbbbbb2")
    plan = _plan(nodes, memo=memo, nodeclass=new_ami)
    assert plan == _plan(nodes, memo=None, nodeclass=new_ami)
    assert plan.command is not None and plan.command.cause == "AMIDrift"


def test_the_clock_is_applied_every_pass_even_to_a_kept_node() -> None:
    young = NOW - HOUR / 2
    nodes = [_node("n1", created=young, instance_type="m5.2xlarge")]
    without = [it for it in TYPES if it.name != "m5.2xlarge"]  # the node's type is no longer offered
    memo = NodeMemo()
    assert _plan(nodes, memo=memo, types=without).command is None, "InstanceTypeNotFound waits an hour"
    later = _plan(nodes, memo=memo, types=without, now=NOW + HOUR)
    assert later.command is not None and later.command.cause == "InstanceTypeNotFound"
    assert later == _plan(nodes, memo=None, types=without, now=NOW + HOUR) and memo.computed == 1


def test_a_node_gone_is_forgotten() -> None:
    n1, n2 = _node("n1"), _node("n2")
    memo = NodeMemo()
    _plan([n1, n2], memo=memo)
    _plan([n1], memo=memo)
    _plan([n1, n2], memo=memo)
    assert memo.computed == 3, "n2 was dropped when it left and derived again when it came back"
