"""``karpenter.sh/do-not-disrupt`` as Karpenter reads it, through the disruption pass and the drain: a duration
counts from the pod's ``status.startTime`` (not its creation) and stops protecting once it elapsed; ``"true"``
protects; a value that is neither is ignored, and the node's Events say which pod carries which value."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import interruption_fakes as fakes
import pytest
from reconcile_fakes import FakeCloud, FakeCluster, make_nodeclass, make_nodepool, make_pod, node_for

from nodesmith.core.termination import TERMINATION_REASON_ANNOTATION, TerminationRequest
from nodesmith.services.disruption.consolidated import Consolidated
from nodesmith.services.disruption.service import disrupt
from nodesmith.services.ports import Ports
from nodesmith.services.provisioning.reconcile import reconcile
from nodesmith.services.termination.service import TerminationSettings, run_round

NOW = 5000.0


def drifted_node_with(annotation: str, *, created: float, started: float) -> tuple[FakeCluster, str]:
    """A cluster with one initialized node running one pod annotated ``annotation``, its NodePool changed since
    (the node is drifted: a candidate unless the pod protects it)."""
    cluster = FakeCluster(nodepools=[make_nodepool()], nodeclasses=[make_nodeclass()])
    cluster.pods = [make_pod("job", created=created, annotations={"karpenter.sh/do-not-disrupt": annotation})]
    cloud = FakeCloud()
    reconcile(ports=Ports(cluster=cluster, cloud=cloud, cluster_name="test"), now=1000.0)
    (claim,) = cluster.nodeclaims.values()
    instance = next(i for i in cloud.instances.values() if i.provider_id == claim.status.provider_id)
    node = node_for(instance, claim, ready=True)
    cluster.nodes.append(node)
    cluster.now = cloud.now = 1001.0
    reconcile(ports=Ports(cluster=cluster, cloud=cloud, cluster_name="test"), now=1001.0)
    cluster.pods = [
        replace(p, node_name=node.name, unschedulable=False, phase="Running", start_time=started) for p in cluster.pods
    ]
    cluster.nodepools = [make_nodepool(labels={"team": "payments"})]
    cluster.cloud = cloud  # type: ignore[attr-defined]
    return cluster, node.name


def node_events(cluster: Any, reason: str) -> list[str]:
    return [message for kind, _name, r, message in cluster.events if kind == "Node" and r == reason]


def run_disruption(cluster: Any, consolidated: Consolidated | None = None) -> Any:
    ports = Ports(cluster=cluster, cloud=cluster.cloud, cluster_name="test")
    return disrupt(ports=ports, now=NOW, consolidated=consolidated)


def test_true_protects_the_node() -> None:
    cluster, _ = drifted_node_with("true", created=900.0, started=NOW - 86_400)
    out = run_disruption(cluster)
    assert not out.candidates
    assert any("do-not-disrupt" in m for m in node_events(cluster, "DisruptionBlocked"))


def test_a_duration_counts_from_the_start_time_not_the_creation() -> None:
    # created long ago (the creation reading would have let it go), started a minute ago: still protected
    cluster, _ = drifted_node_with("2m", created=900.0, started=NOW - 60)
    out = run_disruption(cluster)
    assert not out.candidates
    assert any("do-not-disrupt" in m for m in node_events(cluster, "DisruptionBlocked"))


def test_an_elapsed_duration_no_longer_protects() -> None:
    cluster, node = drifted_node_with("2m", created=NOW - 130, started=NOW - 121)
    out = run_disruption(cluster)
    assert out.candidates == [node]


@pytest.mark.parametrize("warm", [False, True], ids=["cold", "warm container"])
def test_an_invalid_value_is_ignored_and_the_node_says_so(warm: bool) -> None:
    cluster, node = drifted_node_with("forever", created=900.0, started=NOW - 60)
    out = run_disruption(cluster, Consolidated() if warm else None)
    assert out.candidates == [node]
    (message,) = node_events(cluster, "InvalidDoNotDisruptAnnotation")
    assert "default/job" in message and '"forever"' in message


def test_the_drain_evicts_a_pod_whose_value_is_invalid_and_says_so_on_the_node() -> None:
    clock = fakes.Clock()
    claim = fakes.make_claim(deleted_at=fakes.NOW - 10, annotations={TERMINATION_REASON_ANNOTATION: "Drifted"})
    pods = [
        fakes.make_pod("odd", annotations={"karpenter.sh/do-not-disrupt": "1d"}, start_time=fakes.NOW - 60),
        fakes.make_pod("guarded", annotations={"karpenter.sh/do-not-disrupt": "1h"}, start_time=fakes.NOW - 60),
    ]
    cluster = fakes.FakeCluster.of(clock, nodes=[fakes.make_node()], claims=[claim], pods=pods)
    cloud = fakes.FakeCloud([fakes.make_instance()])
    request = TerminationRequest(nodeclaim="default-abcde", instance_id="i-1234567890abcdef0", reason="Drifted")

    run_round(
        ports=fakes.ports(cluster, cloud), settings=TerminationSettings(), request=request, now=clock(), attempt=1
    )

    assert cluster.args("evict") == ["default/odd"]
    assert ("Node", "node-a", "InvalidDoNotDisruptAnnotation", "Warning") in cluster.events
