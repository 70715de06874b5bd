"""A warm container's passes share what it keeps (:class:`~nodesmith.services.reconciler.container.WarmContainer`):
the disruption pass's consolidation memory, the garbage collection cadence, and when a pass last began."""

from __future__ import annotations

import time

from reconcile_fakes import FakeCloud, FakeCluster, ListingCloud, make_nodeclass, make_nodepool, make_pod, node_for

from nodesmith.core.disruption import DisruptionSettings
from nodesmith.services.ports import Ports
from nodesmith.services.provisioning.lifecycle import GARBAGE_COLLECTION_INTERVAL_SECONDS
from nodesmith.services.reconciler.container import PassSettings, WarmContainer

ON = PassSettings(disruption=DisruptionSettings())


def _one_busy_node(warm: WarmContainer) -> tuple[Ports, ListingCloud]:
    """A NodeClaim the container launched at 1000 for one pod, registered by 1005 with the pod bound to it."""
    cluster = FakeCluster(nodepools=[make_nodepool()], nodeclasses=[make_nodeclass()])
    cloud = ListingCloud()
    ports = Ports(cluster=cluster, cloud=cloud, cluster_name="test")
    cluster.pods = [make_pod("web", cpu="1")]
    warm.provision(ports=ports, settings=ON, now=1000.0)
    (claim,) = cluster.nodeclaims.values()
    (instance,) = cloud.instances.values()
    node = node_for(instance, claim, ready=True)
    cluster.nodes.append(node)
    cluster.pods = [make_pod("web", cpu="1", node_name=node.name)]
    warm.provision(ports=ports, settings=ON, now=1005.0)
    return ports, cloud


def test_the_disruption_pass_is_off_without_its_settings() -> None:
    warm = WarmContainer()
    ports, _ = _one_busy_node(warm)

    assert warm.disrupt(ports=ports, settings=PassSettings(), now=2000.0) is None
    assert warm.consolidated is None


def test_a_cluster_consolidation_found_nothing_in_is_not_computed_again_by_the_same_container() -> None:
    warm = WarmContainer()
    ports, _ = _one_busy_node(warm)

    first = warm.disrupt(ports=ports, settings=ON, now=2000.0)
    again = warm.disrupt(ports=ports, settings=ON, now=2010.0)
    elsewhere = WarmContainer().disrupt(ports=ports, settings=ON, now=2010.0)  # a new container remembers nothing

    assert first is not None and not first.consolidation_skipped and not first.executed
    assert again is not None and again.consolidation_skipped
    assert elsewhere is not None and not elsewhere.consolidation_skipped


def test_passes_list_the_fleet_on_the_containers_cadence_and_record_when_they_began() -> None:
    clock = [0.0]
    warm = WarmContainer(clock=lambda: clock[0])
    before = time.time()
    ports, cloud = _one_busy_node(warm)  # the first pass collected at 1000, the second did not

    assert cloud.listings == [1000.0] and warm.collected == (cloud, 1000.0)
    assert warm.began_since(before) and not warm.began_since(time.time() + 60)
    assert not warm.provision(
        ports=ports, settings=ON, now=1000.0 + GARBAGE_COLLECTION_INTERVAL_SECONDS - 1
    ).garbage_collected
    assert warm.garbage_collection_due(cloud=cloud, now=1000.0 + GARBAGE_COLLECTION_INTERVAL_SECONDS)
    assert warm.garbage_collection_due(cloud=FakeCloud(), now=1001.0)  # other ports: at once
    assert warm.garbage_collection_due(cloud=cloud, now=999.0)  # the clock went back
