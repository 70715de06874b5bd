"""A pass that simulates nothing (no repair, no drifted node of a dynamic NodePool, consolidation skipped for an
unchanged cluster) builds no simulation context: a warm container's pass over a quiet cluster costs no simulation."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from disruption_factories import NOW, catalogue, make_node, make_nodepool

from nodesmith.core.disruption import DisruptionSnapshot, decide

if TYPE_CHECKING:
    import pytest

decide_module = importlib.import_module("nodesmith.core.disruption.decide")  # the package exports the function


def test_only_a_pass_that_simulates_builds_the_context(monkeypatch: pytest.MonkeyPatch) -> None:
    pool = make_nodepool(policy="WhenEmptyOrUnderutilized", budgets=[{"nodes": "100%"}])
    nodes = [make_node(f"busy-{i}", instance_type="m5.large", pod_specs=[("1500m", "6Gi")]) for i in range(2)]
    snapshot = DisruptionSnapshot(nodes=nodes, nodepools=[pool], instance_types=catalogue())
    built: list[Any] = []
    build = decide_module.build_context

    def counting(*args: Any, **kwargs: Any) -> Any:
        built.append(build(*args, **kwargs))
        return built[-1]

    monkeypatch.setattr(decide_module, "build_context", counting)
    first = decide(snapshot, now=NOW, cluster_state="unchanged")
    assert first.consolidation_state and len(built) == 1  # consolidation simulated

    again = decide(snapshot, now=NOW, cluster_state="unchanged", consolidated=first.consolidation_state)
    assert again.consolidation_skipped and again.command is None
    assert len(built) == 1  # nothing simulated: no context built
