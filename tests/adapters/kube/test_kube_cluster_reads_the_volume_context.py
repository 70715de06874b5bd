"""KubeCluster.volume_context lists PersistentVolumeClaims, PersistentVolumes and StorageClasses from
the API (through the emulator) and they pin a pod's volumes to their zone."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from nodesmith.adapters.kube import KubeCluster, build_api_client
from nodesmith.core.errors import KubernetesError
from nodesmith.core.model import NodeSelectorRequirement, Pod

if TYPE_CHECKING:
    from nodesmith.sim.kube import KubeEmulator

ZONE = "topology.kubernetes.io/zone"


@pytest.fixture
def cluster(kube: KubeEmulator) -> KubeCluster:
    return KubeCluster(api_client=build_api_client(cluster_endpoint=kube.endpoint, kube_auth="none"), page_size=1)


def _seed(kube: KubeEmulator) -> None:
    store = kube.store
    store.create(
        "storageclasses.storage.k8s.io",
        {
            "metadata": {"name": "gp3-1b"},
            "provisioner": "ebs.csi.aws.com",
            "volumeBindingMode": "WaitForFirstConsumer",
            "allowedTopologies": [{"matchLabelExpressions": [{"key": ZONE, "values": ["us-east-1b"]}]}],
        },
    )
    store.create(
        "persistentvolumes",
        {
            "metadata": {"name": "pv-data"},
            "spec": {
                "capacity": {"storage": "10Gi"},
                "accessModes": ["ReadWriteOnce"],
                "csi": {"driver": "ebs.csi.aws.com", "volumeHandle": "vol-1"},
                "nodeAffinity": {
                    "required": {
                        "nodeSelectorTerms": [
                            {"matchExpressions": [{"key": ZONE, "operator": "In", "values": ["us-east-1a"]}]}
                        ]
                    }
                },
            },
        },
    )
    for name, spec in (
        ("bound", {"storageClassName": "gp3", "volumeName": "pv-data"}),
        ("pending", {"storageClassName": "gp3-1b"}),
    ):
        store.create(
            "persistentvolumeclaims",
            {"metadata": {"name": name, "namespace": "apps"}, "spec": {"accessModes": ["ReadWriteOnce"], **spec}},
        )


def test_claims_volumes_and_classes_are_read_across_pages_and_pin_pods(
    cluster: KubeCluster, kube: KubeEmulator
) -> None:
    _seed(kube)
    context = cluster.volume_context()

    assert sorted(context.claims) == [("apps", "bound"), ("apps", "pending")]
    assert context.claims[("apps", "bound")].volume_name == "pv-data"
    assert context.classes["gp3-1b"].binding_mode == "WaitForFirstConsumer"
    pod = Pod(namespace="apps", name="db-0", uid="u", requests={}, pvc_names=("bound", "pending"))
    assert context.requirements(pod) == (
        (
            NodeSelectorRequirement(ZONE, "In", ("us-east-1a",)),
            NodeSelectorRequirement(ZONE, "In", ("us-east-1b",)),
        ),
        (),
    )


def test_an_unreadable_object_is_a_kubernetes_error_naming_it(cluster: KubeCluster, kube: KubeEmulator) -> None:
    kube.store.create("persistentvolumes", {"metadata": {"name": "broken"}, "spec": {"nodeAffinity": "zone-a"}})
    with pytest.raises(KubernetesError, match="persistentvolume broken"):
        cluster.volume_context()


def test_a_generic_ephemeral_volumes_claim_names_its_pod(cluster: KubeCluster, kube: KubeEmulator) -> None:
    owners = {
        "worker-scratch": [{"apiVersion": "v1", "kind": "Pod", "name": "worker", "uid": "u1", "controller": True}],
        "data-db-0": [{"apiVersion": "apps/v1", "kind": "StatefulSet", "name": "db", "uid": "u2", "controller": True}],
    }
    for name, refs in owners.items():
        kube.store.create(
            "persistentvolumeclaims",
            {"metadata": {"name": name, "namespace": "apps", "ownerReferences": refs}, "spec": {}},
        )
    claims = cluster.volume_context().claims
    assert claims[("apps", "worker-scratch")].owner_pod == "worker"
    assert claims[("apps", "data-db-0")].owner_pod == ""
