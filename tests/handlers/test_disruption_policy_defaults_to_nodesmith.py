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
