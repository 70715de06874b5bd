"""The one set of Powertools instances every Nodesmith Lambda uses: logger, tracer, metrics.

Import these; never create another ``Logger``, ``Tracer`` or ``Metrics``. ``Metrics`` emits
CloudWatch embedded metric format in namespace ``Nodesmith`` with the ``service`` dimension from
``POWERTOOLS_SERVICE_NAME`` (set per function by the stack); metric names are those of
``infra/metric_names.py``. :func:`emit` (and its shorthand :func:`count_by`) emits one data point
under ``service`` plus its own breakdown dimensions (``NodePool``, ``Reason``, ...) so no point is
counted twice across dimension sets.

Logs: the logger is named ``nodesmith``, so the standard-library loggers of the services and
adapters (``nodesmith.services.*``) propagate to its handler and are formatted as the same JSON,
with the same keys. :func:`log_keys` appends the keys that let one interruption be followed end to
end (``event_id``, ``instance_id``, ``node``, ``nodeclaim``) to every line that follows and
annotates the X-Ray trace with them; a line's own ``extra=`` keys win.

Creating these does no I/O: the tracer only patches clients when running inside Lambda with
tracing enabled.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from aws_lambda_powertools import Logger, Metrics, Tracer
from aws_lambda_powertools.metrics import MetricUnit, single_metric

if TYPE_CHECKING:
    from collections.abc import Mapping

__all__ = ["TRACE_KEYS", "MetricUnit", "count_by", "emit", "log_keys", "logger", "metrics", "tracer"]

NAMESPACE = "Nodesmith"

TRACE_KEYS = ("event_id", "instance_id", "node", "nodeclaim")
"""Log keys (and X-Ray annotations) that identify one interruption across every line it causes."""


logger = Logger(service="nodesmith")
tracer = Tracer()
metrics = Metrics(namespace=NAMESPACE)


def emit(name: str, value: float, *, unit: MetricUnit, dimensions: Mapping[str, str]) -> None:
    """Emit ``name`` = ``value`` (in ``unit``) once, under ``service`` plus ``dimensions``.

    Flushed immediately as its own EMF document (Powertools ``single_metric``), because the shared
    ``metrics`` object carries one dimension set for everything it flushes. Empty dimension values
    become ``unknown`` (CloudWatch rejects empty values). Nothing is printed when metrics are disabled
    (``POWERTOOLS_METRICS_DISABLED``, as the shared ``metrics`` object honours it; ``single_metric`` does not).
    """
    from aws_lambda_powertools.metrics.functions import is_metrics_disabled

    if is_metrics_disabled():
        return
    defaults = {"service": metrics.service} if getattr(metrics, "service", None) else None
    with single_metric(name=name, unit=unit, value=value, namespace=NAMESPACE, default_dimensions=defaults) as metric:
        for key, dim_value in dimensions.items():
            metric.add_dimension(name=key, value=dim_value or "unknown")


def count_by(name: str, *, dimension: str, value: str, count: float = 1.0, unit: MetricUnit = MetricUnit.Count) -> None:
    """Emit ``name`` (``count`` in ``unit``) once, under ``service`` plus ``dimension=value`` (see :func:`emit`)."""
    emit(name, count, unit=unit, dimensions={dimension: value})


def log_keys(**keys: str | None) -> None:
    """Add ``keys`` (those of :data:`TRACE_KEYS`, or others) to every following log line of this invocation.

    ``None`` and empty values are skipped. The keys of :data:`TRACE_KEYS` also become X-Ray
    annotations of the current trace (searchable: ``annotation.event_id = "..."``); with tracing
    disabled that is a no-op. The handlers' ``inject_lambda_context(clear_state=True)`` drops the
    keys at the start of the next invocation.
    """
    present = {key: value for key, value in keys.items() if value}
    if not present:
        return
    logger.append_keys(**present)
    for key in TRACE_KEYS:
        if key in present:
            tracer.put_annotation(key=key, value=str(present[key]))
