"""Interruption Lambda: the EventBridge rules' SQS queue -> verified messages -> cordon, mark, terminate request.

Each record is parsed strictly (malformed: logged, counted, acknowledged); :class:`InterruptionBatch
<nodesmith.services.interruption.service.InterruptionBatch>` then works the batch against what EC2 and the cluster
say and sends its termination requests together. Our account and region are those of the queue (``eventSourceARN``).
Powertools' ``AsyncBatchProcessor`` runs the records at once, each bounded by the time left (:class:`RecordBudget
<nodesmith.handlers.budget.RecordBudget>`), and gives a partial batch response: a record whose work raised or
overran, or whose request SQS refused, is retried; a message id delivered twice into one batch is handled once.
"""

from __future__ import annotations

import time
from functools import partial
from typing import TYPE_CHECKING, Any

from aws_lambda_powertools.utilities.batch import AsyncBatchProcessor, EventType, async_process_partial_response
from aws_lambda_powertools.utilities.data_classes.sqs_event import SQSRecord

from nodesmith.core.interruption import MalformedEventError, parse_message
from nodesmith.handlers import reporting, wiring
from nodesmith.handlers.budget import RecordBudget
from nodesmith.handlers.observability import logger, metrics, tracer
from nodesmith.services.interruption.service import InterruptionBatch, InterruptionSettings, MessageOutcome, Received

if TYPE_CHECKING:
    from aws_lambda_powertools.utilities.typing import LambdaContext

__all__ = ["handler"]


def _receive(record: SQSRecord, now: float) -> Received | None:
    """The record as :class:`Received` (its queue receipt time from ``SentTimestamp``), or None when malformed."""
    try:
        message = parse_message(record.body)
    except MalformedEventError as exc:
        reporting.report_malformed(
            metric="InterruptionMessagesMalformed", message_id=record.message_id, reason=exc.reason
        )
        return None
    attributes = record.attributes
    sent = int(attributes.sent_timestamp) / 1000.0 if attributes.sent_timestamp else now
    return Received(record.message_id, message, received_at=min(sent, now),
                    redelivered=int(attributes.approximate_receive_count or 1) > 1)  # fmt: skip


def _account_and_region(records: list[SQSRecord], context: LambdaContext) -> tuple[str, str]:
    """Ours: from the queue's ARN (``arn:aws:sqs:<region>:<account>:<name>``), else the function's ARN."""
    arn = next((r.event_source_arn for r in records if r.event_source_arn), None) or context.invoked_function_arn
    parts = arn.split(":")
    return parts[4], parts[3]


@logger.inject_lambda_context(clear_state=True)
@tracer.capture_lambda_handler(capture_response=False)
@metrics.log_metrics
def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    """Lambda entry point (``nodesmith.handlers.interruption.handler``): returns ``batchItemFailures``."""
    now = time.time()
    records = [SQSRecord(r) for r in event.get("Records") or []]
    settings = wiring.get_settings()
    account, region = _account_and_region(records, context)
    batch = InterruptionBatch(
        ports=wiring.ports(settings),
        settings=InterruptionSettings(account, region, settings.rebalance_action),
        received=[r for r in (_receive(record, now) for record in records) if r is not None],
        now=now,
    )
    batch.prepare()

    handled: set[str] = set()  # read and written on the event loop's thread only
    outcomes: dict[str, MessageOutcome] = {}

    async def record_handler(record: SQSRecord) -> None:
        # a second copy of a message in this batch (SQS delivers at least once) is acknowledged with the first
        if record.message_id in batch.received and record.message_id not in handled:
            handled.add(record.message_id)
            try:
                outcomes[record.message_id] = await budget.run(partial(batch.handle, record.message_id))
            except Exception as exc:  # the record's failure: logged, and delivered again
                event_id = batch.received[record.message_id].message.event_id
                reporting.report_message_failed(record.message_id, event_id, exc)
                raise

    processor = AsyncBatchProcessor(event_type=EventType.SQS, raise_on_entire_batch_failure=False)
    with RecordBudget(context=context, workers=len(records)) as budget:  # a hung record holds no other's request
        response = async_process_partial_response(event=event, record_handler=record_handler, processor=processor,
                                                  context=context)  # fmt: skip
    sent, unsent = batch.send(outcomes)  # the requests of the whole batch, together
    for message_id, outcome in sent.items():
        reporting.report_message(outcome, queue_age_seconds=now - batch.received[message_id].received_at)
    return reporting.batch_response(response, also_failed=unsent, message_ids=[r.message_id for r in records])
