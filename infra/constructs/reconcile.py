"""Reconcile: the scheduled Lambda that provisions and disrupts, and the state table it shares.

One invocation runs snapshot -> solve -> launch / disrupt (``design.md``). Reserved concurrency 1
makes it the single writer, as Karpenter's leader election does; ticks that arrive while a pass is
still running are dropped rather than queued, because the next tick is at most a minute away.

In watch mode one invocation watches for ~14 minutes and the next scheduled one takes over from it
through the reconcile lease (``nodesmith.services.reconciler.watching``): that one has to run *while* the
leaving watcher still runs, so the reserved concurrency is :data:`WATCH_CONCURRENCY` (2) and the
lease, not the concurrency, keeps a single pass active. With 1, the successor tick would be
throttled until the watcher returned, then retried by Lambda's backoff: a gap of up to ~30 s.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from aws_cdk import Duration
from aws_cdk import aws_dynamodb as dynamodb
from aws_cdk import aws_events as events
from aws_cdk import aws_events_targets as targets
from aws_cdk import aws_logs as logs
from constructs import Construct

from infra.constructs.function import NodesmithFunction
from nodesmith.handlers.settings import ENV

if TYPE_CHECKING:
    from collections.abc import Mapping

__all__ = [
    "OFFERING_PARTITION",
    "SCHEDULE_PERIOD",
    "STATE_TABLE_ACTIONS",
    "STATE_TABLE_KEYS",
    "TTL_ATTRIBUTE",
    "WATCH_CONCURRENCY",
    "Reconcile",
]

SCHEDULE_PERIOD = Duration.minutes(1)
"""How often EventBridge starts a reconcile pass (``rate(1 minute)``, EventBridge's finest rate)."""

STATE_TABLE_KEYS = ("pk", "sk")
"""Partition and sort key (both strings) of the state table: single-table design
(``nodesmith.adapters.aws.state``): ``pk="lease#reconcile" sk="lease"`` (the reconcile lease) and
``pk="offering" sk="<type>#<zone>#<capacity type>"`` (unavailable-offering marks)."""

OFFERING_PARTITION = "offering"
"""The partition key of every unavailable-offering mark: the only items the interruption function writes."""

WATCH_CONCURRENCY = 2
"""Reserved concurrency in watch mode: the watcher and its successor waiting for the lease."""

TTL_ATTRIBUTE = "expires_at"
"""Epoch seconds after which DynamoDB deletes an item (expired leases, unavailable-offering marks)."""

STATE_TABLE_ACTIONS = (
    "dynamodb:GetItem",
    "dynamodb:PutItem",
    "dynamodb:UpdateItem",
    "dynamodb:DeleteItem",
    "dynamodb:Query",
)
"""What ``DynamoStateStore`` calls: the lease (conditional UpdateItem, GetItem, conditional DeleteItem) and
the offering marks (PutItem, Query); the reconcile function's grant on the table."""


class Reconcile(Construct):
    """The reconcile Lambda on a one-minute schedule, and the DynamoDB state table.

    Props (keyword-only):

    ``environment``
        Nodesmith settings (``ENV`` names); the state table name is added here.
    ``timeout``
        Function timeout (at most 15 minutes, Lambda's limit).
    ``log_retention``
        Retention of the function's log group.
    ``concurrency``
        Reserved concurrency: 1 (default, one pass per tick) or :data:`WATCH_CONCURRENCY` in watch mode.
    ``memory_size_mib``
        Function memory, MiB (``nodesmith:reconcileMemoryMiB``, 1024 by default): a pass holds the cluster's pods,
        Nodes and NodeClaims, so it grows with the cluster (``docs/operations.md``, "Sizing the reconcile
        function").

    Attributes: ``table`` (on-demand, point-in-time recovery, AWS-managed KMS encryption, TTL on
    ``expires_at``; this function may call :data:`STATE_TABLE_ACTIONS` on it, and the stack lets the
    interruption function put offering marks), ``handler`` (:class:`NodesmithFunction`),
    ``function``, ``schedule`` (the ``events.Rule``).
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        environment: Mapping[str, str],
        timeout: Duration,
        log_retention: logs.RetentionDays,
        concurrency: int = 1,
        memory_size_mib: int = 1024,
    ) -> None:
        super().__init__(scope, construct_id)
        partition_key, sort_key = STATE_TABLE_KEYS
        self.table = dynamodb.Table(
            self,
            "StateTable",
            partition_key=dynamodb.Attribute(name=partition_key, type=dynamodb.AttributeType.STRING),
            sort_key=dynamodb.Attribute(name=sort_key, type=dynamodb.AttributeType.STRING),
            billing_mode=dynamodb.BillingMode.PAY_PER_REQUEST,
            point_in_time_recovery_specification=dynamodb.PointInTimeRecoverySpecification(
                point_in_time_recovery_enabled=True
            ),
            encryption=dynamodb.TableEncryption.AWS_MANAGED,
            time_to_live_attribute=TTL_ATTRIBUTE,
        )

        self.handler = NodesmithFunction(
            self,
            "Handler",
            handler="nodesmith.handlers.reconcile.handler",
            service_name="nodesmith-reconcile",
            description="Nodesmith: schedule pending pods onto new NodeClaims, launch, and disrupt",
            timeout=timeout,
            # Scheduling is CPU-bound; Lambda allots CPU in proportion to memory.
            memory_size_mib=memory_size_mib,
            environment={**environment, ENV.STATE_TABLE: self.table.table_name},
            log_retention=log_retention,
            reserved_concurrency=concurrency,
        )
        self.function = self.handler.function
        self.table.grant(self.function, *STATE_TABLE_ACTIONS)
        # A tick throttled by the reserved concurrency would otherwise wait in Lambda's async queue
        # (up to 6 h) and run stale; drop it, the next tick comes within a minute.
        self.function.configure_async_invoke(retry_attempts=0, max_event_age=Duration.seconds(60))

        self.schedule = events.Rule(
            self,
            "Schedule",
            description="Nodesmith: start a reconcile pass",
            schedule=events.Schedule.rate(SCHEDULE_PERIOD),
        )
        self.schedule.add_target(targets.LambdaFunction(self.function, retry_attempts=0))
