"""The one set of Powertools instances every Nodesmith Lambda uses: logger, tracer, metrics.

Import these; never create another ``Logger``, ``Tracer`` or ``Metrics``. ``Metrics`` emits
CloudWatch embedded metric format in namespace ``Nodesmith`` with the ``service`` dimension from
``POWERTOOLS_SERVICE_NAME`` (set per function by the stack); metric names are those of
``infra/metric_names.py``. :func:`count_by` emits one data point under a single extra dimension
(``MessageType``, ``Reason``) so no point is counted twice across dimension sets.

Creating these does no I/O: the tracer only patches clients when running inside Lambda with
tracing enabled.
"""

from __future__ import annotations

from aws_lambda_powertools import Logger, Metrics, Tracer
from aws_lambda_powertools.metrics import MetricUnit, single_metric

__all__ = ["MetricUnit", "count_by", "logger", "metrics", "tracer"]

NAMESPACE = "Nodesmith"

logger = Logger(service="nodesmith")
tracer = Tracer()
metrics = Metrics(namespace=NAMESPACE)


def count_by(name: str, *, dimension: str, value: str, count: float = 1.0, unit: MetricUnit = MetricUnit.Count) -> None:
    """Emit ``name`` (``count`` in ``unit``) once, under ``service`` plus ``dimension=value``.

    Flushed immediately as its own EMF document (Powertools ``single_metric``), because the shared
    ``metrics`` object carries one dimension set for everything it flushes.
    """
    defaults = {"service": metrics.service} if getattr(metrics, "service", None) else None
    with single_metric(name=name, unit=unit, value=count, namespace=NAMESPACE, default_dimensions=defaults) as metric:
        metric.add_dimension(name=dimension, value=value or "unknown")
