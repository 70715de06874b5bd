"""Each disruption pass records a fingerprint of every node's pods on its NodeClaim (condition
``nodesmith.io/PodSet``) and, when the pods changed, sets ``status.lastPodEventTime``, which Karpenter's
``consolidateAfter`` counts from. On first sight it is the newest pod's creation time, unless the NodeClaim already
records a later one (Karpenter's, for a NodeClaim it launched): a first sight never moves it back."""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from reconcile_fakes import two_running_nodes

from nodesmith.core.timestamps import from_rfc3339, to_rfc3339
from nodesmith.services.disruption.state import CONDITION_POD_SET, cluster_nodes

if TYPE_CHECKING:
    from reconcile_fakes import FakeCluster

    from nodesmith.core.api.nodeclaim import NodeClaim
    from nodesmith.core.disruption import ClusterNode


def _pass(cluster: FakeCluster, claims: list[NodeClaim], now: float) -> tuple[list[ClusterNode], list[NodeClaim]]:
    views, written = cluster_nodes(
        cluster=cluster, nodes=cluster.nodes, pods=cluster.pods, nodeclaims=claims, facts={}, now=now, errors=[]
    )
    return views, sorted(written.values(), key=lambda c: c.name)


def _world() -> tuple[FakeCluster, list[NodeClaim]]:
    """Two nodes of two pods each; the first node's pods created at 900 and 950."""
    cluster, _ = two_running_nodes()
    cluster.pods[1] = replace(cluster.pods[1], creation_timestamp=950.0)
    claims = sorted(cluster.nodeclaims.values(), key=lambda c: c.name)
    assert all(c.condition(CONDITION_POD_SET) is None for c in claims)
    return cluster, claims


def test_first_sight_records_the_newest_pods_creation_and_a_change_the_pass_time() -> None:
    cluster, claims = _world()
    views, claims = _pass(cluster, claims, now=2000.0)
    assert [v.last_pod_event_time for v in views] == [950.0, 900.0]
    assert [from_rfc3339(c.status.last_pod_event_time) for c in claims] == [950.0, 900.0]
    assert all(c.condition(CONDITION_POD_SET) is not None for c in claims)

    again, claims = _pass(cluster, claims, now=2100.0)  # nothing changed: nothing written, nothing moved
    assert [v.last_pod_event_time for v in again] == [950.0, 900.0]

    cluster.pods = cluster.pods[1:]  # a pod of the first node went away
    changed, _ = _pass(cluster, claims, now=2200.0)
    assert [v.last_pod_event_time for v in changed] == [2200.0, 900.0]


def test_first_sight_keeps_a_later_time_already_recorded_on_the_nodeclaim() -> None:
    """A NodeClaim Karpenter launched carries its lastPodEventTime: a pod deleted at 1500 is no longer on the node,
    so the pods alone would say 950, and consolidateAfter would count from before that deletion."""
    cluster, claims = _world()
    claims[0].status.last_pod_event_time = to_rfc3339(1500.0)
    claims[1].status.last_pod_event_time = to_rfc3339(800.0)  # older than its pods: theirs is newer

    views, written = _pass(cluster, claims, now=2000.0)

    assert [v.last_pod_event_time for v in views] == [1500.0, 900.0]
    assert [from_rfc3339(c.status.last_pod_event_time) for c in written] == [1500.0, 900.0]
