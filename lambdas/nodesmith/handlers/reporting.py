"""What the handlers report: pass summaries, metrics and their breakdowns, deadlines, trace keys.

Both handlers call in here with their outcomes; every function only emits metrics and log lines
(names from ``infra/metric_names.py``, units as there: Count, Seconds, Percent, None for USD/hour)
and never changes what the pass did. Each data point goes under one dimension set (``service``
plus the breakdown), so the dashboard's sums count it once.

Reconcile (:func:`pass_summary` for the pass's log line and return value, :func:`report_pass`, and
:func:`report_disruption` after each disruption pass): the pass's totals (``PodsPending``, ``PodsScheduled``,
``ClusterCostUSDPerHour``, ``ReconcileErrors``, ...), the disruption decisions and savings by ``Method``, and

* ``NodeClaimsCreated`` / ``Launched`` / ``Registered`` / ``Initialized`` by ``NodePool`` and
  ``CapacityType`` (Karpenter's ``nodeclaims_created_total{nodepool}`` and the status-condition
  transitions), only for the (NodePool, capacity type) pairs that had any;
* ``NodeClaimsTerminated`` by ``Reason``, ``NodePool`` and ``CapacityType``: ``GarbageCollected``
  (instance gone) and ``LaunchTimeout`` / ``RegistrationTimeout`` (liveness); nodes that are drained
  (interruptions, ``Empty``, ``Drifted``, ...) are counted by the termination function;
* ``NodePoolCostUSDPerHour`` by ``NodePool`` and ``CapacityType`` (``karpenter_nodepools_cost_total``;
  the pairs sum to ``ClusterCostUSDPerHour``), ``NodePoolUtilizationPercent`` by ``NodePool`` and
  ``Resource`` (``cpu``, ``memory``): requested over allocatable (:mod:`nodesmith.services.provisioning.utilization`).

Interruption (:func:`report_message`, :func:`report_malformed`, :func:`batch_response`): messages received by
kind, ignored by reason, queue age, nodes cordoned, one line per instance with the keys ``event_id`` /
``instance_id`` / ``node`` / ``nodeclaim`` (:func:`instance_keys`), so one interruption's lines are one
CloudWatch Logs Insights filter.

Termination (:func:`report_termination`): the drain round's evictions, refusals and deletions; requests
ignored by reason; and, when the node went, ``NodeClaimsTerminated`` by ``Reason`` (Karpenter's:
``SpotInterrupted``, ``Drifted``, ``Empty``, ...), ``NodePool`` and ``CapacityType``,
``DrainDurationSeconds`` and ``DrainsMissedDeadline``.
"""

from __future__ import annotations

from dataclasses import asdict
from typing import TYPE_CHECKING, Any

from nodesmith.handlers.observability import MetricUnit, count_by, emit, logger, metrics
from nodesmith.services.breakdown import UNKNOWN
from nodesmith.services.termination.service import Status

if TYPE_CHECKING:
    from collections.abc import Collection, Iterable, Mapping, Sequence

    from nodesmith.core.termination import TerminationRequest
    from nodesmith.services.disruption.service import DisruptionOutcome
    from nodesmith.services.interruption.service import InstanceOutcome, MessageOutcome
    from nodesmith.services.provisioning.reconcile import ReconcileOutcome
    from nodesmith.services.termination.service import TerminationOutcome

__all__ = [
    "batch_response",
    "instance_keys",
    "pass_summary",
    "report_disruption",
    "report_malformed",
    "report_message",
    "report_pass",
    "report_termination",
]

MAX_LOGGED_REASONS = 20
"""Unschedulable reasons a pass summary lists at most (the most frequent first)."""

NODECLAIM_STAGES = (
    ("NodeClaimsCreated", "created_by"),
    ("NodeClaimsLaunched", "launched_by"),
    ("NodeClaimsRegistered", "registered_by"),
    ("NodeClaimsInitialized", "initialized_by"),
)
"""Metric name and the :class:`~nodesmith.services.provisioning.reconcile.ReconcileOutcome` tally it reports."""


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


def pass_summary(outcome: ReconcileOutcome) -> dict[str, Any]:
    """A JSON-safe summary of ``outcome`` for logs and the handler's return value.

    Unschedulable pods are summarised by reason (at most 20 reasons, with pod counts).
    """
    reasons = sorted(outcome.unschedulable_reasons.items(), key=lambda kv: (-kv[1], kv[0]))
    return {
        "pods_pending": outcome.pods_pending,
        "oldest_pending_age_seconds": round(outcome.oldest_pending_age_seconds, 3),
        "pods_scheduled": outcome.pods_scheduled,
        "pods_awaiting_capacity": outcome.pods_awaiting_capacity,
        "pods_rescheduled": outcome.pods_rescheduled,
        "nodeclaims_created": outcome.nodeclaims_created,
        "nodeclaims_launched": outcome.nodeclaims_launched,
        "nodeclaims_registered": outcome.nodeclaims_registered,
        "nodeclaims_initialized": outcome.nodeclaims_initialized,
        "nodeclaims_terminated": outcome.nodeclaims_terminated,
        "orphans_terminated": outcome.orphans_terminated,
        "launch_templates_deleted": list(outcome.launch_templates_deleted),
        "terminations_requested": list(outcome.terminations_requested),
        "garbage_collected": outcome.garbage_collected,
        "launched": list(outcome.launched),
        "launch_failures": dict(outcome.launch_failures),
        "offerings_marked_unavailable": outcome.offerings_marked_unavailable,
        "cost_usd_per_hour": round(outcome.cost_per_hour, 6),
        "new_cost_usd_per_hour": round(outcome.new_cost_per_hour, 6),
        "scheduling_duration_seconds": round(outcome.scheduling_duration_seconds, 6),
        "solve_attempts": outcome.solve_attempts,
        "unschedulable": len(outcome.unschedulable),
        "unschedulable_reasons": dict(reasons[:MAX_LOGGED_REASONS]),
        "errors": list(outcome.errors),
    }


def report_pass(outcome: ReconcileOutcome) -> None:
    """Emit the reconcile pass's metrics: ``PodsPending``, ``OldestPendingPodAgeSeconds``,
    ``SchedulingDurationSeconds``, ``PodsScheduled``, ``OfferingsMarkedUnavailable``, ``ClusterCostUSDPerHour``,
    ``ReconcileErrors``, ``LaunchFailures`` by ``ErrorCode``, and the breakdowns (see the module docstring).

    Only pairs with something to report are emitted (a pass that created nothing emits no
    ``NodeClaimsCreated``); utilisation only for NodePools with capacity, cost only for NodePools
    with running instances.
    """
    add = metrics.add_metric
    add(name="PodsPending", unit=MetricUnit.Count, value=outcome.pods_pending)
    add(name="OldestPendingPodAgeSeconds", unit=MetricUnit.Seconds, value=outcome.oldest_pending_age_seconds)
    add(name="SchedulingDurationSeconds", unit=MetricUnit.Seconds, value=outcome.scheduling_duration_seconds)
    add(name="PodsScheduled", unit=MetricUnit.Count, value=outcome.pods_scheduled)
    add(name="OfferingsMarkedUnavailable", unit=MetricUnit.Count, value=outcome.offerings_marked_unavailable)
    add(name="ClusterCostUSDPerHour", unit=MetricUnit.NoUnit, value=outcome.cost_per_hour)
    add(name="ReconcileErrors", unit=MetricUnit.Count, value=len(outcome.errors))
    for code, count in sorted(outcome.launch_failures.items()):
        count_by("LaunchFailures", dimension="ErrorCode", value=code, count=count)
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
    """Log one line per decision of a disruption pass (method, nodes, cost before and after, rejected candidates
    with why) and emit ``DisruptionDecisions`` and ``DisruptionSavingsUSDPerHour`` by ``Method`` and its
    replacements' ``NodeClaimsCreated`` / ``NodeClaimsLaunched`` (by NodePool, capacity type); the nodes it
    disrupts are counted terminated by the termination function, when they go.

    Called right after each disruption pass (a watch-mode invocation runs several), so none is lost.
    """
    for decision in disruption.decisions:
        logger.info("disruption decision", extra={"disruption": decision})
    for method, count in sorted(disruption.executed.items()):
        count_by("DisruptionDecisions", dimension="Method", value=method, count=count)
    for method, saved in sorted(disruption.savings_by_method.items()):
        count_by("DisruptionSavingsUSDPerHour", dimension="Method", value=method, count=saved, unit=MetricUnit.NoUnit)
    _by_pool("NodeClaimsCreated", disruption.created_by.items())
    _by_pool("NodeClaimsLaunched", disruption.launched_by.items())


# --- interruption and termination ------------------------------------------------------------------


def instance_keys(event_id: str, instance: InstanceOutcome) -> dict[str, Any]:
    """``event_id``, ``instance_id`` and, when known, ``node`` and ``nodeclaim``: the keys that tie one
    interruption's lines together (``filter event_id = "..."`` in CloudWatch Logs Insights)."""
    keys: dict[str, Any] = {"event_id": event_id, "instance_id": instance.instance_id}
    if instance.node:
        keys["node"] = instance.node
    if instance.nodeclaim:
        keys["nodeclaim"] = instance.nodeclaim
    return keys


def report_message(outcome: MessageOutcome, *, queue_age_seconds: float | None) -> None:
    """Log and count one interruption message: ``InterruptionMessagesReceived`` by ``MessageType``,
    ``InterruptionQueueAgeSeconds``, ``InterruptionMessagesIgnored`` by ``Reason`` (once per message that
    nothing was done about), ``NodesCordoned``; one line per instance with its :func:`instance_keys`."""
    count_by("InterruptionMessagesReceived", dimension="MessageType", value=outcome.kind.value)
    if queue_age_seconds is not None:
        metrics.add_metric(name="InterruptionQueueAgeSeconds", unit=MetricUnit.Seconds, value=queue_age_seconds)
    if outcome.ignored:
        count_by("InterruptionMessagesIgnored", dimension="Reason", value=outcome.ignored)
    if not outcome.instances:
        logger.info("interruption message ignored", extra={"event_id": outcome.event_id, "reason": outcome.ignored,
                                                           "message_id": outcome.message_id})  # fmt: skip
    for instance in outcome.instances:
        verdict = instance.verdict
        logger.info(
            "interruption message ignored" if verdict.ignored else "interruption handled",
            extra={
                **instance_keys(outcome.event_id, instance),
                "kind": outcome.kind.value,
                "reason": verdict.ignored or verdict.reason,
                "action": verdict.action.value,
                "cordoned": instance.cordoned,
                "termination_requested": instance.requested,
                "duplicate": instance.duplicate,
                "deadline": verdict.deadline,
            },
        )
    cordoned = sum(i.cordoned for i in outcome.instances)
    if cordoned:
        metrics.add_metric(name="NodesCordoned", unit=MetricUnit.Count, value=cordoned)


def report_malformed(*, metric: str, message_id: str, reason: str) -> None:
    """Log a message that is not one we can read, and count it in ``metric`` (``InterruptionMessagesMalformed``,
    ``TerminationRequestsMalformed``): it is acknowledged, since no retry can fix it (Karpenter deletes
    unparseable messages too)."""
    logger.warning(
        "malformed message acknowledged", extra={"message_id": message_id, "reason": reason, "metric": metric}
    )
    metrics.add_metric(name=metric, unit=MetricUnit.Count, value=1)


def report_termination(outcome: TerminationOutcome, request: TerminationRequest) -> None:
    """Log and count one termination round: ``PodsEvicted``, ``PodsBlockedByPDB``, ``PodsForceDeleted``;
    ``TerminationRequestsIgnored`` by ``Reason``; when the node went, ``NodeClaimsTerminated`` by ``Reason``,
    ``NodePool`` and ``CapacityType``, ``DrainDurationSeconds`` (from the NodeClaim's deletion) and
    ``DrainsMissedDeadline`` (pods were still on it at its deadline)."""
    keys = {"nodeclaim": request.nodeclaim, "instance_id": request.instance_id or None, "node": outcome.node}
    drain = outcome.drain
    if drain is not None:
        for name, value in (("PodsEvicted", drain.evicted), ("PodsBlockedByPDB", drain.blocked),
                            ("PodsForceDeleted", drain.force_deleted)):  # fmt: skip
            if value:
                metrics.add_metric(name=name, unit=MetricUnit.Count, value=value)
    if outcome.status is Status.IGNORED:
        count_by("TerminationRequestsIgnored", dimension="Reason", value=outcome.detail)
        logger.warning("termination request ignored", extra={**keys, "reason": outcome.detail})
        return
    line = {**keys, "status": outcome.status.value, "detail": outcome.detail, "reason": outcome.reason,
            "retry_after": outcome.retry_after, "drain": None if drain is None else asdict(drain)}  # fmt: skip
    logger.info("termination round", extra=line)
    if outcome.status is not Status.TERMINATED:
        return
    _terminated([((outcome.reason, outcome.nodepool or UNKNOWN, outcome.capacity_type or UNKNOWN), 1)])
    if outcome.seconds_since_deletion is not None:
        metrics.add_metric(name="DrainDurationSeconds", unit=MetricUnit.Seconds, value=outcome.seconds_since_deletion)
    metrics.add_metric(name="DrainsMissedDeadline", unit=MetricUnit.Count, value=int(outcome.missed_deadline))
    if outcome.missed_deadline:
        logger.warning("pods were still on the node at its deadline; terminated anyway", extra=keys)


def report_round_failed(request: TerminationRequest, error: BaseException, retry_after: int) -> None:
    """Log a termination round that raised or overran its time (a WARNING naming the NodeClaim, the instance and the
    error): its request comes back after ``retry_after`` seconds, and the dead-letter queue takes it when it keeps
    failing."""
    logger.warning(
        "termination round failed",
        extra={"nodeclaim": request.nodeclaim, "instance_id": request.instance_id or None,
               "error": f"{type(error).__name__}: {error}", "retry_after": retry_after},
    )  # fmt: skip


def report_message_failed(message_id: str, event_id: str, error: BaseException) -> None:
    """Log an interruption message whose handling raised or overran its time (a WARNING naming the SQS message,
    the event and the error): SQS delivers it again after the queue's visibility timeout, and the dead-letter
    queue takes it when it keeps failing."""
    logger.warning(
        "interruption message failed",
        extra={"message_id": message_id, "event_id": event_id or None, "error": f"{type(error).__name__}: {error}"},
    )


def batch_response(
    response: Mapping[str, Any], *, also_failed: Collection[str], message_ids: Sequence[str]
) -> dict[str, Any]:
    """The interruption batch's response: the batch processor's ``batchItemFailures`` plus the ``also_failed``
    message ids (termination requests SQS refused), each once, in the order of ``message_ids`` (the records'). Emits
    ``InterruptionMessagesAcknowledged``: the records SQS may delete (0 included)."""
    failures = list(response.get("batchItemFailures") or [])
    failed = {f["itemIdentifier"] for f in failures}
    failures += [{"itemIdentifier": m} for m in dict.fromkeys(message_ids) if m in also_failed and m not in failed]
    acknowledged = max(0, len(message_ids) - len(failures))
    metrics.add_metric(name="InterruptionMessagesAcknowledged", unit=MetricUnit.Count, value=acknowledged)
    return {"batchItemFailures": failures}
