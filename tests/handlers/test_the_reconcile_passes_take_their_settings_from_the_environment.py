"""The reconcile function's environment becomes its passes' settings (:func:`~nodesmith.handlers.wiring.pass_settings`):
every setting reaches them, and disruption off leaves them none."""

from __future__ import annotations

from nodesmith.handlers.settings import ENV, load_settings
from nodesmith.handlers.wiring import pass_settings

BASE = {ENV.CLUSTER_NAME: "demo", ENV.CLUSTER_ENDPOINT: "https://example.invalid"}


def test_each_setting_reaches_the_passes() -> None:
    settings = pass_settings(
        load_settings(
            {
                **BASE,
                ENV.TERMINATION_REQUEST_STALE_SECONDS: "120",
                ENV.REGISTRATION_TTL_SECONDS: "600",
                ENV.DISRUPTION_VALIDATION_DELAY_SECONDS: "5",
                ENV.DISRUPTION_MIN_SAVINGS_USD_PER_HOUR: "0.25",
                ENV.DISRUPTION_POLICY: "karpenter",
                ENV.FEATURE_GATES: "NodeRepair=true,StaticCapacity=true",
            }
        )
    )

    assert (settings.request_stale_seconds, settings.registration_ttl_seconds) == (120.0, 600.0)
    assert settings.validation_delay_seconds == 5.0 and settings.static_capacity
    assert settings.disruption is not None
    assert settings.disruption.min_savings_per_hour == 0.25 and settings.disruption.policy == "karpenter"
    assert settings.disruption.node_repair


def test_disruption_off_leaves_the_passes_without_disruption_settings() -> None:
    assert pass_settings(load_settings({**BASE, ENV.DISRUPTION: "false"})).disruption is None
    on = pass_settings(load_settings(BASE))
    assert on.disruption is not None and not on.disruption.node_repair and not on.static_capacity
