"""The reconcile pass fills in each NodePool's status as Karpenter's counter and readiness controllers do:
``status.nodes``, ``status.resources`` summed over the pool's nodes, and ValidationSucceeded /
NodeClassReady / Ready conditions; it writes only when something changed."""

from __future__ import annotations

from dataclasses import replace

from reconcile_fakes import FakeCloud, FakeCluster, make_nodeclass, make_nodepool, make_pod, node_for

from nodesmith.core.api.ec2nodeclass import EC2NodeClass, EC2NodeClassStatus
from nodesmith.core.nodepool_status import nodepool_status, status_changed
from nodesmith.services.ports import Ports
from nodesmith.services.provisioning.reconcile import ReconcileOutcome, reconcile

GIB = 2**30


def run(cluster: FakeCluster, cloud: FakeCloud, now: float) -> ReconcileOutcome:
    cluster.now = cloud.now = now
    return reconcile(ports=Ports(cluster=cluster, cloud=cloud, cluster_name="test"), now=now)


def conditions(cluster: FakeCluster) -> dict[str, tuple[str, str | None]]:
    status = cluster.nodepools[0].status
    assert status is not None
    return {c.type: (c.status, c.reason) for c in status.conditions}


def _ready_nodeclass() -> EC2NodeClass:
    """The default EC2NodeClass with the ``Ready`` condition an earlier pass wrote."""
    return make_nodeclass().model_copy(
        update={"status": EC2NodeClassStatus.model_validate({"conditions": [{"type": "Ready", "status": "True"}]})}
    )


def test_a_nodepool_with_its_nodeclass_is_ready_and_counts_its_registered_nodes() -> None:
    cluster = FakeCluster(nodepools=[make_nodepool()], nodeclasses=[_ready_nodeclass()])
    cluster.pods = [make_pod("inflate-0")]
    cloud = FakeCloud()
    run(cluster, cloud, 1000.0)
    (claim,) = cluster.nodeclaims.values()
    (instance,) = cloud.instances.values()
    node = node_for(instance, claim, ready=True)
    cluster.nodes = [replace(node, capacity={"cpu": 2000, "memory": 4 * GIB, "pods": 29})]

    run(cluster, cloud, 1010.0)

    status = cluster.nodepools[0].status
    assert status is not None
    assert status.nodes == 1
    assert status.resources == {"cpu": "2", "memory": "4Gi", "pods": "29", "ephemeral-storage": "0", "nodes": "1"}
    assert conditions(cluster) == {
        "ValidationSucceeded": ("True", "ValidationSucceeded"),
        "NodeClassReady": ("True", "NodeClassReady"),
        "Ready": ("True", "Ready"),
    }


def test_a_nodepool_whose_nodeclass_is_missing_is_not_ready() -> None:
    cluster = FakeCluster(nodepools=[make_nodepool()], nodeclasses=[])

    run(cluster, FakeCloud(), 1000.0)

    found = conditions(cluster)
    assert found["NodeClassReady"] == ("False", "NodeClassNotFound")
    assert found["Ready"][0] == "False"
    assert cluster.nodepools[0].status is not None
    assert cluster.nodepools[0].status.nodes == 0


def test_an_unchanged_status_keeps_its_transition_times_and_is_not_rewritten() -> None:
    cluster = FakeCluster(nodepools=[make_nodepool()], nodeclasses=[make_nodeclass()])
    run(cluster, FakeCloud(), 1000.0)
    pool = cluster.nodepools[0]

    again = nodepool_status(nodepool=pool, nodes=[], nodeclaims=[], nodeclass=make_nodeclass(), now=5000.0)

    assert pool.status is not None
    before = {c.type: c.last_transition_time for c in pool.status.conditions}
    assert {c["type"]: c["lastTransitionTime"] for c in again["conditions"]} == before
    assert before["Ready"] == "1970-01-01T00:16:40Z"
    assert not status_changed(pool, again)


def test_nodeclass_ready_follows_the_ec2nodeclass_ready_condition() -> None:
    pool = make_nodepool()
    unready = make_nodeclass().model_copy(
        update={
            "status": EC2NodeClassStatus.model_validate(
                {
                    "conditions": [
                        {"type": "SubnetsReady", "status": "False", "reason": "SubnetsNotFound", "message": "none"},
                        {
                            "type": "Ready",
                            "status": "False",
                            "reason": "UnhealthyDependents",
                            "message": "SubnetsReady=False",
                        },
                    ]
                }
            )
        }
    )

    status = nodepool_status(nodepool=pool, nodes=[], nodeclaims=[], nodeclass=unready, now=1000.0)

    found = {c["type"]: c for c in status["conditions"]}
    assert (found["NodeClassReady"]["status"], found["NodeClassReady"]["reason"]) == ("False", "UnhealthyDependents")
    assert found["NodeClassReady"]["message"] == "SubnetsReady=False"
    assert found["Ready"]["status"] == "False"

    unknown = unready.model_copy(
        update={"status": EC2NodeClassStatus.model_validate({"conditions": [{"type": "Ready", "status": "Unknown"}]})}
    )
    status = nodepool_status(nodepool=pool, nodes=[], nodeclaims=[], nodeclass=unknown, now=1000.0)
    found = {c["type"]: c for c in status["conditions"]}
    assert (found["NodeClassReady"]["status"], found["NodeClassReady"]["reason"]) == (
        "False",
        "NodeClassReadinessUnknown",
    )

    never_resolved = make_nodeclass()  # no Ready condition yet: unknown, as Karpenter's readiness controller says
    status = nodepool_status(nodepool=pool, nodes=[], nodeclaims=[], nodeclass=never_resolved, now=1000.0)
    found = {c["type"]: c for c in status["conditions"]}
    assert (found["NodeClassReady"]["reason"], found["Ready"]["status"]) == ("NodeClassReadinessUnknown", "False")
