"""The full-cluster builder (``nodesmith.sim.full_cluster.fill``) the scale and latency benchmarks share: the demo's
NodePool without limits, Ready nodes full of Running pods, unschedulable pods, and Nodes the simulated kubelet keeps
as its own when asked."""

from __future__ import annotations

import time

import pytest

from nodesmith.core.objects import node_from_dict, pod_from_dict
from nodesmith.sim import aws as embedded_aws
from nodesmith.sim.fleet import KubeletInstances
from nodesmith.sim.full_cluster import FullCluster, fill
from nodesmith.sim.kube import Store
from nodesmith.sim.kubelet import MANAGED_ANNOTATION, SimKubelet

pytestmark = [pytest.mark.slow]

CLUSTER = "demo"


@pytest.fixture
def aws(aws: embedded_aws.EmbeddedAws) -> embedded_aws.EmbeddedAws:
    """The shared embedded AWS, seeded for :data:`CLUSTER`."""
    embedded_aws.seed(cluster_name=CLUSTER)
    return aws


def test_the_running_pods_share_each_nodes_allocatable_cpu() -> None:
    assert FullCluster(nodes=10, pods=100).pods_per_node == 10
    assert FullCluster(nodes=10, pods=100).running_pod_cpu == "190m"  # m5.large: 1930m allocatable
    assert FullCluster(nodes=3, pods=10).pods_per_node == 4
    assert FullCluster(nodes=3, pods=10).running_pod_cpu == "480m"
    assert FullCluster(nodes=1, pods=1000).running_pod_cpu == "10m"


@pytest.mark.parametrize(("nodes", "pods", "pending"), [(0, 10, 0), (2, -1, 0), (2, 10, -3)])
def test_an_impossible_cluster_is_refused_naming_its_numbers(nodes: int, pods: int, pending: int) -> None:
    with pytest.raises(ValueError, match=f"nodes={nodes}, pods={pods}, pending={pending}"):
        FullCluster(nodes=nodes, pods=pods, pending=pending)


def test_fill_builds_full_ready_nodes_and_unschedulable_pods(aws: embedded_aws.EmbeddedAws) -> None:
    store = Store(seed=7)
    shape = FullCluster(nodes=3, pods=12, pending=2, pending_cpu="1500m")

    built = fill(store=store, ec2=aws.client("ec2"), cluster_name=CLUSTER, shape=shape)

    assert built == {"running_pod_cpu": "480m", "pods_per_node": 4}
    assert "limits" not in store.get("nodepools.karpenter.sh", "default")["spec"]
    nodes = [node_from_dict(n) for n in store.objects("nodes")]
    assert len(nodes) == 3
    assert all(n.ready and n.provider_id for n in nodes)
    pods = [pod_from_dict(p) for p in store.objects("pods")]
    by_node: dict[str, int] = {}
    for pod in pods:
        if pod.node_name:
            by_node[pod.node_name] = by_node.get(pod.node_name, 0) + pod.requests["cpu"]
    assert sorted(by_node) == sorted(n.name for n in nodes)
    assert all(used == 4 * 480 for used in by_node.values())  # full: 1920m of 1930m
    pending = [p for p in pods if not p.node_name]
    assert len(pending) == 2
    assert all(p.unschedulable and p.requests["cpu"] == 1500 for p in pending)
    assert not any(MANAGED_ANNOTATION in n.annotations for n in nodes)


def test_nodes_the_kubelet_manages_are_not_registered_again(aws: embedded_aws.EmbeddedAws) -> None:
    store = Store(seed=7)
    fill(store=store, ec2=aws.client("ec2"), cluster_name=CLUSTER, shape=FullCluster(nodes=2, pods=4),
         kubelet_managed=True)  # fmt: skip
    before = {n["metadata"]["name"]: n["metadata"]["resourceVersion"] for n in store.objects("nodes")}
    assert all(MANAGED_ANNOTATION in n["metadata"]["annotations"] for n in store.objects("nodes"))

    kubelet = SimKubelet(store=store, instances=KubeletInstances(ec2=aws.client("ec2"), store=store), ready_delay=0)
    kubelet.step(time.time())
    kubelet.step(time.time() + 1)

    after = {n["metadata"]["name"]: n["metadata"]["resourceVersion"] for n in store.objects("nodes")}
    assert after == before  # Ready already: the kubelet keeps them as they are
