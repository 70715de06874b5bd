"""What the handlers report beyond their pass summaries: breakdown metrics, deadlines, trace keys.

Both handlers call in here with their outcomes; every function only emits metrics and log lines
(names from ``infra/metric_names.py``, units as there: Count, Seconds, Percent, None for USD/hour)
and never changes what the pass did.

Reconcile (:func:`report_pass`):

* ``NodePoolUtilizationPercent`` by ``NodePool`` and ``Resource`` (``cpu``, ``memory``): requested
  over allocatable on the NodePool's capacity (:mod:`nodesmith.services.utilization`);
* ``NodeClaimsTerminated`` by ``Reason``: ``GarbageCollected`` (instance gone, liveness expired)
  and ``Disruption`` (emptiness, drift, consolidation, expiration), plus the disruption drains'
  ``PodsEvicted``.

Interruption (:func:`bind_batch`, :func:`trace_keys`, :func:`report_batch`, :func:`acknowledged`):

* the log keys ``event_id`` / ``instance_id`` (and, per outcome line, ``node`` / ``nodeclaim``) so
  one interruption's lines can be found together (``{ $.event_id = "..." }`` in CloudWatch Logs);
* ``DrainsMissedDeadline`` (:mod:`nodesmith.services.drain_deadlines`), with one warning line each;
* ``InterruptionMessagesAcknowledged``: records not reported back to SQS as failures (SQS deletes
  them), Karpenter's ``interruption_deleted_messages_total``;
* :func:`terminated_reason`: the ``Reason`` of ``NodeClaimsTerminated`` for an interruption
  (Karpenter's event reason: ``SpotInterrupted``, ``InstanceTerminating``, ...).
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from nodesmith.handlers.observability import MetricUnit, emit, log_keys, logger, metrics
from nodesmith.services.drain_deadlines import missed_deadlines
from nodesmith.services.interrupt import EVENT_REASONS

if TYPE_CHECKING:
    from collections.abc import Sequence

    from nodesmith.services.disruption import DisruptionOutcome
    from nodesmith.services.interrupt import InterruptionOutcome
    from nodesmith.services.interrupt_batch import BatchItem, BatchOutcome
    from nodesmith.services.reconcile import ReconcileOutcome

__all__ = [
    "REASON_DISRUPTION",
    "REASON_GARBAGE_COLLECTED",
    "acknowledged",
    "bind_batch",
    "report_batch",
    "report_pass",
    "terminated_reason",
    "trace_keys",
]

REASON_GARBAGE_COLLECTED = "GarbageCollected"
"""``Reason`` of NodeClaims the reconcile lifecycle deleted (instance gone, launch/registration TTL)."""
REASON_DISRUPTION = "Disruption"
"""``Reason`` of NodeClaims the disruption pass terminated."""


# --- reconcile ------------------------------------------------------------------------------------


def report_pass(outcome: ReconcileOutcome, disruption: DisruptionOutcome | None = None) -> None:
    """Emit the reconcile pass's breakdown metrics (see the module docstring).

    ``NodeClaimsTerminated`` (reason ``GarbageCollected``) is emitted every pass, 0 included, so
    the graph shows a line rather than a gap; utilisation only for NodePools with capacity.
    """
    emit(
        "NodeClaimsTerminated",
        outcome.nodeclaims_terminated,
        unit=MetricUnit.Count,
        dimensions={"Reason": REASON_GARBAGE_COLLECTED},
    )
    for pool, by_resource in sorted(outcome.utilization.items()):
        for resource, percent in sorted(by_resource.items()):
            emit(
                "NodePoolUtilizationPercent",
                percent,
                unit=MetricUnit.Percent,
                dimensions={"NodePool": pool, "Resource": resource},
            )
    if disruption is None:
        return
    if disruption.nodes_terminated:
        emit(
            "NodeClaimsTerminated",
            len(disruption.nodes_terminated),
            unit=MetricUnit.Count,
            dimensions={"Reason": REASON_DISRUPTION},
        )
    if disruption.pods_evicted:
        metrics.add_metric(name="PodsEvicted", unit=MetricUnit.Count, value=disruption.pods_evicted)


# --- interruption ---------------------------------------------------------------------------------


def bind_batch(items: Sequence[BatchItem]) -> None:
    """Put the batch's event id (and instance id) on every following log line of this invocation.

    One message (the usual SQS batch for one interruption): ``event_id`` and, when it names one
    instance, ``instance_id``, also as X-Ray annotations. Several messages: ``event_ids`` (their
    lines then carry their own ``event_id`` through :func:`trace_keys`).
    """
    if len(items) == 1:
        message = items[0].message
        only = message.instance_ids[0] if len(message.instance_ids) == 1 else None
        log_keys(event_id=message.event_id, instance_id=only)
    elif items:
        logger.append_keys(event_ids=[item.message.event_id for item in items])


def trace_keys(outcome: InterruptionOutcome) -> dict[str, Any]:
    """``event_id`` plus, for a message about one instance, ``instance_id``, ``node`` and ``nodeclaim``.

    For a message about several instances (an AWS Health event) the ids are lists under
    ``instance_ids``, ``nodes`` and ``nodeclaims``. Absent names are left out.
    """
    keys: dict[str, Any] = {"event_id": outcome.event_id}
    instances = outcome.instances
    if len(instances) == 1:
        only = instances[0]
        keys["instance_id"] = only.instance_id
        if only.node_name:
            keys["node"] = only.node_name
        if only.nodeclaim_name:
            keys["nodeclaim"] = only.nodeclaim_name
    elif instances:
        keys["instance_ids"] = [i.instance_id for i in instances]
        keys["nodes"] = [i.node_name for i in instances if i.node_name]
        keys["nodeclaims"] = [i.nodeclaim_name for i in instances if i.nodeclaim_name]
    return keys


def terminated_reason(outcome: InterruptionOutcome) -> str:
    """The ``Reason`` dimension of ``NodeClaimsTerminated`` for ``outcome``: Karpenter's event reason of its kind."""
    reason = EVENT_REASONS.get(outcome.kind)
    return reason[0] if reason else outcome.kind.value


def report_batch(
    *, items: Sequence[BatchItem], batch: BatchOutcome, started_at: float, reported_at: float | None = None
) -> int:
    """Emit ``DrainsMissedDeadline`` for a handled batch (when it drained anything) and log each miss.

    ``started_at`` is the invocation's start (epoch seconds); the drain phase is taken to start
    after the batch's cordon and replacement phases. Returns the number of missed deadlines.
    """
    reported = time.time() if reported_at is None else reported_at
    missed = missed_deadlines(
        items=items,
        results=batch.items,
        started_at=started_at,
        drain_started_at=started_at + batch.cordon_seconds + batch.replace_seconds,
        reported_at=reported,
    )
    drained = any(i.drain is not None for r in batch.items if r.outcome is not None for i in r.outcome.instances)
    if drained:
        metrics.add_metric(name="DrainsMissedDeadline", unit=MetricUnit.Count, value=len(missed))
    for miss in missed:
        logger.warning(
            "drain missed the interruption deadline: pods were still on the node when EC2 reclaimed it",
            extra={
                "event_id": miss.event_id,
                "instance_id": miss.instance_id,
                "node": miss.node_name,
                "nodeclaim": miss.nodeclaim_name,
                "late_seconds": round(miss.late_seconds, 3),
                "finished": miss.finished_at is not None,
            },
        )
    return len(missed)


def acknowledged(count: int) -> None:
    """Emit ``InterruptionMessagesAcknowledged``: records of the invocation SQS may delete (0 included)."""
    metrics.add_metric(name="InterruptionMessagesAcknowledged", unit=MetricUnit.Count, value=max(0, count))
