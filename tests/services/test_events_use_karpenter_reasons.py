"""Kubernetes Events carry the reasons Karpenter users already filter on (``kubectl get events
--field-selector reason=...``), on the objects Karpenter puts them on.

Provisioning: ``Nominated`` and ``FailedScheduling`` (with Nodesmith's explanation) on pods,
``Launched``, ``Registered`` and ``Initialized`` on the NodeClaim. Disruption: ``DisruptionBlocked`` on a
node a ``karpenter.sh/do-not-disrupt`` pod protects. (Interruption and drain Events -- ``SpotInterrupted``,
``TerminatingOnInterruption``, ``Evicted``, ``Disrupted``, ``FailedDraining`` -- are checked with their use
cases: ``test_interruption_batch.py``, ``test_termination_rounds.py``.)
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from reconcile_fakes import FakeCloud, FakeCluster, make_nodeclass, make_nodepool, make_pod, node_for

from nodesmith.services.ports import Ports
from nodesmith.services.provisioning.reconcile import reconcile


def _events(cluster: Any, kind: str) -> dict[str, list[str]]:
    """Reason -> messages of the Events on objects of ``kind`` (reconcile fakes: (kind, name, reason, message))."""
    out: dict[str, list[str]] = {}
    for k, _name, reason, message in cluster.events:
        if k == kind:
            out.setdefault(reason, []).append(message)
    return out


def test_provisioning_posts_nominated_failed_scheduling_launched_registered_initialized() -> None:
    cluster = FakeCluster(nodepools=[make_nodepool()], nodeclasses=[make_nodeclass()])
    cluster.pods = [make_pod("inflate-0"), make_pod("huge", cpu="512")]  # no instance type has 512 vCPUs
    cloud = FakeCloud()
    reconcile(ports=Ports(cluster=cluster, cloud=cloud, cluster_name="test"), now=1000.0)

    pods = _events(cluster, "Pod")
    (claim,) = cluster.nodeclaims.values()
    assert pods["Nominated"] == [f"Pod should schedule on: nodeclaim/{claim.name}"]
    (explanation,) = pods["FailedScheduling"]
    assert explanation.startswith("Failed to schedule pod, ") and len(explanation) > len("Failed to schedule pod, ")
    assert "Launched" in _events(cluster, "NodeClaim")

    instance = next(i for i in cloud.instances.values() if i.provider_id == claim.status.provider_id)
    cluster.nodes.append(node_for(instance, claim, ready=True))
    reconcile(ports=Ports(cluster=cluster, cloud=cloud, cluster_name="test"), now=1001.0)

    claims = _events(cluster, "NodeClaim")
    assert [m.split(",")[1].strip() for m in claims["Registered"]] == ["Type: Registered"]
    assert [m.split(",")[1].strip() for m in claims["Initialized"]] == ["Type: Initialized"]


def test_a_pass_posts_its_pod_events_side_by_side_up_to_the_limit() -> None:
    """Like client-go's recorder, a pass does not wait for one Event before the next: two posts are in
    flight at once (each waits for the other here), and the limit still holds."""
    import threading

    from nodesmith.services.provisioning.outcome import post_pod_events
    from nodesmith.services.provisioning.reconcile import ReconcileOutcome

    cluster = FakeCluster()
    together = threading.Barrier(2, timeout=5)  # a second post never starts if they go one after another
    record = cluster.record_event

    def in_flight_with_another(**kwargs: Any) -> None:
        together.wait()
        record(**kwargs)

    cluster.record_event = in_flight_with_another  # type: ignore[method-assign]
    pods = [make_pod(f"p-{i}") for i in range(3)]
    out = ReconcileOutcome(unschedulable={pods[2].key: "no instance type fits"})

    post_pod_events(cluster=cluster, pending=pods, nominated=[(pods[0], "nc-a"), (pods[1], "nc-a")], out=out, limit=2)

    assert sorted(_events(cluster, "Pod")) == ["Nominated"] and len(_events(cluster, "Pod")["Nominated"]) == 2


def test_a_registered_and_initialized_nodeclaim_is_passed_through_untouched() -> None:
    """Every pass links NodeClaims to their nodes; one already Initialized is neither copied nor written."""
    from nodesmith.services.provisioning.lifecycle import LifecycleOutcome, link_nodes

    cluster = FakeCluster(nodepools=[make_nodepool()], nodeclasses=[make_nodeclass()])
    cluster.pods = [make_pod("inflate-0")]
    cloud = FakeCloud()
    reconcile(ports=Ports(cluster=cluster, cloud=cloud, cluster_name="test"), now=1000.0)
    (claim,) = cluster.nodeclaims.values()
    instance = next(i for i in cloud.instances.values() if i.provider_id == claim.status.provider_id)
    cluster.nodes.append(node_for(instance, claim, ready=True))
    reconcile(ports=Ports(cluster=cluster, cloud=cloud, cluster_name="test"), now=1001.0)
    (linked,) = cluster.nodeclaims.values()
    assert linked.is_true("Initialized")
    written = len(cluster.events)

    (out,) = link_nodes(
        cluster=cluster, nodeclaims=[linked], nodes=cluster.nodes, now=1002.0, outcome=LifecycleOutcome()
    )

    assert out is linked and len(cluster.events) == written


def test_a_do_not_disrupt_pod_blocks_disruption_with_disruption_blocked() -> None:
    from nodesmith.services.disruption.service import disrupt

    cluster = FakeCluster(nodepools=[make_nodepool()], nodeclasses=[make_nodeclass()])
    cluster.pods = [make_pod("keep-me", annotations={"karpenter.sh/do-not-disrupt": "true"})]
    cloud = FakeCloud()
    reconcile(ports=Ports(cluster=cluster, cloud=cloud, cluster_name="test"), now=1000.0)
    (claim,) = cluster.nodeclaims.values()
    instance = next(i for i in cloud.instances.values() if i.provider_id == claim.status.provider_id)
    node = node_for(instance, claim, ready=True)
    cluster.nodes.append(node)
    cluster.now = cloud.now = 1001.0
    reconcile(ports=Ports(cluster=cluster, cloud=cloud, cluster_name="test"), now=1001.0)
    cluster.pods = [replace(p, node_name=node.name, unschedulable=False, phase="Running") for p in cluster.pods]
    cluster.nodepools = [make_nodepool(labels={"team": "payments"})]  # drifted: a candidate but for the pod

    disrupt(ports=Ports(cluster=cluster, cloud=cloud, cluster_name="test"), now=1100.0)

    blocked = _events(cluster, "Node").get("DisruptionBlocked", [])
    assert blocked and "do-not-disrupt" in blocked[0]
