"""Shared fixtures for the infra tests: one synthesized stack without an alarm topic.

Synthesis goes through jsii and takes seconds, so modules that only read the template share this
session-scoped one (they are in the ``infra-synth`` xdist group, hence on one worker). The
``test_stack_*`` modules share ``synth``, one synthesis with a topic and a cluster-specific context.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from stack_synth import Synth

REPO = Path(__file__).resolve().parents[2]
PENDING_POD_AGE_ALARM_SECONDS = 600


@pytest.fixture(scope="session")
def template_without_topic() -> dict[str, Any]:
    """The template of ``NodesmithStack`` with a real-looking endpoint, no ``alarmTopicArn`` and a 600 s
    pending-pod alarm threshold (as ``-c nodesmith:pendingPodAgeAlarmSeconds=600`` would pass it)."""
    import aws_cdk as cdk
    from aws_cdk.assertions import Template

    from infra.config import NodesmithConfig
    from infra.stack import NodesmithStack

    context = json.loads((REPO / "cdk.json").read_text())["context"]
    context |= {
        "nodesmith:clusterEndpoint": "https://ABCDEF0123456789.gr7.eu-west-1.eks.amazonaws.com",
        "nodesmith:pendingPodAgeAlarmSeconds": str(PENDING_POD_AGE_ALARM_SECONDS),
    }
    app = cdk.App(context=context)
    stack = NodesmithStack(app, "NodesmithStack", config=NodesmithConfig.from_context(app.node.try_get_context))
    return dict(Template.from_stack(stack).to_json())


@pytest.fixture(scope="session")
def synth() -> Synth:
    """The stack synthesized with a cluster-specific context and an alarm topic (:class:`stack_synth.Synth`)."""
    return Synth()
