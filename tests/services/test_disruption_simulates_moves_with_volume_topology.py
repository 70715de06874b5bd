"""The disruption service hands the decision its pods' volume topology and each NodePool's own
node class catalogue; when the storage objects cannot be read, a pod with claims stays in its
node's zone rather than being consolidated away from its volume."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pytest
from reconcile_fakes import FakeCloud, FakeCluster, make_nodeclass, make_nodepool, make_pod

from nodesmith.core.errors import KubernetesError
from nodesmith.core.model import Node, NodeSelectorRequirement, NodeSelectorTerm
from nodesmith.core.scheduling.volumes import PersistentVolume, VolumeClaim, VolumeContext
from nodesmith.services.disruption import service as disruption
from nodesmith.services.ports import Ports
from nodesmith.services.provisioning.capacity import disruption_volume_topology

if TYPE_CHECKING:
    from nodesmith.core.disruption import DisruptionSnapshot

ZONE = "topology.kubernetes.io/zone"
IN_1B = (NodeSelectorRequirement(ZONE, "In", ("us-east-1b",)),)
NODE = Node(name="n1", labels={ZONE: "us-east-1a"}, allocatable={"cpu": 2000, "pods": 29}, ready=True)
CONTEXT = VolumeContext.of(
    claims=[VolumeClaim("default", "data", "gp3", "pv-1b"), VolumeClaim("default", "tmp", "gp3", "pv-1b", "db")],
    volumes=[PersistentVolume("pv-1b", (NodeSelectorTerm(IN_1B),))],
)


@pytest.fixture
def decided(monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    seen: dict[str, Any] = {}
    real = disruption.decide

    def spy(snapshot: DisruptionSnapshot, **kwargs: Any) -> Any:
        seen.update(
            volume_requirements=snapshot.volume_requirements, nodepool_instance_types=snapshot.nodepool_instance_types
        )
        return real(snapshot, **kwargs)

    monkeypatch.setattr(disruption, "decide", spy)
    return seen


def _cluster() -> FakeCluster:
    cluster = FakeCluster(nodepools=[make_nodepool()], nodeclasses=[make_nodeclass()], nodes=[NODE], volumes=CONTEXT)
    cluster.pods = [make_pod("db", pvc_names=("data",), node_name="n1", unschedulable=False, phase="Running")]
    return cluster


def _disrupt(cluster: FakeCluster) -> disruption.DisruptionOutcome:
    return disruption.disrupt(ports=Ports(cluster=cluster, cloud=FakeCloud(), cluster_name="test"), now=1000.0)


def test_the_decision_sees_volume_topology_and_per_nodepool_types(decided: dict[str, Any]) -> None:
    _disrupt(_cluster())
    assert decided["volume_requirements"] == {"default/db": IN_1B}
    assert set(decided["nodepool_instance_types"]) == {"default"}
    assert {it.name for it in decided["nodepool_instance_types"]["default"]} == {
        "c5.large",
        "m5.large",
        "c5.xlarge",
        "m5.xlarge",
    }


def test_unreadable_storage_keeps_pods_with_claims_in_their_nodes_zone(decided: dict[str, Any]) -> None:
    cluster = _cluster()

    def refuse() -> VolumeContext:
        raise KubernetesError("list persistentvolumeclaims: HTTP 403: Forbidden", status=403)

    cluster.volume_context = refuse  # type: ignore[method-assign]
    out = _disrupt(cluster)
    assert decided["volume_requirements"] == {"default/db": (NodeSelectorRequirement(ZONE, "In", ("us-east-1a",)),)}
    assert any("403" in e for e in out.errors)


def test_a_bound_pods_ephemeral_claim_does_not_pin_it_but_a_pending_pods_claims_do() -> None:
    bound = make_pod("db", pvc_names=("tmp",), node_name="n1", unschedulable=False)
    pending = make_pod("web", pvc_names=("data",))
    assert disruption_volume_topology(pods=[bound, pending], nodes=[NODE], context=CONTEXT) == {"default/web": IN_1B}
