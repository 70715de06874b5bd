"""A consolidation's trials offer a node inside its ``consolidateAfter`` quiet period as a node no pod may join;
that node is made once per pass, so every trial shares its scheduling base (derived once) and decides as before."""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING, Any

from disruption_factories import NOW, catalogue, make_node, make_nodepool

from nodesmith.core.disruption import DisruptionSnapshot, decide
from nodesmith.core.scheduling import existing

if TYPE_CHECKING:
    import pytest

MINUTE = 60.0


def test_every_trial_shares_the_held_back_node_and_its_base(monkeypatch: pytest.MonkeyPatch) -> None:
    pool = make_nodepool(policy="WhenEmptyOrUnderutilized", consolidate_after="30m", budgets=[{"nodes": "100%"}])
    cluster = [
        make_node("busy-recent", instance_type="m5.2xlarge", pod_specs=[("1", "1Gi")], last_pod_event=NOW - MINUTE),
        *(make_node(f"light-{i}", instance_type="m5.xlarge", pod_specs=[("500m", "512Mi")]) for i in range(4)),
    ]
    snapshot = DisruptionSnapshot(nodes=cluster, nodepools=[pool], instance_types=catalogue())
    before = decide(snapshot, now=NOW)

    asked: Counter[tuple[str, bool]] = Counter()
    derived: Counter[tuple[str, bool]] = Counter()
    base, derive = existing.ExistingBases.base, existing.derive_base

    def asking(self: Any, node: Any, daemonsets: Any, daemons: Any) -> Any:
        asked[node.name, node.unschedulable] += 1
        return base(self, node, daemonsets, daemons)

    def deriving(node: Any, daemons: Any) -> Any:
        derived[node.name, node.unschedulable] += 1
        return derive(node, daemons)

    monkeypatch.setattr(existing.ExistingBases, "base", asking)
    monkeypatch.setattr(existing, "derive_base", deriving)
    after = decide(snapshot, now=NOW)

    assert after.command == before.command and after.rejected == before.rejected
    assert asked["busy-recent", True] >= 2, asked  # every trial offers it, held back ...
    assert derived["busy-recent", True] == 1, derived  # ... and its base is derived once
