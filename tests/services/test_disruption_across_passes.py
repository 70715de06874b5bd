"""The disruption service across reconcile passes, with only the cluster for memory: a command is
recorded, re-validated after the delay, then executed; replacements become Initialized before the
old node's termination is requested; every step is explained by Events and decision records.

The pass never drains: it requests the termination (the NodeClaim annotated with Karpenter's reason and
deleted, kept by its finalizer, and a request sent to the termination queue), and the termination function
drains the node and terminates the instance later."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

from reconcile_fakes import FakeCloud, FakeCluster, FakeQueue, make_nodeclass, make_nodepool, make_pod, node_for

from nodesmith.core.termination import REQUESTED_AT_ANNOTATION, TERMINATION_REASON_ANNOTATION
from nodesmith.core.timestamps import to_rfc3339
from nodesmith.services.disruption.service import DisruptionOutcome, disrupt
from nodesmith.services.disruption.state import CONDITION_CANDIDATE, CONDITION_DISRUPTING
from nodesmith.services.ports import Ports
from nodesmith.services.provisioning.reconcile import reconcile

if TYPE_CHECKING:
    from nodesmith.core.model import Pod, Taint

CLUSTER = "test"


@dataclass
class DrainableCluster(FakeCluster):
    """FakeCluster that can taint and evict (an accepted eviction removes the pod at once; the pass must not)."""

    evicted: list[str] = field(default_factory=list)
    queue: FakeQueue = field(default_factory=FakeQueue)

    def taint_and_cordon(self, *, node_name: str, taint: Taint) -> bool:
        self.nodes = [
            replace(n, taints=(*n.taints, taint), unschedulable=True) if n.name == node_name else n for n in self.nodes
        ]
        return any(n.name == node_name for n in self.nodes)

    def evict(self, *, pod: Pod, grace_period_seconds: int | None = None) -> str:
        self.pods = [p for p in self.pods if p.key != pod.key]
        self.evicted.append(pod.key)
        return "evicted"


def _reconcile(cluster: DrainableCluster, cloud: FakeCloud, now: float) -> None:
    cluster.now = cloud.now = now
    reconcile(ports=Ports(cluster=cluster, cloud=cloud, cluster_name=CLUSTER, queue=cluster.queue), now=now)


def _register_all(cluster: DrainableCluster, cloud: FakeCloud) -> None:
    """What the kubelet does: a Ready Node for every launched instance that has none yet."""
    have = {n.provider_id for n in cluster.nodes}
    for claim in cluster.nodeclaims.values():
        inst = next((i for i in cloud.instances.values() if i.provider_id == claim.status.provider_id), None)
        if inst is not None and inst.provider_id not in have and inst.state != "terminated":
            cluster.nodes.append(node_for(inst, claim, ready=True))


def _bind_pending(cluster: DrainableCluster) -> None:
    """What kube-scheduler does for the test's pods: bind every unbound pod to the first node."""
    node = cluster.nodes[0].name
    cluster.pods = [
        replace(p, node_name=node, unschedulable=False, phase="Running") if p.node_name is None else p
        for p in cluster.pods
    ]


def _cluster_with_one_node() -> tuple[DrainableCluster, FakeCloud]:
    cluster = DrainableCluster(nodepools=[make_nodepool()], nodeclasses=[make_nodeclass()])
    cluster.pods = [make_pod(f"inflate-{i}") for i in range(2)]
    cloud = FakeCloud()
    _reconcile(cluster, cloud, 1000.0)
    _register_all(cluster, cloud)
    _reconcile(cluster, cloud, 1001.0)  # registered + initialized
    _bind_pending(cluster)
    return cluster, cloud


def _disrupt(cluster: DrainableCluster, cloud: FakeCloud, now: float) -> DisruptionOutcome:
    cluster.now = cloud.now = now
    # no in-memory state across calls: everything must come from the cluster
    return disrupt(ports=Ports(cluster=cluster, cloud=cloud, cluster_name=CLUSTER, queue=cluster.queue), now=now)


def assert_termination_requested(cluster: DrainableCluster, claim_name: str, *, reason: str, at: float) -> None:
    """The NodeClaim is deleting (its finalizer keeps it), annotated with ``reason`` and the request time, and
    one request for it went to the termination queue."""
    claim = cluster.nodeclaims[claim_name]
    assert claim.metadata.deletion_timestamp is not None
    assert claim.metadata.finalizers == ["karpenter.sh/termination"]
    assert claim.metadata.annotations[TERMINATION_REASON_ANNOTATION] == reason
    assert claim.metadata.annotations[REQUESTED_AT_ANNOTATION] == to_rfc3339(at)
    (request,) = [r for r in cluster.queue.sent if r.nodeclaim == claim_name]
    assert request.reason == reason
    assert request.instance_id == claim.status.provider_id.rsplit("/", 1)[-1]


def test_an_empty_node_is_handed_to_termination_only_when_the_command_holds_after_the_validation_delay() -> None:
    cluster, cloud = _cluster_with_one_node()
    (claim_name,) = cluster.nodeclaims
    node = cluster.nodes[0].name
    cluster.pods = []  # scaled to zero

    first = _disrupt(cluster, cloud, 1100.0)
    assert first.candidates == [node] and not first.nodes_terminated
    assert cluster.nodeclaims[claim_name].is_true(CONDITION_CANDIDATE)
    assert [d["stage"] for d in first.decisions] == ["candidate"]

    early = _disrupt(cluster, cloud, 1105.0)  # 5 s later: still waiting for the 15 s validation
    assert not early.nodes_terminated and node in {n.name for n in cluster.nodes}
    assert cluster.queue.sent == [] and cluster.deleting() == []

    done = _disrupt(cluster, cloud, 1116.0)
    assert done.nodes_terminated == [node]
    assert done.executed == {"emptiness": 1}
    assert done.savings_per_hour > 0
    assert_termination_requested(cluster, claim_name, reason="Empty", at=1116.0)
    # the termination function drains and terminates: the pass deleted no Node and terminated no instance
    assert node in {n.name for n in cluster.nodes} and not cluster.deleted_nodes and not cloud.terminated
    reasons = cluster.reasons("Node")
    assert "Disrupted" in reasons and "DisruptionTerminating" in reasons
    record = done.decisions[-1]
    assert record["method"] == "emptiness" and record["nodes"] == [node] and record["cost_after_usd_per_hour"] == 0


def test_a_command_that_no_longer_holds_at_validation_is_not_executed() -> None:
    cluster, cloud = _cluster_with_one_node()
    saved = list(cluster.pods)
    cluster.pods = []
    assert _disrupt(cluster, cloud, 1100.0).candidates
    cluster.pods = saved  # pods came back before the validation pass
    later = _disrupt(cluster, cloud, 1116.0)
    assert not later.nodes_terminated and not cloud.terminated
    assert cluster.queue.sent == [] and cluster.deleting() == []
    assert not any(c.is_true(CONDITION_CANDIDATE) for c in cluster.nodeclaims.values())


def test_a_drifted_node_is_replaced_and_handed_to_termination_only_once_the_replacement_is_initialized() -> None:
    cluster, cloud = _cluster_with_one_node()
    old_node = cluster.nodes[0].name
    (old_claim,) = cluster.nodeclaims
    # the NodePool template changes: NodePoolDrifted (the hash stamped at launch no longer matches)
    cluster.nodepools = [make_nodepool(labels={"team": "payments"})]

    assert _disrupt(cluster, cloud, 1100.0).candidates == [old_node]
    started = _disrupt(cluster, cloud, 1116.0)
    assert started.executed == {"drift": 1}
    (replacement,) = started.replacements_launched
    assert replacement in cluster.nodeclaims and cluster.nodeclaims[old_claim].is_true(CONDITION_DISRUPTING)
    assert any(t.key == "karpenter.sh/disrupted" for t in cluster.get_node(name=old_node).taints)  # type: ignore[union-attr]
    assert not cluster.evicted  # nothing is evicted before the replacement is Initialized

    assert cluster.queue.sent == [] and cluster.deleting() == []

    waiting = _disrupt(cluster, cloud, 1117.0)
    assert not waiting.nodes_terminated and "DisruptionWaitingReadiness" in cluster.reasons("Node")
    assert cluster.queue.sent == [] and cluster.deleting() == []

    _register_all(cluster, cloud)
    _reconcile(cluster, cloud, 1118.0)
    assert cluster.nodeclaims[replacement].is_true("Initialized")
    finished = _disrupt(cluster, cloud, 1119.0)
    assert finished.nodes_terminated == [old_node]
    assert_termination_requested(cluster, old_claim, reason="Drifted", at=1119.0)
    assert cluster.deleting() == [old_claim] and not cluster.evicted and not cloud.terminated

    # a later pass finds the command finished: no second request
    again = _disrupt(cluster, cloud, 1120.0)
    assert not again.nodes_terminated and [r.nodeclaim for r in cluster.queue.sent] == [old_claim]
