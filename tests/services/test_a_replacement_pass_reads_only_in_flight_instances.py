"""The replacement pass an interruption wakes (a provisioning-first pass when garbage collection is not due,
``ReconcileOptions(provision_first=True, collect_garbage=False)``) describes only the instances of NodeClaims
launched but not registered, not the fleet: at 1,000 nodes the full DescribeInstances was the slowest read of
the pass the burst's pods wait for. A NodeClaim that was never launched still makes it list every instance,
because only the listing finds the instance carrying its name (the next full pass adopts it)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from reconcile_fakes import FakeCloud, FakeCluster, make_nodeclass, make_nodepool, make_pod, node_for

from nodesmith.core.drain import DISRUPTED_TAINT
from nodesmith.services.ports import Ports
from nodesmith.services.provisioning.reconcile import ReconcileOptions, reconcile

if TYPE_CHECKING:
    from collections.abc import Sequence

    from nodesmith.core.ports import Instance
    from nodesmith.services.provisioning.outcome import ReconcileOutcome


@dataclass
class CountingCloud(FakeCloud):
    listings: int = 0
    described: list[list[str]] = field(default_factory=list)

    def list_instances(self) -> list[Instance]:
        self.listings += 1
        return super().list_instances()

    def get_instances(self, *, instance_ids: Sequence[str]) -> dict[str, Instance]:
        self.described.append(list(instance_ids))
        return {i: self.instances[i] for i in instance_ids if i in self.instances}


def replacement_pass(cluster: FakeCluster, cloud: CountingCloud, *, now: float) -> ReconcileOutcome:
    """The pass a wake runs when the last garbage collection was less than two minutes ago."""
    return reconcile(
        ports=Ports(cluster=cluster, cloud=cloud, cluster_name="test"),
        now=now,
        options=ReconcileOptions(provision_first=True, collect_garbage=False),
    )


def _leaving_node_and_an_inflight_claim() -> tuple[FakeCluster, CountingCloud, str]:
    """Node of NodeClaim 1 interrupted (tainted) with pod "a" on it; NodeClaim 2 launched, not registered."""
    cluster = FakeCluster(nodepools=[make_nodepool()], nodeclasses=[make_nodeclass()])
    cloud = CountingCloud()
    cluster.pods = [make_pod("a", cpu="3")]
    reconcile(ports=Ports(cluster=cluster, cloud=cloud, cluster_name="test"), now=1000.0)
    (first,) = cluster.nodeclaims.values()
    (instance,) = cloud.instances.values()
    node = node_for(instance, first, ready=True)
    cluster.nodes.append(node)
    cluster.pods = [make_pod("a", cpu="3", unschedulable=False, node_name=node.name), make_pod("b", cpu="3")]
    reconcile(ports=Ports(cluster=cluster, cloud=cloud, cluster_name="test"), now=1010.0)  # launches for "b"
    (inflight,) = [i for i in cloud.instances if i != instance.instance_id]
    cluster.nodes = [node_for(instance, first, ready=True, taints=(DISRUPTED_TAINT,))]  # then it is interrupted
    cloud.listings, cloud.described = 0, []
    return cluster, cloud, inflight


def test_the_replacement_pass_describes_the_in_flight_instance_and_lists_nothing() -> None:
    cluster, cloud, inflight = _leaving_node_and_an_inflight_claim()

    out = replacement_pass(cluster, cloud, now=1020.0)

    assert cloud.listings == 0 and cloud.described == [[inflight]]
    assert out.pods_rescheduled == 1 and out.nodeclaims_launched == 1 and not out.errors  # "a" gets a new node
    assert len(cluster.nodeclaims) == 3  # and "b" still counts on the in-flight one: no second claim for it


def test_a_claim_never_launched_makes_the_pass_list_every_instance_to_adopt_its_instance() -> None:
    cluster, cloud, inflight = _leaving_node_and_an_inflight_claim()
    claim = next(
        nc for nc in cluster.nodeclaims.values() if nc.status.provider_id not in {n.provider_id for n in cluster.nodes}
    )
    claim.status.provider_id = None  # as if the pass died after CreateFleet, before writing the status

    out = replacement_pass(cluster, cloud, now=1020.0)

    assert cloud.listings == 1 and cloud.described == []
    assert not out.errors and len(cloud.instances) == 3  # one new instance, for "a"
    assert inflight not in cloud.terminated  # the listing shows it carries the NodeClaim's name: not an orphan
    # the next full pass adopts it (a provisioning-first pass leaves unlaunched NodeClaims to it)
    reconcile(ports=Ports(cluster=cluster, cloud=cloud, cluster_name="test"), now=1030.0)
    adopted = cluster.nodeclaims[claim.name]
    assert adopted.status.provider_id is not None and adopted.status.provider_id.endswith(inflight)
    assert len(cloud.requests) == 3  # no CreateFleet for it
