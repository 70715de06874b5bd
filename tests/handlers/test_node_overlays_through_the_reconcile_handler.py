"""NodeOverlays end to end on the Kubernetes side (feature gate ``NodeOverlay``): an overlay created through the API
emulator's HTTP API (as ``kubectl apply`` sends it) is read by the real Kubernetes adapter in the reconcile handler's
pass, reprices the NodePool's instance types, so the pass launches the overlaid type and annotates the NodeClaim as
Karpenter does; equal-weight overlays that conflict get ``ValidationSucceeded=False`` (reason ``Conflict``) on their
status. With the gate off, overlays are neither read nor applied."""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
import yaml
from kubernetes import client

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "services"))

from reconcile_fakes import FakeCloud

from nodesmith.adapters.kube import KubeCluster, build_api_client
from nodesmith.handlers import reconcile as reconcile_handler
from nodesmith.handlers import wiring
from nodesmith.handlers.settings import Settings
from nodesmith.sim.kube import KubeEmulator

if TYPE_CHECKING:
    from collections.abc import Iterator

    from nodesmith.services.provisioning.outcome import ReconcileOutcome

MANIFESTS = Path(__file__).resolve().parents[2] / "lambdas" / "nodesmith" / "sim" / "manifests"
OVERLAYS = ("karpenter.sh", "v1alpha1", "nodeoverlays")


def overlay(name: str, *, weight: int | None = None, **spec: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"requirements": spec.pop("requirements", []), **spec}
    if weight is not None:
        body["weight"] = weight
    return {"apiVersion": "karpenter.sh/v1alpha1", "kind": "NodeOverlay", "metadata": {"name": name}, "spec": body}


M5_LARGE = [{"key": "node.kubernetes.io/instance-type", "operator": "In", "values": ["m5.large"]}]


@pytest.fixture
def kube() -> Iterator[KubeEmulator]:
    with KubeEmulator() as emulator:
        for doc in yaml.safe_load_all((MANIFESTS / "nodepool.yaml").read_text()):
            if doc:
                emulator.store.apply(doc)
        emulator.store.create(
            "pods",
            {
                "metadata": {"name": "web", "namespace": "default"},
                "spec": {"containers": [{"name": "web", "resources": {"requests": {"cpu": "1", "memory": "1Gi"}}}]},
                "status": {
                    "phase": "Pending",
                    "conditions": [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}],
                },
            },
        )
        yield emulator


@pytest.fixture
def custom(kube: KubeEmulator) -> Iterator[client.CustomObjectsApi]:
    api = client.ApiClient(client.Configuration(host=kube.endpoint))
    yield client.CustomObjectsApi(api)
    api.close()


def run_pass(kube: KubeEmulator, cloud: FakeCloud, gates: str) -> ReconcileOutcome:
    settings = Settings(cluster_name="demo", cluster_endpoint=kube.endpoint, kube_auth="none", feature_gates=gates)
    cluster = KubeCluster(api_client=build_api_client(cluster_endpoint=kube.endpoint, kube_auth="none"))
    wiring.reset()
    wiring.set_ports(cluster=cluster, cloud=cloud, settings=settings)
    try:
        return reconcile_handler.run_pass(now=cloud.now)
    finally:
        wiring.reset()


def conditions(custom: client.CustomObjectsApi, name: str) -> dict[str, dict[str, Any]]:
    found = custom.get_cluster_custom_object(*OVERLAYS, name)
    return {c["type"]: c for c in (found.get("status") or {}).get("conditions", [])}


def test_an_overlay_price_chooses_the_launched_type_and_marks_the_nodeclaim(
    kube: KubeEmulator, custom: client.CustomObjectsApi
) -> None:
    custom.create_cluster_custom_object(*OVERLAYS, overlay("m5-deal", requirements=M5_LARGE, price="0.001"))
    cloud = FakeCloud(now=time.time(), cluster_name="demo")

    out = run_pass(kube, cloud, "NodeOverlay=true")

    assert not out.errors, out.errors
    [launched] = cloud.instances.values()
    assert launched.instance_type == "m5.large"
    assert cloud.requests[0].price_overlaid
    [claim] = kube.store.objects("nodeclaims.karpenter.sh")
    assert claim["metadata"]["annotations"]["karpenter.sh/price-overlay-applied"] == "true"
    status = conditions(custom, "m5-deal")
    assert (status["ValidationSucceeded"]["status"], status["Ready"]["status"]) == ("True", "True")


def test_with_the_gate_off_overlays_are_ignored(kube: KubeEmulator, custom: client.CustomObjectsApi) -> None:
    custom.create_cluster_custom_object(*OVERLAYS, overlay("m5-deal", requirements=M5_LARGE, price="0.001"))
    cloud = FakeCloud(now=time.time(), cluster_name="demo")

    out = run_pass(kube, cloud, "NodeRepair=false")

    assert not out.errors, out.errors
    [launched] = cloud.instances.values()
    assert launched.instance_type == "c5.large"
    assert not cloud.requests[0].price_overlaid
    [claim] = kube.store.objects("nodeclaims.karpenter.sh")
    assert "karpenter.sh/price-overlay-applied" not in claim["metadata"].get("annotations", {})
    assert conditions(custom, "m5-deal") == {}


def test_equal_weight_overlays_on_one_offering_conflict_on_their_status(
    kube: KubeEmulator, custom: client.CustomObjectsApi
) -> None:
    custom.create_cluster_custom_object(*OVERLAYS, overlay("m5-deal", weight=5, requirements=M5_LARGE, price="0.001"))
    custom.create_cluster_custom_object(*OVERLAYS, overlay("general-markup", weight=5, priceAdjustment="+50%"))
    cloud = FakeCloud(now=time.time(), cluster_name="demo")

    out = run_pass(kube, cloud, "NodeOverlay=true")

    assert not out.errors, out.errors
    loser, winner = conditions(custom, "general-markup"), conditions(custom, "m5-deal")
    assert (winner["ValidationSucceeded"]["status"], winner["Ready"]["status"]) == ("True", "True")
    for type_ in ("ValidationSucceeded", "Ready"):
        assert loser[type_]["status"] == "False"
        assert loser[type_]["reason"] == "Conflict"
        assert loser[type_]["message"] == "conflict with another overlay"
    sent = {it.name: it for it in cloud.requests[0].instance_types}
    base = {it.name: it for it in FakeCloud().types}
    assert sent["c5.large"].offerings == base["c5.large"].offerings, "the conflicting markup is applied nowhere"
    assert {o.price for o in sent["m5.large"].offerings} == {0.001}
    version = custom.get_cluster_custom_object(*OVERLAYS, "general-markup")["metadata"]["resourceVersion"]
    run_pass(kube, FakeCloud(now=time.time(), cluster_name="demo"), "NodeOverlay=true")
    after = custom.get_cluster_custom_object(*OVERLAYS, "general-markup")["metadata"]["resourceVersion"]
    assert after == version, "an unchanged verdict is not written again"


def test_an_overlay_failing_runtime_validation_is_reported_on_its_status(
    kube: KubeEmulator, custom: client.CustomObjectsApi
) -> None:
    restricted = [{"key": "karpenter.sh/team", "operator": "In", "values": ["a"]}]
    custom.create_cluster_custom_object(*OVERLAYS, overlay("team-a", requirements=restricted, price="0.001"))
    cloud = FakeCloud(now=time.time(), cluster_name="demo")

    out = run_pass(kube, cloud, "NodeOverlay=true")

    assert not out.errors, out.errors
    status = conditions(custom, "team-a")["ValidationSucceeded"]
    assert (status["status"], status["reason"]) == ("False", "RuntimeValidation")
    assert "restricted" in status["message"]
    [launched] = cloud.instances.values()
    assert launched.instance_type == "c5.large"
