"""Watch mode's batch pass (``provision_first``) launches for its pending pods before it writes the
registration of nodes that joined meanwhile, and before it lists the fleet (DescribeInstances of every
instance, which only garbage collection needs); the registration and the garbage collection still
happen in the same pass, and the registered node's capacity counts either way."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

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


def _joined_node_and_new_pod(calls: Calls) -> tuple[OrderedCluster, OrderedCloud]:
    cluster = OrderedCluster(nodepools=[make_nodepool()], nodeclasses=[make_nodeclass()], calls=calls)
    cloud = OrderedCloud(calls=calls)
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


def test_the_batch_pass_lists_the_fleet_after_createfleet_and_still_collects_orphans() -> None:
    calls = Calls()
    cluster, cloud = _joined_node_and_new_pod(calls)
    orphan = replace(next(iter(cloud.instances.values())), instance_id="i-orphan", launch_time=900.0,
                     tags={"karpenter.sh/nodeclaim": "deleted-long-ago"})  # fmt: skip
    cloud.instances[orphan.instance_id] = orphan

    out = reconcile(
        ports=Ports(cluster=cluster, cloud=cloud, cluster_name="test"),
        now=1010.0,
        options=ReconcileOptions(provision_first=True),
    )

    assert calls.order.index("CreateFleet") < calls.order.index("list fleet")
    assert calls.order.count("list fleet") == 1
    assert cloud.terminated == ["i-orphan"] and out.orphans_terminated == 1
    assert out.nodeclaims_launched == 1  # the instance it launched is listed too, and not taken for an orphan


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


def test_a_full_pass_lists_the_fleet_first() -> None:
    calls = Calls()
    cluster, cloud = _joined_node_and_new_pod(calls)
    reconcile(ports=Ports(cluster=cluster, cloud=cloud, cluster_name="test"), now=1010.0)
    assert calls.order.index("list fleet") < calls.order.index("CreateFleet")


def test_a_full_pass_still_registers_first() -> None:
    calls = Calls()
    cluster, cloud = _joined_node_and_new_pod(calls)
    out = reconcile(ports=Ports(cluster=cluster, cloud=cloud, cluster_name="test"), now=1010.0)
    assert calls.order.index("register") < calls.order.index("CreateFleet")
    assert out.nodeclaims_launched == 1 and out.nodeclaims_registered == 1
