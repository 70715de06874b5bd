"""The synthesized NodesmithStack's dashboard and alarms (they notify the configured topic), and the linters:
cdk-nag (AWS Solutions) and cfn-lint find nothing unsuppressed.

Every test reads the session's one synthesis (``synth`` in ``conftest.py``).
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from stack_synth import (
    TOPIC,
    Synth,
)

pytestmark = pytest.mark.xdist_group("infra-synth")

# --- dashboard and alarms --------------------------------------------------------------------


def _dashboard_body(synth: Synth) -> str:
    _, dashboard = synth.one("AWS::CloudWatch::Dashboard", lambda p: True)
    parts = dashboard["DashboardBody"]["Fn::Join"][1]
    return "".join(p if isinstance(p, str) else "<token>" for p in parts)


def test_dashboard_reads_every_named_metric_and_no_other(synth: Synth) -> None:
    from infra.metric_names import NAMESPACE, MetricName

    body = json.loads(_dashboard_body(synth))
    expressions = [
        item["expression"]
        for widget in body["widgets"]
        if widget["type"] == "metric"
        for line in widget["properties"]["metrics"]
        for item in line
        if isinstance(item, dict) and "expression" in item
    ]
    read = set()
    for expression in expressions:
        # free-text search in the namespace, or the exact-schema search of a per-NodePool breakdown
        assert f'Namespace="{NAMESPACE}"' in expression or f"{{{NAMESPACE}," in expression
        read |= set(re.findall(r'MetricName="(\w+)"', expression))
    assert read == {m.value for m in MetricName}


def test_dashboard_is_grouped_for_a_platform_engineer(synth: Synth) -> None:
    body = json.loads(_dashboard_body(synth))
    headers = [w["properties"]["markdown"].splitlines()[0] for w in body["widgets"] if w["type"] == "text"]
    assert headers == [
        "## Capacity and cost",
        "## Provisioning",
        "## Interruptions and drains",
        "## Disruption",
        "## Controller health",
    ]
    assert any(w["type"] == "alarm" for w in body["widgets"])


def test_alarms_on_pending_age_reconcile_errors_launch_failures_and_drain_deadlines_notify_the_topic(
    synth: Synth,
) -> None:
    from infra.metric_names import MetricName

    alarms = synth.resources("AWS::CloudWatch::Alarm").values()
    queried = {}
    for alarm in alarms:
        assert alarm["AlarmActions"] == [TOPIC] and alarm["OKActions"] == [TOPIC]
        for query in alarm.get("Metrics", []):
            match = re.fullmatch(r"SELECT (SUM|MAX)\((\w+)\) FROM Nodesmith", query["Expression"])
            assert match, query["Expression"]
            queried[MetricName(match.group(2))] = alarm
    assert set(queried) == {
        MetricName.OLDEST_PENDING_POD_AGE_SECONDS,
        MetricName.RECONCILE_ERRORS,
        MetricName.LAUNCH_FAILURES,
        MetricName.DRAINS_MISSED_DEADLINE,
    }
    assert queried[MetricName.OLDEST_PENDING_POD_AGE_SECONDS]["Threshold"] == 240
    assert len(alarms) == 9  # + two DLQs not empty, and the errors of each of the three functions


# --- linters ---------------------------------------------------------------------------------


def test_cdk_nag_aws_solutions_has_no_unsuppressed_findings(synth: Synth) -> None:
    from aws_cdk.assertions import Match

    findings = [
        *synth.annotations.find_error("*", Match.string_like_regexp(r"AwsSolutions-.*")),
        *synth.annotations.find_warning("*", Match.string_like_regexp(r"AwsSolutions-.*")),
    ]
    assert [f"{f.id}: {f.entry.data}" for f in findings] == []
    # And nothing else warns either (e.g. the placeholder-endpoint warning is off with a real endpoint).
    assert synth.annotations.find_warning("*", Match.any_value()) == []


def test_cdk_nag_suppressions_all_give_a_reason(synth: Synth) -> None:
    reasons = []
    for resource in synth.json["Resources"].values():
        for suppression in resource.get("Metadata", {}).get("cdk_nag", {}).get("rules_to_suppress", []):
            reasons.append(suppression["reason"])
    assert reasons
    assert all(len(reason) >= 60 for reason in reasons), reasons


def test_cfn_lint_finds_nothing(synth: Synth, tmp_path: Path) -> None:
    template = tmp_path / "NodesmithStack.template.json"
    template.write_text(json.dumps(synth.json))
    cfn_lint = Path(sys.executable).parent / "cfn-lint"
    result = subprocess.run(
        [str(cfn_lint), "--format", "parseable", str(template)], capture_output=True, text=True, check=False
    )
    assert (result.returncode, result.stdout, result.stderr) == (0, "", "")
