"""A pod that is terminating still holds its room on its node until it is gone, as in Karpenter's cluster state
(a pod's requests are released once it is terminal or deleted) and kube-scheduler: a pending pod that fits only in
that room is launched a node for, not left waiting on a node that will not take it while the pod lingers (a kubelet
that never confirms the deletion keeps it there for good). A pod that has finished frees its room at once."""

from __future__ import annotations

from dataclasses import replace

from reconcile_fakes import make_pod, two_running_nodes

from nodesmith.services.ports import Ports
from nodesmith.services.provisioning.reconcile import reconcile


def _pass_with_one_node_emptied(how: dict[str, object]) -> tuple[int, int]:
    """Both nodes full but for their two 1.5 CPU pods; the pods of the first node changed by ``how``; then a pending
    pod of 2 CPUs. Returns (pods awaiting existing capacity, NodeClaims created) of the next pass."""
    cluster, cloud = two_running_nodes()
    first = sorted(n.name for n in cluster.nodes)[0]
    cluster.pods = [replace(p, **how) if p.node_name == first else p for p in cluster.pods]  # type: ignore[arg-type]
    cluster.pods.append(make_pod("wide", cpu="2"))
    cluster.now = cloud.now = 2000.0
    out = reconcile(ports=Ports(cluster=cluster, cloud=cloud, cluster_name="test", queue=None), now=2000.0)
    assert not out.errors
    return out.pods_awaiting_capacity, out.nodeclaims_created


def test_a_pending_pod_gets_a_node_of_its_own_while_the_pods_in_its_way_are_terminating() -> None:
    assert _pass_with_one_node_emptied({"deletion_timestamp": 1500.0}) == (0, 1)


def test_a_pending_pod_waits_for_a_node_whose_pods_have_finished() -> None:
    assert _pass_with_one_node_emptied({"phase": "Succeeded"}) == (1, 0)
