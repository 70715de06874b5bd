"""The API emulator serves ``karpenter.sh/v1alpha1`` NodeOverlays as the CRD does (cluster-scoped, short name
``overlays``, status subresource), so ``kubectl apply -f overlay.yaml`` and Nodesmith's adapter work against it."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kubernetes import client

from nodesmith.adapters.kube import KubeCluster, build_api_client

if TYPE_CHECKING:
    from nodesmith.sim.kube import KubeEmulator

OVERLAYS = ("karpenter.sh", "v1alpha1", "nodeoverlays")
DOC: dict[str, Any] = {
    "apiVersion": "karpenter.sh/v1alpha1",
    "kind": "NodeOverlay",
    "metadata": {"name": "fuse"},
    "spec": {"capacity": {"smarter-devices/fuse": "1"}, "weight": 10},
}


def test_discovery_names_the_nodeoverlay_resource_like_the_crd(api: client.ApiClient) -> None:
    versions = {g.name: [v.version for v in g.versions] for g in client.ApisApi(api).get_api_versions().groups}
    assert versions["karpenter.sh"][0] == "v1" and "v1alpha1" in versions["karpenter.sh"]
    listing = client.CustomObjectsApi(api).get_api_resources("karpenter.sh", "v1alpha1")
    resources = {r.name: r for r in listing.resources}
    main = resources["nodeoverlays"]
    assert (main.kind, main.namespaced, main.short_names) == ("NodeOverlay", False, ["overlays"])
    assert "nodeoverlays/status" in resources


def test_apply_creates_then_merge_patches_and_the_adapter_reads_and_writes_status(
    kube: KubeEmulator, api: client.ApiClient
) -> None:
    custom = client.CustomObjectsApi(api)
    created = custom.create_cluster_custom_object(*OVERLAYS, {**DOC, "status": {"conditions": []}})
    assert "status" not in created
    custom.patch_cluster_custom_object(*OVERLAYS, "fuse", {"spec": {"weight": 20}})  # kubectl apply's merge patch

    cluster = KubeCluster(api_client=build_api_client(cluster_endpoint=kube.endpoint, kube_auth="none"))
    [overlay] = cluster.list_nodeoverlays()
    assert overlay.weight_or_zero == 20 and overlay.spec.capacity == {"smarter-devices/fuse": "1"}

    condition = {"type": "ValidationSucceeded", "status": "True", "reason": "ValidationSucceeded", "message": ""}
    cluster.patch_nodeoverlay_status(
        name="fuse", conditions=[condition], resource_version=overlay.metadata.resource_version
    )
    found = custom.get_cluster_custom_object(*OVERLAYS, "fuse")
    assert found["status"]["conditions"] == [condition]
    assert found["metadata"]["generation"] == 2, "a status write is not a spec change"
