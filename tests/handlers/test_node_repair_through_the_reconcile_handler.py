"""Node repair end to end on the Kubernetes side: the reconcile handler's disruption pass, with the real Kubernetes
adapter talking to the API emulator, repairs a node whose ``Ready`` condition stayed ``False`` past the AWS
policy's 30 minutes (Karpenter v1.15 ``repair.go``, ``[aws]`` ``RepairPolicies``): a replacement is launched
first, and once it is initialized the node's termination is requested with reason ``Unhealthy``. Not before the
toleration, not with ``karpenter.sh/do-not-repair``, not when more than 20% of the NodePool is unhealthy, not
with the ``NodeRepair`` feature gate off."""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "services"))

from reconcile_fakes import FakeCloud, FakeQueue

from nodesmith.adapters.kube import KubeCluster, build_api_client
from nodesmith.core.timestamps import to_rfc3339
from nodesmith.handlers import reconcile as reconcile_handler
from nodesmith.handlers import wiring
from nodesmith.handlers.settings import Settings
from nodesmith.services.ports import Ports
from nodesmith.services.provisioning.reconcile import reconcile
from nodesmith.services.reconciler.container import WarmContainer
from nodesmith.sim.kube import KubeEmulator

if TYPE_CHECKING:
    from collections.abc import Iterator

    from nodesmith.services.disruption.service import DisruptionOutcome

MANIFESTS = Path(__file__).resolve().parents[2] / "lambdas" / "nodesmith" / "sim" / "manifests"
NODECLAIMS = "nodeclaims.karpenter.sh"
MINUTE = 60.0
GATE_ON = "NodeRepair=true"


@dataclass
class World:
    kube: KubeEmulator
    cluster: KubeCluster
    cloud: FakeCloud
    queue: FakeQueue
    nodes: list[str]

    @property
    def store(self) -> Any:
        return self.kube.store

    def reconcile(self) -> None:
        self.cloud.now = time.time()
        out = reconcile(ports=Ports(cluster=self.cluster, cloud=self.cloud, cluster_name="demo"), now=self.cloud.now)
        assert not out.errors, out.errors

    def register_nodes(self) -> list[str]:
        """A Ready Node (as its kubelet registers it) for every launched NodeClaim that has none yet."""
        made = []
        known = {n["spec"].get("providerID") for n in self.store.objects("nodes")}
        for claim in self.store.objects(NODECLAIMS):
            pid = (claim.get("status") or {}).get("providerID")
            if not pid or pid in known:
                continue
            instance = next(i for i in self.cloud.instances.values() if i.provider_id == pid)
            name = instance.private_dns_name
            status = claim["status"]
            self.store.apply({
                "apiVersion": "v1", "kind": "Node",
                "metadata": {"name": name, "labels": {
                    **claim["metadata"].get("labels", {}),
                    "node.kubernetes.io/instance-type": instance.instance_type,
                    "topology.kubernetes.io/zone": instance.zone,
                    "karpenter.sh/capacity-type": instance.capacity_type,
                    "kubernetes.io/hostname": name,
                }},
                "spec": {"providerID": pid},
                "status": {"allocatable": status.get("allocatable", {}), "capacity": status.get("capacity", {}),
                           "conditions": [{"type": "Ready", "status": "True",
                                           "lastTransitionTime": to_rfc3339(time.time())}]},
            })  # fmt: skip
            made.append(name)
        return made

    def unhealthy(self, node: str, *, minutes: float, status: str = "False") -> None:
        """``node``'s ``Ready`` condition turned ``status`` ``minutes`` ago."""
        since = to_rfc3339(time.time() - minutes * MINUTE)

        def edit(obj: dict[str, Any]) -> None:
            obj["status"]["conditions"] = [{"type": "Ready", "status": status, "lastTransitionTime": since}]

        self.store.mutate("nodes", node, edit)

    def disrupt(self, gates: str = GATE_ON) -> list[DisruptionOutcome]:
        """Two passes of the reconcile handler's disruption, the second after the 15 s validation delay."""
        settings = Settings(
            cluster_name="demo", cluster_endpoint=self.kube.endpoint, kube_auth="none", feature_gates=gates
        )
        wiring.reset()
        wiring.set_ports(cluster=self.cluster, cloud=self.cloud, queue=self.queue, settings=settings)
        outs = []
        try:
            start = time.time()
            for now in (start, start + 16):
                out = reconcile_handler.run_disruption(now=now)
                assert out is not None and not out.errors, out
                outs.append(out)
        finally:
            wiring.reset()
        return outs

    def node_events(self, node: str, reason: str) -> list[str]:
        return [
            e["message"]
            for e in self.store.objects("events")
            if e["involvedObject"]["kind"] == "Node" and e["involvedObject"]["name"] == node and e["reason"] == reason
        ]

    def tainted(self, node: str) -> bool:
        taints = self.store.get("nodes", node)["spec"].get("taints") or []
        return any(t["key"] == "karpenter.sh/disrupted" for t in taints)


@pytest.fixture(autouse=True)
def _fresh_handler_state() -> Iterator[None]:
    reconcile_handler._CONTAINER = WarmContainer()
    yield
    reconcile_handler._CONTAINER = WarmContainer()


@pytest.fixture
def kube() -> Iterator[KubeEmulator]:
    with KubeEmulator() as emulator:
        for doc in yaml.safe_load_all((MANIFESTS / "nodepool.yaml").read_text()):
            if doc and doc["kind"] == "NodePool":
                doc["spec"]["disruption"]["budgets"] = [{"nodes": "100%"}]
            if doc:
                emulator.store.apply(doc)
        yield emulator


def running(kube: KubeEmulator, count: int) -> World:
    """``count`` initialized nodes, one ``web`` pod on each (required anti-affinity: a pod moves only to a new
    node)."""
    store = kube.store
    for i in range(count):
        store.create(
            "pods",
            {
                "metadata": {"name": f"web-{i}", "namespace": "default", "labels": {"app": "web"}},
                "spec": {
                    "containers": [{"name": "web", "resources": {"requests": {"cpu": "1", "memory": "1Gi"}}}],
                    "affinity": {
                        "podAntiAffinity": {
                            "requiredDuringSchedulingIgnoredDuringExecution": [
                                {
                                    "labelSelector": {"matchLabels": {"app": "web"}},
                                    "topologyKey": "kubernetes.io/hostname",
                                }
                            ]
                        }
                    },
                },
                "status": {
                    "phase": "Pending",
                    "conditions": [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}],
                },
            },
        )
    cluster = KubeCluster(api_client=build_api_client(cluster_endpoint=kube.endpoint, kube_auth="none"))
    world = World(
        kube=kube, cluster=cluster, cloud=FakeCloud(now=time.time(), cluster_name="demo"), queue=FakeQueue(), nodes=[]
    )
    world.reconcile()
    world.nodes = sorted(world.register_nodes())
    assert len(world.nodes) == count
    started = to_rfc3339(time.time())
    for i, node in enumerate(world.nodes):
        store.bind(f"web-{i}", namespace="default", node_name=node)

        def run(obj: dict[str, Any]) -> None:
            obj["status"] = {**obj.get("status", {}), "phase": "Running", "startTime": started}

        store.mutate("pods", f"web-{i}", run, namespace="default")
    world.reconcile()
    claims = store.objects(NODECLAIMS)
    assert all(
        any(c["type"] == "Initialized" and c["status"] == "True" for c in nc["status"].get("conditions", []))
        for nc in claims
    ), "the NodeClaims did not initialize"
    return world


def test_a_node_not_ready_for_31_minutes_is_replaced_then_terminated_for_reason_unhealthy(kube: KubeEmulator) -> None:
    world = running(kube, 2)
    sick = world.nodes[0]
    world.unhealthy(sick, minutes=31)
    claims_before = {c["metadata"]["name"] for c in world.store.objects(NODECLAIMS)}

    found, executed = world.disrupt()

    assert found.candidates == [sick] and executed.executed == {"repair": 1}
    assert world.tainted(sick) and world.node_events(sick, "DisruptionLaunching")
    (replacement,) = {c["metadata"]["name"] for c in world.store.objects(NODECLAIMS)} - claims_before
    assert not world.queue.sent  # the replacement comes first: nothing is drained yet

    world.register_nodes()
    world.reconcile()  # the replacement registers and initializes
    settings = Settings(cluster_name="demo", cluster_endpoint=kube.endpoint, kube_auth="none", feature_gates=GATE_ON)
    wiring.set_ports(cluster=world.cluster, cloud=world.cloud, queue=world.queue, settings=settings)
    try:
        reconcile_handler.run_disruption(now=time.time() + 30)
    finally:
        wiring.reset()

    (request,) = world.queue.sent
    assert request.reason == "Unhealthy" and request.nodeclaim != replacement
    claim = world.store.get(NODECLAIMS, request.nodeclaim)
    assert claim["metadata"].get("deletionTimestamp")
    assert claim["metadata"]["annotations"]["nodesmith.dev/termination-reason"] == "Unhealthy"
    assert claim["status"]["nodeName"] == sick


def test_a_node_not_ready_for_29_minutes_is_left_alone(kube: KubeEmulator) -> None:
    world = running(kube, 2)
    world.unhealthy(world.nodes[0], minutes=29, status="Unknown")
    _, executed = world.disrupt()
    assert "repair" not in executed.executed and not world.tainted(world.nodes[0])


def test_do_not_repair_is_honoured(kube: KubeEmulator) -> None:
    world = running(kube, 2)
    sick = world.nodes[0]
    world.unhealthy(sick, minutes=31)

    def veto(obj: dict[str, Any]) -> None:
        obj["metadata"].setdefault("annotations", {})["karpenter.sh/do-not-repair"] = "true"

    world.store.mutate("nodes", sick, veto)
    _, executed = world.disrupt()
    assert "repair" not in executed.executed and not world.tainted(sick)


def test_no_repair_when_more_than_20_percent_of_the_nodepool_is_unhealthy(kube: KubeEmulator) -> None:
    world = running(kube, 4)
    for node in world.nodes[:2]:  # 2 of 4 > ceil(20% x 4) = 1
        world.unhealthy(node, minutes=31)
    _, executed = world.disrupt()
    assert "repair" not in executed.executed
    assert not any(world.tainted(n) for n in world.nodes)
    blocked = world.node_events(world.nodes[0], "NodeRepairBlocked")
    assert blocked and "more than 20%" in blocked[0]


def test_no_repair_with_the_feature_gate_off(kube: KubeEmulator) -> None:
    world = running(kube, 2)
    world.unhealthy(world.nodes[0], minutes=31)
    _, executed = world.disrupt(gates="NodeRepair=false")
    assert "repair" not in executed.executed and not world.tainted(world.nodes[0])
