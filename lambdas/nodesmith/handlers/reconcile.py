"""Reconcile Lambda: one provisioning pass per EventBridge schedule tick (``rate(1 minute)``).

The event's content is not used (any scheduled event, or ``{}`` when invoked by hand or by the
embedded demo), except for an interruption batch's wake (:mod:`nodesmith.adapters.aws.wake`), which
runs one provisioning pass at once and keeps provisioning, for the interruption window, as more nodes are
cordoned and pods turn unschedulable (without disruption). The handler loads the settings, gets the ports
from :mod:`~nodesmith.handlers.wiring`, runs :func:`nodesmith.services.provisioning.reconcile.reconcile` and reports:

* metrics (namespace ``Nodesmith``, names of ``infra/metric_names.py``): ``PodsPending``,
  ``OldestPendingPodAgeSeconds``, ``SchedulingDurationSeconds``, ``PodsScheduled``,
  ``NodeClaimsCreated/Launched/Registered/Initialized`` by ``NodePool`` and ``CapacityType``,
  ``NodeClaimsTerminated`` by ``Reason``, ``NodePool`` and ``CapacityType``,
  ``NodePoolCostUSDPerHour`` by ``NodePool`` and ``CapacityType``, ``NodePoolUtilizationPercent``
  by ``NodePool`` and ``Resource`` (those from :mod:`~nodesmith.handlers.reporting`), ``LaunchFailures`` by
  ``ErrorCode``, ``OfferingsMarkedUnavailable``, ``ClusterCostUSDPerHour`` (unit None: USD/hour),
  ``ReconcileDurationSeconds`` and ``ReconcileErrors`` (per-object errors the pass survived, or 1
  when the pass itself failed);
* one structured log line with the outcome.

A pass that fails on its dependencies (a :class:`~nodesmith.core.errors.NodesmithError`: the API server or AWS
still failing after the adapters' retries) is counted in ``ReconcileErrors``, logged with its traceback and answered
``{"status": "failed: <error>"}``, as a Karpenter controller logs a failed reconcile and tries again later: the
next tick is a minute away, and the schedule target has no retries, so nothing is replayed stale. Any other
exception is a fault of Nodesmith's own: counted, logged and raised, so the invocation shows as an error.

With a state table (``NODESMITH_STATE_TABLE``) the pass runs under the reconcile lease
(:mod:`nodesmith.services.provisioning.leases`; holder = the Lambda request id, TTL = the invocation's remaining
time plus a margin): when another pass holds it the handler returns
``{"status": "skipped: lease held by <holder>"}`` without solving, so two passes never launch for the same pods.
"""

from __future__ import annotations

import time
from functools import partial
from typing import TYPE_CHECKING, Any

from nodesmith.core.errors import NodesmithError
from nodesmith.handlers import heap, reporting, wiring
from nodesmith.handlers.observability import MetricUnit, logger, metrics, tracer
from nodesmith.services.provisioning.leases import RECONCILE_LEASE, lease_ttl, with_lease
from nodesmith.services.reconciler.container import WarmContainer

if TYPE_CHECKING:
    from collections.abc import Callable

    from aws_lambda_powertools.utilities.typing import LambdaContext

    from nodesmith.services.disruption.service import DisruptionOutcome
    from nodesmith.services.provisioning.inputs import Snapshot
    from nodesmith.services.provisioning.outcome import ReconcileOutcome

__all__ = ["handler", "run_disruption", "run_pass"]

_CONTAINER = WarmContainer()
"""What this container keeps from pass to pass (:class:`~nodesmith.services.reconciler.container.WarmContainer`)."""


def run_pass(
    *, now: float | None = None, provision_first: bool = False, more_to_come: bool = False
) -> ReconcileOutcome:
    """One provisioning pass with the container's settings, ports and kept state (``now`` defaults to the clock,
    epoch seconds; ``provision_first`` and ``more_to_come``: see
    :meth:`~nodesmith.services.reconciler.container.WarmContainer.provision`)."""
    settings = wiring.get_settings()
    return _CONTAINER.provision(
        ports=wiring.ports(settings),
        settings=wiring.pass_settings(settings),
        now=now,
        provision_first=provision_first,
        more_to_come=more_to_come,
    )


def run_disruption(*, now: float | None = None, snapshot: Snapshot | None = None) -> DisruptionOutcome | None:
    """One disruption pass after provisioning (None when ``NODESMITH_DISRUPTION`` is off); node repair runs in
    it when ``NODESMITH_FEATURE_GATES`` turns ``NodeRepair`` on. ``snapshot`` is the provisioning pass's, as
    that pass left the cluster (None: the disruption pass lists the cluster itself).

    Reported as it ends (:func:`~nodesmith.handlers.reporting.report_disruption`: a line per decision, the
    decisions and savings by ``Method``); the nodes it disrupts are drained and counted by the termination function.
    """
    settings = wiring.get_settings()
    outcome = _CONTAINER.disrupt(
        ports=wiring.ports(settings), settings=wiring.pass_settings(settings), now=now, snapshot=snapshot
    )
    if outcome is not None:
        reporting.report_disruption(outcome)
    return outcome


def _reported(outcome: ReconcileOutcome) -> ReconcileOutcome:
    """Emit one pass's metrics as soon as it ends: a watch-mode invocation runs many passes, and
    reporting only the last would lose the NodeClaims the others created, launched or terminated."""
    reporting.report_pass(outcome)
    return outcome


def _pass_and_disrupt(*, more_to_come: bool = False) -> tuple[ReconcileOutcome, DisruptionOutcome | None]:
    """A provisioning pass, then a disruption pass on the snapshot it left (the cluster is listed once); the heap
    is settled after each (:func:`~nodesmith.handlers.heap.settle`), so the disruption pass's collections do not
    traverse the snapshot. ``more_to_come``: see :func:`run_pass`."""
    outcome = _reported(run_pass(more_to_come=more_to_come))
    heap.settle()
    disruption = run_disruption(snapshot=outcome.snapshot)
    heap.settle()
    return outcome, disruption


def _warmed(
    work: Callable[[], tuple[ReconcileOutcome, DisruptionOutcome | None]],
) -> tuple[ReconcileOutcome, DisruptionOutcome | None]:
    """``work()``, a pass that may find the catalogue cold or expiring (a scheduled pass; a wake's first), with the
    catalogue warmed alongside it (:func:`~nodesmith.services.reconciler.watching.warm_alongside`: the EC2NodeClass
    resolution and the instance types, refreshed ahead of their expiry) while it lists the cluster, so those EC2,
    SSM and pricing reads are not on the way to CreateFleet; the pass waits only for what the warm-up has not read
    yet. The ports are built first, so both use the same cloud provider. The pass reads the container's kept cache,
    caught up first (:func:`_caught_up`)."""
    from nodesmith.services.reconciler.watching import warm_alongside, warm_scheduler

    ports = wiring.ports(wiring.get_settings())
    warmed = warm_alongside(lambda: warm_scheduler(cluster=ports.cluster, cloud=ports.cloud))
    try:
        hold = _caught_up(ports.cluster)
        try:
            return work()
        finally:
            hold()
    finally:
        warmed()


def _caught_up(cluster: object) -> Callable[[], None]:
    """Bring the container's kept cache of pods, Nodes, NodeClaims and NodePools to the present, when ``cluster``
    keeps one (:meth:`~nodesmith.adapters.kube.cluster.KubeCluster.catch_up`: listed by a container's first pass,
    then only what changed since the last, to the API server's bookmark), so the pass reads it instead of listing
    the whole cluster; returns what ends serving from it (the passes that follow, a wake's, list the API). A kind
    listed again because its watch failed, or not caught up at all (the pass lists it as before), is logged."""
    catch_up = getattr(cluster, "catch_up", None)
    if catch_up is None:
        return lambda: None
    for failure in catch_up():
        logger.warning("kept cache could not catch up by watch", extra={"failure": failure})
    hold: Callable[[], None] = cluster.hold  # type: ignore[attr-defined]
    return hold


def _scheduled_pass() -> tuple[ReconcileOutcome, DisruptionOutcome | None]:
    """A scheduled (poll mode) invocation: :func:`_pass_and_disrupt`, the catalogue warmed alongside."""
    return _warmed(_pass_and_disrupt)


def _provision_only() -> tuple[ReconcileOutcome, DisruptionOutcome | None]:
    """A provisioning pass that launches first, of a watching invocation or a wake (pass after pass)."""
    outcome = _reported(run_pass(provision_first=True, more_to_come=True))
    heap.settle()
    return outcome, None


def _handle_watch(context: LambdaContext | None, started: float) -> dict[str, Any]:
    """Watch mode (:mod:`nodesmith.services.reconciler.watching`): passes as pending pods arrive, until near the
    timeout."""
    from nodesmith.services.reconciler.watching import WatchPasses, run_watch, warm_scheduler

    settings = wiring.get_settings()
    remaining = context.get_remaining_time_in_millis() / 1000.0 if context is not None else 900.0
    cluster = wiring.build_cluster(settings)
    try:
        run = run_watch(
            passes=WatchPasses(
                provision=_provision_only,
                full=partial(_pass_and_disrupt, more_to_come=True),
                warm=lambda: warm_scheduler(cluster=cluster, cloud=wiring.build_cloud(settings)),
                settle=heap.settle,
            ),
            cluster=cluster,
            remaining_seconds=remaining,
            request_id=str(getattr(context, "aws_request_id", "") or f"watch-{time.time():.6f}"),
            state=wiring.build_state(settings),
        )
    except Exception as exc:
        return _failed("reconcile watch", exc)
    if run.skipped or run.value is None:
        logger.info("reconcile watch skipped", extra={"reason": run.skipped})
        return {"status": run.skipped or "no pass ran"}
    outcome, disruption = run.value
    return _report(
        outcome, disruption, started, mode="watch", passes=run.passes, batches=list(run.batches), stopped=run.stopped
    )


def _leased(
    context: LambdaContext | None,
    started: float,
    *,
    label: str,
    work: Callable[[], tuple[ReconcileOutcome, DisruptionOutcome | None]],
    **report_extra: Any,
) -> dict[str, Any]:
    """Run ``work`` under the reconcile lease (plainly without a state table) and report it.

    When another pass holds the lease, returns ``{"status": "skipped: ...", "lease_holder": ...}``. ``label``
    names the pass in the log lines (``"<label> skipped"``, ``"<label> failed"``); the holder is the request
    id. A failure is counted (``ReconcileErrors``) and logged; a dependency's
    (:class:`~nodesmith.core.errors.NodesmithError`) is answered ``{"status": "failed: ..."}``, any other raised.
    """
    try:
        state = wiring.build_state(wiring.get_settings())
        if state is None:
            outcome, disruption = work()
        else:
            remaining = context.get_remaining_time_in_millis() / 1000.0 if context is not None else None
            leased = with_lease(
                state=state,
                name=RECONCILE_LEASE,
                holder=str(getattr(context, "aws_request_id", "") or f"{label}-{time.time():.6f}"),
                ttl_seconds=lease_ttl(remaining),
                work=work,
            )
            if not leased.acquired or leased.value is None:
                logger.info(f"{label} skipped", extra={"reason": leased.skipped_reason})
                return {"status": leased.skipped_reason, "lease_holder": leased.held_by}
            outcome, disruption = leased.value
    except Exception as exc:
        metrics.add_metric(name="ReconcileDurationSeconds", unit=MetricUnit.Seconds, value=time.monotonic() - started)
        return _failed(label, exc)
    return _report(outcome, disruption, started, **report_extra)


def _failed(label: str, exc: Exception) -> dict[str, Any]:
    """Count (``ReconcileErrors``) and log (``"<label> failed"``, with the traceback) a pass that raised ``exc``,
    from inside its ``except`` block; answer ``{"status": "failed: ..."}`` when a dependency failed it (a
    :class:`~nodesmith.core.errors.NodesmithError`), else raise ``exc`` again."""
    metrics.add_metric(name="ReconcileErrors", unit=MetricUnit.Count, value=1)
    logger.exception(f"{label} failed")
    if isinstance(exc, NodesmithError):
        return {"status": f"failed: {exc}"}
    raise exc


def _handle_wake(after: float, context: LambdaContext | None, started: float) -> dict[str, Any]:
    """A wake from an interruption batch (:mod:`nodesmith.adapters.aws.wake`) that cordoned nodes at ``after``
    (epoch seconds): skipped when a pass of this container began since (it saw them); else, under the lease, one
    provisioning pass and then more as nodes are cordoned and pods turn unschedulable, until
    :data:`~nodesmith.services.reconciler.watching.BURST_WATCH_SECONDS` after ``after``
    (:func:`~nodesmith.services.reconciler.watching.watch_burst`). No disruption pass: the schedule runs those. The
    summary's ``burst`` gives the passes run and the sizes of the batches of unschedulable pods that triggered them."""
    from nodesmith.services.reconciler.watching import BURST_WATCH_SECONDS, EXIT_MARGIN_SECONDS, watch_burst

    if _CONTAINER.began_since(after):
        logger.info("reconcile wake skipped", extra={"reason": "a pass began after the cordons", "woken_for": after})
        return {"status": "skipped: a pass began after the cordons", "woken_for": after}
    last: list[tuple[ReconcileOutcome, DisruptionOutcome | None]] = []
    burst: dict[str, Any] = {"passes": 0, "batches": []}

    def one_pass() -> tuple[ReconcileOutcome, DisruptionOutcome | None]:
        last.append(_provision_only())
        return last[-1]

    def work() -> tuple[ReconcileOutcome, DisruptionOutcome | None]:
        _warmed(one_pass)  # a wake may find the container, and its catalogue, cold
        seconds = after + BURST_WATCH_SECONDS - time.time()
        if context is not None:
            seconds = min(seconds, context.get_remaining_time_in_millis() / 1000.0 - EXIT_MARGIN_SECONDS)
        out = watch_burst(run_pass=one_pass, cluster=wiring.build_cluster(wiring.get_settings()), seconds=seconds)
        burst.update(passes=len(last), batches=list(out.batches))
        return last[-1]

    return _leased(context, started, label="reconcile wake", work=work, woken_for=after, burst=burst)


@logger.inject_lambda_context(clear_state=True)
@tracer.capture_lambda_handler(capture_response=False)
@metrics.log_metrics
def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    """Lambda entry point (``nodesmith.handlers.reconcile.handler``): returns the pass summary."""
    return _dispatch(event, context)


def _dispatch(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    """A wake, a watch or a scheduled pass, as ``event`` and the mode say, with the container's cyclic collector
    tuned for a heap that holds the cluster (:func:`~nodesmith.handlers.heap.tune`)."""
    started = time.monotonic()
    heap.tune()
    from nodesmith.adapters.aws.wake import provision_after

    try:
        after = provision_after(event)
    except ValueError as exc:  # a broken wake is logged and dropped: the next tick provisions anyway
        logger.error("malformed reconcile wake ignored", extra={"error": str(exc), "event": event})
        return {"status": f"ignored: {exc}"}
    if after is not None:
        return _handle_wake(after, context, started)
    if wiring.get_settings().reconcile_mode == "watch":
        return _handle_watch(context, started)
    return _leased(context, started, label="reconcile pass", work=_scheduled_pass)


def _report(
    outcome: ReconcileOutcome, disruption: DisruptionOutcome | None, started: float, **extra: Any
) -> dict[str, Any]:
    """The invocation's duration and the log line of its (last) pass; returns the summary.

    Each pass's own metrics were emitted when it ended (:func:`_reported`).
    """
    duration = time.monotonic() - started
    metrics.add_metric(name="ReconcileDurationSeconds", unit=MetricUnit.Seconds, value=duration)
    summary = reporting.pass_summary(outcome)
    summary["duration_seconds"] = round(duration, 3)
    summary.update(extra)
    if disruption is not None:
        from nodesmith.services.disruption.service import summary as disruption_summary

        summary["disruption"] = dict(disruption_summary(disruption))
    if outcome.errors:
        logger.warning("reconcile pass finished with errors", extra={"outcome": summary})
    else:
        logger.info("reconcile pass finished", extra={"outcome": summary})
    return summary
