"""The reconcile pass keeps static NodePools at ``spec.replicas`` (feature gate ``StaticCapacity``) against in-memory
ports: the missing NodeClaims are launched from the template and are capacity for pending pods in the same pass,
a deleting NodeClaim is refilled only when ``limits.nodes`` leaves room, and a scale-down requests the termination
of its victims (reason ``Overprovisioned``) and provisions for their pods at once."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from reconcile_fakes import FakeCloud, FakeCluster, FakeQueue, make_nodeclass, make_nodepool, make_pod, node_for

from nodesmith.core.api.nodepool import NodePool
from nodesmith.core.termination import TERMINATION_REASON_ANNOTATION
from nodesmith.services.disruption.service import DisruptionOutcome, disrupt
from nodesmith.services.disruption.state import CONDITION_DISRUPTING
from nodesmith.services.ports import Ports
from nodesmith.services.provisioning.reconcile import ReconcileOptions, ReconcileOutcome, reconcile

if TYPE_CHECKING:
    from nodesmith.core.model import Taint

CLUSTER = "test"


def static_pool(replicas: int, *, nodes_limit: int | None = None, tier: str = "static") -> NodePool:
    doc: dict[str, Any] = make_nodepool("static", labels={"tier": tier}).model_dump(by_alias=True, exclude_none=True)
    doc["spec"]["replicas"] = replicas
    doc["spec"]["template"]["spec"]["requirements"] = [
        {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]}
    ]
    if nodes_limit is not None:
        doc["spec"]["limits"] = {"nodes": str(nodes_limit)}
    return NodePool.model_validate(doc)


def run(cluster: FakeCluster, cloud: FakeCloud, now: float, *, queue: FakeQueue | None = None) -> ReconcileOutcome:
    cluster.now = cloud.now = now
    out = reconcile(
        ports=Ports(cluster=cluster, cloud=cloud, cluster_name=CLUSTER, queue=queue),
        now=now,
        options=ReconcileOptions(static_capacity=True),
    )
    assert not out.errors, out.errors
    return out


def pool_claims(cluster: FakeCluster, pool: str, *, live: bool = True) -> list[str]:
    return sorted(
        nc.name
        for nc in cluster.nodeclaims.values()
        if nc.nodepool_name == pool and (nc.metadata.deletion_timestamp is None) == live
    )


def register(cluster: FakeCluster, cloud: FakeCloud) -> None:
    """A Ready Node for every launched NodeClaim that has none."""
    known = {n.provider_id for n in cluster.nodes}
    for nc in cluster.nodeclaims.values():
        if nc.status.provider_id and nc.status.provider_id not in known:
            instance = next(i for i in cloud.instances.values() if i.provider_id == nc.status.provider_id)
            cluster.nodes.append(node_for(instance, nc, ready=True))


def test_missing_static_nodeclaims_launch_from_the_template_and_hold_pending_pods() -> None:
    cluster = FakeCluster(nodepools=[static_pool(2), make_nodepool()], nodeclasses=[make_nodeclass()])
    cluster.pods = [make_pod("web", cpu="1")]
    cloud = FakeCloud()
    out = run(cluster, cloud, 1000.0)
    claims = [cluster.nodeclaims[name] for name in pool_claims(cluster, "static")]
    assert len(claims) == 2 and pool_claims(cluster, "default") == [], "the pod waits on static capacity"
    assert (out.nodeclaims_created, out.pods_awaiting_capacity, out.pods_scheduled) == (2, 1, 0)
    for claim in claims:
        assert claim.metadata.labels["tier"] == "static" and claim.spec.resources.requests == {}
        types = next(r.values for r in claim.spec.requirements if r.key == "node.kubernetes.io/instance-type")
        assert types == ["c5.large", "m5.large", "c5.xlarge", "m5.xlarge"], "every type the template allows"
    assert run(cluster, cloud, 1010.0).nodeclaims_created == 0, "a pool at its replicas launches nothing"


def test_the_gate_off_leaves_static_pools_alone() -> None:
    cluster = FakeCluster(nodepools=[static_pool(2)], nodeclasses=[make_nodeclass()])
    cluster.now = 1000.0
    out = reconcile(ports=Ports(cluster=cluster, cloud=FakeCloud(), cluster_name=CLUSTER), now=1000.0)
    assert out.nodeclaims_created == 0 and not cluster.nodeclaims


def test_a_deleting_nodeclaim_is_refilled_only_within_the_node_limit() -> None:
    cluster = FakeCluster(nodepools=[static_pool(2, nodes_limit=2)], nodeclasses=[make_nodeclass()])
    cloud = FakeCloud()
    run(cluster, cloud, 1000.0)
    first = pool_claims(cluster, "static")[0]
    cluster.nodeclaims[first].metadata.deletion_timestamp = "2026-01-01T00:00:00Z"  # an expiration, say
    assert run(cluster, cloud, 1010.0).nodeclaims_created == 0, "limits.nodes counts the deleting NodeClaim"
    cluster.nodepools = [static_pool(2, nodes_limit=3)]
    assert run(cluster, cloud, 1020.0).nodeclaims_created == 1
    assert len(pool_claims(cluster, "static")) == 2


def test_a_scale_down_removes_the_empty_node_and_provisions_for_the_pods_of_the_others_later() -> None:
    cluster = FakeCluster(nodepools=[static_pool(2), make_nodepool()], nodeclasses=[make_nodeclass()])
    cloud = FakeCloud()
    queue = FakeQueue()
    run(cluster, cloud, 1000.0, queue=queue)
    register(cluster, cloud)
    busy = cluster.nodes[0].name
    cluster.pods = [make_pod("web", cpu="1", node_name=busy, phase="Running", unschedulable=False)]
    cluster.nodepools = [static_pool(1), make_nodepool()]
    out = run(cluster, cloud, 1010.0, queue=queue)
    [removed] = pool_claims(cluster, "static", live=False)
    assert cluster.nodeclaims[removed].status.node_name != busy, "the empty node goes first"
    assert cluster.nodeclaims[removed].metadata.annotations[TERMINATION_REASON_ANNOTATION] == "Overprovisioned"
    assert queue.nodeclaims() == [removed] and out.static_removed == [removed]
    assert out.pods_rescheduled == 0 and pool_claims(cluster, "default") == []

    cluster.nodepools = [static_pool(0), make_nodepool()]
    out = run(cluster, cloud, 1020.0, queue=queue)
    assert pool_claims(cluster, "static") == []
    assert out.pods_rescheduled == 1, "the pods of a removed node are provisioned for in the same pass"
    assert len(pool_claims(cluster, "default")) == 1


@dataclass
class TaintableCluster(FakeCluster):
    """FakeCluster whose nodes can be tainted and cordoned (a disruption command does that first)."""

    def taint_and_cordon(self, *, node_name: str, taint: Taint) -> bool:
        self.nodes = [
            replace(n, taints=(*n.taints, taint), unschedulable=True) if n.name == node_name else n for n in self.nodes
        ]
        return any(n.name == node_name for n in self.nodes)


def disrupt_at(cluster: FakeCluster, cloud: FakeCloud, queue: FakeQueue, now: float) -> DisruptionOutcome:
    cluster.now = cloud.now = now
    return disrupt(ports=Ports(cluster=cluster, cloud=cloud, cluster_name=CLUSTER, queue=queue), now=now)


def test_a_drifted_static_node_is_replaced_one_for_one_and_static_provisioning_neither_adds_nor_removes() -> None:
    cluster = TaintableCluster(nodepools=[static_pool(1)], nodeclasses=[make_nodeclass()])
    cloud, queue = FakeCloud(), FakeQueue()
    run(cluster, cloud, 1000.0, queue=queue)
    register(cluster, cloud)
    run(cluster, cloud, 1001.0, queue=queue)  # registered and initialized
    [old] = pool_claims(cluster, "static")
    cluster.nodepools = [static_pool(1, tier="gold")]  # the template changed: NodePoolDrifted

    assert disrupt_at(cluster, cloud, queue, 1100.0).candidates
    started = disrupt_at(cluster, cloud, queue, 1116.0)
    assert started.executed == {"drift": 1}
    [replacement] = started.replacements_launched
    assert cluster.nodeclaims[replacement].metadata.labels["tier"] == "gold"
    assert cluster.nodeclaims[old].is_true(CONDITION_DISRUPTING)

    held = run(cluster, cloud, 1117.0, queue=queue)
    assert held.nodeclaims_created == 0 and held.static_removed == [], "replicas + the node being replaced"
    register(cluster, cloud)
    run(cluster, cloud, 1118.0, queue=queue)
    finished = disrupt_at(cluster, cloud, queue, 1119.0)
    assert finished.nodes_terminated and queue.nodeclaims() == [old]
    after = run(cluster, cloud, 1120.0, queue=queue)
    assert after.nodeclaims_created == 0 and pool_claims(cluster, "static") == [replacement]
