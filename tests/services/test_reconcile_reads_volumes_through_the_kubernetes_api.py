"""Volume topology end to end on the Kubernetes side: a StatefulSet-like pod whose claim is bound to a
PersistentVolume in us-east-1b, stored in the Kubernetes API emulator, read by KubeCluster, gets its
NodeClaim (and instance) in us-east-1b although us-east-1a is cheaper."""

from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
import yaml
from reconcile_fakes import FakeCloud

from nodesmith.adapters.kube import KubeCluster, build_api_client
from nodesmith.services.ports import Ports
from nodesmith.services.provisioning.reconcile import reconcile
from nodesmith.sim.kube import KubeEmulator

if TYPE_CHECKING:
    from collections.abc import Iterator

ZONE = "topology.kubernetes.io/zone"
MANIFESTS = Path(__file__).resolve().parents[2] / "lambdas" / "nodesmith" / "sim" / "manifests"


@pytest.fixture
def kube() -> Iterator[KubeEmulator]:
    with KubeEmulator() as emulator:
        for doc in yaml.safe_load_all((MANIFESTS / "nodepool.yaml").read_text()):
            if doc:
                emulator.store.apply(doc)
        yield emulator


def test_a_pod_bound_to_a_zonal_volume_gets_capacity_in_that_zone(kube: KubeEmulator) -> None:
    store = kube.store
    store.create(
        "persistentvolumes",
        {
            "metadata": {"name": "pv-db-0"},
            "spec": {
                "capacity": {"storage": "10Gi"},
                "csi": {"driver": "ebs.csi.aws.com", "volumeHandle": "vol-0123"},
                "nodeAffinity": {
                    "required": {
                        "nodeSelectorTerms": [
                            {"matchExpressions": [{"key": ZONE, "operator": "In", "values": ["us-east-1b"]}]}
                        ]
                    }
                },
            },
        },
    )
    store.create(
        "persistentvolumeclaims",
        {
            "metadata": {
                "name": "data-db-0",
                "namespace": "default",
                "annotations": {"pv.kubernetes.io/bind-completed": "yes"},
            },
            "spec": {"storageClassName": "gp3", "volumeName": "pv-db-0"},
        },
    )
    store.create(
        "pods",
        {
            "metadata": {"name": "db-0", "namespace": "default"},
            "spec": {
                "containers": [{"name": "db", "resources": {"requests": {"cpu": "1", "memory": "1Gi"}}}],
                "volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": "data-db-0"}}],
            },
            "status": {
                "phase": "Pending",
                "conditions": [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}],
            },
        },
    )
    cluster = KubeCluster(api_client=build_api_client(cluster_endpoint=kube.endpoint, kube_auth="none"))
    cloud = FakeCloud(now=time.time())

    out = reconcile(ports=Ports(cluster=cluster, cloud=cloud, cluster_name="demo"), now=cloud.now)

    assert out.pods_scheduled == 1 and not out.errors, out
    assert [i.zone for i in cloud.instances.values()] == ["us-east-1b"]
    (claim,) = store.objects("nodeclaims.karpenter.sh")
    zone_reqs = [r for r in claim["spec"]["requirements"] if r["key"] == ZONE]
    assert zone_reqs and all(r["values"] == ["us-east-1b"] for r in zone_reqs)
