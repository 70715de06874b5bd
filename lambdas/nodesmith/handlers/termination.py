"""Termination Lambda: the termination queue -> one drain round per request -> the node terminated when empty.

Each record is one :class:`~nodesmith.core.termination.TerminationRequest` (ids only; malformed: logged, counted,
acknowledged). Powertools' ``AsyncBatchProcessor`` works a batch's records at once, as Karpenter's termination
controller reconciles many nodes, each bounded by the time left (:class:`~nodesmith.handlers.budget.RecordBudget`).
:func:`~nodesmith.services.termination.service.run_round` re-reads the NodeClaim, instance and node and works one
round. A node that still has pods, or whose round raised, is a batch item failure made visible again after its
backoff (``ChangeMessageVisibility``); the queue's ``maxReceiveCount`` and dead-letter queue bound the retries.
"""

from __future__ import annotations

import time
from functools import partial
from typing import TYPE_CHECKING, Any

from aws_lambda_powertools.utilities.batch import AsyncBatchProcessor, EventType, async_process_partial_response
from aws_lambda_powertools.utilities.data_classes.sqs_event import SQSRecord

from nodesmith.core.termination import MalformedRequestError, TerminationRequest, parse_request
from nodesmith.handlers import reporting, wiring
from nodesmith.handlers.budget import RecordBudget
from nodesmith.handlers.observability import logger, metrics, tracer
from nodesmith.services.termination.service import Status, describe, retry_after_failure, run_round

if TYPE_CHECKING:
    from aws_lambda_powertools.utilities.typing import LambdaContext

__all__ = ["StillDraining", "handler"]


class StillDraining(Exception):
    """The node still has pods: SQS delivers the request again after ``retry_after`` seconds."""

    def __init__(self, retry_after: int) -> None:
        super().__init__(f"still draining; next round in {retry_after}s")
        self.retry_after = retry_after


def _parse(record: SQSRecord) -> TerminationRequest | None:
    """The record's request, or None when malformed (logged, counted, acknowledged)."""
    try:
        return parse_request(record.body)
    except MalformedRequestError as exc:
        reporting.report_malformed(metric="TerminationRequestsMalformed", message_id=record.message_id,
                                   reason=exc.reason)  # fmt: skip
        return None


@logger.inject_lambda_context(clear_state=True)
@tracer.capture_lambda_handler(capture_response=False)
@metrics.log_metrics
def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    """Lambda entry point (``nodesmith.handlers.termination.handler``): returns ``batchItemFailures``."""
    settings = wiring.get_settings()
    ports = wiring.ports(settings)
    tuning = wiring.termination_settings(settings)
    backoff: list[tuple[str, int]] = []
    requests = {r.message_id: _parse(r) for r in (SQSRecord(raw) for raw in event.get("Records") or [])}
    described = describe(ports, [r for r in requests.values() if r is not None])

    async def record_handler(record: SQSRecord) -> None:
        request = requests.get(record.message_id)
        if request is None:
            return
        attempt = int(record.attributes.approximate_receive_count or 1)
        work = partial(run_round, ports=ports, settings=tuning, request=request, now=time.time(), attempt=attempt,
                       described=described)  # fmt: skip
        try:
            outcome = await rounds.run(work)
        except Exception as exc:  # failed or overran its budget: the record's failure, back after the backoff
            wait = retry_after_failure(tuning, attempt=attempt, now=time.time())
            backoff.append((record.receipt_handle, wait))
            reporting.report_round_failed(request, exc, wait)
            raise
        reporting.report_termination(outcome, request)
        if outcome.status is Status.DRAINING and outcome.retry_after is not None:
            backoff.append((record.receipt_handle, outcome.retry_after))
            raise StillDraining(outcome.retry_after)

    processor = AsyncBatchProcessor(event_type=EventType.SQS, raise_on_entire_batch_failure=False)
    with RecordBudget(context=context, workers=len(requests)) as rounds:
        response = async_process_partial_response(event=event, record_handler=record_handler, processor=processor,
                                                  context=context)  # fmt: skip
    retry_after = wiring.build_retry_after(settings)
    if backoff and retry_after is not None:
        retry_after(backoff)
    return dict(response)
