"""Reconcile reads the cluster's PersistentVolumeClaims, PersistentVolumes and StorageClasses and launches
a pod with zonal storage in its volume's zone (Karpenter's volumetopology.go); a pod whose claims
Karpenter would refuse gets no NodeClaim and a FailedScheduling event saying why."""

from __future__ import annotations

from dataclasses import replace

import pytest
from reconcile_fakes import FakeCloud, FakeCluster, make_nodeclass, make_nodepool, make_pod

from nodesmith.core.errors import KubernetesError
from nodesmith.core.model import Node, NodeSelectorRequirement, NodeSelectorTerm, Taint
from nodesmith.core.scheduling.volumes import PersistentVolume, StorageClass, VolumeClaim, VolumeContext
from nodesmith.services.ports import Ports
from nodesmith.services.provisioning.reconcile import reconcile

ZONE = "topology.kubernetes.io/zone"
# The fake catalogue's us-east-1a offerings are the cheapest: without volume topology every pod lands there.
CONTEXT = VolumeContext.of(
    claims=[
        VolumeClaim("default", "data-db-0", "gp3", "pv-db-0"),
        VolumeClaim("default", "cache", "zonal-1b"),
        VolumeClaim("default", "no-class"),
    ],
    volumes=[
        PersistentVolume(
            "pv-db-0", node_affinity=(NodeSelectorTerm((NodeSelectorRequirement(ZONE, "In", ("us-east-1b",)),)),)
        )
    ],
    classes=[
        StorageClass("zonal-1b", allowed_topologies=(((ZONE, ("us-east-1b",)),),), binding_mode="WaitForFirstConsumer")
    ],
)


def _world(*pods_and_claims: tuple[str, tuple[str, ...]]) -> tuple[FakeCluster, FakeCloud]:
    cluster = FakeCluster(nodepools=[make_nodepool()], nodeclasses=[make_nodeclass()], volumes=CONTEXT)
    cluster.pods = [make_pod(name, pvc_names=claims) for name, claims in pods_and_claims]
    return cluster, FakeCloud()


def _zones(cloud: FakeCloud) -> list[str]:
    return sorted(i.zone for i in cloud.instances.values())


def test_a_pod_whose_claim_is_bound_to_a_zonal_volume_launches_in_that_zone() -> None:
    cluster, cloud = _world(("db-0", ("data-db-0",)))
    out = reconcile(ports=Ports(cluster=cluster, cloud=cloud, cluster_name="test"), now=1000.0)

    assert out.pods_scheduled == 1 and _zones(cloud) == ["us-east-1b"]
    assert cloud.requests[0].zones == frozenset({"us-east-1b"})


def test_an_unbound_claim_follows_its_wait_for_first_consumer_class_topology() -> None:
    cluster, cloud = _world(("web", ("cache",)))
    out = reconcile(ports=Ports(cluster=cluster, cloud=cloud, cluster_name="test"), now=1000.0)

    assert out.pods_scheduled == 1 and _zones(cloud) == ["us-east-1b"]
    claim = next(iter(cluster.nodeclaims.values()))
    assert [r.values for r in claim.spec.requirements if r.key == ZONE] == [["us-east-1b"]]


def test_claims_karpenter_would_refuse_leave_the_pod_pending_with_the_reason() -> None:
    cluster, cloud = _world(("orphan", ("missing",)), ("classless", ("no-class",)), ("ok", ()))
    out = reconcile(ports=Ports(cluster=cluster, cloud=cloud, cluster_name="test"), now=1000.0)

    assert out.pods_scheduled == 1
    assert out.unschedulable == {
        "default/orphan": "PersistentVolumeClaim default/missing not found",
        "default/classless": "unbound PersistentVolumeClaim default/no-class has no storage class",
    }
    failed = {name for kind, name, reason, _ in cluster.events if reason == "FailedScheduling"}
    assert failed == {"orphan", "classless"}


def test_storage_objects_are_read_only_when_a_pod_mounts_a_claim() -> None:
    cluster, cloud = _world(("free", ()))
    reconcile(ports=Ports(cluster=cluster, cloud=cloud, cluster_name="test"), now=1000.0)
    assert cluster.volume_reads == 0


def test_unreadable_storage_objects_hold_back_only_the_pods_with_claims() -> None:
    cluster, cloud = _world(("db-0", ("data-db-0",)), ("free", ()))

    def refuse() -> VolumeContext:
        raise KubernetesError("list persistentvolumeclaims: HTTP 403: Forbidden", status=403)

    cluster.volume_context = refuse  # type: ignore[method-assign]
    out = reconcile(ports=Ports(cluster=cluster, cloud=cloud, cluster_name="test"), now=1000.0)

    assert out.pods_scheduled == 1 and "default/db-0" in out.unschedulable
    assert any("403" in e for e in out.errors)


@pytest.mark.parametrize(("owner_pod", "zone"), [("worker", "us-east-1a"), ("", "us-east-1b")])
def test_a_rescheduled_pods_ephemeral_volume_does_not_pin_its_replacement(owner_pod: str, zone: str) -> None:
    """Karpenter skips generic ephemeral volumes of bound pods (the claim is deleted with the pod);
    a regular claim keeps the replacement with its volume. us-east-1a is the cheaper zone."""
    leaving = Node(
        name="old-node",
        labels={ZONE: "us-east-1b"},
        taints=(Taint(key="karpenter.sh/disrupted", effect="NoSchedule"),),
        allocatable={"cpu": 2000, "memory": 4 * 2**30, "pods": 29},
        ready=True,
    )
    cluster = FakeCluster(nodepools=[make_nodepool()], nodeclasses=[make_nodeclass()], nodes=[leaving])
    cluster.volumes = replace(
        CONTEXT, claims={("default", "scratch"): VolumeClaim("default", "scratch", "gp3", "pv-db-0", owner_pod)}
    )
    cluster.pods = [make_pod("worker", pvc_names=("scratch",), node_name="old-node", unschedulable=False)]
    cloud = FakeCloud()

    out = reconcile(ports=Ports(cluster=cluster, cloud=cloud, cluster_name="test"), now=1000.0)

    assert out.pods_rescheduled == 1 and out.pods_scheduled == 1
    assert _zones(cloud) == [zone]
