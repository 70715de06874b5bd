"""Log keys scoped to a unit of work, for every line logged inside it, in whichever thread it runs.

A batch of interruptions is worked in a thread pool, one task per (message, instance); a line a
service logs in a task must name *that* interruption (``event_id``, ``instance_id``, ``node``,
``nodeclaim``), not the whole batch. :func:`log_context` sets the keys for the code it wraps (a
:class:`contextvars.ContextVar`, so each thread and each task has its own), and
:func:`current_log_keys` is what a logging filter adds to each record: the handlers install one on
the Powertools handler (:mod:`nodesmith.handlers.observability`). Standard library only: services
do not import Powertools.
"""

from __future__ import annotations

from contextlib import contextmanager
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Iterator, Mapping

__all__ = ["current_log_keys", "log_context"]

_KEYS: ContextVar[Mapping[str, Any] | None] = ContextVar("nodesmith_log_keys", default=None)


@contextmanager
def log_context(**keys: Any) -> Iterator[None]:
    """Add ``keys`` to every log line inside the ``with`` block (this thread / task only).

    Nested blocks merge over the outer keys; a key given as ``None`` (or empty) is dropped for the
    block, so a per-instance block can drop the batch's ``event_ids`` list. The outer keys are back
    when the block exits, even on an exception.
    """
    merged = {**(_KEYS.get() or {}), **keys}
    token = _KEYS.set({k: v for k, v in merged.items() if v not in (None, "", [])})
    try:
        yield
    finally:
        _KEYS.reset(token)


def current_log_keys() -> Mapping[str, Any]:
    """The keys of the innermost :func:`log_context` of this thread / task (empty outside any)."""
    return _KEYS.get() or {}
