"""Watch mode's batch pass (``provision_first``) launches for its pending pods before it writes the
registration of nodes that joined meanwhile; the registration still happens in the same pass, and
the registered node's capacity counts either way."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from reconcile_fakes import FakeCloud, FakeCluster, make_nodeclass, make_nodepool, make_pod, node_for

from nodesmith.services.reconcile import reconcile

if TYPE_CHECKING:
    from collections.abc import Mapping

    from nodesmith.core.ports import LaunchRequest, LaunchResult


@dataclass
class Calls:
    order: list[str] = field(default_factory=list)


@dataclass
class OrderedCluster(FakeCluster):
    calls: Calls = field(default_factory=Calls)

    def label_node(self, *, node_name: str, labels: Mapping[str, str]) -> None:
        self.calls.order.append("register")
        super().label_node(node_name=node_name, labels=labels)


@dataclass
class OrderedCloud(FakeCloud):
    calls: Calls = field(default_factory=Calls)

    def create(self, *, request: LaunchRequest) -> LaunchResult:
        self.calls.order.append("CreateFleet")
        return super().create(request=request)


def _joined_node_and_new_pod(calls: Calls) -> tuple[OrderedCluster, OrderedCloud]:
    cluster = OrderedCluster(nodepools=[make_nodepool()], nodeclasses=[make_nodeclass()], calls=calls)
    cloud = OrderedCloud(calls=calls)
    cluster.pods = [make_pod("first", cpu="1")]
    reconcile(cluster=cluster, cloud=cloud, cluster_name="test", now=1000.0)
    (claim,) = cluster.nodeclaims.values()
    (instance,) = cloud.instances.values()
    cluster.nodes.append(node_for(instance, claim, ready=True))  # its kubelet joined; not registered yet
    cluster.pods.append(make_pod("big", cpu="3"))  # does not fit the joined node: needs a new one
    calls.order.clear()
    return cluster, cloud


def test_the_batch_pass_calls_createfleet_before_registering_the_joined_node() -> None:
    calls = Calls()
    cluster, cloud = _joined_node_and_new_pod(calls)
    out = reconcile(cluster=cluster, cloud=cloud, cluster_name="test", now=1010.0, provision_first=True)
    assert calls.order[0] == "CreateFleet" and "register" in calls.order
    assert out.nodeclaims_launched == 1 and out.nodeclaims_registered == 1


def test_a_full_pass_still_registers_first() -> None:
    calls = Calls()
    cluster, cloud = _joined_node_and_new_pod(calls)
    out = reconcile(cluster=cluster, cloud=cloud, cluster_name="test", now=1010.0)
    assert calls.order[0] == "register" and "CreateFleet" in calls.order
    assert out.nodeclaims_launched == 1 and out.nodeclaims_registered == 1
