"""A warm container's disruption pass hands an unchanged node's view back (so what the core derived from it is
reused), and builds a new one when the Node, one of its pods or its NodeClaim's version changed, or when the pod set
could not be written on its NodeClaim."""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from reconcile_fakes import two_running_nodes

from nodesmith.core.errors import ConflictError
from nodesmith.services.disruption import state
from nodesmith.services.disruption.consolidated import StateParts, cluster_state
from nodesmith.services.disruption.state import CONDITION_POD_SET, cluster_nodes

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
        cluster=cluster, nodes=cluster.nodes, pods=cluster.pods, nodeclaims=claims, facts={}, now=2000.0, errors=[],
        kept=kept,
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
        cluster=cluster, nodes=cluster.nodes, pods=cluster.pods, nodeclaims=claims, facts={}, now=2000.0,
        errors=errors, kept=kept,
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
