"""The synthesized NodesmithStack the ``test_stack_*`` modules read, and helpers to find resources in it.

:class:`Synth` synthesizes the stack with a cluster-specific context and an alarm topic (the ``synth`` fixture
of ``conftest.py`` builds it once per session); the functions find a function, queue, policy statement or
event source mapping in its template by what it is, never by a logical id.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Iterator

REPO = Path(__file__).resolve().parents[2]
CLUSTER = "prod-euw1"
NODE_ROLE = "arn:aws:iam::123456789012:role/NodesmithNodeRole"
TOPIC = "arn:aws:sns:eu-west-1:123456789012:platform-alerts"
CLUSTER_TAG = f"kubernetes.io/cluster/{CLUSTER}"


class Synth:
    """The stack, its template (as dict and as ``assertions.Template``) and its annotations."""

    def __init__(self) -> None:
        import aws_cdk as cdk
        from aws_cdk.assertions import Annotations, Template

        from infra.config import NodesmithConfig
        from infra.stack import NodesmithStack

        # The same context `npx cdk synth` reads (feature flags, defaults), plus a real-looking cluster.
        context = json.loads((REPO / "cdk.json").read_text())["context"]
        context |= {
            "nodesmith:clusterName": CLUSTER,
            "nodesmith:clusterEndpoint": "https://ABCDEF0123456789.gr7.eu-west-1.eks.amazonaws.com",
            "nodesmith:nodeRoleArn": NODE_ROLE,
            "nodesmith:alarmTopicArn": TOPIC,
            "nodesmith:pendingPodAgeAlarmSeconds": "240",  # as `-c key=value` would pass it
            "nodesmith:reconcileMemoryMiB": "2048",
        }
        app = cdk.App(context=context)
        self.stack = NodesmithStack(
            app, "NodesmithStack", config=NodesmithConfig.from_context(app.node.try_get_context)
        )
        self.template = Template.from_stack(self.stack)
        self.json: dict[str, Any] = dict(self.template.to_json())
        self.annotations = Annotations.from_stack(self.stack)

    def resources(self, cfn_type: str) -> dict[str, dict[str, Any]]:
        """Logical id -> Properties of every resource of ``cfn_type``."""
        return {
            logical_id: resource.get("Properties", {})
            for logical_id, resource in self.json["Resources"].items()
            if resource["Type"] == cfn_type
        }

    def one(self, cfn_type: str, predicate: Any) -> tuple[str, dict[str, Any]]:
        """The single resource of ``cfn_type`` whose properties satisfy ``predicate``."""
        found = [(lid, props) for lid, props in self.resources(cfn_type).items() if predicate(props)]
        assert len(found) == 1, f"expected one {cfn_type}, found {[lid for lid, _ in found]}"
        return found[0]


RECONCILE = "nodesmith.handlers.reconcile.handler"
INTERRUPTION = "nodesmith.handlers.interruption.handler"
TERMINATION = "nodesmith.handlers.termination.handler"
HANDLERS = (RECONCILE, INTERRUPTION, TERMINATION)


def lambda_function(synth: Synth, handler: str) -> tuple[str, dict[str, Any]]:
    return synth.one("AWS::Lambda::Function", lambda p: p.get("Handler") == handler)


def interruption_queue(synth: Synth) -> tuple[str, dict[str, Any]]:
    return synth.one("AWS::SQS::Queue", lambda p: "RedrivePolicy" in p and p["MessageRetentionPeriod"] == 300)


def termination_queue(synth: Synth) -> tuple[str, dict[str, Any]]:
    return synth.one("AWS::SQS::Queue", lambda p: "RedrivePolicy" in p and p["MessageRetentionPeriod"] > 300)


def dlq_of(queue: dict[str, Any]) -> str:
    return str(queue["RedrivePolicy"]["deadLetterTargetArn"]["Fn::GetAtt"][0])


def queue_policy_statements(synth: Synth, queue_id: str) -> list[dict[str, Any]]:
    return [
        statement
        for props in synth.resources("AWS::SQS::QueuePolicy").values()
        if {"Ref": queue_id} in props["Queues"]
        for statement in props["PolicyDocument"]["Statement"]
    ]


def identity_statements(synth: Synth) -> Iterator[tuple[str, dict[str, Any]]]:
    """(logical id of the identity policy, statement) for every IAM identity policy statement."""
    for cfn_type in ("AWS::IAM::Policy", "AWS::IAM::ManagedPolicy"):
        for logical_id, props in synth.resources(cfn_type).items():
            for statement in props["PolicyDocument"]["Statement"]:
                yield logical_id, statement
    for logical_id, props in synth.resources("AWS::IAM::Role").items():
        for policy in props.get("Policies", []):
            for statement in policy["PolicyDocument"]["Statement"]:
                yield logical_id, statement


def as_list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else [value]


def role_policy_statements(synth: Synth, role_logical_id: str) -> list[dict[str, Any]]:
    """Every statement of every policy attached to the role."""
    statements = []
    for props in synth.resources("AWS::IAM::Policy").values():
        if {"Ref": role_logical_id} in props["Roles"]:
            statements.extend(props["PolicyDocument"]["Statement"])
    return statements


def role_of(function_props: dict[str, Any]) -> str:
    return str(function_props["Role"]["Fn::GetAtt"][0])


def actions_of(synth: Synth, handler: str) -> set[str]:
    """Every action the function's role is allowed."""
    statements = role_policy_statements(synth, role_of(lambda_function(synth, handler)[1]))
    assert all(s["Effect"] == "Allow" for s in statements)
    return {a for s in statements for a in as_list(s["Action"])}


def event_source(synth: Synth, handler: str) -> dict[str, Any]:
    function_id, _ = lambda_function(synth, handler)
    return synth.one("AWS::Lambda::EventSourceMapping", lambda p: p["FunctionName"] == {"Ref": function_id})[1]
