"""Reconcile asks the cloud for each EC2NodeClass's instance types and schedules every NodePool from
its own node class's (Karpenter's ``GetInstanceTypes(nodePool)``): maxPods and subnets' zones differ
per node class, so the same pods land on differently shaped NodeClaims."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

from reconcile_fakes import FakeCloud, FakeCluster, catalogue, make_nodeclass, make_nodepool, make_pod

from nodesmith.services.ports import Ports
from nodesmith.services.provisioning.reconcile import reconcile

if TYPE_CHECKING:
    from nodesmith.core.api.ec2nodeclass import EC2NodeClass
    from nodesmith.core.api.nodepool import NodePool
    from nodesmith.core.model import InstanceType

POOL = "karpenter.sh/nodepool"


def _shaped(*, pods: int, zones: frozenset[str]) -> list[InstanceType]:
    """The fake catalogue as a node class with kubelet ``maxPods`` and subnets in ``zones`` would see it."""
    return [
        replace(
            it,
            capacity={**it.capacity, "pods": pods},
            offerings=tuple(replace(o, available=o.available and o.zone in zones) for o in it.offerings),
        )
        for it in catalogue()
    ]


@dataclass
class PerNodeClassCloud(FakeCloud):
    """``instance_types`` answers per node class (keyed by its ``spec.kubelet.maxPods``) and counts calls."""

    by_max_pods: dict[int, list[InstanceType]] = field(default_factory=dict)
    asked: list[str] = field(default_factory=list)

    def instance_types(self, *, nodeclass: EC2NodeClass | None = None) -> list[InstanceType]:
        assert nodeclass is not None and nodeclass.spec.kubelet is not None
        self.asked.append(nodeclass.name)
        return list(self.by_max_pods[nodeclass.spec.kubelet.max_pods or 0])


def _nodeclass(name: str, *, max_pods: int) -> EC2NodeClass:
    nc = make_nodeclass(name)
    return nc.model_validate(
        {**nc.model_dump(by_alias=True, exclude_none=True), "spec": {**_spec(nc), "kubelet": {"maxPods": max_pods}}}
    )


def _spec(nc: EC2NodeClass) -> dict[str, object]:
    return nc.spec.model_dump(by_alias=True, exclude_none=True)


def _pool(name: str, nodeclass: str) -> NodePool:
    np = make_nodepool(name)
    raw = np.model_dump(by_alias=True, exclude_none=True)
    raw["spec"]["template"]["spec"]["nodeClassRef"]["name"] = nodeclass
    return np.model_validate(raw)


def test_two_nodepools_get_their_own_nodeclass_allocatable_and_zones() -> None:
    cloud = PerNodeClassCloud(
        by_max_pods={
            110: _shaped(pods=110, zones=frozenset({"us-east-1a", "us-east-1b"})),
            4: _shaped(pods=4, zones=frozenset({"us-east-1b"})),
        }
    )
    cluster = FakeCluster(
        nodepools=[_pool("dense", "dense"), _pool("sparse", "sparse")],
        nodeclasses=[_nodeclass("dense", max_pods=110), _nodeclass("sparse", max_pods=4)],
    )
    cluster.pods = [make_pod(f"d{i}", cpu="10m", memory="16Mi", node_selector={POOL: "dense"}) for i in range(6)]
    cluster.pods += [make_pod(f"s{i}", cpu="10m", memory="16Mi", node_selector={POOL: "sparse"}) for i in range(6)]

    out = reconcile(ports=Ports(cluster=cluster, cloud=cloud, cluster_name="test"), now=1000.0)

    assert out.unschedulable == {} and out.errors == []
    requests = {pool: [r for r in cloud.requests if r.nodepool_name == pool] for pool in ("dense", "sparse")}
    # maxPods 110 holds six pods on one node; maxPods 4 needs two nodes for six pods.
    assert len(requests["dense"]) == 1 and len(requests["sparse"]) == 2
    assert {it.capacity["pods"] for r in requests["sparse"] for it in r.instance_types} == {4}
    assert {it.capacity["pods"] for it in requests["dense"][0].instance_types} == {110}
    # The sparse node class has subnets in us-east-1b only.
    assert {cloud.instances[i].zone for i in cloud.instances if cloud.instances[i].tags.get(POOL) == "sparse"} == {
        "us-east-1b"
    }
    sparse_claims = [nc for nc in cluster.nodeclaims.values() if nc.nodepool_name == "sparse"]
    assert {nc.status.allocatable["pods"] for nc in sparse_claims} == {"4"}


def test_node_classes_with_the_same_spec_are_asked_for_once_per_pass() -> None:
    cloud = PerNodeClassCloud(by_max_pods={8: _shaped(pods=8, zones=frozenset({"us-east-1a", "us-east-1b"}))})
    cluster = FakeCluster(
        nodepools=[_pool("one", "a"), _pool("two", "b")],
        nodeclasses=[_nodeclass("a", max_pods=8), _nodeclass("b", max_pods=8)],
        pods=[make_pod("p", node_selector={POOL: "two"})],
    )

    out = reconcile(ports=Ports(cluster=cluster, cloud=cloud, cluster_name="test"), now=1000.0)

    assert cloud.asked == ["a"] and out.pods_scheduled == 1
