"""A warm container's disruption pass hands an unchanged node's view back (so what the core derived from it is
reused), and builds a new one when the Node, one of its pods or its NodeClaim's version changed, or when the pod set
could not be written on its NodeClaim; a cluster seen for the first time is recorded over a few passes."""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from reconcile_fakes import two_running_nodes

from nodesmith.core.errors import ConflictError
from nodesmith.core.timestamps import to_rfc3339
from nodesmith.services.disruption import state
from nodesmith.services.disruption.consolidated import StateParts, cluster_state
from nodesmith.services.disruption.state import CONDITION_POD_SET, ClusterRead, cluster_nodes

if TYPE_CHECKING:
    import pytest
    from reconcile_fakes import FakeCluster

    from nodesmith.core.api.nodeclaim import NodeClaim
    from nodesmith.core.disruption import ClusterNode


def _world() -> tuple[FakeCluster, list[NodeClaim]]:
    """Two initialized nodes, each running two pods, and their NodeClaims by name."""
    cluster, _ = two_running_nodes()
    return cluster, sorted(cluster.nodeclaims.values(), key=lambda c: c.name)


def _views(
    cluster: FakeCluster, claims: list[NodeClaim], kept: dict[str, ClusterNode]
) -> tuple[list[ClusterNode], list[NodeClaim]]:
    views, written = cluster_nodes(
        cluster=cluster, read=ClusterRead(nodes=cluster.nodes, pods=cluster.pods, nodeclaims=claims), facts={},
        now=2000.0, errors=[], kept=kept,
    )  # fmt: skip
    return views, list(written.values())


def test_an_unchanged_node_gets_its_kept_view_and_a_changed_one_a_new_view() -> None:
    cluster, claims = _world()
    kept: dict[str, ClusterNode] = {}
    first, claims = _views(cluster, claims, kept)  # the pod sets are recorded on the NodeClaims
    again, claims = _views(cluster, claims, kept)
    assert all(a is b for a, b in zip(first, again, strict=True))

    copies = [c.model_copy(deep=True) for c in claims]  # listed again, same resourceVersion
    assert all(a is b for a, b in zip(again, _views(cluster, copies, kept)[0], strict=True))

    moved = cluster.pods[0]
    cluster.pods[0] = replace(moved, labels={**moved.labels, "version": "2"})  # a pod of the first node changed
    changed, claims = _views(cluster, claims, kept)
    assert changed[0] is not again[0] and changed[0].pods[0] is cluster.pods[0]
    assert changed[1] is again[1]

    bumped = [claims[0], claims[1].model_copy(update={"metadata": claims[1].metadata.model_copy(deep=True)})]
    bumped[1].metadata.resource_version = "99"  # the second NodeClaim was written
    latest, _ = _views(cluster, bumped, kept)
    assert latest[0] is changed[0] and latest[1] is not changed[1]
    assert latest[1].nodeclaim is bumped[1]
    assert set(kept) == {n.name for n in cluster.nodes}


def test_the_consolidation_state_is_the_same_with_and_without_kept_parts() -> None:
    cluster, claims = _world()
    kept: dict[str, ClusterNode] = {}
    views, claims = _views(cluster, claims, kept)
    digests = StateParts()
    args = {"pending": [], "nodeclaims": claims, "nodepools": [], "pdbs": [], "daemonsets": [], "deleting": []}
    state = cluster_state(views=views, digests=digests, **args)  # type: ignore[arg-type]
    assert state == cluster_state(views=views, **args)  # type: ignore[arg-type]
    assert cluster_state(views=views, digests=digests, **args) == state  # type: ignore[arg-type]

    gone = replace(views[0], pods=views[0].pods[:1])  # a pod left the first node
    moved = cluster_state(views=[gone, views[1]], digests=digests, **args)  # type: ignore[arg-type]
    assert moved != state and moved == cluster_state(views=[gone, views[1]], **args)  # type: ignore[arg-type]
    assert digests.views[views[0].name][0] is gone

    assert cluster_state(views=views, digests=digests, **args) == state  # type: ignore[arg-type]
    written = [claims[0].model_copy(deep=True), *claims[1:]]
    written[0].status.last_pod_event_time = "2030-01-01T00:00:00Z"  # a NodeClaim part is kept by its version:
    same_version = {**args, "nodeclaims": written}
    assert cluster_state(views=views, digests=digests, **same_version) == state  # type: ignore[arg-type]
    written[0].metadata.resource_version = "99"  # the API server's new version comes with every write
    changed = cluster_state(views=views, digests=digests, **same_version)  # type: ignore[arg-type]
    assert changed == cluster_state(views=views, **same_version) != state  # type: ignore[arg-type]


def test_a_pod_set_whose_write_failed_is_written_by_the_next_warm_pass() -> None:
    cluster, claims = _world()
    kept: dict[str, ClusterNode] = {}
    calls: list[str] = []
    write = cluster.update_nodeclaim_status

    def refused(*, nodeclaim: NodeClaim) -> NodeClaim:
        calls.append(nodeclaim.name)
        raise ConflictError(f"nodeclaim {nodeclaim.name} changed", status=409)

    cluster.update_nodeclaim_status = refused  # type: ignore[method-assign]
    errors: list[str] = []
    cluster_nodes(
        cluster=cluster, read=ClusterRead(nodes=cluster.nodes, pods=cluster.pods, nodeclaims=claims), facts={},
        now=2000.0, errors=errors, kept=kept,
    )  # fmt: skip
    assert len(errors) == 2 and sorted(calls) == [c.name for c in claims]
    assert not kept  # a view over a NodeClaim that does not hold its pod set is not kept

    cluster.update_nodeclaim_status = write  # type: ignore[method-assign]
    _, written = _views(cluster, claims, kept)  # the same objects: fingerprinted and written again
    assert all(c.condition(CONDITION_POD_SET) is not None for c in written)
    assert all(cluster.nodeclaims[c.name].condition(CONDITION_POD_SET) is not None for c in claims)


def test_an_unchanged_node_is_not_fingerprinted_again(monkeypatch: pytest.MonkeyPatch) -> None:
    cluster, claims = _world()
    kept: dict[str, ClusterNode] = {}
    _, claims = _views(cluster, claims, kept)
    hashed: list[int] = []
    fingerprint = state._fingerprint
    monkeypatch.setattr(state, "_fingerprint", lambda pods: hashed.append(len(pods)) or fingerprint(pods))

    _views(cluster, [c.model_copy(deep=True) for c in claims], kept)  # listed again: same uid and resourceVersion
    assert hashed == []
    cluster.pods[0] = replace(cluster.pods[0], labels={"version": "2"})  # one node's pods changed
    _views(cluster, claims, kept)
    assert hashed == [2]


def test_a_cluster_seen_for_the_first_time_is_recorded_a_few_nodeclaims_a_pass() -> None:
    # Given two NodeClaims never seen, whose pods were created at 100 and 200, and room for one first record a pass
    cluster, claims = _world()
    for n, pod in enumerate(cluster.pods):
        cluster.pods[n] = replace(pod, creation_timestamp=100.0 * (1 + n // 2))
    kept: dict[str, ClusterNode] = {}

    def observe(claims: list[NodeClaim], now: float) -> tuple[list[ClusterNode], list[NodeClaim]]:
        views, written = cluster_nodes(
            cluster=cluster, read=ClusterRead(nodes=cluster.nodes, pods=cluster.pods, nodeclaims=claims), facts={},
            now=now, errors=[], kept=kept, first_sight_writes=1,
        )  # fmt: skip
        return views, list(written.values())

    first, claims = observe(claims, 2000.0)
    recorded = [c.condition(CONDITION_POD_SET) is not None for c in claims]
    # one is recorded with its newest pod's creation time; the other waits, its pods taken as just changed
    assert recorded == [True, False]
    assert [v.last_pod_event_time for v in first] == [100.0, 2000.0]

    second, claims = observe(claims, 2060.0)
    # the next pass records the other, as if it had been the first to see it; the first's view is handed back
    assert all(c.condition(CONDITION_POD_SET) is not None for c in claims)
    assert [v.last_pod_event_time for v in second] == [100.0, 200.0] and second[0] is first[0]


def test_a_changed_pod_set_is_written_whatever_the_first_sight_limit() -> None:
    cluster, claims = _world()
    kept: dict[str, ClusterNode] = {}
    _, claims = _views(cluster, claims, kept)  # both recorded
    cluster.pods = cluster.pods[1:]  # a pod of the first node is gone
    views, _ = cluster_nodes(
        cluster=cluster, read=ClusterRead(nodes=cluster.nodes, pods=cluster.pods, nodeclaims=claims), facts={},
        now=3000.0, errors=[], kept=kept, first_sight_writes=0,
    )  # fmt: skip
    # the change is recorded on the NodeClaim at once, and its view kept
    assert cluster.nodeclaims[claims[0].name].status.last_pod_event_time == to_rfc3339(3000.0)
    assert views[0].last_pod_event_time == 3000.0 and kept[views[0].name] is views[0]
