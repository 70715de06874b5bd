"""A watching invocation or a wake runs pass after pass: garbage collection's listing of the fleet runs across
them (``ReconcileOptions.fleet_listing``), no pass waits for it, and the first pass after it ended collects against
it. A listing older than the pass is safe: what it does not show is described by id before a NodeClaim goes, and
an orphan it shows is asked about again before it is terminated."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

import pytest
from reconcile_fakes import FakeCloud, FakeCluster, make_nodeclass, make_nodepool, make_pod, node_for

from nodesmith.services.ports import Ports
from nodesmith.services.provisioning.fleet_listing import FleetListing
from nodesmith.services.provisioning.reconcile import ReconcileOptions, reconcile
from nodesmith.services.reconciler.container import WarmContainer

if TYPE_CHECKING:
    from nodesmith.core.ports import Instance

WAIT = 10.0


@dataclass
class SlowCloud(FakeCloud):
    """Lists the fleet only once ``release`` is set (a large fleet's DescribeInstances), as it was when asked."""

    release: threading.Event = field(default_factory=threading.Event)
    listings: int = 0

    def list_instances(self) -> list[Instance]:
        self.listings += 1
        seen = super().list_instances()
        assert self.release.wait(WAIT), "the listing was never released"
        return seen


def _listing_ended() -> None:
    for thread in threading.enumerate():
        if thread.name == "fleet-listing":
            thread.join(WAIT)


def _ports(cluster: FakeCluster, cloud: FakeCloud) -> Ports:
    return Ports(cluster=cluster, cloud=cloud, cluster_name="test")


def _registered_node_and_an_orphan() -> tuple[FakeCluster, SlowCloud]:
    """One NodeClaim launched at 1000 and registered, and an instance of ours no NodeClaim claims."""
    cluster = FakeCluster(nodepools=[make_nodepool()], nodeclasses=[make_nodeclass()])
    cloud = SlowCloud()
    cloud.release.set()
    cluster.pods = [make_pod("first", cpu="1")]
    reconcile(ports=_ports(cluster, cloud), now=1000.0)
    (claim,) = cluster.nodeclaims.values()
    (instance,) = cloud.instances.values()
    cluster.nodes.append(node_for(instance, claim, ready=True))
    reconcile(ports=_ports(cluster, cloud), now=1005.0)  # registers it
    orphan = replace(instance, instance_id="i-orphan", launch_time=900.0, tags={"karpenter.sh/nodeclaim": "gone"})
    cloud.instances[orphan.instance_id] = orphan
    cloud.release.clear()
    cloud.listings = 0
    return cluster, cloud


@pytest.mark.parametrize("provision_first", [True, False])
def test_no_pass_waits_for_the_kept_listing_and_the_first_after_it_ended_collects(provision_first: bool) -> None:
    cluster, cloud = _registered_node_and_an_orphan()
    kept = FleetListing()
    options = ReconcileOptions(provision_first=provision_first, fleet_listing=kept)

    first = reconcile(ports=_ports(cluster, cloud), now=1100.0, options=options)  # the listing is still under way
    cloud.release.set()
    _listing_ended()
    second = reconcile(ports=_ports(cluster, cloud), now=1101.0, options=options)

    assert not first.garbage_collected and first.orphans_terminated == 0
    assert second.garbage_collected and second.orphans_terminated == 1 and cloud.terminated == ["i-orphan"]
    assert cloud.listings == 1


def test_a_nodeclaim_launched_after_the_listing_began_is_kept() -> None:
    cluster, cloud = _registered_node_and_an_orphan()
    kept = FleetListing()
    options = ReconcileOptions(fleet_listing=kept)
    cluster.pods.append(make_pod("second", cpu="2"))  # more than the registered node has left

    reconcile(ports=_ports(cluster, cloud), now=1100.0, options=options)  # launches while the listing runs
    cloud.release.set()
    _listing_ended()
    later = reconcile(ports=_ports(cluster, cloud), now=1200.0, options=options)  # settled: checked for a gone one

    assert later.garbage_collected and len(cluster.nodeclaims) == 2 and later.nodeclaims_terminated == 0
    assert cloud.terminated == ["i-orphan"]


def test_an_orphan_the_listing_showed_running_and_that_ended_since_is_not_terminated_again() -> None:
    cluster, cloud = _registered_node_and_an_orphan()
    kept = FleetListing()
    options = ReconcileOptions(fleet_listing=kept)

    reconcile(ports=_ports(cluster, cloud), now=1100.0, options=options)
    cloud.release.set()
    _listing_ended()
    cloud.instances["i-orphan"] = replace(cloud.instances["i-orphan"], state="terminated")  # by someone else
    later = reconcile(ports=_ports(cluster, cloud), now=1101.0, options=options)

    assert later.garbage_collected and later.orphans_terminated == 0 and cloud.terminated == []


def test_a_failed_listing_is_reported_by_the_pass_that_takes_it_and_the_next_lists_again() -> None:
    cluster, cloud = _registered_node_and_an_orphan()
    kept = FleetListing()
    options = ReconcileOptions(fleet_listing=kept)

    def failing() -> list[Instance]:
        assert cloud.release.wait(WAIT)
        raise RuntimeError("DescribeInstances: throttled")

    cloud.list_instances = failing  # type: ignore[method-assign]
    reconcile(ports=_ports(cluster, cloud), now=1100.0, options=options)
    cloud.release.set()
    _listing_ended()
    failed = reconcile(ports=_ports(cluster, cloud), now=1101.0, options=options)
    del cloud.list_instances
    cloud.release.clear()
    again = reconcile(ports=_ports(cluster, cloud), now=1102.0, options=options)  # begins a new listing
    cloud.release.set()
    _listing_ended()
    collected = reconcile(ports=_ports(cluster, cloud), now=1103.0, options=options)

    assert not failed.garbage_collected and any("throttled" in e for e in failed.errors)
    assert not again.garbage_collected and cloud.listings == 1
    assert collected.garbage_collected and cloud.terminated == ["i-orphan"]


def test_a_watching_invocation_or_a_wake_keeps_the_listing_and_a_scheduled_pass_does_not(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from nodesmith.handlers import reconcile as handler
    from nodesmith.handlers import wiring
    from nodesmith.handlers.settings import Settings

    cluster, cloud = _registered_node_and_an_orphan()
    monkeypatch.setattr(handler, "_CONTAINER", WarmContainer(collected=(cloud, 0.0)))  # collected before, due again
    wiring.reset()
    settings = Settings(cluster_name="test", cluster_endpoint="http://k", disruption=False)
    wiring.set_ports(cluster=cluster, cloud=cloud, settings=settings)
    try:
        batch, _ = handler._provision_only()  # a batch pass of watch mode, or a wake's: does not wait
        full, _ = handler._pass_and_disrupt(more_to_come=True)  # watch mode's full pass: does not wait either
        cloud.release.set()
        _listing_ended()
        collected, _ = handler._provision_only()
        assert not batch.garbage_collected and not full.garbage_collected and cloud.listings == 1
        assert collected.garbage_collected and cloud.terminated == ["i-orphan"]

        handler._CONTAINER.collected = (cloud, 0.0)
        scheduled = handler.run_pass(now=2000.0)  # lists within itself and waits for it
        assert scheduled.garbage_collected and cloud.listings == 2
    finally:
        wiring.reset()


def test_a_containers_first_collection_waits_for_its_listing_even_in_watch_mode(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The instance cache is cold: the disruption pass would describe the whole fleet by id for drift's facts."""
    from nodesmith.handlers import reconcile as handler
    from nodesmith.handlers import wiring
    from nodesmith.handlers.settings import Settings

    cluster, cloud = _registered_node_and_an_orphan()
    monkeypatch.setattr(handler, "_CONTAINER", WarmContainer())  # a new container
    settings = Settings(cluster_name="test", cluster_endpoint="http://k", disruption=False)
    wiring.reset()
    wiring.set_ports(cluster=cluster, cloud=cloud, settings=settings)
    threading.Timer(0.5, cloud.release.set).start()  # a listing slower than the pass's own work
    try:
        first, _ = handler._provision_only()
        assert first.garbage_collected and cloud.terminated == ["i-orphan"] and cloud.listings == 1
    finally:
        wiring.reset()
