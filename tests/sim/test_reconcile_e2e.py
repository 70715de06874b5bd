"""End to end on the embedded AWS (moto server) and Kubernetes emulator, with the reconcile Lambda
handler invoked in-process: a Deployment of 5 pods -> NodeClaims -> CreateFleet instances -> Nodes
-> pods Running. The simulated components are stepped by hand so the test is deterministic."""

from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
import yaml

from nodesmith.handlers import wiring
from nodesmith.sim import aws as embedded_aws
from nodesmith.sim.controllers import SimControllers
from nodesmith.sim.kube import KubeEmulator
from nodesmith.sim.kube_scheduler import SimScheduler
from nodesmith.sim.kubelet import SimKubelet

if TYPE_CHECKING:
    from collections.abc import Iterator

pytestmark = pytest.mark.slow

CLUSTER = "demo"  # the demo manifests select subnets/security groups tagged karpenter.sh/discovery=demo
MANIFESTS = Path(__file__).resolve().parents[2] / "lambdas" / "nodesmith" / "sim" / "manifests"


class Context:
    function_name = "nodesmith-reconcile"
    memory_limit_in_mb = 1024
    invoked_function_arn = "arn:aws:lambda:us-east-1:123456789012:function:nodesmith-reconcile"
    aws_request_id = "e2e"

    def get_remaining_time_in_millis(self) -> int:
        return 300_000


@pytest.fixture
def world(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[KubeEmulator, Any]]:
    aws = embedded_aws.start()
    aws.reset()  # moto's backends belong to the process: another test's world may have seeded them already
    emulator = KubeEmulator()
    try:
        embedded_aws.seed(cluster_name=CLUSTER)
        prices = embedded_aws.write_price_table(path=tmp_path / "prices.json")
        endpoint = emulator.start()
        monkeypatch.setenv("NODESMITH_CLUSTER_NAME", CLUSTER)
        monkeypatch.setenv("NODESMITH_CLUSTER_ENDPOINT", endpoint)
        monkeypatch.setenv("NODESMITH_KUBE_AUTH", "none")
        monkeypatch.setenv("NODESMITH_PRICE_TABLE", str(prices))
        wiring.reset()
        for path in ("nodepool.yaml", "inflate.yaml"):
            for doc in yaml.safe_load_all((MANIFESTS / path).read_text()):
                if doc:
                    emulator.store.apply(doc)
        yield emulator, aws
    finally:
        wiring.reset()
        emulator.stop()
        aws.stop()


def conditions(obj: dict[str, Any]) -> dict[str, str]:
    return {c["type"]: c["status"] for c in (obj.get("status") or {}).get("conditions") or []}


def test_a_scaled_deployment_gets_nodes_and_its_pods_run(world: tuple[KubeEmulator, Any]) -> None:
    from nodesmith.handlers.reconcile import handler

    emulator, aws = world
    store = emulator.store
    cloud = wiring.build_cloud(wiring.get_settings())
    controllers = SimControllers(store=store)
    scheduler = SimScheduler(store=store)
    kubelet = SimKubelet(store=store, instances=cloud.list_instances, ready_delay=0.0)

    store.mutate("deployments.apps", "inflate", lambda d: d["spec"].update(replicas=5), namespace="default")
    controllers.step(time.time())
    scheduler.step(time.time())  # no nodes: all five Unschedulable
    assert len(store.objects("pods")) == 5

    first = handler({"source": "aws.events", "detail-type": "Scheduled Event"}, Context())

    assert first["pods_pending"] == 5 and first["pods_scheduled"] == 5, first
    assert first["nodeclaims_launched"] >= 1 and not first["errors"], first
    claims = store.objects("nodeclaims.karpenter.sh")
    assert len(claims) == first["nodeclaims_launched"]
    assert all(conditions(c).get("Launched") == "True" for c in claims)
    reservations = aws.client("ec2").describe_instances(
        Filters=[{"Name": "tag-key", "Values": ["karpenter.sh/nodeclaim"]}]
    )["Reservations"]
    running = [i for r in reservations for i in r["Instances"] if i["State"]["Name"] in ("pending", "running")]
    assert len(running) == len(claims)

    second = handler({}, Context())  # pods still pending, capacity in flight: no second launch
    assert second["nodeclaims_created"] == 0 and second["pods_awaiting_capacity"] == 5, second

    kubelet.step(time.time())  # register
    kubelet.step(time.time())  # Ready
    third = handler({}, Context())
    assert third["nodeclaims_registered"] == len(claims) and third["nodeclaims_initialized"] == len(claims), third
    assert all(conditions(c).get("Ready") == "True" for c in store.objects("nodeclaims.karpenter.sh"))

    scheduler.step(time.time())
    pods = store.objects("pods")
    nodes = {n["metadata"]["name"]: n for n in store.objects("nodes")}
    assert all(p["status"]["phase"] == "Running" for p in pods)
    assert {p["spec"]["nodeName"] for p in pods} <= set(nodes)
    for node in nodes.values():
        labels = node["metadata"]["labels"]
        assert labels["karpenter.sh/nodepool"] == "default"
        assert labels["karpenter.sh/registered"] == "true" and labels["karpenter.sh/initialized"] == "true"
        assert node["spec"]["providerID"].startswith("aws:///us-east-1")
