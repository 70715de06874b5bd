"""The Nodesmith CloudWatch dashboard, and the construct that puts it and the controller's alarms together.

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

from typing import TYPE_CHECKING, Any, Protocol

from aws_cdk import Duration
from aws_cdk import aws_cloudwatch as cloudwatch
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_sqs as sqs
from constructs import Construct

from infra.constructs.alarms import controller_alarms
from infra.constructs.metric_queries import (
    PERIOD,
    SERVICE_DIMENSION,
    insights_query,
    search_each,
    search_total,
    search_where,
)
from infra.metric_names import BREAKDOWNS, Dimension, MetricName

if TYPE_CHECKING:
    from collections.abc import Sequence

__all__ = ["SERVICE_DIMENSION", "NodesmithMonitoring", "QueueConsumer", "insights_query", "search_each", "search_total"]

_PERIOD = PERIOD
_FULL_WIDTH = 24
_GRAPH_HEIGHT = 6

M = MetricName
D = Dimension


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


def _sums(title: str, *series: tuple[MetricName, str], width: int = 8, unit: str = "count") -> cloudwatch.GraphWidget:
    """A graph of counts: one line per ``(metric, label)``, each summed per minute over every series."""
    return _graph(
        title,
        [search_total(name, statistic="Sum", label=label) for name, label in series],
        width=width,
        left_label=unit,
    )


def _durations(title: str, name: MetricName, *, width: int = 8) -> cloudwatch.GraphWidget:
    """A graph of a duration in seconds: the average and the maximum per minute."""
    return _graph(
        title,
        [
            search_total(name, statistic="Average", aggregate="AVG", label="average"),
            search_total(name, statistic="Maximum", aggregate="MAX", label="maximum"),
        ],
        width=width,
        left_label="seconds",
    )


def _breakdown(
    title: str, name: MetricName, *, label: str, statistic: str = "Sum", width: int = 8, unit: str = "count"
) -> cloudwatch.GraphWidget:
    """One line per series of ``name`` under its breakdown dimensions (:data:`infra.metric_names.BREAKDOWNS`)."""
    return _graph(
        title,
        [search_each(name, dimensions=sorted(BREAKDOWNS[name]), statistic=statistic, label=label)],
        width=width,
        left_label=unit,
    )


def _node_repair_widget() -> cloudwatch.GraphWidget:
    """Node repair (feature gate ``NodeRepair``): repair commands started, and the unhealthy NodeClaims
    terminated (reason ``Unhealthy``, Karpenter's ``nodeclaims_disrupted_total{reason="unhealthy"}``) per
    NodePool and capacity type."""
    return _graph(
        "Node repair: commands and unhealthy NodeClaims terminated",
        [
            search_where(
                M.DISRUPTION_DECISIONS,
                dimensions=sorted(BREAKDOWNS[M.DISRUPTION_DECISIONS]),
                where={Dimension.METHOD: "repair"},
                statistic="Sum",
                label="repair commands",
            ),
            search_where(
                M.NODECLAIMS_TERMINATED,
                dimensions=sorted(BREAKDOWNS[M.NODECLAIMS_TERMINATED]),
                where={Dimension.REASON: "Unhealthy"},
                statistic="Sum",
                label="terminated Unhealthy ${PROP('Dim.NodePool')} ${PROP('Dim.CapacityType')}",
            ),
        ],
        width=_FULL_WIDTH,
        left_label="count",
    )


def _header(text: str) -> cloudwatch.TextWidget:
    return cloudwatch.TextWidget(markdown=text, width=_FULL_WIDTH, height=2)


_BY_POOL = "${PROP('Dim.NodePool')} ${PROP('Dim.CapacityType')}"
"""Dynamic label of a (NodePool, capacity type) series."""

_NODECLAIM_STAGES = (
    ("created", M.NODECLAIMS_CREATED),
    ("launched", M.NODECLAIMS_LAUNCHED),
    ("registered", M.NODECLAIMS_REGISTERED),
    ("initialized", M.NODECLAIMS_INITIALIZED),
)
"""A NodeClaim's way to a node, in order: (label, metric)."""


class QueueConsumer(Protocol):
    """A Lambda fed by an SQS queue with a dead-letter queue (:class:`~infra.constructs.interruption.Interruption`,
    :class:`~infra.constructs.termination.Termination`)."""

    @property
    def function(self) -> lambda_.IFunction: ...

    @property
    def queue(self) -> sqs.IQueue: ...

    @property
    def dead_letter_queue(self) -> sqs.IQueue: ...


class NodesmithMonitoring(Construct):
    """Dashboard plus the controller's alarms (actions are attached by the stack).

    Props (keyword-only):

    ``reconcile_function``
        The reconcile Lambda.
    ``interruption`` / ``termination``
        The interruption and termination Lambdas with their queues and DLQs (:class:`QueueConsumer`). For the three
        Lambdas, their built-in Errors, Throttles and Invocations are shown; for the interruption queue, its depth and
        age of oldest message; for the termination queue, requests waiting, requests in flight (nodes between two
        drain rounds: a request waiting out its backoff is in flight) and dead-lettered requests.
    ``pending_pod_age_threshold``
        The oldest-pending-pod alarm fires when the age stays above this for two minutes.
    ``extra_alarms``
        Alarms defined elsewhere (the DLQ alarms) to show in the alarm status widget.

    Alarms (:func:`~infra.constructs.alarms.controller_alarms`; the stack sends their alarm and OK actions to the
    optional SNS topic): oldest pending pod older than the threshold, reconcile errors, launch failures rate, drains
    that missed their deadline, and errors of each function; the dead-letter queue alarms live with
    their queues (:class:`~infra.constructs.interruption.Interruption`,
    :class:`~infra.constructs.termination.Termination`).

    Attributes: ``dashboard``, ``alarms`` (the alarms created here, in a stable order).
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        reconcile_function: lambda_.IFunction,
        interruption: QueueConsumer,
        termination: QueueConsumer,
        pending_pod_age_threshold: Duration,
        extra_alarms: Sequence[cloudwatch.IAlarm] = (),
    ) -> None:
        super().__init__(scope, construct_id)
        functions = {
            "reconcile": reconcile_function,
            "interruption": interruption.function,
            "termination": termination.function,
        }
        interruption_queue, interruption_dead_letter_queue = interruption.queue, interruption.dead_letter_queue
        termination_queue, termination_dead_letter_queue = termination.queue, termination.dead_letter_queue
        self.alarms = controller_alarms(self, functions=functions, pending_pod_age_threshold=pending_pod_age_threshold)
        threshold_line = cloudwatch.HorizontalAnnotation(
            value=pending_pod_age_threshold.to_seconds(), label="alarm threshold"
        )
        self.dashboard = cloudwatch.Dashboard(self, "Dashboard", default_interval=Duration.hours(3))
        add = self.dashboard.add_widgets
        peak: dict[str, Any] = {"period": _PERIOD, "statistic": "Maximum"}  # per minute, for SQS gauges
        add(_header("## Capacity and cost\nWhat the cluster costs now, per NodePool, and whether pods are waiting."))
        add(
            _graph(
                "Cluster cost (USD/hour)",
                [search_total(M.CLUSTER_COST_USD_PER_HOUR, statistic="Average", label="cost USD/hour")],
                width=6,
                left_label="USD/hour",
            ),
            _breakdown(
                "Cost per NodePool and capacity type (USD/hour)",
                M.NODEPOOL_COST_USD_PER_HOUR,
                label=_BY_POOL,
                statistic="Average",
                width=6,
                unit="USD/hour",
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
                [search_total(M.OLDEST_PENDING_POD_AGE_SECONDS, statistic="Maximum", aggregate="MAX", label="age")],
                width=6,
                left_label="seconds",
                annotations=[threshold_line],
            ),
        )
        add(
            _breakdown(
                "NodePool utilisation: requested / allocatable (%)",
                M.NODEPOOL_UTILIZATION_PERCENT,
                label="${PROP('Dim.NodePool')} ${PROP('Dim.Resource')}",
                statistic="Average",
                width=_FULL_WIDTH,
                unit="percent",
            ),
        )
        add(_header("## Provisioning\nNodeClaims from creation to an initialized node, per NodePool."))
        add(
            _sums(
                "NodeClaim lifecycle (per minute)",
                *((name, stage) for stage, name in _NODECLAIM_STAGES),
                unit="NodeClaims",
            ),
            _sums(
                "Launch failures and unavailable offerings",
                (M.LAUNCH_FAILURES, "launch failures"),
                (M.OFFERINGS_MARKED_UNAVAILABLE, "offerings marked unavailable"),
            ),
            _durations("Scheduling duration (seconds)", M.SCHEDULING_DURATION_SECONDS),
        )
        add(
            *(
                _breakdown(f"NodeClaims {stage} by NodePool and capacity type", name, label=_BY_POOL, width=6)
                for stage, name in _NODECLAIM_STAGES
            )
        )
        add(
            _header(
                "## Interruptions and drains\nEC2 and AWS Health events through the interruption queue, and the "
                "termination requests that drain nodes one round per delivery through the termination queue."
            ),
        )
        add(
            _sums(
                "Interruption messages (per minute)",
                (M.INTERRUPTION_MESSAGES_RECEIVED, "received"),
                (M.INTERRUPTION_MESSAGES_ACKNOWLEDGED, "acknowledged"),
                (M.INTERRUPTION_MESSAGES_IGNORED, "ignored"),
                (M.INTERRUPTION_MESSAGES_MALFORMED, "malformed"),
                width=6,
                unit="messages",
            ),
            _graph(
                "Interruption queue",
                [
                    interruption_queue.metric_approximate_number_of_messages_visible(**peak, label="queue depth"),
                    interruption_dead_letter_queue.metric_approximate_number_of_messages_visible(
                        **peak, label="dead-letter depth"
                    ),
                ],
                width=6,
                left_label="messages",
            ),
            _graph(
                "Message age (seconds)",
                [
                    interruption_queue.metric_approximate_age_of_oldest_message(**peak, label="oldest in queue"),
                    search_total(
                        M.INTERRUPTION_QUEUE_AGE_SECONDS, statistic="Maximum", aggregate="MAX", label="age when handled"
                    ),
                ],
                width=6,
                left_label="seconds",
            ),
            _breakdown(
                "Interruption messages ignored, by reason",
                M.INTERRUPTION_MESSAGES_IGNORED,
                label="${PROP('Dim.Reason')}",
                width=6,
                unit="messages",
            ),
        )
        add(
            _graph(
                "Termination queue",
                [
                    termination_queue.metric_approximate_number_of_messages_visible(**peak, label="waiting"),
                    termination_queue.metric_approximate_number_of_messages_not_visible(
                        **peak, label="in flight (draining)"
                    ),
                    termination_dead_letter_queue.metric_approximate_number_of_messages_visible(
                        **peak, label="dead-lettered"
                    ),
                ],
                width=6,
                left_label="requests",
            ),
            _sums(
                "Termination requests not acted on (per minute)",
                (M.TERMINATION_REQUESTS_IGNORED, "ignored"),
                (M.TERMINATION_REQUESTS_MALFORMED, "malformed"),
                width=6,
                unit="requests",
            ),
            _breakdown(
                "Termination requests ignored, by reason",
                M.TERMINATION_REQUESTS_IGNORED,
                label="${PROP('Dim.Reason')}",
                width=6,
                unit="requests",
            ),
            _sums(
                "Drains",
                (M.NODES_CORDONED, "nodes cordoned"),
                (M.PODS_EVICTED, "pods evicted"),
                (M.PODS_BLOCKED_BY_PDB, "evictions blocked by PDB"),
                (M.PODS_FORCE_DELETED, "pods force-deleted"),
                width=6,
            ),
        )
        add(
            _durations("Drain duration (seconds)", M.DRAIN_DURATION_SECONDS, width=16),
            _sums(
                "Drains that missed their deadline",
                (M.DRAINS_MISSED_DEADLINE, "missed deadlines"),
                unit="drains",
            ),
        )
        add(_header("## Disruption\nNodes removed or replaced, why, and what that saves."))
        add(
            _sums(
                "Disruption decisions and terminations (per minute)",
                (M.DISRUPTION_DECISIONS, "decisions"),
                (M.NODECLAIMS_TERMINATED, "NodeClaims terminated"),
            ),
            _breakdown(
                "NodeClaims terminated by reason, NodePool and capacity type",
                M.NODECLAIMS_TERMINATED,
                label="${PROP('Dim.Reason')} ${PROP('Dim.NodePool')} ${PROP('Dim.CapacityType')}",
                unit="NodeClaims",
            ),
            _sums(
                "Savings from disruption (USD/hour)",
                (M.DISRUPTION_SAVINGS_USD_PER_HOUR, "savings USD/hour"),
                unit="USD/hour",
            ),
        )
        add(_node_repair_widget())
        add(_header("## Controller health\nReconcile passes, Lambda errors and throttles, and every alarm."))
        add(
            _durations("Reconcile duration (seconds)", M.RECONCILE_DURATION_SECONDS, width=6),
            _graph(
                "Errors (per minute)",
                [
                    search_total(M.RECONCILE_ERRORS, statistic="Sum", label="reconcile errors (handled)"),
                    *(
                        function.metric_errors(period=_PERIOD, label=f"{name} Lambda errors")
                        for name, function in functions.items()
                    ),
                ],
                width=6,
                left_label="count",
            ),
            _graph(
                "Invocations and throttles (per minute)",
                [
                    metric
                    for name, function in functions.items()
                    for metric in (
                        function.metric_invocations(period=_PERIOD, label=f"{name} invocations"),
                        function.metric_throttles(period=_PERIOD, label=f"{name} throttles"),
                    )
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
