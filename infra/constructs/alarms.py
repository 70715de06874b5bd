"""The controller's CloudWatch alarms: what each watches, when it fires, and what it tells the on-call to check.

Custom metrics are read with Metrics Insights ``SELECT`` (:func:`~infra.constructs.metric_queries.insights_query`),
which aggregates across every dimension set (alarms cannot use ``SEARCH``); the Lambdas' own ``Errors`` are read
from AWS/Lambda. Thresholds are counts per period or seconds; periods are one minute unless said. The
dead-letter queue alarms live with their queues (:class:`~infra.constructs.interruption.Interruption`,
:class:`~infra.constructs.termination.Termination`); the dashboard shows these and those
(:class:`~infra.constructs.dashboard.NodesmithMonitoring`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from aws_cdk import Duration
from aws_cdk import aws_cloudwatch as cloudwatch

from infra.constructs.metric_queries import PERIOD, insights_query
from infra.metric_names import MetricName

if TYPE_CHECKING:
    from collections.abc import Mapping

    from aws_cdk import aws_lambda as lambda_
    from constructs import Construct

__all__ = ["ALARM_DESCRIPTIONS", "controller_alarms"]

_PERIOD = PERIOD
M = MetricName


def _alarm(
    scope: Construct,
    construct_id: str,
    *,
    description: str,
    metric: cloudwatch.IMetric,
    threshold: float,
    periods: tuple[int, int],
    comparison: cloudwatch.ComparisonOperator = cloudwatch.ComparisonOperator.GREATER_THAN_OR_EQUAL_TO_THRESHOLD,
) -> cloudwatch.Alarm:
    """An alarm that treats missing data as not breaching; ``periods`` is (datapoints to alarm, out of)."""
    datapoints, evaluation_periods = periods
    return cloudwatch.Alarm(
        scope,
        construct_id,
        alarm_description=description,
        metric=metric,
        threshold=threshold,
        comparison_operator=comparison,
        evaluation_periods=evaluation_periods,
        datapoints_to_alarm=datapoints,
        treat_missing_data=cloudwatch.TreatMissingData.NOT_BREACHING,
    )


def controller_alarms(
    scope: Construct, *, functions: Mapping[str, lambda_.IFunction], pending_pod_age_threshold: Duration
) -> list[cloudwatch.Alarm]:
    """Create the controller's alarms in ``scope``, in a stable order (:data:`ALARM_DESCRIPTIONS` says what each
    means and where to look first).

    ``functions`` maps ``reconcile``, ``interruption`` and ``termination`` to their Lambdas;
    ``pending_pod_age_threshold`` is the pending-pod age (seconds) above which ``OldestPendingPodAge`` fires.
    Every alarm treats missing data as not breaching (no pass ran: nothing is wrong yet).
    """
    age = pending_pod_age_threshold.to_seconds()
    five_minutes = Duration.minutes(5)
    above = cloudwatch.ComparisonOperator.GREATER_THAN_THRESHOLD
    at_least = cloudwatch.ComparisonOperator.GREATER_THAN_OR_EQUAL_TO_THRESHOLD

    def errors(name: str) -> cloudwatch.IMetric:
        return functions[name].metric_errors(period=_PERIOD, statistic="Sum")

    # construct id, metric, threshold, (datapoints to alarm, out of periods), comparison
    rows: list[tuple[str, cloudwatch.IMetric, float, tuple[int, int], cloudwatch.ComparisonOperator]] = [
        ("OldestPendingPodAge", insights_query(M.OLDEST_PENDING_POD_AGE_SECONDS, function="MAX", period=_PERIOD),
         age, (2, 2), above),
        ("ReconcileErrors", insights_query(M.RECONCILE_ERRORS, function="SUM", period=_PERIOD),
         1, (3, 5), at_least),
        ("LaunchFailures", insights_query(M.LAUNCH_FAILURES, function="SUM", period=five_minutes),
         5, (2, 3), at_least),
        ("DrainsMissedDeadline", insights_query(M.DRAINS_MISSED_DEADLINE, function="SUM", period=five_minutes),
         1, (1, 1), at_least),
        ("ReconcileFunctionErrors", errors("reconcile"), 1, (3, 5), at_least),
        ("InterruptionFunctionErrors", errors("interruption"), 1, (2, 3), at_least),
        ("TerminationFunctionErrors", errors("termination"), 1, (2, 3), at_least),
    ]  # fmt: skip
    return [
        _alarm(
            scope,
            construct_id,
            description=ALARM_DESCRIPTIONS[construct_id].format(age=int(age)),
            metric=metric,
            threshold=threshold,
            periods=periods,
            comparison=comparison,
        )
        for construct_id, metric, threshold, periods, comparison in rows
    ]


ALARM_DESCRIPTIONS = {
    "OldestPendingPodAge": (
        "A pod has waited more than {age} s for capacity. "
        "Check LaunchFailures, NodePool limits and requirements, and the reconcile logs."
    ),
    "ReconcileErrors": (
        "Reconcile passes are failing in 3 of the last 5 minutes: provisioning and disruption may "
        "have stopped. Check the reconcile function's logs and traces."
    ),
    "LaunchFailures": (
        "At least 5 launches failed in each of two 5-minute windows out of three: capacity errors "
        "across many offerings, quotas, or IAM/launch-template problems. Check the reasons in logs."
    ),
    "DrainsMissedDeadline": (
        "A drain did not finish before its deadline (a spot interruption's two-minute notice, or the "
        "NodeClaim's terminationGracePeriod): its last pods were deleted past their PodDisruptionBudgets and "
        "the instance terminated. Check PodsBlockedByPDB, long terminationGracePeriodSeconds, do-not-disrupt "
        "pods, InterruptionQueueAgeSeconds and the termination queue's backlog."
    ),
    "ReconcileFunctionErrors": "The reconcile Lambda raised (or timed out) in 3 of the last 5 minutes.",
    "InterruptionFunctionErrors": (
        "The interruption Lambda failed whole batches in 2 of the last 3 minutes; messages are "
        "retried, then dead-lettered."
    ),
    "TerminationFunctionErrors": (
        "The termination Lambda failed whole invocations (errors or timeouts) in 2 of the last 3 minutes: "
        "drains are not progressing. Requests are retried, then dead-lettered; check its logs and traces."
    ),
}
"""What each alarm means and where to look first (``{age}``: the pending-pod threshold in seconds)."""
