"""Garbage collection (the instance-gone check and the orphan sweep) needs every instance of ours, a
DescribeInstances of the whole fleet; Karpenter runs it every 2 minutes. A burst of interruptions runs a
provisioning pass every few seconds, so such a pass lists the fleet only when garbage collection is due:
without it, it reads the instances of in-flight NodeClaims only, still runs registration and liveness,
and prices registered nodes by their labels."""

from __future__ import annotations

from dataclasses import replace

import pytest
from reconcile_fakes import FakeCluster, ListingCloud, make_nodeclass, make_nodepool, make_pod, node_for

from nodesmith.handlers import wiring
from nodesmith.handlers.settings import Settings
from nodesmith.services.ports import Ports
from nodesmith.services.provisioning.lifecycle import GARBAGE_COLLECTION_INTERVAL_SECONDS, REGISTRATION_TTL_SECONDS
from nodesmith.services.provisioning.reconcile import ReconcileOptions, reconcile
from nodesmith.services.reconciler.container import WarmContainer


def _registered_node_and_an_orphan() -> tuple[FakeCluster, ListingCloud]:
    """One NodeClaim launched at 1000 and registered, and an instance of ours no NodeClaim claims."""
    cluster = FakeCluster(nodepools=[make_nodepool()], nodeclasses=[make_nodeclass()])
    cloud = ListingCloud()
    cluster.pods = [make_pod("first", cpu="1")]
    reconcile(ports=Ports(cluster=cluster, cloud=cloud, cluster_name="test"), now=1000.0)
    (claim,) = cluster.nodeclaims.values()
    (instance,) = cloud.instances.values()
    cluster.nodes.append(node_for(instance, claim, ready=True))
    reconcile(ports=Ports(cluster=cluster, cloud=cloud, cluster_name="test"), now=1005.0)  # registers it
    orphan = replace(instance, instance_id="i-orphan", launch_time=900.0, tags={"karpenter.sh/nodeclaim": "gone"})
    cloud.instances[orphan.instance_id] = orphan
    cloud.listings.clear()
    return cluster, cloud


@pytest.mark.parametrize("provision_first", [True, False])
def test_a_pass_without_garbage_collection_does_not_list_the_fleet_or_sweep_orphans(provision_first: bool) -> None:
    cluster, cloud = _registered_node_and_an_orphan()

    out = reconcile(
        ports=Ports(cluster=cluster, cloud=cloud, cluster_name="test"),
        now=1100.0,
        options=ReconcileOptions(provision_first=provision_first, collect_garbage=False),
    )

    assert cloud.listings == [] and cloud.terminated == []
    assert not out.garbage_collected and out.orphans_terminated == 0


@pytest.mark.parametrize("provision_first", [True, False])
def test_the_pass_garbage_collection_is_due_for_lists_once_and_sweeps(provision_first: bool) -> None:
    cluster, cloud = _registered_node_and_an_orphan()

    out = reconcile(
        ports=Ports(cluster=cluster, cloud=cloud, cluster_name="test"),
        now=1100.0,
        options=ReconcileOptions(provision_first=provision_first),
    )

    assert len(cloud.listings) == 1 and cloud.terminated == ["i-orphan"]
    assert out.garbage_collected and out.orphans_terminated == 1


def test_a_nodeclaim_whose_instance_went_is_left_to_the_pass_that_lists_the_fleet() -> None:
    cluster, cloud = _registered_node_and_an_orphan()
    (claim,) = cluster.nodeclaims.values()
    gone = claim.status.provider_id.rsplit("/", 1)[-1]
    del cloud.instances[gone]  # terminated by someone else, and no longer described either

    kept = reconcile(
        ports=Ports(cluster=cluster, cloud=cloud, cluster_name="test"),
        now=1100.0,
        options=ReconcileOptions(provision_first=True, collect_garbage=False),
    )
    assert kept.nodeclaims_terminated == 0 and claim.name in cluster.nodeclaims

    collected = reconcile(
        ports=Ports(cluster=cluster, cloud=cloud, cluster_name="test"),
        now=1101.0,
        options=ReconcileOptions(provision_first=True),
    )
    assert collected.nodeclaims_terminated == 1 and claim.name not in cluster.nodeclaims


def test_liveness_still_runs_without_garbage_collection() -> None:
    cluster = FakeCluster(nodepools=[make_nodepool()], nodeclasses=[make_nodeclass()])
    cloud = ListingCloud()
    cluster.pods = [make_pod("first", cpu="1")]
    reconcile(ports=Ports(cluster=cluster, cloud=cloud, cluster_name="test"), now=1000.0)
    (claim,) = cluster.nodeclaims.values()
    (iid,) = cloud.instances
    cloud.listings.clear()

    out = reconcile(
        ports=Ports(cluster=cluster, cloud=cloud, cluster_name="test"),
        now=1001.0 + REGISTRATION_TTL_SECONDS,
        options=ReconcileOptions(provision_first=True, collect_garbage=False),
    )

    assert claim.name not in cluster.nodeclaims and cloud.terminated == [iid]  # never registered: liveness
    assert out.nodeclaims_terminated == 1 and cloud.listings == []


def test_a_pass_that_did_not_list_the_fleet_prices_registered_nodes_by_their_labels() -> None:
    cluster, cloud = _registered_node_and_an_orphan()
    del cloud.instances["i-orphan"]

    labelled = reconcile(
        ports=Ports(cluster=cluster, cloud=cloud, cluster_name="test"),
        now=1100.0,
        options=ReconcileOptions(provision_first=True, collect_garbage=False),
    )
    listed = reconcile(
        ports=Ports(cluster=cluster, cloud=cloud, cluster_name="test"),
        now=1101.0,
        options=ReconcileOptions(provision_first=True),
    )

    assert labelled.cost_per_hour > 0
    assert labelled.cost_per_hour == pytest.approx(listed.cost_per_hour)
    assert labelled.cost_by == pytest.approx(listed.cost_by)


@pytest.mark.parametrize("provision_first", [True, False])
def test_the_handler_lists_the_fleet_once_per_interval_whatever_the_pass(
    monkeypatch: pytest.MonkeyPatch, provision_first: bool
) -> None:
    from nodesmith.handlers import reconcile as handler

    cluster, cloud = _registered_node_and_an_orphan()
    monkeypatch.setattr(handler, "_CONTAINER", WarmContainer())
    wiring.reset()
    wiring.set_ports(cluster=cluster, cloud=cloud, settings=Settings(cluster_name="test", cluster_endpoint="http://k"))
    try:
        first = handler.run_pass(now=2000.0, provision_first=provision_first)
        assert first.garbage_collected and cloud.terminated == ["i-orphan"]  # a new container collects at once
        assert len(cloud.listings) == 1
        late = replace(
            cloud.instances["i-orphan"], instance_id="i-late", state="running", tags={"karpenter.sh/nodeclaim": "gone"}
        )
        cloud.instances[late.instance_id] = late

        within = handler.run_pass(now=2000.0 + GARBAGE_COLLECTION_INTERVAL_SECONDS - 1, provision_first=provision_first)
        assert not within.garbage_collected and len(cloud.listings) == 1  # the fleet is not listed again
        assert cloud.terminated == ["i-orphan"]  # nor swept

        # due 2 minutes after the collecting pass ended (it took a moment of its own)
        due = handler.run_pass(now=2000.0 + GARBAGE_COLLECTION_INTERVAL_SECONDS + 5, provision_first=provision_first)
        assert due.garbage_collected and len(cloud.listings) == 2
        assert cloud.terminated == ["i-orphan", "i-late"]
    finally:
        wiring.reset()


def test_a_collecting_pass_longer_than_the_interval_does_not_make_the_next_pass_list_the_fleet(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from nodesmith.handlers import reconcile as handler
    from nodesmith.services.reconciler import container

    cluster, cloud = _registered_node_and_an_orphan()
    clock = [0.0]
    monkeypatch.setattr(handler, "_CONTAINER", WarmContainer(clock=lambda: clock[0]))

    def slow(**kwargs: object) -> object:  # a pass over a very large fleet: 5 minutes
        out = reconcile(**kwargs)  # type: ignore[arg-type]
        clock[0] += 300.0
        return out

    monkeypatch.setattr(container, "reconcile", slow)
    wiring.reset()
    wiring.set_ports(cluster=cluster, cloud=cloud, settings=Settings(cluster_name="test", cluster_endpoint="http://k"))
    try:
        assert handler.run_pass(now=2000.0).garbage_collected
        # the next pass starts as the first ends, 5 minutes after it began: the interval counts from that end
        assert not handler.run_pass(now=2300.0).garbage_collected
        assert len(cloud.listings) == 1
        assert handler.run_pass(now=2300.0 + GARBAGE_COLLECTION_INTERVAL_SECONDS).garbage_collected
    finally:
        wiring.reset()


def test_the_handler_collects_at_once_with_new_ports_or_when_the_clock_went_back(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from nodesmith.handlers import reconcile as handler

    cluster, cloud = _registered_node_and_an_orphan()
    del cloud.instances["i-orphan"]
    monkeypatch.setattr(handler, "_CONTAINER", WarmContainer())
    wiring.reset()
    wiring.set_ports(cluster=cluster, cloud=cloud, settings=Settings(cluster_name="test", cluster_endpoint="http://k"))
    try:
        assert handler.run_pass(now=2000.0).garbage_collected
        assert handler.run_pass(now=1990.0).garbage_collected  # earlier than the last collection: due
        other = ListingCloud(instances=dict(cloud.instances))
        wiring.set_ports(cloud=other)
        assert handler.run_pass(now=1991.0).garbage_collected  # another provider has listed nothing yet
        assert len(cloud.listings) == 2 and len(other.listings) == 1
    finally:
        wiring.reset()
