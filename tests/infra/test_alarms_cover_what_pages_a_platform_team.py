"""The alarms a platform team is paged by: either dead-letter queue (interruption, termination) not empty,
oldest pending pod older than the configured threshold, reconcile errors, drains that missed their
deadline, launch failures rate (plus any of the three functions failing). With ``alarmTopicArn`` every
one notifies the topic on ALARM and OK (``test_stack.py``); without it they exist and stay silent, so
synthesis never needs a topic."""

from __future__ import annotations

import re
from typing import Any

import pytest

from infra.metric_names import MetricName

pytestmark = pytest.mark.xdist_group("infra-synth")


@pytest.fixture(scope="module")
def alarms(template_without_topic: dict[str, Any]) -> dict[str, dict[str, Any]]:
    resources = template_without_topic["Resources"]
    return {lid: r["Properties"] for lid, r in resources.items() if r["Type"] == "AWS::CloudWatch::Alarm"}


def _by_custom_metric(alarms: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    found = {}
    for props in alarms.values():
        for query in props.get("Metrics", []):
            match = re.fullmatch(r"SELECT (\w+)\((\w+)\) FROM Nodesmith", query.get("Expression", ""))
            if match:
                found[match.group(2)] = props | {"function": match.group(1), "period": query["Period"]}
    return found


def test_each_condition_has_its_alarm(alarms: dict[str, dict[str, Any]]) -> None:
    custom = _by_custom_metric(alarms)
    assert set(custom) == {
        MetricName.OLDEST_PENDING_POD_AGE_SECONDS,
        MetricName.RECONCILE_ERRORS,
        MetricName.LAUNCH_FAILURES,
        MetricName.DRAINS_MISSED_DEADLINE,
    }
    pending = custom[MetricName.OLDEST_PENDING_POD_AGE_SECONDS]
    assert (pending["function"], pending["Threshold"], pending["ComparisonOperator"]) == (
        "MAX",
        600,  # nodesmith:pendingPodAgeAlarmSeconds in conftest.template_without_topic
        "GreaterThanThreshold",
    )
    drains = custom[MetricName.DRAINS_MISSED_DEADLINE]
    assert (drains["function"], drains["Threshold"], drains["EvaluationPeriods"]) == ("SUM", 1, 1)
    launches = custom[MetricName.LAUNCH_FAILURES]
    assert (launches["function"], launches["period"]) == ("SUM", 300)  # a rate: failures per 5 minutes
    errors = custom[MetricName.RECONCILE_ERRORS]
    assert errors["function"] == "SUM" and errors["Threshold"] == 1
    dlqs = [p for p in alarms.values() if p.get("MetricName") == "ApproximateNumberOfMessagesVisible"]
    assert len(dlqs) == 2 and all(p["Threshold"] == 1 for p in dlqs)
    lambda_errors = [p for p in alarms.values() if p.get("MetricName") == "Errors"]
    assert len(lambda_errors) == 3


def test_every_alarm_says_what_to_check_and_ignores_missing_data(alarms: dict[str, dict[str, Any]]) -> None:
    for props in alarms.values():
        assert len(props["AlarmDescription"]) > 40
        assert props["TreatMissingData"] == "notBreaching"


def test_without_a_topic_no_alarm_has_actions(alarms: dict[str, dict[str, Any]]) -> None:
    assert len(alarms) == 9
    assert all("AlarmActions" not in p and "OKActions" not in p for p in alarms.values())
