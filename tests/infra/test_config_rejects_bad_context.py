"""CDK context -> NodesmithConfig: defaults synthesize, bad values fail synth naming the key.

Pure Python (no jsii), so these run in milliseconds.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from infra.config import PLACEHOLDER_ENDPOINT, ConfigError, NodesmithConfig

REPO = Path(__file__).resolve().parents[2]


def _config(**context: Any) -> NodesmithConfig:
    values = {f"nodesmith:{key}": value for key, value in context.items()}
    return NodesmithConfig.from_context(values.get)


def test_cdk_json_defaults_build_a_config_with_a_placeholder_endpoint() -> None:
    context = json.loads((REPO / "cdk.json").read_text())["context"]
    config = NodesmithConfig.from_context(context.get)
    assert config.cluster_name == "nodesmith"
    assert config.uses_placeholder_endpoint and config.cluster_endpoint == PLACEHOLDER_ENDPOINT
    assert config.node_role_arn is None  # derived from the account at deploy time
    assert config.alarm_topic_arn is None


def test_command_line_strings_are_parsed_as_integers() -> None:
    config = _config(
        reconcileTimeoutSeconds="600", interruptionTimeoutSeconds=" 30 ", logRetentionDays="90",
        interruptionMaxConcurrency="40", interruptionBatchSize="100",
    )  # fmt: skip
    assert (config.reconcile_timeout_seconds, config.interruption_timeout_seconds) == (600, 30)
    assert config.interruption_max_concurrency == 40
    assert config.interruption_reserved_concurrency == 40  # unset: as much as the event source may use
    assert config.interruption_batch_size == 100
    assert config.log_retention_days == 90


@pytest.mark.parametrize(
    ("key", "value", "says"),
    [
        ("clusterName", "-bad", "EKS cluster name"),
        ("clusterEndpoint", "http://plain.example", "https://"),
        ("nodeRoleArn", "arn:aws:iam::123:role/x", "IAM role ARN"),
        ("reconcileMode", "stream", "supported: poll, watch"),
        ("reconcileTimeoutSeconds", 901, "60..900"),
        ("interruptionTimeoutSeconds", 61, "two minutes"),
        ("interruptionTimeoutSeconds", "twenty", "integer"),
        ("interruptionMaxConcurrency", 1, "2..1000"),
        ("interruptionMaxConcurrency", 1001, "MaximumConcurrency"),
        ("interruptionBatchSize", 0, "1..10000"),
        ("interruptionBatchSize", 10_001, "BatchSize"),
        ("interruptionReservedConcurrency", 24, "throttled"),
        ("interruptionReservedConcurrency", 1001, "25..1000"),
        ("terminationTimeoutSeconds", 5, "10..900"),
        ("terminationTimeoutSeconds", 901, "10..900"),
        ("terminationMaxConcurrency", 1, "MaximumConcurrency"),
        ("terminationReservedConcurrency", 10, "throttled"),
        ("terminationMaxReceiveCount", 5, "10..1000"),
        ("terminationMaxReceiveCount", 1300, "retention"),
        ("terminationRetrySeconds", 0, "1..60"),
        ("terminationRetryMaxSeconds", 901, "terminationRetrySeconds..900"),
        ("terminationRequestStaleSeconds", 65, "drains under way"),
        ("terminationRequestStaleSeconds", 3601, "3600"),
        ("reconcileMemoryMiB", 256, "512..10240"),
        ("reconcileMemoryMiB", 10241, "512..10240"),
        ("registrationTtlSeconds", 30, "60..3600"),
        ("registrationTtlSeconds", 3601, "60..3600"),
        ("evictionWorkers", 0, "1..64"),
        ("evictionWorkers", 65, "1..64"),
        ("rebalanceAction", "reboot", "ignore, event, cordon, drain"),
        ("alarmTopicArn", "arn:aws:sqs:eu-west-1:123456789012:q", "SNS topic ARN"),
        ("pendingPodAgeAlarmSeconds", 30, "reconcile period"),
        ("logRetentionDays", 31, "retention"),
        ("clusterName", 7, "expected a string"),
    ],
)
def test_bad_context_fails_synth_naming_the_key(key: str, value: Any, says: str) -> None:
    with pytest.raises(ConfigError) as error:
        _config(**{key: value})
    assert f"nodesmith:{key}" in str(error.value)
    assert says in str(error.value)


def test_rebalance_actions_follow_the_handlers_settings_model() -> None:
    from typing import get_args

    from nodesmith.handlers.settings import Settings

    for action in get_args(Settings.model_fields["rebalance_action"].annotation):
        assert _config(rebalanceAction=action).rebalance_action == action


def test_every_allowed_log_retention_is_a_cdk_retention() -> None:
    """The day -> RetentionDays name table matches aws-cdk-lib's enum (imports jsii, so a little slower)."""
    from aws_cdk import aws_logs as logs

    from infra.config import LOG_RETENTION_NAMES

    members = {m.name for m in logs.RetentionDays} - {"INFINITE"}
    assert set(LOG_RETENTION_NAMES.values()) == members


def test_watch_mode_is_accepted_with_the_full_lambda_timeout_and_reaches_the_handlers_environment() -> None:
    from infra.stack import reconcile_environment

    config = _config(reconcileMode="watch")
    assert config.reconcile_mode == "watch" and config.reconcile_timeout_seconds == 900
    env = reconcile_environment(config, node_role_arn="arn:aws:iam::123456789012:role/n")
    assert env["NODESMITH_RECONCILE_MODE"] == "watch"
    with pytest.raises(ConfigError, match="reconcileTimeoutSeconds"):
        _config(reconcileMode="watch", reconcileTimeoutSeconds=600)


def test_reserved_concurrency_may_exceed_the_event_source_s_maximum() -> None:
    config = _config(terminationMaxConcurrency="10", terminationReservedConcurrency="12")
    assert (config.termination_max_concurrency, config.termination_reserved_concurrency) == (10, 12)
    assert _config(terminationMaxConcurrency="50").termination_reserved_concurrency == 50


def test_the_defaults_dead_letter_a_blocked_drain_after_about_an_hour() -> None:
    config = NodesmithConfig()
    assert 45 * 60 <= config.termination_patience_seconds <= 75 * 60
    # fewer receives, or a lower cap on the backoff, give up sooner
    assert _config(terminationMaxReceiveCount="30").termination_patience_seconds < 20 * 60
    assert _config(terminationRetryMaxSeconds="5").termination_patience_seconds < config.termination_patience_seconds


def test_termination_tuning_reaches_the_termination_function_and_parses_with_the_handlers_settings() -> None:
    from infra.stack import termination_environment
    from nodesmith.handlers.settings import load_settings

    config = _config(evictionWorkers="16", terminationRetrySeconds="3", terminationRetryMaxSeconds="60",
                     terminationRequestStaleSeconds="600")  # fmt: skip
    env = termination_environment(config)
    settings = load_settings(env)
    assert (settings.eviction_workers, settings.termination_retry_seconds) == (16, 3)
    assert settings.termination_retry_max_seconds == 60
    assert "NODESMITH_STATE_TABLE" not in env  # the termination function needs no state table


def test_every_default_parses_with_the_handlers_settings() -> None:
    from infra.stack import interruption_environment, reconcile_environment, termination_environment
    from nodesmith.handlers.settings import load_settings

    config = NodesmithConfig()
    for env in (
        reconcile_environment(config, node_role_arn="arn:aws:iam::123456789012:role/n"),
        interruption_environment(config),
        termination_environment(config),
    ):
        load_settings(env)


def test_feature_gates_reach_the_reconcile_function_and_turn_node_repair_on() -> None:
    from infra.stack import interruption_environment, reconcile_environment
    from nodesmith.handlers.settings import load_settings

    config = _config(featureGates="NodeRepair=true,SpotToSpotConsolidation=false")
    env = reconcile_environment(config, node_role_arn="arn:aws:iam::123456789012:role/n")
    assert env["NODESMITH_FEATURE_GATES"] == "NodeRepair=true,SpotToSpotConsolidation=false"
    assert load_settings(env).node_repair
    assert "NODESMITH_FEATURE_GATES" not in interruption_environment(config)
    off = reconcile_environment(NodesmithConfig(), node_role_arn="arn:aws:iam::123456789012:role/n")
    assert not load_settings(off).node_repair  # Karpenter's default: the gate is off


def test_the_registration_ttl_reaches_the_reconcile_function() -> None:
    from infra.stack import reconcile_environment
    from nodesmith.handlers.settings import load_settings

    role = "arn:aws:iam::123456789012:role/n"
    assert load_settings(reconcile_environment(NodesmithConfig(), node_role_arn=role)).registration_ttl_seconds == 900
    env = reconcile_environment(_config(registrationTtlSeconds=600), node_role_arn=role)
    assert load_settings(env).registration_ttl_seconds == 600


def test_reserved_capacity_is_on_unless_the_gate_turns_it_off() -> None:
    from infra.stack import reconcile_environment
    from nodesmith.handlers.settings import load_settings

    role = "arn:aws:iam::123456789012:role/n"
    assert load_settings(reconcile_environment(NodesmithConfig(), node_role_arn=role)).reserved_capacity
    off = reconcile_environment(_config(featureGates="ReservedCapacity=false"), node_role_arn=role)
    assert not load_settings(off).reserved_capacity


def test_the_static_capacity_gate_reaches_the_reconcile_function_off_by_default() -> None:
    from infra.stack import reconcile_environment
    from nodesmith.handlers.settings import load_settings

    arn = "arn:aws:iam::123456789012:role/n"
    on = load_settings(reconcile_environment(_config(featureGates="StaticCapacity=true"), node_role_arn=arn))
    assert on.static_capacity and not on.node_repair
    off = load_settings(reconcile_environment(NodesmithConfig(), node_role_arn=arn))
    assert not off.static_capacity  # Karpenter's default: static NodePools are left alone


@pytest.mark.parametrize(("value", "says"), [("NodeRepair", "Name=true|false"), ("Repair=true", "unknown feature")])
def test_a_bad_feature_gate_fails_synth(value: str, says: str) -> None:
    with pytest.raises(ConfigError, match=f"featureGates: .*{says}"):
        _config(featureGates=value)
