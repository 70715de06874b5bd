"""A warm container's provisioning pass hands an unchanged node's existing capacity back (so the scheduler's base
for it is kept too), makes it anew when its Node, a bound pod or its NodeClaim's version changed, forgets nodes
gone, and decides as a pass that keeps nothing."""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from reconcile_fakes import FakeCluster, make_pod, two_running_nodes

from nodesmith.services.ports import Ports
from nodesmith.services.provisioning.capacity import KeptCapacity, existing_capacity
from nodesmith.services.provisioning.reconcile import ReconcileOptions, reconcile

if TYPE_CHECKING:
    from nodesmith.core.api.nodeclaim import NodeClaim
    from nodesmith.core.scheduling.types import ExistingNode


def _capacity(cluster: FakeCluster, claims: list[NodeClaim], kept: KeptCapacity) -> dict[str, ExistingNode]:
    made = existing_capacity(
        nodes=cluster.nodes, pods=cluster.pods, nodeclaims=claims, instances={}, catalogue={}, kept=kept
    )
    return {n.name: n for n in made}


def test_an_unchanged_node_gets_its_kept_capacity_and_a_changed_one_is_made_anew() -> None:
    cluster, _ = two_running_nodes()
    claims = sorted(cluster.nodeclaims.values(), key=lambda c: c.name)
    first_node, second_node = sorted(n.name for n in cluster.nodes)
    kept = KeptCapacity()
    first = _capacity(cluster, claims, kept)
    assert set(first) == {first_node, second_node}
    again = _capacity(cluster, [c.model_copy(deep=True) for c in claims], kept)  # listed again, same versions
    assert all(again[name] is first[name] for name in first)

    moved = next(i for i, p in enumerate(cluster.pods) if p.node_name == first_node)
    cluster.pods[moved] = replace(cluster.pods[moved], labels={"version": "2"})  # a pod of the first node changed
    changed = _capacity(cluster, claims, kept)
    assert changed[first_node] is not first[first_node] and changed[second_node] is first[second_node]

    written = [c.model_copy(deep=True) for c in claims]
    for claim in written:
        claim.metadata.resource_version = "99"  # both NodeClaims were written
    latest = _capacity(cluster, written, kept)
    assert all(latest[name] is not changed[name] for name in latest)

    cluster.nodes = [n for n in cluster.nodes if n.name == first_node]  # the second node is gone
    _capacity(cluster, written, kept)
    assert set(kept.nodes) == {first_node}


def test_passes_that_keep_capacity_decide_as_passes_that_keep_nothing() -> None:
    outcomes = []
    for kept in (None, KeptCapacity()):
        cluster, cloud = two_running_nodes()
        cluster.pods += [make_pod(f"small-{i}", cpu="250m") for i in range(2)]  # room for them on the nodes
        ports = Ports(cluster=cluster, cloud=cloud, cluster_name="test", queue=None)
        for now in (2000.0, 2001.0):
            cluster.now = cloud.now = now
            out = reconcile(ports=ports, now=now, options=ReconcileOptions(kept_capacity=kept))
            outcomes.append((kept is None, now, out.pods_awaiting_capacity, out.nodeclaims_created, out.errors))
        if kept is not None:
            assert set(kept.nodes) == {n.name for n in cluster.nodes}
    plain, warm = outcomes[:2], outcomes[2:]
    assert [o[1:] for o in plain] == [o[1:] for o in warm]
    assert plain[0][2] == 2 and plain[0][3] == 0  # the small pods go to the existing nodes, no NodeClaim
