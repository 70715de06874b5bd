"""What the handler tests share: the port fakes of ``tests/services/interruption_fakes.py`` (loaded by path: the
test folders are not packages), and invoking a handler while reading what it printed (its JSON log lines and EMF
metric documents, as CloudWatch Logs would get them)."""

from __future__ import annotations

import contextlib
import importlib.util
import io
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Callable


def _load() -> Any:
    name = "nodesmith_tests_interruption_fakes"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(
            name, Path(__file__).parents[1] / "services" / "interruption_fakes.py"
        )
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


fakes = _load()


def run_handler(
    handler: Callable[[dict[str, Any], Any], Any], event: dict[str, Any], context: Any
) -> tuple[Any, list[dict[str, Any]]]:
    """Invoke ``handler``; returns its response and the JSON documents it printed (log lines and EMF)."""
    from nodesmith.handlers.observability import logger

    out = io.StringIO()
    stream_handler = logger.registered_handler
    stream, stream_handler.stream = stream_handler.stream, out  # type: ignore[attr-defined]
    try:
        with contextlib.redirect_stdout(out):
            response = handler(event, context)
    finally:
        stream_handler.stream = stream  # type: ignore[attr-defined]
    return response, [json.loads(line) for line in out.getvalue().splitlines() if line.startswith("{")]


def points(docs: list[dict[str, Any]], name: str) -> list[tuple[float, dict[str, str]]]:
    """(value, breakdown dimensions) of every EMF data point of metric ``name``."""
    found = []
    for doc in docs:
        if "_aws" in doc and name in doc:
            dims = {d: doc[d] for d in doc["_aws"]["CloudWatchMetrics"][0]["Dimensions"][0] if d != "service"}
            found += [(float(v), dims) for v in (doc[name] if isinstance(doc[name], list) else [doc[name]])]
    return found
