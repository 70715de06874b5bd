"""Interruption Lambda: SQS batch of EventBridge events -> cordon every node, launch replacements, drain.

The batch is handled as a whole (:func:`nodesmith.services.interrupt_batch.handle_batch`): every
record is parsed first, then every target node is tainted and cordoned in parallel, then one
replacement pass launches capacity for their pods (the reconcile scheduler, under the reconcile
lease), then the nodes drain in parallel. The response lists the records to retry (partial batch
responses; the event source mapping has ``ReportBatchItemFailures``):

* malformed body -> logged with the SQS message id, counted (``InterruptionMessagesMalformed``) and
  acknowledged: retrying cannot fix it (Karpenter deletes unparseable messages too);
* a message we do not act on (unknown event, state, Health category, foreign instance, action
  NONE) -> acknowledged, counted in ``InterruptionMessagesIgnored`` by ``Reason``;
* our work raising (a ``KubernetesError``, an AWS error) -> only that record fails and SQS
  delivers it again after the visibility timeout;
* a drain that does not finish within the budget -> a continuation message (the event plus a
  ``nodesmith-continuation`` marker) is sent to ``NODESMITH_INTERRUPTION_QUEUE_URL`` with a delay
  and the record is acknowledged; without a queue URL the record fails instead.

Drains are idempotent per (event id, instance id, attempt) through Powertools idempotency on
``NODESMITH_STATE_TABLE`` (:mod:`nodesmith.handlers.idempotency`), and their progress is stored
there, so duplicates drain once and a redelivery after a timeout resumes. The queue's visibility
timeout stays 6 x the function timeout + the batching window (AWS's guidance for event source
mappings, against throttled invokes), which is longer than a spot notice; so the handler first
shortens its records' visibility to what the invocation has left + ``VISIBILITY_MARGIN_SECONDS``
(``ChangeMessageVisibilityBatch``, best effort): a crash or timeout mid-drain makes SQS deliver them
again within ~25 s and that delivery resumes from the stored progress. Records reported as failed
get ``RETRY_VISIBILITY_SECONDS``. The work budget is
``NODESMITH_DRAIN_TIMEOUT_SECONDS``, cut to what the invocation has left minus a safety margin.
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict
from typing import TYPE_CHECKING, Any

from aws_lambda_powertools.utilities.data_classes.sqs_event import SQSRecord

from nodesmith.core.interruption import MalformedEventError, MessageKind, parse_message
from nodesmith.handlers import reporting, wiring
from nodesmith.handlers.observability import MetricUnit, count_by, logger, metrics, tracer
from nodesmith.services import interrupt_batch
from nodesmith.services.interrupt_batch import BatchItem, BatchOutcome, Continuation, ItemResult, handle_batch
from nodesmith.services.leases import lease_ttl
from nodesmith.services.log_context import log_context
from nodesmith.services.replacement import replacement_launcher

if TYPE_CHECKING:
    from aws_lambda_powertools.utilities.typing import LambdaContext

    from nodesmith.services.interrupt import InterruptionOutcome

__all__ = ["RETRY_VISIBILITY_SECONDS", "SAFETY_MARGIN_SECONDS", "VISIBILITY_MARGIN_SECONDS", "handler",
           "process_records"]  # fmt: skip

SAFETY_MARGIN_SECONDS = 10.0
"""Invocation time kept back from the work so the handler can report before Lambda's timeout."""

RERUN_MARGIN_SECONDS = 5.0
"""Invocation time (seconds) kept back when the replacement pass's holder decides whether to run again on request."""

VISIBILITY_MARGIN_SECONDS = 5
"""Seconds past the invocation's remaining time before SQS may deliver its records again (after a crash)."""

RETRY_VISIBILITY_SECONDS = 5
"""Visibility of a record reported in ``batchItemFailures``: a short backoff, then SQS delivers it again
(the queue's 121 s would be past the 2-minute spot notice)."""

CONTINUATION_DELAY_SECONDS = interrupt_batch.CONTINUATION_DELAY_SECONDS
"""SQS delay of a continuation message (seconds)."""

CONTINUATION_STALL_SECONDS = 3.0
"""How long a continuation's drain (a burst's hand-off, or a drain blocked before) waits in place
without progress (seconds; PodDisruptionBudget 429s, pods still terminating) before it continues in
a new message after :data:`CONTINUATION_DELAY_SECONDS`, so a burst's drains take turns at the
function's concurrency instead of sleeping in it."""

HANDOFF_MIN_DRAINS = 5
"""A batch leaving at least this many nodes to drain is a burst: it cordons, hands the drains off to
continuation messages and returns, so the next batches are cordoned within seconds (see
:mod:`nodesmith.services.interrupt_batch`). One or a few interruptions drain in the same invocation, unless
the batch also holds a continuation (a burst's drains are under way): then even one is handed off."""

HANDOFF_DELAY_SECONDS = 3
"""SQS delay of a burst's hand-off continuations (seconds). A burst's warnings reach the queue over a second or
more; a hand-off sent without a delay is queued ahead of the originals still arriving, and the event source's
pollers, bounded by ``MaximumConcurrency``, then give invocations to drains (5-12 s each) while nodes wait
uncordoned. In ``bench/interruptions.py --nodes 1000`` (warnings through EventBridge), each of three runs
cordoned every node sooner with the delay than the run right after it without (11.3, 15.0, 14.6 s against 13.4,
15.8, 17.9 s). The drains begin 3 s later; the replacement pass, asked for at the cordon, does not wait."""

DEFER_DRAINS_AFTER_SHARE = 0.5
"""Share of the drain budget after which a continuation whose drains have not begun goes back to the queue
instead (:func:`~nodesmith.services.interrupt_batch.handle_batch`'s ``defer_drains_after_seconds``), for an event
source whose batches (``nodesmith:interruptionBatchSize``) hold more hand-offs than :data:`DRAIN_WORKERS`: with 50
hand-offs' drains to an invocation, 29 of 105 invocations ran past the function timeout in one
``bench/interruptions.py --nodes 1000 --batch-size 50`` run without it. A drain begun by then has the other half of
the budget to make progress. With the default batches of 10 every drain begins at once."""

DRAIN_WORKERS = 10
"""Drains an invocation runs at once: a default batch's ten. With batches of 50 and 16 drains at once, 27 of 130
invocations ran past the function timeout, most of them in drains, in a 1,000-node ``bench/interruptions.py`` run
(the machine running slow); no run with batches of ten did."""


def _queue_age_seconds(record: SQSRecord, now: float) -> float | None:
    sent = record.attributes.sent_timestamp if record.attributes else None
    try:
        return max(0.0, now - int(sent) / 1000.0) if sent else None
    except (TypeError, ValueError):
        return None


def _remaining_seconds(lambda_context: LambdaContext | None) -> float | None:
    if lambda_context is None:
        return None
    try:
        return float(lambda_context.get_remaining_time_in_millis()) / 1000.0
    except (AttributeError, TypeError, ValueError):
        return None


def _budget_seconds(configured: float, lambda_context: LambdaContext | None) -> float:
    left = _remaining_seconds(lambda_context)
    if left is None:
        return configured
    return max(0.0, min(configured, left - SAFETY_MARGIN_SECONDS))


def _report(outcome: InterruptionOutcome) -> None:
    if outcome.nodes_cordoned:
        metrics.add_metric(name="NodesCordoned", unit=MetricUnit.Count, value=outcome.nodes_cordoned)
    if outcome.pods_evicted:
        metrics.add_metric(name="PodsEvicted", unit=MetricUnit.Count, value=outcome.pods_evicted)
    if outcome.pods_blocked_by_pdb:
        metrics.add_metric(name="PodsBlockedByPDB", unit=MetricUnit.Count, value=outcome.pods_blocked_by_pdb)
    if outcome.pods_force_deleted:
        metrics.add_metric(name="PodsForceDeleted", unit=MetricUnit.Count, value=outcome.pods_force_deleted)
    reporting.report_terminations(outcome)
    if any(i.drain is not None for i in outcome.instances):
        metrics.add_metric(name="DrainDurationSeconds", unit=MetricUnit.Seconds, value=outcome.drain_seconds)


def _parse(record: SQSRecord, now: float) -> BatchItem | None:
    """The record as a :class:`BatchItem`, or None when it is acknowledged right away (malformed, no-op)."""
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
        return None
    count_by("InterruptionMessagesReceived", dimension="MessageType", value=message.kind.value)
    if message.kind is MessageKind.NO_OP:
        logger.info(
            "interruption message ignored",
            extra={"message_id": record.message_id, "event_id": message.event_id, "reason": message.reason,
                   "description": message.description},
        )  # fmt: skip
        count_by("InterruptionMessagesIgnored", dimension="Reason", value=message.reason)
        return None
    event: dict[str, Any] = json.loads(record.body)  # parse_message proved it is a JSON object
    return BatchItem(
        item_id=record.message_id,
        message=message,
        event=event,
        continuation=Continuation.from_event(event),
        first_delivery=_receive_count(record) == 1,
    )


def _receive_count(record: SQSRecord) -> int | None:
    """The record's ``ApproximateReceiveCount``, or None when it is missing or not a number."""
    try:
        return int(record.attributes.approximate_receive_count)
    except (KeyError, TypeError, ValueError):
        return None


def _run(items: list[BatchItem], lambda_context: LambdaContext | None, now: float) -> BatchOutcome:
    settings = wiring.get_settings()
    cluster = wiring.build_cluster(settings)
    cloud = wiring.build_cloud(settings)
    state = wiring.build_state(settings)
    once = wiring.build_idempotency(settings)
    if once is not None:
        once.bind(lambda_context)
    holder = str(getattr(lambda_context, "aws_request_id", "") or f"interruption-{now:.6f}")
    budget = _budget_seconds(settings.drain_timeout_seconds, lambda_context)
    left = _remaining_seconds(lambda_context)
    waker = wiring.build_waker(settings)
    return handle_batch(
        items=items,
        cluster=cluster,
        cloud=cloud,
        cluster_name=settings.cluster_name,
        rebalance_action=settings.rebalance_action,
        now=now,
        drain_budget_seconds=budget,
        state=state,
        replace_capacity=replacement_launcher(
            cluster=cluster,
            cloud=cloud,
            cluster_name=settings.cluster_name,
            state=state,
            holder=holder,
            ttl_seconds=lease_ttl(_remaining_seconds(lambda_context)),
            wait_seconds=max(1.0, budget / 2),  # pods need somewhere to go more than drains need to start
            # passes requested of this holder run only while one more still ends before the invocation has to
            # report: a fixed window let reruns run past the function timeout, where Lambda kills them mid-launch
            again_until=None if left is None else time.monotonic() + left - RERUN_MARGIN_SECONDS,
            wake=waker,  # poll mode: a free lease's pass goes to the reconcile function
        ),
        once=once,
        requeue=wiring.build_requeue(settings),
        requeue_batch=wiring.build_requeue_batch(settings),
        handoff_min_drains=HANDOFF_MIN_DRAINS,
        handoff_delay_seconds=HANDOFF_DELAY_SECONDS,
        recent_marks=wiring.recent_marks(),
        # a burst's replacements at once: cheap here only when the pass runs in the reconcile function (with no
        # state table there is no lease, and the launcher runs the pass itself)
        replace_at_handoff=waker is not None and state is not None,
        defer_drains_after_seconds=budget * DEFER_DRAINS_AFTER_SHARE,
        drain_workers=DRAIN_WORKERS,
        continuation_delay_seconds=CONTINUATION_DELAY_SECONDS,
        continuation_stall_seconds=CONTINUATION_STALL_SECONDS,
    )


def _set_visibility(records: list[dict[str, Any]], timeout_seconds: float) -> None:
    """Best effort: make ``records`` visible again after ``timeout_seconds``; failures are only logged."""
    handles = [str(r.get("receiptHandle") or "") for r in records]
    handles = [h for h in handles if h]
    if not handles:
        return
    try:
        change = wiring.build_visibility(wiring.get_settings())
        if change is not None:
            change(handles, int(timeout_seconds + 0.999))
    except Exception:  # never fail the batch for this: the queue's own visibility timeout still applies
        logger.warning("could not change the records' visibility", exc_info=True)


def process_records(records: list[dict[str, Any]], lambda_context: LambdaContext | None = None) -> list[str]:
    """Handle the SQS records of one invocation; returns the message ids SQS must deliver again.

    First shortens the records' visibility to the invocation's remaining time +
    ``VISIBILITY_MARGIN_SECONDS`` (so a crash is retried before the spot notice runs out), and at the
    end sets the failed records' visibility to ``RETRY_VISIBILITY_SECONDS``.
    """
    now = time.time()
    left = _remaining_seconds(lambda_context)
    if left is not None:
        _set_visibility(records, left + VISIBILITY_MARGIN_SECONDS)
    failed = _process(records, lambda_context, now)
    if failed:
        ids = set(failed)
        _set_visibility([r for r in records if r.get("messageId") in ids], RETRY_VISIBILITY_SECONDS)
    return failed


def _process(records: list[dict[str, Any]], lambda_context: LambdaContext | None, now: float) -> list[str]:
    items = [item for item in (_parse(SQSRecord(r), now) for r in records) if item is not None]
    if not items:
        return []
    with log_context(**reporting.bind_batch(items)):
        return _handle(items, lambda_context, now)


def _handle(items: list[BatchItem], lambda_context: LambdaContext | None, now: float) -> list[str]:
    """Run the parsed batch and report it; returns the message ids SQS must deliver again."""
    try:
        batch = _run(items, lambda_context, now)
    except Exception:
        logger.exception(
            "interruption batch failed; SQS will deliver its records again",
            extra={"message_ids": [i.item_id for i in items]},
        )
        return [i.item_id for i in items]
    replacement = batch.replacement
    reporting.report_batch(items=items, batch=batch, started_at=now)
    logger.info(
        "interruption batch handled",
        extra={
            "records": len(items),
            "cordon_seconds": round(batch.cordon_seconds, 3),
            "replace_seconds": round(batch.replace_seconds, 3),
            "drain_seconds": round(batch.drain_seconds, 3),
            "drains_run": batch.drains_run,
            "drains_replayed": batch.drains_replayed,
            "drains_handed_off": batch.drains_handed_off,
            "drains_deferred": batch.drains_deferred,
            "replacement": None if replacement is None else asdict(replacement),
        },
    )
    reporting.report_replacement(replacement)
    marked = batch.offerings_marked + (replacement.offerings_marked_unavailable if replacement else 0)
    if marked:
        metrics.add_metric(name="OfferingsMarkedUnavailable", unit=MetricUnit.Count, value=marked)
    event_ids = {i.item_id: i.message.event_id for i in items}
    failed: list[str] = []
    for result in batch.items:
        with log_context(event_ids=None, event_id=event_ids.get(result.item_id), message_id=result.item_id):
            if _report_result(result):
                failed.append(result.item_id)
    return failed


def _report_result(result: ItemResult) -> bool:
    """Log and count one record's result (inside its own log keys); True when SQS must deliver it again."""
    if result.outcome is None:
        logger.error("interruption message failed; SQS will deliver it again", extra={"error": result.error})
        return True
    outcome = result.outcome
    logger.info("interruption handled", extra={**reporting.trace_keys(outcome), "outcome": outcome.as_log()})
    if len(outcome.instances) > 1:
        for instance in outcome.instances:
            logger.info(
                "interruption instance handled",
                extra={**reporting.instance_keys(outcome.event_id, instance), "status": instance.status.value,
                       "detail": instance.detail},
            )  # fmt: skip
    _report(outcome)
    if outcome.ignored:
        count_by("InterruptionMessagesIgnored", dimension="Reason", value=outcome.ignore_reason)
    return result.failed


@logger.inject_lambda_context(clear_state=True)
@tracer.capture_lambda_handler(capture_response=False)
@metrics.log_metrics
def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    """Lambda entry point (``nodesmith.handlers.interruption.handler``): returns ``batchItemFailures``.

    Besides the per-record metrics it reports ``InterruptionMessagesAcknowledged`` and, through
    :mod:`~nodesmith.handlers.reporting`, ``DrainsMissedDeadline`` and the ``event_id`` /
    ``instance_id`` / ``node`` / ``nodeclaim`` log keys that tie one interruption's lines together.
    """
    records = list(event.get("Records") or [])
    try:
        failed = process_records(records, context)
    finally:
        wiring.freeze_warm_heap()  # the container is warm now: full collections skip what it holds
    reporting.acknowledged(len(records) - len(failed))
    return {"batchItemFailures": [{"itemIdentifier": message_id} for message_id in failed]}
