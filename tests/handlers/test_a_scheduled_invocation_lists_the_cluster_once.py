"""One scheduled reconcile invocation reads the cluster once: provisioning, garbage collection and the disruption
pass decide on one snapshot, so a container's first invocation lists pods, Nodes and NodeClaims once (counted by the
API emulator) and EC2's fleet at most once (when garbage collection is due), whatever the pass does between its
provisioning and its disruption; a warm container's next invocation lists none of them, and reads what changed
since through one watch each. The catalogue (the EC2NodeClass resolution and instance types) is warmed while the
pass lists the cluster, not after, by a scheduled invocation and by a wake's first pass."""

from __future__ import annotations

import gc
import sys
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "services"))

from reconcile_fakes import FakeCloud, FakeQueue

from nodesmith.adapters.kube import KubeCluster, build_api_client
from nodesmith.handlers import heap, wiring
from nodesmith.handlers import reconcile as reconcile_handler
from nodesmith.handlers.settings import Settings
from nodesmith.services.reconciler.container import WarmContainer
from nodesmith.sim.kube import KubeEmulator

if TYPE_CHECKING:
    from collections.abc import Iterator

MANIFESTS = Path(__file__).resolve().parents[2] / "lambdas" / "nodesmith" / "sim" / "manifests"
NODECLAIMS = "nodeclaims.karpenter.sh"


class Context:
    function_name = "nodesmith-reconcile"
    memory_limit_in_mb = 1024
    invoked_function_arn = "arn:aws:lambda:us-east-1:123456789012:function:nodesmith-reconcile"
    aws_request_id = "req-1"

    def get_remaining_time_in_millis(self) -> int:
        return 60_000


class CountingCloud(FakeCloud):
    """The fake cloud, counting how often the whole fleet is listed."""

    listed = 0

    def list_instances(self) -> Any:
        self.listed += 1
        return super().list_instances()


def _pod(name: str, cpu: str) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "namespace": "default", "labels": {"app": "web"}},
        "spec": {"containers": [{"name": "web", "resources": {"requests": {"cpu": cpu, "memory": "1Gi"}}}]},
        "status": {"phase": "Pending", "conditions": [{"type": "PodScheduled", "status": "False",
                                                         "reason": "Unschedulable"}]},
    }  # fmt: skip


@pytest.fixture
def world() -> Iterator[tuple[KubeEmulator, CountingCloud]]:
    reconcile_handler._CONTAINER = WarmContainer()
    with KubeEmulator() as kube:
        for doc in yaml.safe_load_all((MANIFESTS / "nodepool.yaml").read_text()):
            if doc:
                kube.store.apply(doc)
        cloud = CountingCloud(now=time.time(), cluster_name="demo")
        api = build_api_client(cluster_endpoint=kube.endpoint, kube_auth="none")
        cluster = KubeCluster(api_client=api, relist_below=0)  # catches up by watch however few objects a kind has
        settings = Settings(cluster_name="demo", cluster_endpoint=kube.endpoint, kube_auth="none")
        wiring.reset()
        wiring.set_ports(cluster=cluster, cloud=cloud, queue=FakeQueue(), settings=settings)
        try:
            yield kube, cloud
        finally:
            wiring.reset()
            reconcile_handler._CONTAINER = WarmContainer()


def _register(kube: KubeEmulator, cloud: FakeCloud) -> list[str]:
    """A Ready Node, as its kubelet registers it, for every launched NodeClaim."""
    names = []
    for claim in kube.store.objects(NODECLAIMS):
        pid = claim["status"]["providerID"]
        instance = next(i for i in cloud.instances.values() if i.provider_id == pid)
        kube.store.apply({
            "apiVersion": "v1", "kind": "Node",
            "metadata": {"name": instance.private_dns_name, "labels": {
                **claim["metadata"].get("labels", {}),
                "node.kubernetes.io/instance-type": instance.instance_type,
                "topology.kubernetes.io/zone": instance.zone,
                "karpenter.sh/capacity-type": instance.capacity_type,
                "kubernetes.io/hostname": instance.private_dns_name,
            }},
            "spec": {"providerID": pid},
            "status": {"allocatable": claim["status"]["allocatable"], "capacity": claim["status"]["capacity"],
                       "conditions": [{"type": "Ready", "status": "True"}]},
        })  # fmt: skip
        names.append(instance.private_dns_name)
    return names


def test_a_scheduled_invocation_lists_pods_nodes_and_nodeclaims_once(
    world: tuple[KubeEmulator, CountingCloud],
) -> None:
    kube, cloud = world
    for i in range(3):
        kube.store.create("pods", _pod(f"web-{i}", "1"))
    thresholds = gc.get_threshold()
    gc.set_threshold(700, 10, 10)  # CPython's default, as a new container starts
    try:
        first = reconcile_handler.handler({"source": "aws.events", "detail-type": "Scheduled Event"}, Context())
        assert gc.get_threshold() == (heap.YOUNG_THRESHOLD, 10, 10)  # the collector tuned for a heap of the cluster
    finally:
        gc.set_threshold(*thresholds)
    assert first["nodeclaims_launched"] >= 1 and "disruption" in first
    assert kube.operations["list pods"] == 1
    assert kube.operations["list nodes"] == 1
    assert kube.operations["list nodeclaims"] == 1
    assert cloud.listed == 1

    nodes = _register(kube, cloud)
    for i, node in enumerate(nodes):
        kube.store.bind(f"web-{i}", namespace="default", node_name=node)
    kube.store.create("pods", _pod("late", "64"))  # fits nothing: the second pass has work to do too
    kube.operations.clear()
    cloud.listed = 0
    second = reconcile_handler.handler({"source": "aws.events", "detail-type": "Scheduled Event"}, Context())
    assert second["nodeclaims_registered"] == len(nodes) and "disruption" in second
    assert not second["errors"] and not second["disruption"]["errors"], second
    assert second["pods_pending"] == 3 - len(nodes) + 1  # the bindings and the new pod were read, not listed
    for kind in ("pods", "nodes", "nodeclaims"):
        assert kube.operations[f"list {kind}"] == 0 and kube.operations[f"watch {kind}"] == 1, kube.operations
    # within Karpenter's 2-minute garbage collection interval: the fleet is not listed again, and drift reads the
    # registered nodes' instances by id (the cloud provider answers from what it already described)
    assert cloud.listed == 0 and not second["garbage_collected"]
    assert sorted(cloud.facts_read) == sorted(
        n.instance_id for n in cloud.instances.values() if n.private_dns_name in nodes
    )


class ListingCluster(KubeCluster):
    """The pass's first pod list meets the catalogue warm-up: each waits (at most 10 s) for the other to begin."""

    def __init__(self, *, api_client: Any, warming: threading.Event) -> None:
        super().__init__(api_client=api_client)
        self.listing, self.warming = threading.Event(), warming
        self.met: list[bool] = []

    def list_pods(self, *, node_name: str | None = None) -> Any:
        if not self.listing.is_set():
            self.listing.set()
            self.met.append(self.warming.wait(10))
        return super().list_pods(node_name=node_name)


class WarmingCloud(FakeCloud):
    """A cloud provider whose catalogue warm-up waits (at most 10 s) for the pass's pod list to begin."""

    def __init__(self, *, listing: list[threading.Event], **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.warming, self.listing = threading.Event(), listing
        self.met: list[bool] = []

    def prefetch(self, *, nodeclass: Any) -> Any:
        self.warming.set()
        self.met.append(self.listing[0].wait(10))
        return self.instance_types(nodeclass=nodeclass)


class AlmostDone(Context):
    """30 s left: a wake's burst watch has no time to run after its first pass."""

    def get_remaining_time_in_millis(self) -> int:
        return 30_000


@pytest.mark.parametrize("woken", [False, True], ids=["scheduled", "wake"])
def test_a_pass_warms_the_catalogue_while_it_lists_the_cluster(
    world: tuple[KubeEmulator, CountingCloud], woken: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    from nodesmith.adapters.aws.wake import provision_event

    monkeypatch.setattr(reconcile_handler, "_CONTAINER", WarmContainer())  # a new container serves any wake
    kube, _ = world
    kube.store.create("pods", _pod("web-0", "1"))
    listing: list[threading.Event] = []
    cloud = WarmingCloud(listing=listing, now=time.time(), cluster_name="demo")
    cluster = ListingCluster(
        api_client=build_api_client(cluster_endpoint=kube.endpoint, kube_auth="none"), warming=cloud.warming
    )
    listing.append(cluster.listing)
    settings = Settings(cluster_name="demo", cluster_endpoint=kube.endpoint, kube_auth="none")
    wiring.set_ports(cluster=cluster, cloud=cloud, queue=FakeQueue(), settings=settings)
    event = provision_event(time.time()) if woken else {"source": "aws.events", "detail-type": "Scheduled Event"}
    summary = reconcile_handler.handler(event, AlmostDone())
    assert summary["nodeclaims_launched"] == 1, summary
    assert cluster.met == [True] and cloud.met == [True]  # the warm-up and the pod list were under way at once
