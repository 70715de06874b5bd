"""A disruption command whose replacement NodeClaims are not all Initialized within 600 s of the
command's start is abandoned as Karpenter's disruption queue gives up on it (``maxRetryDuration``,
10 min, in ``pkg/controllers/disruption/orchestration/queue.go``; ``minRetryDuration`` in today's
``pkg/controllers/disruption/queue.go``): the candidate node loses the karpenter.sh/disrupted taint
and its cordon and is kept, its termination is never requested, and the replacement is left in
place (Karpenter does not delete it; an empty one is consolidated later)."""

from __future__ import annotations

from reconcile_fakes import FakeCloud, make_nodepool
from test_disruption_across_passes import DrainableCluster, _cluster_with_one_node, _disrupt

from nodesmith.services.disruption.state import CONDITION_DISRUPTING

DISRUPTED = "karpenter.sh/disrupted"
STARTED = 1116.0


def _started_drift() -> tuple[DrainableCluster, FakeCloud, str, str, str]:
    cluster, cloud = _cluster_with_one_node()
    node = cluster.nodes[0].name
    (claim,) = cluster.nodeclaims
    cluster.nodepools = [make_nodepool(labels={"team": "payments"})]  # drifted
    assert _disrupt(cluster, cloud, 1100.0).candidates == [node]
    (replacement,) = _disrupt(cluster, cloud, STARTED).replacements_launched
    return cluster, cloud, node, claim, replacement


def _tainted(cluster: DrainableCluster, node: str) -> bool:
    current = cluster.get_node(name=node)
    assert current is not None
    return current.unschedulable and any(t.key == DISRUPTED for t in current.taints)


def test_a_command_still_waiting_at_600_seconds_keeps_waiting() -> None:
    cluster, cloud, node, claim, replacement = _started_drift()

    waiting = _disrupt(cluster, cloud, STARTED + 600.0)

    assert _tainted(cluster, node)
    assert cluster.nodeclaims[claim].is_true(CONDITION_DISRUPTING)
    assert not [d for d in waiting.decisions if d["stage"] == "abandoned"]
    assert replacement in cluster.nodeclaims


def test_a_command_whose_replacement_is_not_initialized_after_600_seconds_is_abandoned() -> None:
    cluster, cloud, node, claim, replacement = _started_drift()
    assert _tainted(cluster, node)

    after = _disrupt(cluster, cloud, STARTED + 601.0)

    assert not _tainted(cluster, node)  # untainted and uncordoned, and kept
    assert cluster.get_node(name=node) is not None
    assert not cluster.nodeclaims[claim].is_true(CONDITION_DISRUPTING)  # no later pass resumes the command
    assert not after.nodes_terminated and not cluster.evicted and not cloud.terminated
    assert cluster.queue.sent == [] and cluster.nodeclaims[claim].metadata.deletion_timestamp is None
    (abandoned,) = [d for d in after.decisions if d["stage"] == "abandoned"]
    assert abandoned["nodes"] == [node] and "600" in abandoned["reason"] and replacement in abandoned["reason"]
    assert "DisruptionBlocked" in cluster.reasons("Node")
    assert replacement in cluster.nodeclaims  # Karpenter leaves the replacement; it is not deleted

    later = _disrupt(cluster, cloud, STARTED + 602.0)  # a candidate again, not drained
    assert not later.nodes_terminated and not cluster.evicted and cluster.queue.sent == []
