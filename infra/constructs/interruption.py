"""Interruption handling: EventBridge rules -> SQS queue (+ DLQ) -> the interruption Lambda.

Mirrors Karpenter's interruption infrastructure (``karpenter-v1.md`` §4.1, from
``karpenter-provider-aws`` ``cloudformation.yaml``): a queue keeping messages 300 s with SSE and a
TLS-only policy, fed by rules for spot interruption warnings, rebalance recommendations, instance
state changes and AWS Health scheduled changes. Unlike Karpenter the state-change and Health rules
filter in EventBridge on what the controller acts on, so ignored events never cost an invocation,
and the queue policy denies ``sqs:SendMessage`` to every principal but those rules
(``aws:SourceArn``), where Karpenter's only allows EventBridge and SQS. Karpenter's fifth rule
(capacity reservation interruption) is left out until capacity reservations are supported.

The function verifies each message against EC2 and the cluster, cordons, marks interrupted spot
offerings unavailable, posts Events, wakes the reconcile function and sends one termination request
per node to the termination queue (:mod:`infra.constructs.termination`); it drains nothing itself.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from aws_cdk import Duration
from aws_cdk import aws_events as events
from aws_cdk import aws_events_targets as targets
from aws_cdk import aws_iam as iam
from aws_cdk import aws_lambda_event_sources as sources
from aws_cdk import aws_logs as logs
from aws_cdk import aws_sqs as sqs
from constructs import Construct

from infra.config import QUEUE_BATCHING_WINDOW_SECONDS, queue_visibility_seconds
from infra.constructs.function import NodesmithFunction
from infra.constructs.queues import dead_letter_alarm

if TYPE_CHECKING:
    from collections.abc import Mapping

__all__ = ["INTERRUPTION_MEMORY_MIB", "INTERRUPTION_RULES", "QUEUE_RETENTION", "Interruption"]

QUEUE_RETENTION = Duration.seconds(300)
"""Karpenter's ``MessageRetentionPeriod``: an interruption notice older than this is moot."""

INTERRUPTION_MEMORY_MIB = 512
"""Memory of the interruption function: a batch is one DescribeInstances and a few Kubernetes calls per
message, no scheduling (the reconcile function provisions the replacements)."""

_DLQ_SAFETY_SECONDS = 30  # a failed message must be re-received this long before it would expire

INTERRUPTION_RULES: Mapping[str, Mapping[str, Any]] = {
    "SpotInterruptionRule": {
        "source": ["aws.ec2"],
        "detail_type": ["EC2 Spot Instance Interruption Warning"],
    },
    "RebalanceRule": {
        "source": ["aws.ec2"],
        "detail_type": ["EC2 Instance Rebalance Recommendation"],
    },
    "InstanceStateChangeRule": {
        "source": ["aws.ec2"],
        "detail_type": ["EC2 Instance State-change Notification"],
        "detail": {"state": ["stopping", "stopped", "shutting-down", "terminated"]},
    },
    "ScheduledChangeRule": {
        "source": ["aws.health"],
        "detail_type": ["AWS Health Event"],
        "detail": {"service": ["EC2"], "eventTypeCategory": ["scheduledChange"]},
    },
    "CapacityReservationInterruptionRule": {
        "source": ["aws.ec2"],
        "detail_type": ["EC2 Capacity Reservation Instance Interruption Warning"],
    },
}
"""Construct id -> EventBridge pattern (``events.EventPattern`` keywords) of each interruption rule."""


class Interruption(Construct):
    """The interruption queue, its DLQ and alarm, the five EventBridge rules, and the consuming Lambda.

    Props (keyword-only):

    ``environment``
        Nodesmith settings (``ENV`` names) for the Lambda.
    ``timeout``
        Function timeout. The queue's visibility timeout is :func:`~infra.config.queue_visibility_seconds`,
        just above it, so a message whose handling failed comes back well within a spot interruption's two
        minutes (Lambda's guidance of six times the timeout guards against throttled invocations, and the
        function's reserved concurrency rules those out); the DLQ ``maxReceiveCount`` is as large as still lets
        a failing message reach the DLQ within the 300 s retention; a timeout leaving no such count raises
        ``ValueError``.
    ``log_retention``
        Retention of the function's log group.
    ``max_concurrency``
        The event source's ``ScalingConfig.MaximumConcurrency``: invocations at once, however many messages
        wait. Each invocation keeps up to 10 Kubernetes requests in flight (the reads that locate a batch's
        nodes), so a burst stays within the ~400 requests a kube-apiserver serves at once before API Priority
        and Fairness queues or rejects them.
    ``reserved_concurrency``
        Reserved concurrent executions: at least ``max_concurrency`` (the configuration checks it), so the
        event source is never throttled in a burst and no other function of the account can take the
        capacity interruptions need.
    ``batch_size``
        The event source's ``BatchSize``: messages per invocation at most (filled for up to the 1 s batching
        window). Their instances are described in one ``DescribeInstances``.

    Attributes: ``queue``, ``dead_letter_queue``, ``rules`` (id -> ``events.Rule``), ``handler``
    (:class:`NodesmithFunction`), ``function``, ``dlq_alarm`` (DLQ has at least one message).

    The event source uses ``ReportBatchItemFailures``: the handler returns the message ids to retry,
    and every other message of the batch is deleted (Karpenter deletes even unparseable messages).
    The queue policy denies ``sqs:SendMessage`` to every principal (``"*"``, AWS services included)
    whose request does not come from one of :attr:`rules` (``ArnNotEquals aws:SourceArn``): a request
    without a source ARN, an IAM user's or role's, matches the negated condition and is denied, and an
    explicit deny outweighs any identity-policy allow in the account.
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        environment: Mapping[str, str],
        timeout: Duration,
        log_retention: logs.RetentionDays,
        max_concurrency: int,
        reserved_concurrency: int,
        batch_size: int = 10,
    ) -> None:
        super().__init__(scope, construct_id)
        visibility_seconds = queue_visibility_seconds(int(timeout.to_seconds()))
        max_receive_count = math.floor((QUEUE_RETENTION.to_seconds() - _DLQ_SAFETY_SECONDS) / visibility_seconds)
        if max_receive_count < 1:
            raise ValueError(
                f"{self.node.path}: a {int(timeout.to_seconds())} s timeout needs a {visibility_seconds} s "
                f"visibility timeout, so a failed message would expire (retention 300 s) before reaching the DLQ"
            )

        self.dead_letter_queue = sqs.Queue(
            self,
            "DeadLetterQueue",
            encryption=sqs.QueueEncryption.SQS_MANAGED,
            enforce_ssl=True,
            retention_period=Duration.days(14),
        )
        self.queue = sqs.Queue(
            self,
            "Queue",
            # SQS-managed SSE, as Karpenter: EventBridge cannot write to a queue encrypted with the
            # AWS-managed KMS key (aws/sqs), and a customer key would add cost and a key policy.
            encryption=sqs.QueueEncryption.SQS_MANAGED,
            enforce_ssl=True,
            retention_period=QUEUE_RETENTION,
            visibility_timeout=Duration.seconds(visibility_seconds),
            dead_letter_queue=sqs.DeadLetterQueue(queue=self.dead_letter_queue, max_receive_count=max_receive_count),
        )

        self.rules: dict[str, events.Rule] = {}
        for rule_id, pattern in INTERRUPTION_RULES.items():
            rule = events.Rule(
                self,
                rule_id,
                description=f"Nodesmith interruption: {pattern['source'][0]} {pattern['detail_type'][0]}",
                event_pattern=events.EventPattern(**pattern),
            )
            rule.add_target(targets.SqsQueue(self.queue))
            self.rules[rule_id] = rule
        self.queue.add_to_resource_policy(
            iam.PolicyStatement(
                sid="OnlyInterruptionRulesSend",
                effect=iam.Effect.DENY,
                principals=[iam.StarPrincipal()],
                actions=["sqs:SendMessage"],
                resources=[self.queue.queue_arn],
                conditions={"ArnNotEquals": {"aws:SourceArn": [rule.rule_arn for rule in self.rules.values()]}},
            )
        )

        self.handler = NodesmithFunction(
            self,
            "Handler",
            handler="nodesmith.handlers.interruption.handler",
            service_name="nodesmith-interruption",
            description="Nodesmith: verify EC2 interruption and health events, cordon, request terminations",
            timeout=timeout,
            memory_size_mib=INTERRUPTION_MEMORY_MIB,
            environment=environment,
            log_retention=log_retention,
            reserved_concurrency=reserved_concurrency,
        )
        self.function = self.handler.function
        self.function.add_event_source(
            sources.SqsEventSource(
                self.queue,
                batch_size=batch_size,
                max_batching_window=Duration.seconds(QUEUE_BATCHING_WINDOW_SECONDS),
                report_batch_item_failures=True,
                max_concurrency=max_concurrency,
            )
        )

        self.dlq_alarm = dead_letter_alarm(
            self,
            self.dead_letter_queue,
            description=(
                "Interruption messages failed every retry and were dead-lettered: the nodes they name may "
                "not have been cordoned or handed to the termination queue. Inspect the DLQ, fix the cause, "
                "then purge it (the notices are minutes old; the queue accepts no redrive)."
            ),
        )
