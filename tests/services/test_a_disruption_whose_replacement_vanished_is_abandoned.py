"""A disruption command whose replacement NodeClaim vanishes before it is Initialized (a capacity
error, a liveness timeout, someone deleting it) is abandoned as Karpenter does: the candidate node
loses the karpenter.sh/disrupted taint and its cordon, the command is no longer in flight, and
its termination is never requested (nothing on it is evicted or terminated)."""

from __future__ import annotations

from reconcile_fakes import make_nodepool
from test_disruption_across_passes import _cluster_with_one_node, _disrupt

from nodesmith.services.disruption.state import CONDITION_DISRUPTING

DISRUPTED = "karpenter.sh/disrupted"


def test_the_candidate_is_untainted_and_kept_when_its_replacement_vanishes() -> None:
    cluster, cloud = _cluster_with_one_node()
    node = cluster.nodes[0].name
    (claim,) = cluster.nodeclaims
    cluster.nodepools = [make_nodepool(labels={"team": "payments"})]  # drifted
    assert _disrupt(cluster, cloud, 1100.0).candidates == [node]
    started = _disrupt(cluster, cloud, 1116.0)
    (replacement,) = started.replacements_launched
    tainted = cluster.get_node(name=node)
    assert tainted is not None and tainted.unschedulable and any(t.key == DISRUPTED for t in tainted.taints)

    cluster.nodeclaims.pop(replacement)  # e.g. insufficient capacity: the replacement is deleted

    after = _disrupt(cluster, cloud, 1117.0)
    kept = cluster.get_node(name=node)
    assert kept is not None
    assert not any(t.key == DISRUPTED for t in kept.taints) and not kept.unschedulable
    assert not cluster.nodeclaims[claim].is_true(CONDITION_DISRUPTING)  # no later pass resumes the command
    assert not after.nodes_terminated and not cluster.evicted and not cloud.terminated
    assert cluster.queue.sent == [] and cluster.nodeclaims[claim].metadata.deletion_timestamp is None
    assert [d["stage"] for d in after.decisions if d["stage"] == "abandoned"] == ["abandoned"]
    assert "DisruptionBlocked" in cluster.reasons("Node")

    later = _disrupt(cluster, cloud, 1118.0)  # the node is a disruption candidate again, not drained
    assert not later.nodes_terminated and not cluster.evicted and cluster.queue.sent == []
