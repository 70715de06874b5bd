"""A pass's NodePool catalogues come through NodeOverlays only with the gate on; an unreadable overlay list makes
NodePools wait (Karpenter's unevaluated NodePools); statuses are written only when their conditions change."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from reconcile_fakes import FakeCloud, FakeCluster, catalogue, make_nodeclass, make_nodepool

from nodesmith.core.api.nodeoverlay import NodeOverlay
from nodesmith.core.disruption import DisruptionSettings
from nodesmith.core.errors import KubernetesError
from nodesmith.core.overlay import OverlayVerdict, status_conditions
from nodesmith.services.disruption.run import DisruptionPass
from nodesmith.services.disruption.service import disrupt
from nodesmith.services.ports import Ports
from nodesmith.services.provisioning.overlays import nodepool_catalogues

NOW = 1_800_000_000.0


def overlay(name: str, **spec: Any) -> NodeOverlay:
    return NodeOverlay.model_validate(
        {
            "apiVersion": "karpenter.sh/v1alpha1",
            "kind": "NodeOverlay",
            "metadata": {"name": name, "generation": 3, "resourceVersion": "7"},
            "spec": spec,
        }
    )


@dataclass
class Overlays:
    items: list[NodeOverlay]
    fail: bool = False
    written: list[tuple[str, list[dict[str, object]], str | None]] = field(default_factory=list)

    def list_nodeoverlays(self) -> list[NodeOverlay]:
        if self.fail:
            raise KubernetesError("list nodeoverlays: 503")
        return self.items

    def patch_nodeoverlay_status(
        self, *, name: str, conditions: list[dict[str, object]], resource_version: str | None = None
    ) -> None:
        self.written.append((name, conditions, resource_version))


def classes() -> dict[str, dict[str, Any]]:
    return {"default": {it.name: it for it in catalogue()}}


def test_without_the_gate_each_nodepool_gets_its_nodeclass_catalogue_itself() -> None:
    cats = classes()
    out = nodepool_catalogues(overlays=None, nodepools=[make_nodepool()], catalogues=cats, now=NOW)
    assert out.by_pool["default"] is cats["default"] and out.overlays is None and out.evaluated


def test_with_the_gate_overlays_reprice_and_statuses_are_written_once() -> None:
    source = Overlays([overlay("cheap-m5", price="0.001")])
    out = nodepool_catalogues(overlays=source, nodepools=[make_nodepool()], catalogues=classes(), now=NOW)
    assert {o.price for o in out.by_pool["default"]["m5.large"].offerings} == {0.001}
    [(name, conditions, version)] = source.written
    assert (name, version) == ("cheap-m5", "7")
    assert {(c["type"], c["status"], c["observedGeneration"]) for c in conditions} == {
        ("ValidationSucceeded", "True", 3),
        ("Ready", "True", 3),
    }


def test_the_disruption_pass_reads_overlays_without_writing_statuses() -> None:
    source = Overlays([overlay("cheap-m5", price="0.001")])
    nodepool_catalogues(overlays=source, nodepools=[make_nodepool()], catalogues=classes(), now=NOW, write_status=False)
    assert source.written == []


def test_an_unreadable_overlay_list_leaves_nodepools_unevaluated() -> None:
    out = nodepool_catalogues(
        overlays=Overlays([], fail=True), nodepools=[make_nodepool()], catalogues=classes(), now=NOW
    )
    assert not out.evaluated and out.by_pool == {}
    assert out.errors and "NodePools wait" in out.errors[0]


def test_conditions_change_only_with_the_verdict() -> None:
    conflicted = OverlayVerdict(name="x", valid=False, reason="Conflict", message="conflict with another overlay")
    first = status_conditions(overlay=overlay("x"), verdict=conflicted, now=NOW)
    assert first is not None
    conditions = [c.model_dump(by_alias=True) for c in first]
    written = NodeOverlay.model_validate({**_doc("x"), "status": {"conditions": conditions}})
    assert status_conditions(overlay=written, verdict=conflicted, now=NOW + 60) is None
    healed = status_conditions(overlay=written, verdict=OverlayVerdict(name="x", valid=True), now=NOW + 60)
    assert healed is not None
    ready = {c.type: c for c in healed}["Ready"]
    assert (ready.status, ready.reason, ready.last_transition_time) == ("True", "Ready", "2027-01-15T08:01:00Z")


def _doc(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "karpenter.sh/v1alpha1",
        "kind": "NodeOverlay",
        "metadata": {"name": name, "generation": 3},
        "spec": {},
    }


def test_the_disruption_pass_decides_on_overlaid_nodepool_catalogues() -> None:
    cluster = FakeCluster(nodepools=[make_nodepool()], nodeclasses=[make_nodeclass()])
    source = Overlays([overlay("cheap-m5", price="0.001")])
    run = DisruptionPass(
        ports=Ports(cluster=cluster, cloud=FakeCloud(), cluster_name="test", overlays=source),
        now=NOW,
        settings=DisruptionSettings(),
        recent_events={},
    )
    run.snapshot()
    types = {it.name: it for it in run.pool_types()["default"]}
    assert {o.price for o in types["m5.large"].offerings} == {0.001}
    assert source.written == [], "statuses are the provisioning pass's to write"


def test_a_disruption_pass_without_the_overlays_decides_nothing() -> None:
    cluster = FakeCluster(nodepools=[make_nodepool()], nodeclasses=[make_nodeclass()])
    ports = Ports(cluster=cluster, cloud=FakeCloud(), cluster_name="test", overlays=Overlays([], fail=True))
    out = disrupt(ports=ports, now=NOW)
    assert out.decisions == [] and any("NodePools wait" in e for e in out.errors)
