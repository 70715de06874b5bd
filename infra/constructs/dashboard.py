"""The Nodesmith CloudWatch dashboard and alarms.

The dashboard reads top to bottom the way a platform engineer asks questions: what does the
cluster cost and is anything waiting (capacity and cost), are nodes coming up (provisioning), are
interruptions handled and drains finishing (interruptions and drains), what is being removed and
why (disruption), and is the controller itself healthy (controller health).

Custom metrics are read with expressions that aggregate across every dimension set (see
:mod:`infra.metric_names`): ``SEARCH`` in graphs (several per graph allowed) and Metrics Insights
``SELECT`` in alarms (alarms cannot use ``SEARCH``). A per-NodePool breakdown is read with a
``SEARCH`` on an exact schema (``{Nodesmith,NodePool,Resource,service}``), one line per series.
Names come only from :class:`infra.metric_names.MetricName`; a test reads the synthesized body
back and checks every (name, dimensions) pair against what the handlers emit.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from aws_cdk import Duration
from aws_cdk import aws_cloudwatch as cloudwatch
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_sqs as sqs
from constructs import Construct

from infra.metric_names import NAMESPACE, Dimension, MetricName

if TYPE_CHECKING:
    from collections.abc import Sequence

__all__ = ["SERVICE_DIMENSION", "NodesmithMonitoring", "insights_query", "search_each", "search_total"]

_PERIOD = Duration.minutes(1)
_FULL_WIDTH = 24
_GRAPH_HEIGHT = 6

M = MetricName
D = Dimension

SERVICE_DIMENSION = "service"
"""Powertools adds ``service`` (``POWERTOOLS_SERVICE_NAME``, set per function) to every data point."""


def search_total(name: MetricName, *, statistic: str, aggregate: str = "SUM", label: str) -> cloudwatch.MathExpression:
    """One line: ``aggregate`` over every time series of ``name`` in :data:`NAMESPACE` (any dimensions).

    ``statistic`` is applied per series and per minute first (``Sum`` for counts, ``Maximum`` or
    ``Average`` for gauges and durations); ``aggregate`` (``SUM``, ``MAX``, ``AVG``) then folds the
    series into one.
    """
    search = f"SEARCH('Namespace=\"{NAMESPACE}\" MetricName=\"{name}\"', '{statistic}', {int(_PERIOD.to_seconds())})"
    return cloudwatch.MathExpression(expression=f"{aggregate}({search})", label=label, period=_PERIOD)


def search_each(
    name: MetricName, *, dimensions: Sequence[Dimension], statistic: str, label: str
) -> cloudwatch.MathExpression:
    """One line per time series of ``name`` emitted under exactly ``dimensions`` (plus ``service``).

    The schema form of ``SEARCH`` (``{Namespace,Dim1,Dim2,service}``) matches only series with
    exactly that dimension set, so the graph shows the breakdown (one line per NodePool and
    resource, say) and never an aggregate. ``label`` may use dynamic labels
    (``${PROP('Dim.NodePool')}``).
    """
    schema = ",".join([NAMESPACE, *sorted(str(d) for d in dimensions), SERVICE_DIMENSION])
    search = f"SEARCH('{{{schema}}} MetricName=\"{name}\"', '{statistic}', {int(_PERIOD.to_seconds())})"
    return cloudwatch.MathExpression(expression=search, label=label, period=_PERIOD)


def insights_query(name: MetricName, *, function: str, period: Duration) -> cloudwatch.MathExpression:
    """A Metrics Insights query returning one series: ``function`` (SUM, MAX, ...) of ``name`` per period."""
    return cloudwatch.MathExpression(
        expression=f"SELECT {function}({name}) FROM {NAMESPACE}",
        label=f"{function.lower()} {name}",
        period=period,
    )


def _graph(
    title: str,
    left: Sequence[cloudwatch.IMetric],
    *,
    width: int = 8,
    left_label: str = "",
    annotations: Sequence[cloudwatch.HorizontalAnnotation] = (),
) -> cloudwatch.GraphWidget:
    return cloudwatch.GraphWidget(
        title=title,
        left=list(left),
        width=width,
        height=_GRAPH_HEIGHT,
        left_y_axis=cloudwatch.YAxisProps(label=left_label, min=0, show_units=False),
        left_annotations=list(annotations) or None,
        period=_PERIOD,
    )


def _header(text: str) -> cloudwatch.TextWidget:
    return cloudwatch.TextWidget(markdown=text, width=_FULL_WIDTH, height=2)


class NodesmithMonitoring(Construct):
    """Dashboard plus the controller's alarms (actions are attached by the stack).

    Props (keyword-only):

    ``reconcile_function`` / ``interruption_function``
        The two Lambdas (their built-in Errors, Throttles, Duration and Invocations are shown).
    ``queue`` / ``dead_letter_queue``
        The interruption queue and its DLQ (depth and age of oldest message are shown).
    ``pending_pod_age_threshold``
        The oldest-pending-pod alarm fires when the age stays above this for two minutes.

    Alarms (the stack sends their alarm and OK actions to the optional SNS topic): oldest pending
    pod older than the threshold, reconcile errors, launch failures rate, drains that missed their
    interruption deadline, and errors of either function; the dead-letter queue alarm lives with
    the queue (:class:`~infra.constructs.interruption.Interruption`).
    ``extra_alarms``
        Alarms defined elsewhere (the DLQ alarm) to show in the alarm status widget.

    Attributes: ``dashboard``, ``alarms`` (the alarms created here, in a stable order).
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        reconcile_function: lambda_.IFunction,
        interruption_function: lambda_.IFunction,
        queue: sqs.IQueue,
        dead_letter_queue: sqs.IQueue,
        pending_pod_age_threshold: Duration,
        extra_alarms: Sequence[cloudwatch.IAlarm] = (),
    ) -> None:
        super().__init__(scope, construct_id)
        self.alarms = self._alarms(
            reconcile_function=reconcile_function,
            interruption_function=interruption_function,
            pending_pod_age_threshold=pending_pod_age_threshold,
        )
        threshold_line = cloudwatch.HorizontalAnnotation(
            value=pending_pod_age_threshold.to_seconds(), label="alarm threshold"
        )
        self.dashboard = cloudwatch.Dashboard(self, "Dashboard", default_interval=Duration.hours(3))
        self.dashboard.add_widgets(
            _header("## Capacity and cost\nWhat the cluster costs now, and whether pods are waiting for capacity."),
        )
        self.dashboard.add_widgets(
            _graph(
                "Cluster cost (USD/hour)",
                [
                    search_total(M.CLUSTER_COST_USD_PER_HOUR, statistic="Average", label="cost USD/hour"),
                ],
                width=6,
                left_label="USD/hour",
            ),
            _graph(
                "Pending and scheduled pods",
                [
                    search_total(M.PODS_PENDING, statistic="Maximum", label="pending"),
                    search_total(M.PODS_SCHEDULED, statistic="Sum", label="scheduled per minute"),
                ],
                width=6,
                left_label="pods",
            ),
            _graph(
                "Oldest pending pod (seconds)",
                [
                    search_total(M.OLDEST_PENDING_POD_AGE_SECONDS, statistic="Maximum", aggregate="MAX", label="age"),
                ],
                width=6,
                left_label="seconds",
                annotations=[threshold_line],
            ),
            _graph(
                "NodePool utilisation: requested / allocatable (%)",
                [
                    search_each(
                        M.NODEPOOL_UTILIZATION_PERCENT,
                        dimensions=[D.NODEPOOL, D.RESOURCE],
                        statistic="Average",
                        label="${PROP('Dim.NodePool')} ${PROP('Dim.Resource')}",
                    ),
                ],
                width=6,
                left_label="percent",
            ),
        )
        self.dashboard.add_widgets(_header("## Provisioning\nNodeClaims from creation to an initialized node."))
        self.dashboard.add_widgets(
            _graph(
                "NodeClaim lifecycle (per minute)",
                [
                    search_total(M.NODECLAIMS_CREATED, statistic="Sum", label="created"),
                    search_total(M.NODECLAIMS_LAUNCHED, statistic="Sum", label="launched"),
                    search_total(M.NODECLAIMS_REGISTERED, statistic="Sum", label="registered"),
                    search_total(M.NODECLAIMS_INITIALIZED, statistic="Sum", label="initialized"),
                ],
                left_label="NodeClaims",
            ),
            _graph(
                "Launch failures and unavailable offerings",
                [
                    search_total(M.LAUNCH_FAILURES, statistic="Sum", label="launch failures"),
                    search_total(M.OFFERINGS_MARKED_UNAVAILABLE, statistic="Sum", label="offerings marked unavailable"),
                ],
                left_label="count",
            ),
            _graph(
                "Scheduling duration (seconds)",
                [
                    search_total(M.SCHEDULING_DURATION_SECONDS, statistic="Average", aggregate="AVG", label="average"),
                    search_total(M.SCHEDULING_DURATION_SECONDS, statistic="Maximum", aggregate="MAX", label="maximum"),
                ],
                left_label="seconds",
            ),
        )
        self.dashboard.add_widgets(
            _header(
                "## Interruptions and drains\nEC2 and AWS Health events through the queue, and the drains they start."
            ),
        )
        self.dashboard.add_widgets(
            _graph(
                "Interruption messages (per minute)",
                [
                    search_total(M.INTERRUPTION_MESSAGES_RECEIVED, statistic="Sum", label="received"),
                    search_total(M.INTERRUPTION_MESSAGES_ACKNOWLEDGED, statistic="Sum", label="acknowledged"),
                    search_total(M.INTERRUPTION_MESSAGES_IGNORED, statistic="Sum", label="ignored"),
                    search_total(M.INTERRUPTION_MESSAGES_MALFORMED, statistic="Sum", label="malformed"),
                ],
                width=6,
                left_label="messages",
            ),
            _graph(
                "Interruption queue",
                [
                    queue.metric_approximate_number_of_messages_visible(
                        period=_PERIOD, statistic="Maximum", label="queue depth"
                    ),
                    dead_letter_queue.metric_approximate_number_of_messages_visible(
                        period=_PERIOD, statistic="Maximum", label="dead-letter depth"
                    ),
                ],
                width=6,
                left_label="messages",
            ),
            _graph(
                "Message age (seconds)",
                [
                    queue.metric_approximate_age_of_oldest_message(
                        period=_PERIOD, statistic="Maximum", label="oldest in queue"
                    ),
                    search_total(
                        M.INTERRUPTION_QUEUE_AGE_SECONDS, statistic="Maximum", aggregate="MAX", label="age when handled"
                    ),
                ],
                width=6,
                left_label="seconds",
            ),
            _graph(
                "Drains",
                [
                    search_total(M.NODES_CORDONED, statistic="Sum", label="nodes cordoned"),
                    search_total(M.PODS_EVICTED, statistic="Sum", label="pods evicted"),
                    search_total(M.PODS_BLOCKED_BY_PDB, statistic="Sum", label="evictions blocked by PDB"),
                    search_total(M.PODS_FORCE_DELETED, statistic="Sum", label="pods force-deleted"),
                ],
                width=6,
                left_label="count",
            ),
        )
        self.dashboard.add_widgets(
            _graph(
                "Drain duration (seconds)",
                [
                    search_total(M.DRAIN_DURATION_SECONDS, statistic="Average", aggregate="AVG", label="average"),
                    search_total(M.DRAIN_DURATION_SECONDS, statistic="Maximum", aggregate="MAX", label="maximum"),
                ],
                width=16,
                left_label="seconds",
            ),
            _graph(
                "Drains that missed the interruption deadline",
                [
                    search_total(M.DRAINS_MISSED_DEADLINE, statistic="Sum", label="missed deadlines"),
                ],
                width=8,
                left_label="drains",
            ),
        )
        self.dashboard.add_widgets(_header("## Disruption\nNodes removed or replaced, and what that saves."))
        self.dashboard.add_widgets(
            _graph(
                "Disruption decisions and terminations (per minute)",
                [
                    search_total(M.DISRUPTION_DECISIONS, statistic="Sum", label="decisions"),
                    search_total(M.NODECLAIMS_TERMINATED, statistic="Sum", label="NodeClaims terminated"),
                ],
                width=12,
                left_label="count",
            ),
            _graph(
                "Savings from disruption (USD/hour)",
                [
                    search_total(M.DISRUPTION_SAVINGS_USD_PER_HOUR, statistic="Sum", label="savings USD/hour"),
                ],
                width=12,
                left_label="USD/hour",
            ),
        )
        self.dashboard.add_widgets(
            _header("## Controller health\nReconcile passes, Lambda errors and throttles, and every alarm."),
        )
        self.dashboard.add_widgets(
            _graph(
                "Reconcile duration (seconds)",
                [
                    search_total(M.RECONCILE_DURATION_SECONDS, statistic="Average", aggregate="AVG", label="average"),
                    search_total(M.RECONCILE_DURATION_SECONDS, statistic="Maximum", aggregate="MAX", label="maximum"),
                ],
                width=6,
                left_label="seconds",
            ),
            _graph(
                "Errors (per minute)",
                [
                    search_total(M.RECONCILE_ERRORS, statistic="Sum", label="reconcile errors (handled)"),
                    reconcile_function.metric_errors(period=_PERIOD, label="reconcile Lambda errors"),
                    interruption_function.metric_errors(period=_PERIOD, label="interruption Lambda errors"),
                ],
                width=6,
                left_label="count",
            ),
            _graph(
                "Invocations and throttles (per minute)",
                [
                    reconcile_function.metric_invocations(period=_PERIOD, label="reconcile invocations"),
                    reconcile_function.metric_throttles(period=_PERIOD, label="reconcile throttles"),
                    interruption_function.metric_invocations(period=_PERIOD, label="interruption invocations"),
                    interruption_function.metric_throttles(period=_PERIOD, label="interruption throttles"),
                ],
                width=6,
                left_label="count",
            ),
            cloudwatch.AlarmStatusWidget(
                title="Alarms",
                alarms=[*self.alarms, *extra_alarms],
                width=6,
                height=_GRAPH_HEIGHT,
            ),
        )

    def _alarms(
        self,
        *,
        reconcile_function: lambda_.IFunction,
        interruption_function: lambda_.IFunction,
        pending_pod_age_threshold: Duration,
    ) -> list[cloudwatch.Alarm]:
        """Create the alarms; each description says what it means and where to look first."""
        at_least = cloudwatch.ComparisonOperator.GREATER_THAN_OR_EQUAL_TO_THRESHOLD
        not_breaching = cloudwatch.TreatMissingData.NOT_BREACHING
        return [
            cloudwatch.Alarm(
                self,
                "OldestPendingPodAge",
                alarm_description=(
                    f"A pod has waited more than {int(pending_pod_age_threshold.to_seconds())} s for capacity. "
                    "Check LaunchFailures, NodePool limits and requirements, and the reconcile logs."
                ),
                metric=insights_query(M.OLDEST_PENDING_POD_AGE_SECONDS, function="MAX", period=_PERIOD),
                threshold=pending_pod_age_threshold.to_seconds(),
                comparison_operator=cloudwatch.ComparisonOperator.GREATER_THAN_THRESHOLD,
                evaluation_periods=2,
                datapoints_to_alarm=2,
                treat_missing_data=not_breaching,
            ),
            cloudwatch.Alarm(
                self,
                "ReconcileErrors",
                alarm_description=(
                    "Reconcile passes are failing in 3 of the last 5 minutes: provisioning and disruption may "
                    "have stopped. Check the reconcile function's logs and traces."
                ),
                metric=insights_query(M.RECONCILE_ERRORS, function="SUM", period=_PERIOD),
                threshold=1,
                comparison_operator=at_least,
                evaluation_periods=5,
                datapoints_to_alarm=3,
                treat_missing_data=not_breaching,
            ),
            cloudwatch.Alarm(
                self,
                "LaunchFailures",
                alarm_description=(
                    "At least 5 launches failed in each of two 5-minute windows out of three: capacity errors "
                    "across many offerings, quotas, or IAM/launch-template problems. Check the reasons in logs."
                ),
                metric=insights_query(M.LAUNCH_FAILURES, function="SUM", period=Duration.minutes(5)),
                threshold=5,
                comparison_operator=at_least,
                evaluation_periods=3,
                datapoints_to_alarm=2,
                treat_missing_data=not_breaching,
            ),
            cloudwatch.Alarm(
                self,
                "DrainsMissedDeadline",
                alarm_description=(
                    "A drain did not finish before its interruption deadline: EC2 reclaimed the instance with "
                    "pods still on it, past their PodDisruptionBudgets. Check PodsBlockedByPDB, long "
                    "terminationGracePeriodSeconds, do-not-disrupt pods and InterruptionQueueAgeSeconds."
                ),
                metric=insights_query(M.DRAINS_MISSED_DEADLINE, function="SUM", period=Duration.minutes(5)),
                threshold=1,
                comparison_operator=at_least,
                evaluation_periods=1,
                datapoints_to_alarm=1,
                treat_missing_data=not_breaching,
            ),
            cloudwatch.Alarm(
                self,
                "ReconcileFunctionErrors",
                alarm_description="The reconcile Lambda raised (or timed out) in 3 of the last 5 minutes.",
                metric=reconcile_function.metric_errors(period=_PERIOD, statistic="Sum"),
                threshold=1,
                comparison_operator=at_least,
                evaluation_periods=5,
                datapoints_to_alarm=3,
                treat_missing_data=not_breaching,
            ),
            cloudwatch.Alarm(
                self,
                "InterruptionFunctionErrors",
                alarm_description=(
                    "The interruption Lambda failed whole batches in 2 of the last 3 minutes; messages are "
                    "retried, then dead-lettered."
                ),
                metric=interruption_function.metric_errors(period=_PERIOD, statistic="Sum"),
                threshold=1,
                comparison_operator=at_least,
                evaluation_periods=3,
                datapoints_to_alarm=2,
                treat_missing_data=not_breaching,
            ),
        ]
