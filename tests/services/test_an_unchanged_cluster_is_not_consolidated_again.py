"""Karpenter's ``IsConsolidated``: once consolidation found nothing to do, a warm container does not simulate it
again until the cluster's consolidation state changes (a pod bound or gone, a node or NodeClaim written, a
candidate turning eligible) or five minutes pass. A cold start (no remembered state) always computes it, and
emptiness is decided every pass."""

from __future__ import annotations

import importlib
from dataclasses import replace
from typing import Any

import pytest
from reconcile_fakes import FakeCloud, FakeCluster, FakeQueue, make_nodeclass, make_nodepool, make_pod, node_for

from nodesmith.services.disruption.consolidated import CONSOLIDATION_STATE_TTL_SECONDS, Consolidated, cluster_state
from nodesmith.services.disruption.service import DisruptionOutcome, disrupt
from nodesmith.services.ports import Ports
from nodesmith.services.provisioning.reconcile import reconcile

CLUSTER = "test"
decide_module = importlib.import_module("nodesmith.core.disruption.decide")  # the package re-exports decide()


def _ports(cluster: FakeCluster, cloud: FakeCloud) -> Ports:
    return Ports(cluster=cluster, cloud=cloud, cluster_name=CLUSTER, queue=FakeQueue())


def _cluster() -> tuple[FakeCluster, FakeCloud]:
    """One initialized node running two pods."""
    cluster = FakeCluster(nodepools=[make_nodepool()], nodeclasses=[make_nodeclass()])
    cluster.pods = [make_pod(f"inflate-{i}") for i in range(2)]
    cloud = FakeCloud()
    for now in (1000.0, 1001.0):
        cluster.now = cloud.now = now
        reconcile(ports=_ports(cluster, cloud), now=now)
        have = {n.provider_id for n in cluster.nodes}
        for claim in cluster.nodeclaims.values():
            inst = next(i for i in cloud.instances.values() if i.provider_id == claim.status.provider_id)
            if inst.provider_id not in have:
                cluster.nodes.append(node_for(inst, claim, ready=True))
    node = cluster.nodes[0].name
    cluster.pods = [replace(p, node_name=node, unschedulable=False, phase="Running") for p in cluster.pods]
    return cluster, cloud


@pytest.fixture
def computed(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """How many candidates each consolidation computation was given; it finds nothing."""
    calls: list[int] = []

    def nothing(ctx: Any, eligible: list[Any], **_: Any) -> tuple[None, list[Any]]:
        calls.append(len(eligible))
        return None, []

    monkeypatch.setattr(decide_module, "_consolidation", nothing)
    return calls


def _pass(cluster: FakeCluster, cloud: FakeCloud, now: float, memo: Consolidated | None) -> DisruptionOutcome:
    cluster.now = cloud.now = now
    return disrupt(ports=_ports(cluster, cloud), now=now, consolidated=memo)


def test_consolidation_is_computed_again_only_when_the_cluster_changed_or_five_minutes_passed(
    computed: list[int],
) -> None:
    cluster, cloud = _cluster()
    memo = Consolidated()
    first = _pass(cluster, cloud, 2000.0, memo)
    assert len(computed) == 1 and not first.consolidation_skipped and memo.state

    again = _pass(cluster, cloud, 2010.0, memo)
    assert len(computed) == 1 and again.consolidation_skipped

    cluster.pods = cluster.pods[:1]  # a pod went away: the state changed
    changed = _pass(cluster, cloud, 2020.0, memo)
    assert len(computed) == 2 and not changed.consolidation_skipped
    assert _pass(cluster, cloud, 2030.0, memo).consolidation_skipped

    stale = _pass(cluster, cloud, 2020.0 + CONSOLIDATION_STATE_TTL_SECONDS + 1, memo)
    assert len(computed) == 3 and not stale.consolidation_skipped


def test_without_a_remembered_state_every_pass_computes_consolidation(computed: list[int]) -> None:
    cluster, cloud = _cluster()
    for now in (2000.0, 2010.0, 2020.0):
        assert not _pass(cluster, cloud, now, None).consolidation_skipped
    assert len(computed) == 3


def test_a_pass_that_found_a_command_is_not_remembered() -> None:
    memo = Consolidated(state="earlier", since=100.0)
    plan = decide_module.DisruptionPlan(consolidation_state="now", commands=(object(),))  # type: ignore[arg-type]
    memo.record(plan, now=200.0)
    assert memo.current(now=201.0) == ""
    memo.record(decide_module.DisruptionPlan(consolidation_state="now"), now=300.0)
    assert memo.current(now=301.0) == "now"
    memo.record(decide_module.DisruptionPlan(consolidation_state="now", consolidation_skipped=True), now=400.0)
    assert memo.since == 300.0, "a skipped pass keeps the time the state was found"


def test_a_label_the_launch_adds_leaves_the_state_and_a_condition_changes_it() -> None:
    cluster, _ = _cluster()
    claim = next(iter(cluster.nodeclaims.values()))
    others: dict[str, Any] = {"views": [], "pending": [], "nodepools": [], "pdbs": [], "daemonsets": [], "deleting": []}
    before = cluster_state(nodeclaims=[claim], **others)
    relabelled = claim.model_copy(deep=True)
    relabelled.metadata.labels["node.kubernetes.io/instance-type"] = "m5.xlarge"
    relabelled.metadata.resource_version = "999"
    assert cluster_state(nodeclaims=[relabelled], **others) == before
    marked = claim.model_copy(deep=True)
    marked.set_condition("nodesmith.io/DisruptionCandidate", "True", "Underutilized", "{}", "2026-11-29T00:00:00Z")
    assert cluster_state(nodeclaims=[marked], **others) != before
