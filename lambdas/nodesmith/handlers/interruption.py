"""Interruption Lambda: SQS batch of EventBridge events -> cordon, drain, clean up.

Each record is handled on its own (Powertools ``BatchProcessor``, partial batch responses, the
event source mapping has ``ReportBatchItemFailures``):

* malformed body -> logged with the SQS message id, counted (``InterruptionMessagesMalformed``) and
  acknowledged: retrying cannot fix it (Karpenter deletes unparseable messages too);
* a message we do not act on (unknown event, state, Health category, foreign instance, action
  NONE) -> acknowledged, counted in ``InterruptionMessagesIgnored`` by ``Reason``;
* our work raising (a ``KubernetesError``, an AWS error) or a drain that did not finish within the
  budget -> the record fails and SQS delivers it again after the visibility timeout; everything we
  do is idempotent, so the retry resumes where this one stopped.

The drain budget per record is ``NODESMITH_DRAIN_TIMEOUT_SECONDS``, cut to what the invocation has
left minus a safety margin, so a slow drain never times the whole batch out.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from aws_lambda_powertools.utilities.batch import BatchProcessor, EventType, process_partial_response

from nodesmith.core.interruption import MalformedEventError, MessageKind, parse_message
from nodesmith.handlers import wiring
from nodesmith.handlers.observability import MetricUnit, count_by, logger, metrics, tracer
from nodesmith.services.interrupt import InterruptionOutcome, handle_interruption

if TYPE_CHECKING:
    from aws_lambda_powertools.utilities.data_classes.sqs_event import SQSRecord
    from aws_lambda_powertools.utilities.typing import LambdaContext

__all__ = ["InterruptionRetryError", "handler", "record_handler"]

SAFETY_MARGIN_SECONDS = 10.0
"""Invocation time kept back from draining so the handler can report before Lambda's timeout."""

processor = BatchProcessor(event_type=EventType.SQS, raise_on_entire_batch_failure=False)


class InterruptionRetryError(Exception):
    """The message's work is not finished (a drain ran out of budget): fail the record so SQS redelivers it."""


def _queue_age_seconds(record: SQSRecord, now: float) -> float | None:
    sent = record.attributes.sent_timestamp if record.attributes else None
    try:
        return max(0.0, now - int(sent) / 1000.0) if sent else None
    except (TypeError, ValueError):
        return None


def _budget_seconds(configured: float, lambda_context: LambdaContext | None) -> float:
    if lambda_context is None:
        return configured
    try:
        left = lambda_context.get_remaining_time_in_millis() / 1000.0 - SAFETY_MARGIN_SECONDS
    except (AttributeError, TypeError):
        return configured
    return max(0.0, min(configured, left))


def _report(outcome: InterruptionOutcome) -> None:
    if outcome.nodes_cordoned:
        metrics.add_metric(name="NodesCordoned", unit=MetricUnit.Count, value=outcome.nodes_cordoned)
    if outcome.pods_evicted:
        metrics.add_metric(name="PodsEvicted", unit=MetricUnit.Count, value=outcome.pods_evicted)
    if outcome.pods_blocked_by_pdb:
        metrics.add_metric(name="PodsBlockedByPDB", unit=MetricUnit.Count, value=outcome.pods_blocked_by_pdb)
    if outcome.pods_force_deleted:
        metrics.add_metric(name="PodsForceDeleted", unit=MetricUnit.Count, value=outcome.pods_force_deleted)
    if outcome.nodeclaims_terminated:
        metrics.add_metric(name="NodeClaimsTerminated", unit=MetricUnit.Count, value=outcome.nodeclaims_terminated)
    if any(i.drain is not None for i in outcome.instances):
        metrics.add_metric(name="DrainDurationSeconds", unit=MetricUnit.Seconds, value=outcome.drain_seconds)


def record_handler(record: SQSRecord, lambda_context: LambdaContext | None = None) -> None:
    """Handle one SQS record; returns to acknowledge it, raises to have SQS deliver it again."""
    now = time.time()
    age = _queue_age_seconds(record, now)
    if age is not None:
        metrics.add_metric(name="InterruptionQueueAgeSeconds", unit=MetricUnit.Seconds, value=age)
    try:
        message = parse_message(record.body)
    except MalformedEventError as exc:
        logger.warning(
            "malformed interruption message acknowledged",
            extra={"message_id": record.message_id, "reason": exc.reason},
        )
        metrics.add_metric(name="InterruptionMessagesMalformed", unit=MetricUnit.Count, value=1)
        return
    count_by("InterruptionMessagesReceived", dimension="MessageType", value=message.kind.value)
    if message.kind is MessageKind.NO_OP:
        logger.info(
            "interruption message ignored",
            extra={"message_id": record.message_id, "event_id": message.event_id, "reason": message.reason,
                   "description": message.description},
        )  # fmt: skip
        count_by("InterruptionMessagesIgnored", dimension="Reason", value=message.reason)
        return

    try:
        settings = wiring.get_settings()
        outcome = handle_interruption(
            message=message,
            cluster=wiring.build_cluster(settings),
            cloud=wiring.build_cloud(settings),
            cluster_name=settings.cluster_name,
            rebalance_action=settings.rebalance_action,
            now=now,
            drain_budget_seconds=_budget_seconds(settings.drain_timeout_seconds, lambda_context),
        )
    except Exception:
        logger.exception(
            "interruption message failed; SQS will deliver it again",
            extra={"message_id": record.message_id, "event_id": message.event_id, "kind": message.kind.value,
                   "instance_ids": list(message.instance_ids)},
        )  # fmt: skip
        raise
    logger.info("interruption handled", extra={"message_id": record.message_id, "outcome": outcome.as_log()})
    _report(outcome)
    if outcome.ignored:
        count_by("InterruptionMessagesIgnored", dimension="Reason", value=outcome.ignore_reason)
    if outcome.needs_retry:
        raise InterruptionRetryError(
            f"event {outcome.event_id}: drain unfinished ({outcome.pods_remaining} pod(s) left); retrying later"
        )


@logger.inject_lambda_context(clear_state=True)
@tracer.capture_lambda_handler(capture_response=False)
@metrics.log_metrics
def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    """Lambda entry point (``nodesmith.handlers.interruption.handler``): returns ``batchItemFailures``."""
    return dict(
        process_partial_response(event=event, record_handler=record_handler, processor=processor, context=context)
    )
