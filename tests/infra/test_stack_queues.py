"""The synthesized NodesmithStack's queues: the interruption and termination queues, their dead-letter queues and
alarms, the EventBridge rules that feed the interruption queue, and the queue policies that deny every other sender.

Every test reads the session's one synthesis (``synth`` in ``conftest.py``; the ``infra-synth`` xdist group keeps
these modules on one worker).
"""

from __future__ import annotations

import json

import pytest
from stack_synth import (
    HANDLERS,
    INTERRUPTION,
    RECONCILE,
    TERMINATION,
    TOPIC,
    Synth,
    as_list,
    dlq_of,
    event_source,
    interruption_queue,
    lambda_function,
    queue_policy_statements,
    role_of,
    role_policy_statements,
    termination_queue,
)

pytestmark = pytest.mark.xdist_group("infra-synth")

# --- queues ----------------------------------------------------------------------------------


def test_interruption_queue_is_encrypted_short_lived_and_dead_lettered(synth: Synth) -> None:
    _queue_id, queue = interruption_queue(synth)
    _, function = lambda_function(synth, INTERRUPTION)

    assert queue["SqsManagedSseEnabled"] is True
    assert queue["MessageRetentionPeriod"] == 300
    # a message whose handling failed comes back within half a spot interruption's two minutes (the function is
    # never throttled: its reserved concurrency covers the event source), and one that keeps failing reaches the
    # DLQ before the 300 s retention drops it
    assert function["Timeout"] < queue["VisibilityTimeout"] <= 60
    assert function["ReservedConcurrentExecutions"] >= 2
    assert queue["VisibilityTimeout"] * queue["RedrivePolicy"]["maxReceiveCount"] < 300
    dlq = synth.resources("AWS::SQS::Queue")[dlq_of(queue)]
    assert dlq["SqsManagedSseEnabled"] is True
    assert dlq["MessageRetentionPeriod"] == 14 * 24 * 3600


def test_termination_queue_keeps_a_blocked_drain_about_an_hour_before_dead_lettering_it(synth: Synth) -> None:
    from infra.config import termination_patience_seconds

    _queue_id, queue = termination_queue(synth)
    _, function = lambda_function(synth, TERMINATION)
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
    dlq = synth.resources("AWS::SQS::Queue")[dlq_of(queue)]
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
    queue_id, _ = interruption_queue(synth)
    rule_arns = [
        {"Fn::GetAtt": [lid, "Arn"]}
        for lid, props in synth.resources("AWS::Events::Rule").items()
        if "EventPattern" in props
    ]
    statements = queue_policy_statements(synth, queue_id)
    senders = []
    for statement in statements:
        if statement["Effect"] == "Allow":
            assert statement["Principal"] == {"Service": "events.amazonaws.com"}
            assert "sqs:*" not in as_list(statement["Action"])
            senders.append(statement["Condition"]["ArnEquals"]["aws:SourceArn"])
    assert sorted(map(str, senders)) == sorted(map(str, rule_arns))
    # Every principal, AWS services of this account included ("*", not {"AWS": "*"}), is denied a send that does
    # not come from one of the rules: an IAM principal's request has no aws:SourceArn, so the negated condition
    # matches it too.
    denies = [s for s in statements if s["Effect"] == "Deny" and "sqs:SendMessage" in as_list(s["Action"])]
    assert len(denies) == 1
    (deny,) = denies
    assert deny["Principal"] == "*"
    assert deny["Resource"] == {"Fn::GetAtt": [queue_id, "Arn"]}
    assert list(deny["Condition"]) == ["ArnNotEquals"]
    assert list(deny["Condition"]["ArnNotEquals"]) == ["aws:SourceArn"]
    assert sorted(map(str, deny["Condition"]["ArnNotEquals"]["aws:SourceArn"])) == sorted(map(str, rule_arns))


def test_only_the_reconcile_and_interruption_roles_may_send_to_the_termination_queue(synth: Synth) -> None:
    queue_id, _ = termination_queue(synth)
    senders = [role_of(lambda_function(synth, h)[1]) for h in (RECONCILE, INTERRUPTION)]
    statements = queue_policy_statements(synth, queue_id)
    assert not [s for s in statements if s["Effect"] == "Allow"]  # identity policies grant, the queue only denies
    denies = [s for s in statements if s["Effect"] == "Deny" and "sqs:SendMessage" in as_list(s["Action"])]
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
        for role in {role_of(lambda_function(synth, h)[1]) for h in HANDLERS}
        for s in role_policy_statements(synth, role)
        if "sqs:SendMessage" in as_list(s["Action"])
    }
    assert allowed == set(senders)
    for role in senders:
        sends = [s for s in role_policy_statements(synth, role) if "sqs:SendMessage" in as_list(s["Action"])]
        assert [(s["Action"], s["Resource"]) for s in sends] == [("sqs:SendMessage", {"Fn::GetAtt": [queue_id, "Arn"]})]


def test_exactly_the_five_interruption_rules_target_the_queue(synth: Synth) -> None:
    queue_id, _ = interruption_queue(synth)
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
        {"source": ["aws.ec2"], "detail-type": ["EC2 Capacity Reservation Instance Interruption Warning"]},
    ]
    key = lambda p: json.dumps(p, sort_keys=True)  # noqa: E731
    assert sorted(patterns, key=key) == sorted(expected, key=key)


def test_the_termination_queue_is_fifo_with_one_group_per_nodeclaim_and_high_throughput(synth: Synth) -> None:
    _queue_id, queue = termination_queue(synth)
    # deduplication and throughput per message group (one per NodeClaim): a repeated request is dropped, and
    # nodes do not share one queue-wide rate; the sender sets the deduplication id, not the body's hash
    assert queue["FifoQueue"] is True
    assert (queue["DeduplicationScope"], queue["FifoThroughputLimit"]) == ("messageGroup", "perMessageGroupId")
    assert queue.get("ContentBasedDeduplication") is False
    assert synth.resources("AWS::SQS::Queue")[dlq_of(queue)]["FifoQueue"] is True
    assert "MaximumBatchingWindowInSeconds" not in event_source(synth, TERMINATION)  # none for FIFO


@pytest.mark.parametrize("which", ["interruption", "termination"])
def test_each_dead_letter_queue_alarm_fires_on_one_message(synth: Synth, which: str) -> None:
    _queue_id, queue = (interruption_queue if which == "interruption" else termination_queue)(synth)
    dlq_id = dlq_of(queue)
    _, alarm = synth.one(
        "AWS::CloudWatch::Alarm",
        lambda p: p.get("Dimensions") == [{"Name": "QueueName", "Value": {"Fn::GetAtt": [dlq_id, "QueueName"]}}],
    )
    assert alarm["MetricName"] == "ApproximateNumberOfMessagesVisible"
    assert alarm["Threshold"] == 1
    assert alarm["ComparisonOperator"] == "GreaterThanOrEqualToThreshold"
    assert alarm["AlarmActions"] == [TOPIC]
