"""The reconcile Lambda consolidates with the nodesmith policy unless NODESMITH_DISRUPTION_POLICY says karpenter."""

from __future__ import annotations

import pytest

from nodesmith.handlers.settings import ENV, SettingsError, load_settings

BASE = {ENV.CLUSTER_NAME: "demo", ENV.CLUSTER_ENDPOINT: "https://example.invalid"}


def test_nodesmith_policy_is_the_lambda_default() -> None:
    assert load_settings(BASE).disruption_policy == "nodesmith"


def test_karpenter_policy_can_be_chosen() -> None:
    assert load_settings({**BASE, ENV.DISRUPTION_POLICY: "karpenter"}).disruption_policy == "karpenter"


def test_an_unknown_policy_is_named_in_the_error() -> None:
    with pytest.raises(SettingsError, match=ENV.DISRUPTION_POLICY):
        load_settings({**BASE, ENV.DISRUPTION_POLICY: "greedy"})


def test_the_reconcile_handler_passes_the_policy_to_the_disruption_pass(monkeypatch: pytest.MonkeyPatch) -> None:
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "services"))
    from reconcile_fakes import FakeCloud, FakeCluster

    from nodesmith.handlers import reconcile, wiring
    from nodesmith.handlers.settings import Settings
    from nodesmith.services.disruption import service as disruption
    from nodesmith.services.disruption.service import DisruptionOutcome

    seen: list[str] = []

    def disrupt(**kwargs: object) -> DisruptionOutcome:
        seen.append(kwargs["settings"].policy)  # type: ignore[attr-defined]
        return DisruptionOutcome()

    monkeypatch.setattr(disruption, "disrupt", disrupt)
    for settings in (
        Settings(cluster_name="t", cluster_endpoint="http://k"),
        Settings(cluster_name="t", cluster_endpoint="http://k", disruption_policy="karpenter"),
    ):
        wiring.reset()
        wiring.set_ports(cluster=FakeCluster(), cloud=FakeCloud(), settings=settings)
        try:
            reconcile.run_disruption(now=1000.0)
        finally:
            wiring.reset()
    assert seen == ["nodesmith", "karpenter"]
