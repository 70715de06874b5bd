"""The synthesized NodesmithStack: interruption and termination pipelines, reconcile loop, least-privilege IAM
(each role holds exactly what its function calls; queue policies deny every other sender), EKS access,
dashboard and alarms, cdk-nag and cfn-lint clean.

Synthesis through jsii takes seconds, so every test reads one module-scoped synthesis, and the
module is pinned to one xdist worker (``make unit`` runs ``-n 2 --dist loadgroup``).
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
import yaml

if TYPE_CHECKING:
    from collections.abc import Iterator

pytestmark = pytest.mark.xdist_group("infra-synth")

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


@pytest.fixture(scope="module")
def synth() -> Synth:
    return Synth()


RECONCILE = "nodesmith.handlers.reconcile.handler"
INTERRUPTION = "nodesmith.handlers.interruption.handler"
TERMINATION = "nodesmith.handlers.termination.handler"
HANDLERS = (RECONCILE, INTERRUPTION, TERMINATION)


def _function(synth: Synth, handler: str) -> tuple[str, dict[str, Any]]:
    return synth.one("AWS::Lambda::Function", lambda p: p.get("Handler") == handler)


def _interruption_queue(synth: Synth) -> tuple[str, dict[str, Any]]:
    return synth.one("AWS::SQS::Queue", lambda p: "RedrivePolicy" in p and p["MessageRetentionPeriod"] == 300)


def _termination_queue(synth: Synth) -> tuple[str, dict[str, Any]]:
    return synth.one("AWS::SQS::Queue", lambda p: "RedrivePolicy" in p and p["MessageRetentionPeriod"] > 300)


def _dlq_of(queue: dict[str, Any]) -> str:
    return str(queue["RedrivePolicy"]["deadLetterTargetArn"]["Fn::GetAtt"][0])


def _queue_policy_statements(synth: Synth, queue_id: str) -> list[dict[str, Any]]:
    return [
        statement
        for props in synth.resources("AWS::SQS::QueuePolicy").values()
        if {"Ref": queue_id} in props["Queues"]
        for statement in props["PolicyDocument"]["Statement"]
    ]


def _statements(synth: Synth) -> Iterator[tuple[str, dict[str, Any]]]:
    """(logical id of the identity policy, statement) for every IAM identity policy statement."""
    for cfn_type in ("AWS::IAM::Policy", "AWS::IAM::ManagedPolicy"):
        for logical_id, props in synth.resources(cfn_type).items():
            for statement in props["PolicyDocument"]["Statement"]:
                yield logical_id, statement
    for logical_id, props in synth.resources("AWS::IAM::Role").items():
        for policy in props.get("Policies", []):
            for statement in policy["PolicyDocument"]["Statement"]:
                yield logical_id, statement


def _as_list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else [value]


def _role_policy_statements(synth: Synth, role_logical_id: str) -> list[dict[str, Any]]:
    """Every statement of every policy attached to the role."""
    statements = []
    for props in synth.resources("AWS::IAM::Policy").values():
        if {"Ref": role_logical_id} in props["Roles"]:
            statements.extend(props["PolicyDocument"]["Statement"])
    return statements


def _role_of(function_props: dict[str, Any]) -> str:
    return str(function_props["Role"]["Fn::GetAtt"][0])


def _actions_of(synth: Synth, handler: str) -> set[str]:
    """Every action the function's role is allowed."""
    statements = _role_policy_statements(synth, _role_of(_function(synth, handler)[1]))
    assert all(s["Effect"] == "Allow" for s in statements)
    return {a for s in statements for a in _as_list(s["Action"])}


def _event_source(synth: Synth, handler: str) -> dict[str, Any]:
    function_id, _ = _function(synth, handler)
    return synth.one("AWS::Lambda::EventSourceMapping", lambda p: p["FunctionName"] == {"Ref": function_id})[1]


# --- queues ----------------------------------------------------------------------------------


def test_interruption_queue_is_encrypted_short_lived_and_dead_lettered(synth: Synth) -> None:
    _queue_id, queue = _interruption_queue(synth)
    _, function = _function(synth, INTERRUPTION)

    assert queue["SqsManagedSseEnabled"] is True
    assert queue["MessageRetentionPeriod"] == 300
    # a message whose handling failed comes back within half a spot interruption's two minutes (the function is
    # never throttled: its reserved concurrency covers the event source), and one that keeps failing reaches the
    # DLQ before the 300 s retention drops it
    assert function["Timeout"] < queue["VisibilityTimeout"] <= 60
    assert function["ReservedConcurrentExecutions"] >= 2
    assert queue["VisibilityTimeout"] * queue["RedrivePolicy"]["maxReceiveCount"] < 300
    dlq = synth.resources("AWS::SQS::Queue")[_dlq_of(queue)]
    assert dlq["SqsManagedSseEnabled"] is True
    assert dlq["MessageRetentionPeriod"] == 14 * 24 * 3600


def test_termination_queue_keeps_a_blocked_drain_about_an_hour_before_dead_lettering_it(synth: Synth) -> None:
    from infra.config import termination_patience_seconds

    _queue_id, queue = _termination_queue(synth)
    _, function = _function(synth, TERMINATION)
    variables = function["Environment"]["Variables"]

    assert queue["SqsManagedSseEnabled"] is True
    assert queue["MessageRetentionPeriod"] == 24 * 3600
    # Lambda refuses an event source whose queue's visibility is below the function timeout; the handler sets a
    # still-draining request's visibility to its backoff itself, so this only applies to failed invocations.
    assert function["Timeout"] < queue["VisibilityTimeout"] <= function["Timeout"] + 15
    receives = queue["RedrivePolicy"]["maxReceiveCount"]
    patience = termination_patience_seconds(
        max_receive_count=receives,
        retry_seconds=int(variables["NODESMITH_TERMINATION_RETRY_SECONDS"]),
        retry_max_seconds=int(variables["NODESMITH_TERMINATION_RETRY_MAX_SECONDS"]),
    )
    assert 45 * 60 <= patience <= 90 * 60
    # even if every delivery waited the full visibility timeout, the DLQ comes before the message would expire
    assert receives * queue["VisibilityTimeout"] < queue["MessageRetentionPeriod"]
    dlq = synth.resources("AWS::SQS::Queue")[_dlq_of(queue)]
    assert dlq["SqsManagedSseEnabled"] is True
    assert dlq["MessageRetentionPeriod"] == 14 * 24 * 3600


def test_every_queue_denies_requests_without_tls(synth: Synth) -> None:
    tls_only = set()
    for props in synth.resources("AWS::SQS::QueuePolicy").values():
        for statement in props["PolicyDocument"]["Statement"]:
            if statement["Effect"] == "Deny" and statement.get("Condition") == {
                "Bool": {"aws:SecureTransport": "false"}
            }:
                tls_only.add(statement["Resource"]["Fn::GetAtt"][0])
    assert tls_only == set(synth.resources("AWS::SQS::Queue")) and len(tls_only) == 4


def test_only_the_interruption_rules_may_send_to_the_interruption_queue(synth: Synth) -> None:
    queue_id, _ = _interruption_queue(synth)
    rule_arns = [
        {"Fn::GetAtt": [lid, "Arn"]}
        for lid, props in synth.resources("AWS::Events::Rule").items()
        if "EventPattern" in props
    ]
    statements = _queue_policy_statements(synth, queue_id)
    senders = []
    for statement in statements:
        if statement["Effect"] == "Allow":
            assert statement["Principal"] == {"Service": "events.amazonaws.com"}
            assert "sqs:*" not in _as_list(statement["Action"])
            senders.append(statement["Condition"]["ArnEquals"]["aws:SourceArn"])
    assert sorted(map(str, senders)) == sorted(map(str, rule_arns))
    # Every principal, AWS services of this account included ("*", not {"AWS": "*"}), is denied a send that does
    # not come from one of the rules: an IAM principal's request has no aws:SourceArn, so the negated condition
    # matches it too.
    denies = [s for s in statements if s["Effect"] == "Deny" and "sqs:SendMessage" in _as_list(s["Action"])]
    assert len(denies) == 1
    (deny,) = denies
    assert deny["Principal"] == "*"
    assert deny["Resource"] == {"Fn::GetAtt": [queue_id, "Arn"]}
    assert list(deny["Condition"]) == ["ArnNotEquals"]
    assert list(deny["Condition"]["ArnNotEquals"]) == ["aws:SourceArn"]
    assert sorted(map(str, deny["Condition"]["ArnNotEquals"]["aws:SourceArn"])) == sorted(map(str, rule_arns))


def test_only_the_reconcile_and_interruption_roles_may_send_to_the_termination_queue(synth: Synth) -> None:
    queue_id, _ = _termination_queue(synth)
    senders = [_role_of(_function(synth, h)[1]) for h in (RECONCILE, INTERRUPTION)]
    statements = _queue_policy_statements(synth, queue_id)
    assert not [s for s in statements if s["Effect"] == "Allow"]  # identity policies grant, the queue only denies
    denies = [s for s in statements if s["Effect"] == "Deny" and "sqs:SendMessage" in _as_list(s["Action"])]
    assert len(denies) == 1
    (deny,) = denies
    assert deny["Principal"] == "*"
    assert deny["Resource"] == {"Fn::GetAtt": [queue_id, "Arn"]}
    # aws:PrincipalArn of a role session is the role's ARN, which CloudFormation renders from the role itself
    assert deny["Condition"] == {
        "ArnNotEquals": {"aws:PrincipalArn": [{"Fn::GetAtt": [role, "Arn"]} for role in senders]}
    }
    # and those two roles are the only ones allowed to send, by their identity policies
    allowed = {
        role
        for role in {_role_of(_function(synth, h)[1]) for h in HANDLERS}
        for s in _role_policy_statements(synth, role)
        if "sqs:SendMessage" in _as_list(s["Action"])
    }
    assert allowed == set(senders)
    for role in senders:
        sends = [s for s in _role_policy_statements(synth, role) if "sqs:SendMessage" in _as_list(s["Action"])]
        assert [(s["Action"], s["Resource"]) for s in sends] == [("sqs:SendMessage", {"Fn::GetAtt": [queue_id, "Arn"]})]


def test_exactly_the_four_interruption_rules_target_the_queue(synth: Synth) -> None:
    queue_id, _ = _interruption_queue(synth)
    patterns = []
    for props in synth.resources("AWS::Events::Rule").values():
        if "EventPattern" not in props:
            continue
        assert [t["Arn"] for t in props["Targets"]] == [{"Fn::GetAtt": [queue_id, "Arn"]}]
        patterns.append(props["EventPattern"])

    expected = [
        {"source": ["aws.ec2"], "detail-type": ["EC2 Spot Instance Interruption Warning"]},
        {"source": ["aws.ec2"], "detail-type": ["EC2 Instance Rebalance Recommendation"]},
        {
            "source": ["aws.ec2"],
            "detail-type": ["EC2 Instance State-change Notification"],
            "detail": {"state": ["stopping", "stopped", "shutting-down", "terminated"]},
        },
        {
            "source": ["aws.health"],
            "detail-type": ["AWS Health Event"],
            "detail": {"service": ["EC2"], "eventTypeCategory": ["scheduledChange"]},
        },
    ]
    key = lambda p: json.dumps(p, sort_keys=True)  # noqa: E731
    assert sorted(patterns, key=key) == sorted(expected, key=key)


def test_the_termination_queue_is_fifo_with_one_group_per_nodeclaim_and_high_throughput(synth: Synth) -> None:
    _queue_id, queue = _termination_queue(synth)
    # deduplication and throughput per message group (one per NodeClaim): a repeated request is dropped, and
    # nodes do not share one queue-wide rate; the sender sets the deduplication id, not the body's hash
    assert queue["FifoQueue"] is True
    assert (queue["DeduplicationScope"], queue["FifoThroughputLimit"]) == ("messageGroup", "perMessageGroupId")
    assert queue.get("ContentBasedDeduplication") is False
    assert synth.resources("AWS::SQS::Queue")[_dlq_of(queue)]["FifoQueue"] is True
    assert "MaximumBatchingWindowInSeconds" not in _event_source(synth, TERMINATION)  # none for FIFO


@pytest.mark.parametrize("which", ["interruption", "termination"])
def test_each_dead_letter_queue_alarm_fires_on_one_message(synth: Synth, which: str) -> None:
    _queue_id, queue = (_interruption_queue if which == "interruption" else _termination_queue)(synth)
    dlq_id = _dlq_of(queue)
    _, alarm = synth.one(
        "AWS::CloudWatch::Alarm",
        lambda p: p.get("Dimensions") == [{"Name": "QueueName", "Value": {"Fn::GetAtt": [dlq_id, "QueueName"]}}],
    )
    assert alarm["MetricName"] == "ApproximateNumberOfMessagesVisible"
    assert alarm["Threshold"] == 1
    assert alarm["ComparisonOperator"] == "GreaterThanOrEqualToThreshold"
    assert alarm["AlarmActions"] == [TOPIC]


# --- functions -------------------------------------------------------------------------------


@pytest.mark.parametrize("handler", HANDLERS)
def test_functions_share_runtime_tracing_and_json_logs(synth: Synth, handler: str) -> None:
    _, function = _function(synth, handler)
    assert function["Runtime"] == "python3.11"
    assert function["Architectures"] == ["arm64"]
    assert function["TracingConfig"] == {"Mode": "Active"}
    assert function["LoggingConfig"]["LogFormat"] == "JSON"
    log_group = function["LoggingConfig"]["LogGroup"]["Ref"]
    assert synth.resources("AWS::Logs::LogGroup")[log_group]["RetentionInDays"] == 30


@pytest.mark.parametrize(
    ("handler", "expected"),
    [
        (
            RECONCILE,
            {"NODE_ROLE_ARN", "RECONCILE_MODE", "STATE_TABLE", "TERMINATION_QUEUE_URL",
             "TERMINATION_REQUEST_STALE_SECONDS", "REGISTRATION_TTL_SECONDS"},
        ),
        (INTERRUPTION, {"REBALANCE_ACTION", "STATE_TABLE", "TERMINATION_QUEUE_URL", "RECONCILE_FUNCTION"}),
        (
            TERMINATION,
            {"TERMINATION_QUEUE_URL", "EVICTION_WORKERS", "TERMINATION_RETRY_SECONDS",
             "TERMINATION_RETRY_MAX_SECONDS"},
        ),
    ],
)  # fmt: skip
def test_each_function_gets_the_settings_it_reads_under_the_handlers_env_names(
    synth: Synth, handler: str, expected: set[str]
) -> None:
    from nodesmith.handlers.settings import ENV, load_settings

    common = {"CLUSTER_NAME", "CLUSTER_ENDPOINT", "KUBE_AUTH"}  # no CA bundle configured: left out
    _, function = _function(synth, handler)
    variables = function["Environment"]["Variables"]
    assert variables["POWERTOOLS_METRICS_NAMESPACE"] == "Nodesmith"
    ours = {k for k in variables if k.startswith("NODESMITH_")}
    assert ours == {getattr(ENV, name) for name in common | expected}
    # The literal values parse with the handlers' own settings model.
    settings = load_settings({k: v for k, v in variables.items() if isinstance(v, str)})
    assert settings.cluster_name == CLUSTER
    assert settings.kube_auth == "eks"
    if handler == RECONCILE:
        assert settings.node_role_arn == NODE_ROLE
        assert settings.registration_ttl_seconds == 900  # Karpenter's registration TTL
    if handler == TERMINATION:
        assert (settings.eviction_workers, settings.termination_retry_seconds) == (8, 2)
        assert settings.termination_retry_max_seconds == 10  # Karpenter's eviction backoff cap
        # its own queue: the backoff is a ChangeMessageVisibility on it
        queue_id, _ = _termination_queue(synth)
        assert variables["NODESMITH_TERMINATION_QUEUE_URL"] == {"Ref": queue_id}


@pytest.mark.parametrize("handler", [INTERRUPTION, TERMINATION])
def test_queue_functions_consume_with_partial_batch_failures_and_bounded_concurrency(
    synth: Synth, handler: str
) -> None:
    queue_id, _ = (_interruption_queue if handler == INTERRUPTION else _termination_queue)(synth)
    mapping = _event_source(synth, handler)
    assert mapping["EventSourceArn"] == {"Fn::GetAtt": [queue_id, "Arn"]}
    assert mapping["FunctionResponseTypes"] == ["ReportBatchItemFailures"]
    assert mapping["BatchSize"] == 10
    assert 0 <= mapping.get("MaximumBatchingWindowInSeconds", 0) <= 1
    # a burst fans out to a bounded number of invocations, so the kube-apiserver is not flooded
    assert mapping["ScalingConfig"] == {"MaximumConcurrency": 25}


@pytest.mark.parametrize("handler", [INTERRUPTION, TERMINATION])
def test_queue_functions_reserve_at_least_their_event_source_s_concurrency(synth: Synth, handler: str) -> None:
    # never throttled by the account's other functions, and never throttled by their own event source
    _, function = _function(synth, handler)
    mapping = _event_source(synth, handler)
    assert function["ReservedConcurrentExecutions"] >= mapping["ScalingConfig"]["MaximumConcurrency"]


def test_the_interruption_function_is_sized_for_verification_not_scheduling(synth: Synth) -> None:
    _, function = _function(synth, INTERRUPTION)
    assert function["MemorySize"] <= 1024
    assert function["Timeout"] <= 20


def test_the_interruption_function_may_wake_the_reconcile_function_and_no_other(synth: Synth) -> None:
    from nodesmith.handlers.settings import ENV

    reconcile_id, _ = _function(synth, RECONCILE)
    _, interruption = _function(synth, INTERRUPTION)
    assert interruption["Environment"]["Variables"][ENV.RECONCILE_FUNCTION] == {"Ref": reconcile_id}
    scopes = [
        s["Resource"]
        for s in _role_policy_statements(synth, _role_of(interruption))
        if s["Effect"] == "Allow" and "lambda:InvokeFunction" in _as_list(s["Action"])
    ]
    assert scopes == [{"Fn::GetAtt": [reconcile_id, "Arn"]}]


def test_reconcile_runs_every_minute_one_at_a_time_and_drops_stale_ticks(synth: Synth) -> None:
    function_id, function = _function(synth, RECONCILE)
    _, rule = synth.one("AWS::Events::Rule", lambda p: "ScheduleExpression" in p)
    assert rule["ScheduleExpression"] == "rate(1 minute)"
    assert [t["Arn"] for t in rule["Targets"]] == [{"Fn::GetAtt": [function_id, "Arn"]}]
    assert function["ReservedConcurrentExecutions"] == 1
    assert function["Timeout"] == 900
    _, invoke = synth.one("AWS::Lambda::EventInvokeConfig", lambda p: p["FunctionName"] == {"Ref": function_id})
    assert invoke["MaximumRetryAttempts"] == 0


def test_state_table_is_on_demand_recoverable_encrypted_with_ttl(synth: Synth) -> None:
    _, table = synth.one("AWS::DynamoDB::Table", lambda p: True)
    assert table["BillingMode"] == "PAY_PER_REQUEST"
    assert table["PointInTimeRecoverySpecification"]["PointInTimeRecoveryEnabled"] is True
    assert table["SSESpecification"]["SSEEnabled"] is True
    assert table["TimeToLiveSpecification"] == {"AttributeName": "expires_at", "Enabled": True}


def test_state_table_access_is_what_each_function_calls(synth: Synth) -> None:
    table_id, _ = synth.one("AWS::DynamoDB::Table", lambda p: True)
    table_arn = {"Fn::GetAtt": [table_id, "Arn"]}

    def table_statements(handler: str) -> list[dict[str, Any]]:
        statements = _role_policy_statements(synth, _role_of(_function(synth, handler)[1]))
        return [s for s in statements if any(a.startswith("dynamodb:") for a in _as_list(s["Action"]))]

    # the lease (conditional UpdateItem, GetItem, DeleteItem) and the offering marks (PutItem, Query)
    (reconcile,) = table_statements(RECONCILE)
    assert set(_as_list(reconcile["Action"])) == {
        "dynamodb:GetItem", "dynamodb:PutItem", "dynamodb:UpdateItem", "dynamodb:DeleteItem", "dynamodb:Query",
    }  # fmt: skip
    assert reconcile["Resource"] == table_arn and "Condition" not in reconcile
    # an interrupted spot offering's mark, and nothing under another partition key (the reconcile lease)
    (interruption,) = table_statements(INTERRUPTION)
    assert interruption["Action"] == "dynamodb:PutItem" and interruption["Resource"] == table_arn
    assert interruption["Condition"] == {"ForAllValues:StringEquals": {"dynamodb:LeadingKeys": ["offering"]}}
    assert table_statements(TERMINATION) == []


def test_no_physical_names(synth: Synth) -> None:
    names = {
        "AWS::SQS::Queue": "QueueName",
        "AWS::Lambda::Function": "FunctionName",
        "AWS::DynamoDB::Table": "TableName",
        "AWS::IAM::Role": "RoleName",
        "AWS::Logs::LogGroup": "LogGroupName",
        "AWS::Events::Rule": "Name",
        "AWS::CloudWatch::Alarm": "AlarmName",
        "AWS::CloudWatch::Dashboard": "DashboardName",
    }
    for cfn_type, prop in names.items():
        for logical_id, props in synth.resources(cfn_type).items():
            assert prop not in props, f"{logical_id} sets {prop}"


def test_outputs_name_the_queues_and_every_role(synth: Synth) -> None:
    outputs = synth.json["Outputs"]
    termination_queue_id, _ = _termination_queue(synth)
    assert outputs["TerminationQueueUrl"]["Value"] == {"Ref": termination_queue_id}
    for name, handler in (("ReconcileRoleArn", RECONCILE), ("InterruptionRoleArn", INTERRUPTION),
                          ("TerminationRoleArn", TERMINATION)):  # fmt: skip
        assert outputs[name]["Value"] == {"Fn::GetAtt": [_role_of(_function(synth, handler)[1]), "Arn"]}


# --- IAM -------------------------------------------------------------------------------------

_BASE = {"logs:CreateLogStream", "logs:PutLogEvents", "xray:PutTelemetryRecords", "xray:PutTraceSegments"}
_CONSUME = {
    "sqs:ReceiveMessage",
    "sqs:DeleteMessage",
    "sqs:ChangeMessageVisibility",
    "sqs:GetQueueUrl",
    "sqs:GetQueueAttributes",
}
_ROLE_ACTIONS = {
    RECONCILE: _BASE
    | {
        "ec2:DescribeAvailabilityZones", "ec2:DescribeCapacityReservations", "ec2:DescribeImages",
        "ec2:DescribeInstances",
        "ec2:DescribeInstanceTypeOfferings", "ec2:DescribeInstanceTypes", "ec2:DescribeLaunchTemplates",
        "ec2:DescribeSecurityGroups", "ec2:DescribeSpotPriceHistory", "ec2:DescribeSubnets",
        "eks:DescribeCluster", "ec2:CreateFleet", "ec2:RunInstances", "ec2:CreateLaunchTemplate", "ec2:CreateTags",
        "ec2:TerminateInstances", "ec2:DeleteLaunchTemplate", "iam:PassRole", "iam:CreateInstanceProfile",
        "iam:TagInstanceProfile", "iam:GetInstanceProfile", "iam:AddRoleToInstanceProfile",
        "iam:RemoveRoleFromInstanceProfile", "ssm:GetParameter", "pricing:GetProducts",
        "dynamodb:GetItem", "dynamodb:PutItem", "dynamodb:UpdateItem", "dynamodb:DeleteItem", "dynamodb:Query",
        "sqs:SendMessage",
    },
    INTERRUPTION: _BASE
    | _CONSUME
    | {"ec2:DescribeInstances", "dynamodb:PutItem", "sqs:SendMessage", "lambda:InvokeFunction"},
    TERMINATION: _BASE | _CONSUME | {"ec2:DescribeInstances", "ec2:TerminateInstances"},
}  # fmt: skip
"""What each function's code calls (its adapters' boto3 calls), and the grants its logs, traces and event
source need: the role may hold nothing else."""


@pytest.mark.parametrize("handler", HANDLERS)
def test_each_role_holds_exactly_the_actions_its_function_calls(synth: Synth, handler: str) -> None:
    assert _actions_of(synth, handler) == _ROLE_ACTIONS[handler]


def test_the_interruption_role_launches_nothing_and_terminates_nothing(synth: Synth) -> None:
    actions = _actions_of(synth, INTERRUPTION)
    for forbidden in ("ec2:CreateFleet", "ec2:RunInstances", "ec2:CreateLaunchTemplate", "ec2:CreateTags",
                      "ec2:TerminateInstances", "ec2:DeleteLaunchTemplate", "iam:PassRole",
                      "iam:CreateInstanceProfile", "ssm:GetParameter", "pricing:GetProducts",
                      "eks:DescribeCluster", "dynamodb:UpdateItem", "dynamodb:DeleteItem"):  # fmt: skip
        assert forbidden not in actions


def test_the_termination_role_only_describes_and_terminates(synth: Synth) -> None:
    actions = _actions_of(synth, TERMINATION)
    assert {a for a in actions if a.startswith("ec2:")} == {"ec2:DescribeInstances", "ec2:TerminateInstances"}
    assert not {a for a in actions if a.split(":")[0] in ("iam", "dynamodb", "lambda", "ssm", "pricing", "eks")}
    assert "sqs:SendMessage" not in actions


def test_no_allow_statement_has_a_wildcard_action(synth: Synth) -> None:
    for policy, statement in _statements(synth):
        for action in _as_list(statement["Action"]):
            assert action != "*" and not action.endswith(":*"), f"{policy}: {action}"
            assert "*" not in action, f"{policy}: {action}"


def test_terminate_requires_the_owned_cluster_tag_and_a_nodepool(synth: Synth) -> None:
    terminates = [(p, s) for p, s in _statements(synth) if "ec2:TerminateInstances" in _as_list(s["Action"])]
    assert len(terminates) == 2  # the reconcile function's (garbage collection, liveness) and the termination's
    for policy, statement in terminates:
        assert _as_list(statement["Action"]) == ["ec2:TerminateInstances"], policy
        assert statement["Condition"] == {
            "StringEquals": {f"aws:ResourceTag/{CLUSTER_TAG}": "owned"},
            "StringLike": {"aws:ResourceTag/karpenter.sh/nodepool": "*"},
        }, policy
        assert statement["Resource"]["Fn::Join"][1][-1] == ":instance/*"


def test_delete_launch_template_requires_the_owned_cluster_tag_and_an_ec2nodeclass(synth: Synth) -> None:
    deletes = [(p, s) for p, s in _statements(synth) if "ec2:DeleteLaunchTemplate" in _as_list(s["Action"])]
    assert len(deletes) == 1
    ((_, statement),) = deletes
    assert _as_list(statement["Action"]) == ["ec2:DeleteLaunchTemplate"]
    assert statement["Condition"] == {
        "StringEquals": {f"aws:ResourceTag/{CLUSTER_TAG}": "owned"},
        "StringLike": {"aws:ResourceTag/karpenter.k8s.aws/ec2nodeclass": "*"},
    }
    assert statement["Resource"]["Fn::Join"][1][-1] == ":launch-template/*"


def test_the_launch_templates_the_adapter_creates_carry_the_tags_delete_requires() -> None:
    from nodesmith.adapters.aws.tags import static_tags

    tags = static_tags(cluster_name=CLUSTER, nodeclass_name="default", extra={})
    assert tags[CLUSTER_TAG] == "owned"
    assert tags["karpenter.k8s.aws/ec2nodeclass"] == "default"


def test_no_statement_tags_existing_instances(synth: Synth) -> None:
    # Tags are only ever written by the launch calls that create the resources (ec2:CreateAction).
    for policy, statement in _statements(synth):
        if "ec2:CreateTags" not in _as_list(statement["Action"]):
            continue
        assert statement["Condition"]["StringEquals"]["ec2:CreateAction"] == [
            "CreateFleet", "RunInstances", "CreateLaunchTemplate",
        ], policy  # fmt: skip
        assert not any("aws:ResourceTag" in key for c in statement["Condition"].values() for key in c), policy


def test_launch_creates_only_resources_tagged_owned_by_the_cluster(synth: Synth) -> None:
    referenced_only = re.compile(r":(image|snapshot|subnet|security-group|capacity-reservation)/\*$")
    creates = {"ec2:CreateFleet", "ec2:RunInstances", "ec2:CreateLaunchTemplate", "ec2:CreateTags"}
    for policy, statement in _statements(synth):
        if not set(_as_list(statement["Action"])) & creates:
            continue
        tag_conditions = statement.get("Condition", {}).get("StringEquals", {})
        if tag_conditions:
            assert {f"aws:RequestTag/{CLUSTER_TAG}", f"aws:ResourceTag/{CLUSTER_TAG}"} & set(tag_conditions)
            assert all(tag_conditions[k] == "owned" for k in tag_conditions if CLUSTER_TAG in k)
        else:
            # Unconditioned launch statements may only reference existing images, snapshots, subnets and SGs.
            assert set(_as_list(statement["Action"])) <= {"ec2:CreateFleet", "ec2:RunInstances"}, policy
            for resource in _as_list(statement["Resource"]):
                tail = resource["Fn::Join"][1][-1]
                assert referenced_only.search(tail), (policy, tail)


def test_only_the_reconcile_role_reads_and_launches_into_capacity_reservations(synth: Synth) -> None:
    assert "ec2:DescribeCapacityReservations" in _actions_of(synth, RECONCILE)
    for handler in (INTERRUPTION, TERMINATION):
        assert "ec2:DescribeCapacityReservations" not in _actions_of(synth, handler)
    into = [s for _, s in _statements(synth) if "capacity-reservation/" in json.dumps(s.get("Resource"))]
    assert len(into) == 1
    (statement,) = into
    assert sorted(_as_list(statement["Action"])) == ["ec2:CreateFleet", "ec2:RunInstances"]
    (resource,) = _as_list(statement["Resource"])
    assert resource["Fn::Join"][1][-1] == ":*:capacity-reservation/*"  # any account's: reservations may be shared


def test_only_the_reconcile_role_may_pass_the_node_role_only_to_ec2(synth: Synth) -> None:
    passes = [(p, s) for p, s in _statements(synth) if "iam:PassRole" in _as_list(s["Action"])]
    assert len(passes) == 1
    policies = synth.resources("AWS::IAM::Policy")
    assert [policies[policy]["Roles"][0]["Ref"] for policy, _ in passes] == [_role_of(_function(synth, RECONCILE)[1])]
    for _, statement in passes:
        assert statement["Resource"] == NODE_ROLE
        assert statement["Condition"] == {"StringEquals": {"iam:PassedToService": "ec2.amazonaws.com"}}


def test_the_termination_role_may_set_the_visibility_of_its_own_queue_s_messages(synth: Synth) -> None:
    # the handler's backoff between drain rounds: ChangeMessageVisibilityBatch, authorized by this action
    queue_id, _ = _termination_queue(synth)
    _, termination = _function(synth, TERMINATION)
    scopes = [
        s["Resource"]
        for s in _role_policy_statements(synth, _role_of(termination))
        if s["Effect"] == "Allow" and "sqs:ChangeMessageVisibility" in _as_list(s["Action"])
    ]
    assert scopes == [{"Fn::GetAtt": [queue_id, "Arn"]}]


def test_wildcard_resources_are_only_where_aws_offers_no_resource_scope(synth: Synth) -> None:
    allowed = {
        "ec2:DescribeAvailabilityZones",
        "ec2:DescribeCapacityReservations",
        "ec2:DescribeImages",
        "ec2:DescribeInstances",
        "ec2:DescribeInstanceTypeOfferings",
        "ec2:DescribeInstanceTypes",
        "ec2:DescribeLaunchTemplates",
        "ec2:DescribeSecurityGroups",
        "ec2:DescribeSpotPriceHistory",
        "ec2:DescribeSubnets",
        "pricing:GetProducts",
        "xray:PutTelemetryRecords",
        "xray:PutTraceSegments",
    }
    for policy, statement in _statements(synth):
        if "*" in _as_list(statement["Resource"]):
            assert set(_as_list(statement["Action"])) <= allowed, policy


def test_cluster_scoped_reads(synth: Synth) -> None:
    describe = [s for _, s in _statements(synth) if "eks:DescribeCluster" in _as_list(s["Action"])]
    assert describe
    for statement in describe:
        assert statement["Resource"]["Fn::Join"][1][-1] == f":cluster/{CLUSTER}"
    ssm = [s for _, s in _statements(synth) if "ssm:GetParameter" in _as_list(s["Action"])]
    assert {s["Resource"]["Fn::Join"][1][-1] for s in ssm} == {"::parameter/aws/service/eks/optimized-ami/*"}


# --- EKS access ------------------------------------------------------------------------------


def test_every_lambda_role_gets_an_access_entry_bound_by_the_shipped_rbac(synth: Synth) -> None:
    from infra.constructs.cluster_access import CLUSTER_ROLE_MANIFEST, KUBERNETES_GROUP

    entries = synth.resources("AWS::EKS::AccessEntry").values()
    roles = {_role_of(_function(synth, h)[1]) for h in HANDLERS}
    assert {e["PrincipalArn"]["Fn::GetAtt"][0] for e in entries} == roles and len(entries) == 3
    assert all(e["ClusterName"] == CLUSTER and e["KubernetesGroups"] == [KUBERNETES_GROUP] for e in entries)
    assert all("AccessPolicies" not in e for e in entries)  # RBAC alone decides what they may do

    documents = list(yaml.safe_load_all(CLUSTER_ROLE_MANIFEST.read_text()))
    role = next(d for d in documents if d["kind"] == "ClusterRole")
    binding = next(d for d in documents if d["kind"] == "ClusterRoleBinding")
    assert binding["roleRef"]["name"] == role["metadata"]["name"]
    assert binding["subjects"] == [{"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": KUBERNETES_GROUP}]
    for rule in role["rules"]:
        assert "*" not in rule["verbs"] and "*" not in rule["resources"], rule


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
