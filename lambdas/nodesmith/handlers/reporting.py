"""What the handlers report beyond their pass summaries: breakdown metrics, deadlines, trace keys.

Both handlers call in here with their outcomes; every function only emits metrics and log lines
(names from ``infra/metric_names.py``, units as there: Count, Seconds, Percent, None for USD/hour)
and never changes what the pass did. Each data point goes under one dimension set (``service``
plus the breakdown), so the dashboard's sums count it once.

Reconcile (:func:`report_pass`, and :func:`report_disruption` after each disruption pass):

* ``NodeClaimsCreated`` / ``Launched`` / ``Registered`` / ``Initialized`` by ``NodePool`` and
  ``CapacityType`` (Karpenter's ``nodeclaims_created_total{nodepool}`` and the status-condition
  transitions), only for the (NodePool, capacity type) pairs that had any;
* ``NodeClaimsTerminated`` by ``Reason``, ``NodePool`` and ``CapacityType``: ``GarbageCollected``
  (instance gone), ``LaunchTimeout`` / ``RegistrationTimeout`` (liveness), and the disruption
  reasons ``Empty``, ``Drifted``, ``Underutilized``, ``Expired`` (:mod:`nodesmith.services.breakdown`),
  plus the disruption drains' ``PodsEvicted``;
* ``NodePoolCostUSDPerHour`` by ``NodePool`` and ``CapacityType`` (``karpenter_nodepools_cost_total``;
  the pairs sum to ``ClusterCostUSDPerHour``), ``NodePoolUtilizationPercent`` by ``NodePool`` and
  ``Resource`` (``cpu``, ``memory``): requested over allocatable (:mod:`nodesmith.services.utilization`).

Interruption (:func:`bind_batch`, :func:`trace_keys`, :func:`instance_keys`, :func:`report_terminations`,
:func:`report_replacement`, :func:`report_batch`, :func:`acknowledged`):

* the log keys ``event_id`` / ``instance_id`` / ``node`` / ``nodeclaim`` so one interruption's
  lines can be found together (``{ $.event_id = "..." }`` in CloudWatch Logs): a one-message
  batch puts them on every line; in a larger batch each task's lines carry its own (the service
  scopes them with :func:`~nodesmith.services.log_context.log_context`) and the batch-wide lines
  ``event_ids``;
* ``NodeClaimsTerminated`` by ``Reason`` (Karpenter's interruption event reason: ``SpotInterrupted``,
  ``InstanceTerminating``, ...), ``NodePool`` and ``CapacityType``; the replacement pass's
  ``NodeClaimsCreated`` / ``NodeClaimsLaunched`` by ``NodePool`` and ``CapacityType``;
* ``DrainsMissedDeadline`` (:mod:`nodesmith.services.drain_deadlines`), with one warning line each;
* ``InterruptionMessagesAcknowledged``: records not reported back to SQS as failures (SQS deletes
  them), Karpenter's ``interruption_deleted_messages_total``.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from nodesmith.handlers.observability import MetricUnit, emit, log_keys, logger, metrics, tracer
from nodesmith.services.breakdown import UNKNOWN
from nodesmith.services.drain_deadlines import missed_deadlines
from nodesmith.services.interrupt import EVENT_REASONS

if TYPE_CHECKING:
    from collections.abc import Iterable, Sequence

    from nodesmith.services.disruption import DisruptionOutcome
    from nodesmith.services.interrupt import InstanceOutcome, InterruptionOutcome
    from nodesmith.services.interrupt_batch import BatchItem, BatchOutcome
    from nodesmith.services.reconcile import ReconcileOutcome
    from nodesmith.services.replacement import Replacement

__all__ = [
    "acknowledged",
    "bind_batch",
    "instance_keys",
    "report_batch",
    "report_disruption",
    "report_pass",
    "report_replacement",
    "report_terminations",
    "terminated_reason",
    "trace_keys",
]

NODECLAIM_STAGES = (
    ("NodeClaimsCreated", "created_by"),
    ("NodeClaimsLaunched", "launched_by"),
    ("NodeClaimsRegistered", "registered_by"),
    ("NodeClaimsInitialized", "initialized_by"),
)
"""Metric name and the :class:`~nodesmith.services.reconcile.ReconcileOutcome` tally it reports."""


def _by_pool(
    name: str, values: Iterable[tuple[tuple[str, str], float]], *, unit: MetricUnit = MetricUnit.Count
) -> None:
    """Emit ``name`` once per (NodePool, capacity type) under ``NodePool`` and ``CapacityType``."""
    for (pool, kind), value in sorted(values):
        emit(name, value, unit=unit, dimensions={"NodePool": pool, "CapacityType": kind})


def _terminated(counts: Iterable[tuple[tuple[str, str, str], int]]) -> None:
    """Emit ``NodeClaimsTerminated`` per (reason, NodePool, capacity type)."""
    for (reason, pool, kind), count in sorted(counts):
        emit(
            "NodeClaimsTerminated",
            count,
            unit=MetricUnit.Count,
            dimensions={"Reason": reason, "NodePool": pool, "CapacityType": kind},
        )


# --- reconcile ------------------------------------------------------------------------------------


def report_pass(outcome: ReconcileOutcome) -> None:
    """Emit the reconcile pass's breakdown metrics (see the module docstring).

    Only pairs with something to report are emitted (a pass that created nothing emits no
    ``NodeClaimsCreated``); utilisation only for NodePools with capacity, cost only for NodePools
    with running instances.
    """
    for name, attribute in NODECLAIM_STAGES:
        _by_pool(name, getattr(outcome, attribute).items())
    _terminated(outcome.terminated_by.items())
    _by_pool("NodePoolCostUSDPerHour", outcome.cost_by.items(), unit=MetricUnit.NoUnit)
    for pool, by_resource in sorted(outcome.utilization.items()):
        for resource, percent in sorted(by_resource.items()):
            emit(
                "NodePoolUtilizationPercent",
                percent,
                unit=MetricUnit.Percent,
                dimensions={"NodePool": pool, "Resource": resource},
            )


def report_disruption(disruption: DisruptionOutcome) -> None:
    """Emit a disruption pass's ``NodeClaimsTerminated`` (by reason, NodePool, capacity type), its
    replacements' ``NodeClaimsCreated`` / ``NodeClaimsLaunched`` (by NodePool, capacity type) and ``PodsEvicted``.

    Called right after each disruption pass (a watch-mode invocation runs several), so none is lost.
    """
    _terminated(disruption.terminated_by.items())
    _by_pool("NodeClaimsCreated", disruption.created_by.items())
    _by_pool("NodeClaimsLaunched", disruption.launched_by.items())
    if disruption.pods_evicted:
        metrics.add_metric(name="PodsEvicted", unit=MetricUnit.Count, value=disruption.pods_evicted)


# --- interruption ---------------------------------------------------------------------------------


def bind_batch(items: Sequence[BatchItem]) -> dict[str, Any]:
    """Log keys for the batch: a one-message batch's go on every following line of the invocation.

    One message (the usual SQS batch for one interruption): ``event_id`` and, when it names one
    instance, ``instance_id`` are appended to every line and become X-Ray annotations; returns
    ``{}``. Several messages: returns ``{"event_ids": [...]}`` for the caller to scope the batch's
    lines with (:func:`~nodesmith.services.log_context.log_context`); each message's and each
    instance's own lines then carry their own ``event_id`` (and instance keys) instead. The trace
    (one per invocation) is annotated with ``event_ids`` and ``instance_ids``, comma-separated.
    """
    if len(items) == 1:
        message = items[0].message
        only = message.instance_ids[0] if len(message.instance_ids) == 1 else None
        log_keys(event_id=message.event_id, instance_id=only)
        return {}
    if not items:
        return {}
    event_ids = [item.message.event_id for item in items]
    instance_ids = [iid for item in items for iid in item.message.instance_ids]
    # One trace per invocation: annotate it with every id, so `annotation.event_ids CONTAINS "..."` finds it.
    tracer.put_annotation(key="event_ids", value=",".join(event_ids))
    tracer.put_annotation(key="instance_ids", value=",".join(instance_ids))
    return {"event_ids": event_ids}


def instance_keys(event_id: str, instance: InstanceOutcome) -> dict[str, Any]:
    """``event_id``, ``instance_id`` and, when known, ``node`` and ``nodeclaim`` of one instance's lines."""
    keys: dict[str, Any] = {"event_id": event_id, "instance_id": instance.instance_id}
    if instance.node_name:
        keys["node"] = instance.node_name
    if instance.nodeclaim_name:
        keys["nodeclaim"] = instance.nodeclaim_name
    return keys


def trace_keys(outcome: InterruptionOutcome) -> dict[str, Any]:
    """The keys of a message's lines: ``event_id`` plus, when it is about one instance, its keys.

    A message about several instances (an AWS Health event) has one line per instance with that
    instance's keys (:func:`instance_keys`); its message line carries ``event_id`` alone.
    """
    if len(outcome.instances) == 1:
        return instance_keys(outcome.event_id, outcome.instances[0])
    return {"event_id": outcome.event_id}


def terminated_reason(outcome: InterruptionOutcome) -> str:
    """The ``Reason`` dimension of ``NodeClaimsTerminated`` for ``outcome``: Karpenter's event reason of its kind."""
    reason = EVENT_REASONS.get(outcome.kind)
    return reason[0] if reason else outcome.kind.value


def report_terminations(outcome: InterruptionOutcome) -> None:
    """Emit ``NodeClaimsTerminated`` for the NodeClaims ``outcome`` deleted, by reason, NodePool and capacity type."""
    reason = terminated_reason(outcome)
    counts: dict[tuple[str, str, str], int] = {}
    for instance in outcome.instances:
        if instance.nodeclaim_deleted:
            key = (reason, instance.nodepool or UNKNOWN, instance.capacity_type or UNKNOWN)
            counts[key] = counts.get(key, 0) + 1
    _terminated(counts.items())


def report_replacement(replacement: Replacement | None) -> None:
    """Emit the replacement pass's ``NodeClaimsCreated`` / ``NodeClaimsLaunched`` by NodePool and capacity type."""
    if replacement is None:
        return
    _by_pool("NodeClaimsCreated", (((pool, kind), n) for pool, kind, n in replacement.created_by))
    _by_pool("NodeClaimsLaunched", (((pool, kind), n) for pool, kind, n in replacement.launched_by))


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
