"""The reconcile pass makes sure every deletion in the cluster has a termination request on its way: a
NodeClaim someone deleted (``kubectl delete nodeclaim``: deleting, kept by ``karpenter.sh/termination``, never
annotated) gets a request and the annotations; one whose request is fresh does not; one whose request went
stale (a lost message) gets another, with its first reason. A Node someone deleted (kept by the finalizer
registration gave it) has its NodeClaim's termination requested; a deleting Node no NodeClaim claims is let
go (its finalizer removed). The pass itself drains and terminates nothing."""

from __future__ import annotations

from dataclasses import replace

from reconcile_fakes import FakeCloud, FakeCluster, FakeQueue, make_nodeclass, make_nodepool, make_pod, node_for

from nodesmith.core.drain import DISRUPTED_TAINT
from nodesmith.core.model import Node
from nodesmith.core.termination import REQUESTED_AT_ANNOTATION, TERMINATION_FINALIZER, TERMINATION_REASON_ANNOTATION
from nodesmith.core.timestamps import to_rfc3339
from nodesmith.services.ports import Ports
from nodesmith.services.provisioning.reconcile import ReconcileOptions, ReconcileOutcome, reconcile

STALE = 300.0  # ReconcileOptions' default request_stale_seconds


def run(cluster: FakeCluster, cloud: FakeCloud, queue: FakeQueue | None, now: float) -> ReconcileOutcome:
    cluster.now = cloud.now = now
    return reconcile(
        ports=Ports(cluster=cluster, cloud=cloud, cluster_name="test", queue=queue),
        now=now,
        options=ReconcileOptions(request_stale_seconds=STALE),
    )


def taint(cluster: FakeCluster, node: str) -> None:
    """Put ``karpenter.sh/disrupted`` on ``node`` and cordon it, as whoever starts its drain does."""
    cluster.nodes = [
        replace(n, taints=(*n.taints, DISRUPTED_TAINT), unschedulable=True) if n.name == node else n
        for n in cluster.nodes
    ]


def registered() -> tuple[FakeCluster, FakeCloud, FakeQueue, str, str, str]:
    """One NodeClaim launched at 1000 and registered at 1010 (its Node carries the finalizer); no pod pending.
    Returns the world, the NodeClaim's name, its Node's name and its instance id."""
    cluster = FakeCluster(nodepools=[make_nodepool()], nodeclasses=[make_nodeclass()], pods=[make_pod("a")])
    cloud, queue = FakeCloud(), FakeQueue()
    run(cluster, cloud, queue, 1000.0)
    (claim,) = cluster.nodeclaims.values()
    (instance,) = cloud.instances.values()
    cluster.nodes = [node_for(instance, claim, ready=True)]
    cluster.pods = []
    run(cluster, cloud, queue, 1010.0)
    assert cluster.nodes[0].finalizers == (TERMINATION_FINALIZER,) and queue.sent == []
    return cluster, cloud, queue, claim.name, cluster.nodes[0].name, instance.instance_id


def test_a_nodeclaim_a_user_deleted_gets_a_request_and_the_annotations() -> None:
    cluster, cloud, queue, claim, node, iid = registered()
    cluster.delete_nodeclaim(name=claim)  # kubectl delete nodeclaim: the finalizer keeps it, deleting

    out = run(cluster, cloud, queue, 1100.0)

    assert [(r.nodeclaim, r.instance_id, r.reason) for r in queue.sent] == [(claim, iid, "Deleted")]
    assert out.terminations_requested == [claim]
    annotations = cluster.nodeclaims[claim].metadata.annotations
    assert annotations[REQUESTED_AT_ANNOTATION] == to_rfc3339(1100.0)
    assert annotations[TERMINATION_REASON_ANNOTATION] == "Deleted"
    # the termination function drains and terminates; the pass does not
    assert cluster.deleting() == [claim] and not cloud.terminated and cluster.get_node(name=node) is not None


def test_a_fresh_request_is_not_sent_again_and_a_stale_one_is() -> None:
    cluster, cloud, queue, claim, node, _ = registered()
    cluster.delete_nodeclaim(name=claim)
    run(cluster, cloud, queue, 1100.0)
    taint(cluster, node)  # the termination function's first round

    fresh = run(cluster, cloud, queue, 1100.0 + STALE - 1)
    assert fresh.terminations_requested == [] and queue.nodeclaims() == [claim]

    stale = run(cluster, cloud, queue, 1100.0 + STALE)  # its message was lost, or the termination stalled
    assert stale.terminations_requested == [claim] and queue.nodeclaims() == [claim, claim]
    annotations = cluster.nodeclaims[claim].metadata.annotations
    assert annotations[REQUESTED_AT_ANNOTATION] == to_rfc3339(1100.0 + STALE)


def test_a_stale_request_is_sent_again_with_its_first_reason() -> None:
    """A disruption requested it (annotated ``Drifted``) and its message was lost: the sweep keeps the reason."""
    cluster, cloud, queue, claim, node, _ = registered()
    cluster.annotate_nodeclaim(
        name=claim,
        annotations={TERMINATION_REASON_ANNOTATION: "Drifted", REQUESTED_AT_ANNOTATION: to_rfc3339(1050.0)},
    )
    cluster.delete_nodeclaim(name=claim)
    taint(cluster, node)  # the disruption tainted it

    early = run(cluster, cloud, queue, 1050.0 + STALE - 1)
    assert early.terminations_requested == [] and queue.sent == []

    run(cluster, cloud, queue, 1050.0 + STALE)
    assert [(r.nodeclaim, r.reason) for r in queue.sent] == [(claim, "Drifted")]
    assert cluster.nodeclaims[claim].metadata.annotations[TERMINATION_REASON_ANNOTATION] == "Drifted"


def test_a_fresh_request_whose_node_no_round_tainted_is_sent_again() -> None:
    """An interruption invocation killed after it annotated and deleted the NodeClaim, before it tainted the node
    and sent the request: the annotation is fresh, but the untainted node says no round started."""
    cluster, cloud, queue, claim, node, iid = registered()
    cluster.annotate_nodeclaim(
        name=claim,
        annotations={TERMINATION_REASON_ANNOTATION: "SpotInterrupted", REQUESTED_AT_ANNOTATION: to_rfc3339(1095.0)},
    )
    cluster.delete_nodeclaim(name=claim)

    out = run(cluster, cloud, queue, 1100.0)

    assert [(r.nodeclaim, r.instance_id, r.reason) for r in queue.sent] == [(claim, iid, "SpotInterrupted")]
    assert out.terminations_requested == [claim]
    taint(cluster, node)  # its first round
    assert run(cluster, cloud, queue, 1110.0).terminations_requested == []


def test_a_node_a_user_deleted_has_its_nodeclaim_deleted_and_a_request_sent() -> None:
    cluster, cloud, queue, claim, node, iid = registered()
    cluster.delete_node(name=node)  # kubectl delete node: the finalizer registration added keeps it
    assert cluster.get_node(name=node) is not None

    out = run(cluster, cloud, queue, 1100.0)

    assert [(r.nodeclaim, r.instance_id, r.reason) for r in queue.sent] == [(claim, iid, "Deleted")]
    assert out.terminations_requested == [claim]
    assert cluster.deleting() == [claim]  # its NodeClaim was deleted too, and is kept by its finalizer
    assert cluster.nodeclaims[claim].metadata.annotations[REQUESTED_AT_ANNOTATION] == to_rfc3339(1100.0)
    assert cluster.get_node(name=node) is not None and not cloud.terminated  # left to the termination function

    again = run(cluster, cloud, queue, 1110.0)  # the request is fresh: nothing more
    assert again.terminations_requested == [] and len(queue.sent) == 1


def test_a_deleting_node_no_nodeclaim_claims_is_let_go() -> None:
    cluster, cloud, queue, _, node, _ = registered()
    stray = Node(
        name="ip-10-9-9-9.ec2.internal",
        provider_id="aws:///us-east-1a/i-0000000000000dead",
        finalizers=(TERMINATION_FINALIZER,),
        deletion_timestamp=1090.0,
    )
    cluster.nodes.append(stray)

    out = run(cluster, cloud, queue, 1100.0)

    assert cluster.get_node(name=stray.name) is None and stray.name in cluster.deleted_nodes
    assert queue.sent == [] and out.terminations_requested == [] and not out.errors
    assert cluster.get_node(name=node) is not None and cluster.deleting() == []  # the others are left alone


def test_a_request_the_queue_refuses_is_reported() -> None:
    cluster, cloud, queue, claim, _, _ = registered()
    queue.failing.add(claim)
    cluster.delete_nodeclaim(name=claim)

    out = run(cluster, cloud, queue, 1100.0)

    assert out.terminations_requested == [] and queue.sent == []
    assert [e for e in out.errors if claim in e and "queue refused it" in e]


def test_without_a_queue_nothing_is_requested() -> None:
    cluster, cloud, queue, claim, node, _ = registered()
    cluster.delete_nodeclaim(name=claim)
    cluster.delete_node(name=node)

    out = run(cluster, cloud, None, 1100.0)

    assert out.terminations_requested == [] and queue.sent == []
    assert REQUESTED_AT_ANNOTATION not in cluster.nodeclaims[claim].metadata.annotations
