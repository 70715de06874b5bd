"""A repair command's drain bound (``min(policy grace period, NodeClaim terminationGracePeriod)``, Karpenter v1.15
``effectiveDrainBound``) survives between passes on the NodeClaim's ``DisruptionReason`` condition and becomes the
NodeClaim's termination timestamp when its termination is requested (reason ``Unhealthy``), the deadline the drain
then keeps."""

from __future__ import annotations

from reconcile_fakes import FakeCloud, FakeCluster, FakeQueue, make_nodeclass, make_nodepool, make_pod, node_for

from nodesmith.core.api.nodeclaim import NodeClaim
from nodesmith.core.disruption import DisruptionSettings
from nodesmith.core.termination import TERMINATION_REASON_ANNOTATION, TERMINATION_TIMESTAMP_ANNOTATION
from nodesmith.core.timestamps import from_rfc3339
from nodesmith.services.disruption.run import DisruptionPass
from nodesmith.services.disruption.state import CommandRecord, read_record
from nodesmith.services.ports import Ports
from nodesmith.services.provisioning.reconcile import reconcile


def test_the_drain_bound_is_stored_with_the_command() -> None:
    record = CommandRecord(method="repair", nodes=("n1",), since=10.0, cause="Unhealthy", drain_bound=600.0)
    claim = make_nodeclaim_with(record)
    restored = read_record(claim, "DisruptionReason")
    assert restored is not None and restored.drain_bound == 600.0
    unbounded = read_record(
        make_nodeclaim_with(CommandRecord(method="drift", nodes=("n1",), since=10.0)), "DisruptionReason"
    )
    assert unbounded is not None and unbounded.drain_bound is None


def make_nodeclaim_with(record: CommandRecord) -> NodeClaim:
    return NodeClaim.model_validate(
        {
            "metadata": {"name": "c1"},
            "spec": {"nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
                     "requirements": []},
            "status": {"conditions": [{"type": "DisruptionReason", "status": "True", "reason": "Unhealthy",
                                       "message": record.message(), "lastTransitionTime": "2026-01-01T00:00:00Z"}]},
        }
    )  # fmt: skip


def test_a_bounded_repair_sets_the_termination_timestamp() -> None:
    cluster = FakeCluster(nodepools=[make_nodepool()], nodeclasses=[make_nodeclass()])
    cluster.pods = [make_pod("web")]
    cloud, queue = FakeCloud(), FakeQueue()
    reconcile(ports=Ports(cluster=cluster, cloud=cloud, cluster_name="test"), now=1000.0)
    (claim,) = cluster.nodeclaims.values()
    instance = next(i for i in cloud.instances.values() if i.provider_id == claim.status.provider_id)
    node = node_for(instance, claim, ready=True)
    cluster.nodes.append(node)
    run = DisruptionPass(
        ports=Ports(cluster=cluster, cloud=cloud, cluster_name="test", queue=queue),
        now=2000.0,
        settings=DisruptionSettings(node_repair=True),
        recent_events={},
    )
    run.snapshot()

    assert run.terminate(node.name, why="repair (Unhealthy)", method="repair", drain_bound=600.0)

    annotations = cluster.nodeclaims[claim.name].metadata.annotations
    assert from_rfc3339(annotations[TERMINATION_TIMESTAMP_ANNOTATION]) == 2600.0
    assert annotations[TERMINATION_REASON_ANNOTATION] == "Unhealthy"
    assert [r.reason for r in queue.sent] == ["Unhealthy"]
