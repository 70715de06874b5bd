"""`nodesmith demo` end to end: provisioning, a spot interruption through EventBridge and SQS,
rescheduling, emptiness after scale-to-zero and an AMI drift replacement, on the embedded AWS and
Kubernetes emulator (the same run `make demo` does)."""

from __future__ import annotations

import json

import pytest

from nodesmith.cli.demo import run_demo

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("embedded-world")]


def test_demo_provisions_survives_a_spot_interruption_and_reports_a_summary(capsys: pytest.CaptureFixture[str]) -> None:
    # Given nothing but the embedded default
    # When the demo runs
    code = run_demo(quiet=False)

    # Then every step happened and the last line is the JSON summary
    out = capsys.readouterr().out.strip().splitlines()
    summary = json.loads(out[-1])
    assert code == 0, out[-5:]
    assert summary["ok"] is True
    assert summary["pods_running_peak"] == 5
    assert summary["interruptions_handled"] == 1
    assert summary["pods_rescheduled"] >= 1
    assert summary["nodes_launched"] >= 4  # first capacity, interruption and drift replacements, the scale-up
    assert summary["empty_nodes_removed"] >= 1  # scaled to zero: removed after consolidateAfter
    assert summary["drift_replaced"] == 1  # the AMI changed under a running node
    timeline = "\n".join(out[:-1])
    for step in ("Launched", "NodeReady", "EventBridge", "SQS -> Lambda", "SpotInterrupted"):
        assert step in timeline, step
    # the disruption steps, explained by the Events a Karpenter user knows
    for step in ("Disrupted", "DisruptionLaunching", "AMIDrift", "DisruptionTerminating"):
        assert step in timeline, step
