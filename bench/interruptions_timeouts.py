"""Lambda's function timeout for the bench's invocations, which are threads (``bench/interruptions.py``):
which invocation a thread works for, which invocations are past their timeout, and the patches that make
every AWS and Kubernetes call of such an invocation raise :class:`LambdaKilled`."""

from __future__ import annotations

import sys
import threading
from collections import Counter
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from types import FrameType


class LambdaKilled(BaseException):
    """The bench's stand-in for Lambda killing an invocation mid-drain (timeout, out of memory): a
    BaseException, so no handler code catches it and SQS delivers the invocation's records again."""


_INVOCATION = threading.local()
"""``id``: the invocation the current thread works for (its pool threads inherit it, see :func:`install_timeouts`)."""
_TIMED_OUT: set[int] = set()
"""Invocations past the function timeout: every AWS or Kubernetes call they still make raises :class:`LambdaKilled`."""


CUT_OFF_IN: Counter[str] = Counter()
"""Where the invocations ended at the timeout were: the innermost ``nodesmith`` functions of the first call each
made after it (``services.drain.drain_node < ...``), so the bench can say which phase runs past the timeout."""
_CUT: set[int] = set()


def _where() -> str:
    frame: FrameType | None = sys._getframe(2)
    names: list[str] = []
    while frame is not None and len(names) < 3:
        module = frame.f_globals.get("__name__", "")
        if module.startswith("nodesmith."):
            names.append(f"{module.removeprefix('nodesmith.')}.{frame.f_code.co_name}")
        frame = frame.f_back
    return " < ".join(names) or "outside nodesmith"


def _check_alive() -> None:
    invocation = getattr(_INVOCATION, "id", None)
    if invocation is not None and invocation in _TIMED_OUT:
        if invocation not in _CUT:
            _CUT.add(invocation)
            CUT_OFF_IN[_where()] += 1
        raise LambdaKilled(f"invocation {invocation} ran past the function timeout")


def install_timeouts() -> None:
    """Lambda's function timeout for invocations that are threads: once an invocation is past it, every
    AWS call (boto3) and Kubernetes call (the adapter's ``KubeRest``) made for it raises
    :class:`LambdaKilled`, from its own thread or from any pool thread it started (``ThreadPoolExecutor.submit``
    hands the invocation on), so nothing of it reaches AWS or the cluster after its timeout, as after Lambda
    ends it. Python cannot stop a thread, so it unwinds at its next call instead."""
    from concurrent.futures import ThreadPoolExecutor

    from botocore.client import BaseClient

    from nodesmith.adapters.kube.calls import KubeRest

    submit, api_call, request = ThreadPoolExecutor.submit, BaseClient._make_api_call, KubeRest.request

    def inheriting_submit(self: Any, fn: Any, /, *args: Any, **kwargs: Any) -> Any:
        invocation = getattr(_INVOCATION, "id", None)
        if invocation is None:
            return submit(self, fn, *args, **kwargs)

        def run(*a: Any, **k: Any) -> Any:
            _INVOCATION.id = invocation
            try:
                return fn(*a, **k)
            finally:
                _INVOCATION.id = None

        return submit(self, run, *args, **kwargs)

    def checked_api_call(self: Any, operation: str, params: Any) -> Any:
        _check_alive()
        return api_call(self, operation, params)

    def checked_request(self: Any, *args: Any, **kwargs: Any) -> Any:
        _check_alive()
        return request(self, *args, **kwargs)

    ThreadPoolExecutor.submit = inheriting_submit  # type: ignore[method-assign]
    BaseClient._make_api_call = checked_api_call
    KubeRest.request = checked_request  # type: ignore[method-assign]
