"""Watch mode's batch pass (``provision_first``) launches for its pending pods before it writes the
registration of nodes that joined meanwhile; no pass waits for the fleet listing (DescribeInstances of every
instance, which only garbage collection needs) before it launches; the registration and the garbage collection
still happen in the same pass, and the registered node's capacity counts either way."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

import pytest
from reconcile_fakes import FakeCloud, FakeCluster, make_nodeclass, make_nodepool, make_pod, node_for

from nodesmith.services.ports import Ports
from nodesmith.services.provisioning.reconcile import ReconcileOptions, reconcile

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

    from nodesmith.core.ports import Instance, LaunchRequest, LaunchResult


@dataclass
class Calls:
    order: list[str] = field(default_factory=list)


@dataclass
class OrderedCluster(FakeCluster):
    calls: Calls = field(default_factory=Calls)

    def label_node(self, *, node_name: str, labels: Mapping[str, str], finalizers: Sequence[str] = ()) -> None:
        self.calls.order.append("register")
        super().label_node(node_name=node_name, labels=labels, finalizers=finalizers)


@dataclass
class OrderedCloud(FakeCloud):
    calls: Calls = field(default_factory=Calls)

    def create(self, *, request: LaunchRequest) -> LaunchResult:
        self.calls.order.append("CreateFleet")
        return super().create(request=request)

    def list_instances(self) -> list[Instance]:
        self.calls.order.append("list fleet")
        return super().list_instances()


def _joined_node_and_new_pod(calls: Calls, cloud: OrderedCloud | None = None) -> tuple[OrderedCluster, OrderedCloud]:
    cluster = OrderedCluster(nodepools=[make_nodepool()], nodeclasses=[make_nodeclass()], calls=calls)
    cloud = cloud if cloud is not None else OrderedCloud(calls=calls)
    cluster.pods = [make_pod("first", cpu="1")]
    reconcile(ports=Ports(cluster=cluster, cloud=cloud, cluster_name="test"), now=1000.0)
    (claim,) = cluster.nodeclaims.values()
    (instance,) = cloud.instances.values()
    cluster.nodes.append(node_for(instance, claim, ready=True))  # its kubelet joined; not registered yet
    cluster.pods.append(make_pod("big", cpu="3"))  # does not fit the joined node: needs a new one
    calls.order.clear()
    return cluster, cloud


def test_the_batch_pass_calls_createfleet_before_registering_the_joined_node() -> None:
    calls = Calls()
    cluster, cloud = _joined_node_and_new_pod(calls)
    out = reconcile(
        ports=Ports(cluster=cluster, cloud=cloud, cluster_name="test"),
        now=1010.0,
        options=ReconcileOptions(provision_first=True),
    )
    assert calls.order.index("CreateFleet") < calls.order.index("register")
    assert out.nodeclaims_launched == 1 and out.nodeclaims_registered == 1


@dataclass
class SlowListingCloud(OrderedCloud):
    """A fleet listing that answers only once CreateFleet was called (or after 5 s): a pass that waited for the
    listing before launching would take those 5 s and record ``"listed before CreateFleet"``."""

    launched: threading.Event = field(default_factory=threading.Event)

    def create(self, *, request: LaunchRequest) -> LaunchResult:
        self.launched.set()
        return super().create(request=request)

    def list_instances(self) -> list[Instance]:
        if not self.launched.wait(timeout=5.0):
            self.calls.order.append("listed before CreateFleet")
        return super().list_instances()


@pytest.mark.parametrize("provision_first", [True, False], ids=["batch pass", "full pass"])
def test_the_fleet_listing_never_holds_createfleet_and_orphans_are_still_collected(provision_first: bool) -> None:
    calls = Calls()
    cloud = SlowListingCloud(calls=calls)
    cluster, _ = _joined_node_and_new_pod(calls, cloud)
    cloud.launched.clear()
    orphan = replace(next(iter(cloud.instances.values())), instance_id="i-orphan", launch_time=900.0,
                     tags={"karpenter.sh/nodeclaim": "deleted-long-ago"})  # fmt: skip
    cloud.instances[orphan.instance_id] = orphan

    out = reconcile(
        ports=Ports(cluster=cluster, cloud=cloud, cluster_name="test"),
        now=1010.0,
        options=ReconcileOptions(provision_first=provision_first),
    )

    assert "listed before CreateFleet" not in calls.order and calls.order.count("list fleet") == 1
    assert cloud.terminated == ["i-orphan"] and out.orphans_terminated == 1 and out.garbage_collected
    assert out.nodeclaims_launched == 1  # the instance it launched is not taken for an orphan


def test_a_batch_pass_that_had_to_list_the_fleet_to_provision_lists_it_once() -> None:
    calls = Calls()
    cluster, cloud = _joined_node_and_new_pod(calls)
    (claim,) = cluster.nodeclaims.values()
    claim.status.provider_id = None  # as if a pass died after CreateFleet, before writing the status

    reconcile(
        ports=Ports(cluster=cluster, cloud=cloud, cluster_name="test"),
        now=1010.0,
        options=ReconcileOptions(provision_first=True),
    )

    assert calls.order.count("list fleet") == 1


def test_a_full_pass_still_registers_first() -> None:
    calls = Calls()
    cluster, cloud = _joined_node_and_new_pod(calls)
    out = reconcile(ports=Ports(cluster=cluster, cloud=cloud, cluster_name="test"), now=1010.0)
    assert calls.order.index("register") < calls.order.index("CreateFleet")
    assert out.nodeclaims_launched == 1 and out.nodeclaims_registered == 1
