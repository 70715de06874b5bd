"""The CloudWatch expressions the dashboard and alarms read Nodesmith's custom metrics with.

``SEARCH`` in graphs (several per graph allowed): :func:`search_total` aggregates every series of a name,
:func:`search_each` draws one line per series of an exact dimension schema, :func:`search_where` the same
limited to some dimension values. Metrics Insights ``SELECT`` in alarms (alarms cannot use ``SEARCH``):
:func:`insights_query`. Names come only from :class:`infra.metric_names.MetricName`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from aws_cdk import Duration
from aws_cdk import aws_cloudwatch as cloudwatch

from infra.metric_names import NAMESPACE

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

    from infra.metric_names import Dimension, MetricName

__all__ = ["PERIOD", "SERVICE_DIMENSION", "insights_query", "search_each", "search_total", "search_where"]

PERIOD = Duration.minutes(1)
"""The period of every graph and search (one minute)."""
_PERIOD = PERIOD

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


def search_where(
    name: MetricName,
    *,
    dimensions: Sequence[Dimension],
    where: Mapping[Dimension, str],
    statistic: str,
    label: str,
) -> cloudwatch.MathExpression:
    """:func:`search_each` limited to the series whose dimensions have the values in ``where``
    (``Reason="Unhealthy"``, say): one line per remaining breakdown."""
    schema = ",".join([NAMESPACE, *sorted(str(d) for d in dimensions), SERVICE_DIMENSION])
    terms = " ".join(f'{d}="{v}"' for d, v in sorted(where.items()))
    search = f"SEARCH('{{{schema}}} MetricName=\"{name}\" {terms}', '{statistic}', {int(_PERIOD.to_seconds())})"
    return cloudwatch.MathExpression(expression=search, label=label, period=_PERIOD)


def insights_query(name: MetricName, *, function: str, period: Duration) -> cloudwatch.MathExpression:
    """A Metrics Insights query returning one series: ``function`` (SUM, MAX, ...) of ``name`` per period."""
    return cloudwatch.MathExpression(
        expression=f"SELECT {function}({name}) FROM {NAMESPACE}",
        label=f"{function.lower()} {name}",
        period=period,
    )
