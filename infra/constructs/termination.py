"""Termination: the termination queue (+ DLQ) and the termination Lambda that drains one node per message.

Whoever decides a node must go (the interruption function, the reconcile function's disruption pass and its
sweep of user deletions) deletes the NodeClaim and sends a termination request, ids only, to this queue
(``nodesmith.core.termination.TerminationRequest``). The termination function
(``nodesmith.handlers.termination.handler``) works one drain round per delivery, re-reading the NodeClaim,
node and instance first; a node that still has pods is reported as a batch item failure and its message made
visible again after a backoff, so SQS is the retry loop of the drain and ``maxReceiveCount`` plus the
dead-letter queue (with its alarm) bound it. This is Karpenter's termination controller
(``[core]:pkg/controllers/node/termination``) with SQS in place of the controller's work queue.

The queue is FIFO with one message group per NodeClaim, as the controller's work queue holds a key once: SQS
delivers a group's next message only when the one in flight is deleted or visible again, so two drain rounds of
one node never run at once, and a request repeated within 5 minutes (a redelivered warning, a sweep racing the
interruption function) is dropped by its deduplication id. Deduplication and throughput are per message group
(high-throughput FIFO), so nodes do not share a queue-wide rate. The order of a group's messages does not matter
to the handler (each is "drain this NodeClaim"), so a batch's records are worked at once and a failed record does
not hold back the ones after it.

Only Nodesmith's own function roles may send to the queue (:meth:`Termination.restrict_senders`): the
request is only a nudge (the handler acts on what the cluster and EC2 say), but nobody else has a reason
to send one.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from aws_cdk import Duration
from aws_cdk import aws_iam as iam
from aws_cdk import aws_lambda_event_sources as sources
from aws_cdk import aws_logs as logs
from aws_cdk import aws_sqs as sqs
from constructs import Construct

from infra.config import TERMINATION_QUEUE_RETENTION_SECONDS, queue_visibility_seconds
from infra.constructs.function import NodesmithFunction
from infra.constructs.queues import dead_letter_alarm
from nodesmith.handlers.settings import ENV

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

__all__ = ["TERMINATION_BATCH_SIZE", "TERMINATION_MEMORY_MIB", "Termination"]

TERMINATION_BATCH_SIZE = 10
"""Requests per invocation at most (the event source's ``BatchSize``, 10 at most for a FIFO queue); the handler
works them at once, each round evicting up to ``NODESMITH_EVICTION_WORKERS`` pods at once."""

TERMINATION_MEMORY_MIB = 512
"""Memory of the termination function: a round is Kubernetes and EC2 calls, not computation."""


class Termination(Construct):
    """The termination queue, its DLQ and alarm, and the consuming Lambda.

    Props (keyword-only):

    ``environment``
        Nodesmith settings (``ENV`` names) for the Lambda; the queue URL is added here (the handler sets its
        own messages' visibility on it).
    ``timeout``
        Function timeout. The queue's visibility timeout is :func:`~infra.config.queue_visibility_seconds`
        (a little above it: Lambda refuses an SQS event source whose visibility timeout is below the function
        timeout). Lambda's guidance of six times the timeout is for throttled invocations; the reserved
        concurrency is at least the event source's maximum concurrency, so there are none, and the handler
        sets each unfinished request's visibility to its backoff itself (``ChangeMessageVisibilityBatch``,
        part of the event source's consume grant): the queue's visibility timeout only applies to an
        invocation that failed as a whole or a backoff SQS refused.
    ``log_retention``
        Retention of the function's log group.
    ``max_concurrency``
        The event source's ``ScalingConfig.MaximumConcurrency``: invocations at once, however many requests wait,
        so a burst of drains does not flood the kube-apiserver with evictions.
    ``reserved_concurrency``
        Reserved concurrent executions: at least ``max_concurrency`` (the configuration checks it), so the
        event source is never throttled and drains never starve behind other functions of the account.
    ``max_receive_count``
        The redrive policy's ``maxReceiveCount``: drain rounds of one request before SQS moves it to the DLQ
        (see :func:`~infra.config.termination_patience_seconds`). The queue keeps messages
        :data:`~infra.config.TERMINATION_QUEUE_RETENTION_SECONDS`; ``max_receive_count`` times the visibility
        timeout must fit in it (``ValueError`` otherwise), so a request is dead-lettered, never expired.
    ``batch_size``
        The event source's ``BatchSize`` (default :data:`TERMINATION_BATCH_SIZE`).

    Attributes: ``queue``, ``dead_letter_queue``, ``handler`` (:class:`NodesmithFunction`), ``function``,
    ``dlq_alarm`` (the DLQ has at least one message).
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
        max_receive_count: int,
        batch_size: int = TERMINATION_BATCH_SIZE,
    ) -> None:
        super().__init__(scope, construct_id)
        visibility_seconds = queue_visibility_seconds(int(timeout.to_seconds()))
        if max_receive_count * visibility_seconds > TERMINATION_QUEUE_RETENTION_SECONDS:
            raise ValueError(
                f"{self.node.path}: {max_receive_count} receives of {visibility_seconds} s exceed the queue's "
                f"{TERMINATION_QUEUE_RETENTION_SECONDS} s retention: a request could expire before the DLQ"
            )

        self.dead_letter_queue = sqs.Queue(
            self,
            "DeadLetterQueue",
            encryption=sqs.QueueEncryption.SQS_MANAGED,
            enforce_ssl=True,
            retention_period=Duration.days(14),
            fifo=True,  # a FIFO queue's dead-letter queue must be FIFO too
        )
        self.queue = sqs.Queue(
            self,
            "Queue",
            encryption=sqs.QueueEncryption.SQS_MANAGED,
            enforce_ssl=True,
            retention_period=Duration.seconds(TERMINATION_QUEUE_RETENTION_SECONDS),
            visibility_timeout=Duration.seconds(visibility_seconds),
            dead_letter_queue=sqs.DeadLetterQueue(queue=self.dead_letter_queue, max_receive_count=max_receive_count),
            fifo=True,
            content_based_deduplication=False,
            deduplication_scope=sqs.DeduplicationScope.MESSAGE_GROUP,
            fifo_throughput_limit=sqs.FifoThroughputLimit.PER_MESSAGE_GROUP_ID,
        )

        self.handler = NodesmithFunction(
            self,
            "Handler",
            handler="nodesmith.handlers.termination.handler",
            service_name="nodesmith-termination",
            description="Nodesmith: drain a node one round per request, then terminate it, delete Node and NodeClaim",
            timeout=timeout,
            memory_size_mib=TERMINATION_MEMORY_MIB,
            environment={**environment, ENV.TERMINATION_QUEUE_URL: self.queue.queue_url},
            log_retention=log_retention,
            reserved_concurrency=reserved_concurrency,
        )
        self.function = self.handler.function
        # The consume grant this adds (ReceiveMessage, DeleteMessage, ChangeMessageVisibility, GetQueueUrl,
        # GetQueueAttributes) is all the function needs of its queue: ChangeMessageVisibility authorizes the
        # handler's ChangeMessageVisibilityBatch (the backoff). It never sends.
        self.function.add_event_source(
            sources.SqsEventSource(
                self.queue,
                batch_size=batch_size,  # no batching window: Lambda has none for FIFO queues
                report_batch_item_failures=True,
                max_concurrency=max_concurrency,
            )
        )

        self.dlq_alarm = dead_letter_alarm(
            self,
            self.dead_letter_queue,
            description=(
                "Termination requests were dead-lettered: a node kept pods past every drain round (a "
                "PodDisruptionBudget or do-not-disrupt pod blocking it), or the termination function kept failing. "
                "Look up the NodeClaim named in the message and its FailedDraining Events; the reconcile pass "
                "sends a new request for a NodeClaim still deleting, so purge the DLQ once the cause is understood."
            ),
        )

    def restrict_senders(self, roles: Sequence[iam.IRole]) -> None:
        """Deny ``sqs:SendMessage`` (which also authorizes ``SendMessageBatch``) on the queue to every principal
        but ``roles``: one ``Deny`` for ``Principal: "*"`` with ``ArnNotEquals aws:PrincipalArn`` (the role ARNs;
        a role's session is matched by its role ARN, and a request without a principal ARN, such as an AWS
        service's, matches the negated condition and is denied). An explicit deny outweighs any allow, so no
        identity policy in the account can grant a send. The roles still need an identity-policy allow.

        A redrive from the dead-letter queue (``StartMessageMoveTask``) sends as its caller and is denied too;
        none is needed: the reconcile pass sends a fresh request for every NodeClaim still deleting whose last
        one is stale (``NODESMITH_TERMINATION_REQUEST_STALE_SECONDS``).
        """
        self.queue.add_to_resource_policy(
            iam.PolicyStatement(
                sid="OnlyNodesmithFunctionsSend",
                effect=iam.Effect.DENY,
                principals=[iam.StarPrincipal()],
                actions=["sqs:SendMessage"],
                resources=[self.queue.queue_arn],
                conditions={"ArnNotEquals": {"aws:PrincipalArn": [role.role_arn for role in roles]}},
            )
        )
