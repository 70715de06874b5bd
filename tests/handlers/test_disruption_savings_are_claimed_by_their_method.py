"""The savings a disruption pass claims are reported under the method that claims them: an expiration
executed in the same pass as a consolidation does not take the consolidation's savings. The pass's
replacement NodeClaims are reported with their breakdowns too; the nodes whose termination it requested are
not counted terminated yet (the termination function counts them when they go)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "services"))

from reconcile_fakes import FakeCloud, FakeCluster
from test_reconcile_handler import emitted

from nodesmith.handlers import wiring
from nodesmith.handlers.settings import Settings
from nodesmith.services.disruption.service import DisruptionOutcome

if TYPE_CHECKING:
    import pytest


def test_each_method_reports_only_its_own_savings(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from nodesmith.handlers import reconcile
    from nodesmith.services.disruption import service as disruption

    done = DisruptionOutcome(
        executed={"expiration": 1, "single-node-consolidation": 1},
        savings_per_hour=0.25,
        savings_by_method={"single-node-consolidation": 0.25},
        nodes_terminated=["ip-10-0-0-1.ec2.internal", "ip-10-0-0-2.ec2.internal"],
        created_by={("default", "on-demand"): 1},
        launched_by={("default", "on-demand"): 1},
    )

    def disrupt(**_: Any) -> DisruptionOutcome:
        return done

    monkeypatch.setattr(disruption, "disrupt", disrupt)
    wiring.reset()
    wiring.set_ports(
        cluster=FakeCluster(), cloud=FakeCloud(), settings=Settings(cluster_name="t", cluster_endpoint="http://k")
    )
    try:
        reconcile.run_disruption(now=1000.0)
    finally:
        wiring.reset()

    metrics = emitted(capsys.readouterr().out)
    assert [(value, dims["Method"]) for value, dims, _ in metrics["DisruptionSavingsUSDPerHour"]] == [
        (0.25, "single-node-consolidation")
    ]
    assert sorted(dims["Method"] for _, dims, _ in metrics["DisruptionDecisions"]) == [
        "expiration",
        "single-node-consolidation",
    ]
    assert "NodeClaimsTerminated" not in metrics  # requested only: the termination function counts them
    for name in ("NodeClaimsCreated", "NodeClaimsLaunched"):  # the consolidation's replacement
        assert [(v, d["NodePool"], d["CapacityType"]) for v, d, _ in metrics[name]] == [(1, "default", "on-demand")]
