"""A ``karpenter.sh/disrupted`` taint that no disruption command, deletion or termination request accounts for (the
invocation that tainted the node ended before recording why) is removed by the next disruption pass, as Karpenter's
disruption controller removes it from the nodes "not in the queue and not deleting"; the node is then an ordinary
candidate again. A taint backed by a command in flight, a termination request or a deletion stays."""

from __future__ import annotations

from typing import TYPE_CHECKING

from reconcile_fakes import make_nodepool
from test_disruption_across_passes import DrainableCluster, _cluster_with_one_node, _disrupt

from nodesmith.core.drain import DISRUPTED_TAINT
from nodesmith.core.termination import REQUESTED_AT_ANNOTATION
from nodesmith.services.disruption.state import CONDITION_DISRUPTING

if TYPE_CHECKING:
    from nodesmith.core.api.nodeclaim import NodeClaim

DISRUPTED = DISRUPTED_TAINT.key


def tainted(cluster: DrainableCluster, node: str) -> bool:
    found = cluster.get_node(name=node)
    assert found is not None
    return any(t.key == DISRUPTED for t in found.taints)


def test_a_taint_without_a_command_is_removed_and_the_empty_node_is_consolidated_later() -> None:
    cluster, cloud = _cluster_with_one_node()
    node = cluster.nodes[0].name
    (claim,) = cluster.nodeclaims
    cluster.pods = []  # empty
    cluster.taint_and_cordon(node_name=node, taint=DISRUPTED_TAINT)  # a pass that died right after tainting

    first = _disrupt(cluster, cloud, 1100.0)
    assert not tainted(cluster, node)
    after = cluster.get_node(name=node)
    assert after is not None and not after.unschedulable
    assert [d["nodes"] for d in first.decisions if d["stage"] == "untainted"] == [[node]]
    assert "DisruptionTaintRemoved" in cluster.reasons("Node")
    assert not first.nodes_terminated and cluster.queue.sent == []

    assert _disrupt(cluster, cloud, 1101.0).candidates == [node]  # an ordinary empty candidate again
    done = _disrupt(cluster, cloud, 1117.0)
    assert done.nodes_terminated == [node] and done.executed == {"emptiness": 1}
    assert cluster.nodeclaims[claim].metadata.deletion_timestamp is not None


def test_a_taint_with_a_termination_request_stays() -> None:
    cluster, cloud = _cluster_with_one_node()
    node = cluster.nodes[0].name
    (claim,) = cluster.nodeclaims
    cluster.taint_and_cordon(node_name=node, taint=DISRUPTED_TAINT)  # the interruption function's taint
    cluster.annotate_nodeclaim(name=claim, annotations={REQUESTED_AT_ANNOTATION: "2026-01-01T00:00:00Z"})

    out = _disrupt(cluster, cloud, 1100.0)
    assert tainted(cluster, node)
    assert not [d for d in out.decisions if d["stage"] == "untainted"]


def test_a_termination_requested_after_the_snapshot_keeps_the_taint() -> None:
    """The interruption function taints, then requests: a pass whose snapshot fell between the two reads the
    NodeClaim again before untainting."""
    cluster, cloud = _cluster_with_one_node()
    node = cluster.nodes[0].name
    (claim,) = cluster.nodeclaims
    cluster.taint_and_cordon(node_name=node, taint=DISRUPTED_TAINT)
    read = cluster.get_nodeclaim

    def requested_meanwhile(*, name: str) -> NodeClaim | None:
        cluster.delete_nodeclaim(name=claim)
        return read(name=name)

    cluster.get_nodeclaim = requested_meanwhile  # type: ignore[method-assign]
    _disrupt(cluster, cloud, 1100.0)
    assert tainted(cluster, node)


def test_a_taint_of_a_command_in_flight_stays() -> None:
    cluster, cloud = _cluster_with_one_node()
    node = cluster.nodes[0].name
    (claim,) = cluster.nodeclaims
    cluster.nodepools = [make_nodepool(labels={"team": "payments"})]  # drifted: replaced, waits for readiness
    assert _disrupt(cluster, cloud, 1100.0).candidates == [node]
    started = _disrupt(cluster, cloud, 1116.0)
    assert started.replacements_launched and tainted(cluster, node)

    later = _disrupt(cluster, cloud, 1130.0)  # the replacement is not Initialized yet
    assert tainted(cluster, node) and cluster.nodeclaims[claim].is_true(CONDITION_DISRUPTING)
    assert not [d for d in later.decisions if d["stage"] == "untainted"]
