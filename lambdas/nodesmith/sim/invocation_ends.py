"""How Lambda ends an invocation, for the embedded runtime (:mod:`nodesmith.sim.lambda_runtime`): its timeout, a
crash, and the faults that make either happen at a random point of an invocation.

Lambda ends an invocation at its timeout; Python cannot stop a thread. :func:`install_function_timeouts` makes
every AWS call (botocore) and Kubernetes call (the adapter's ``KubeRest``) of an invocation past its timeout
raise :class:`LambdaKilled` instead, from its thread or any pool thread it started, so nothing of it reaches
AWS or the cluster afterwards. :func:`kill_invocation` ends the running invocation the same way at once (a runtime
that crashed mid-work); :func:`inject_crashes` makes a share of invocations crash so, or run into their timeout,
at a random point (:class:`Crashes`). ``invocation(timeout)`` runs a block as one invocation; :func:`returned`
says whether its answer reaches Lambda.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import random
import threading
from typing import TYPE_CHECKING, Any, Literal, NoReturn

if TYPE_CHECKING:
    from collections.abc import Iterator

__all__ = [
    "Crashes",
    "LambdaKilled",
    "ended_by",
    "inject_crashes",
    "install_function_timeouts",
    "invocation",
    "kill_invocation",
    "returned",
]


class LambdaKilled(BaseException):
    """An invocation ended by Lambda (its timeout): a BaseException, so no handler code catches it."""


LOG = logging.getLogger(__name__)

_INVOCATION = threading.local()
_TIMED_OUT: set[int] = set()
_IDS = itertools.count(1)
_KILLED: set[int] = set()
_RAN_OUT: set[int] = set()
"""Invocations a :class:`Crashes` fault made run into their timeout (told apart from ones that were too slow)."""
_INSTALLED: list[bool] = []


class Crashes:
    """Invocations that crash or run into their timeout at a random point: with :func:`install_function_timeouts`
    installed, each invocation is drawn once as it starts, from ``random.Random(seed)``. With chance ``rate`` it
    crashes (:func:`kill_invocation`, as a runtime that died mid-work: out of memory, a segfault in a native
    library), with chance ``timeouts`` it runs into its timeout (a dependency that hung, a burst larger than it can
    work through). Either strikes at the invocation's k-th AWS or Kubernetes call, k uniform in ``1..spread``, or
    as it returns when it makes fewer calls (its answer never reaches Lambda). Thread-safe; :attr:`injected`
    counts the crashes, :attr:`timeouts_injected` the timeouts, both as they strike. Raises ``ValueError`` when a
    chance or their sum is outside 0..1, or ``spread`` is below 1."""

    def __init__(self, *, rate: float, seed: int = 0, timeouts: float = 0.0, spread: int = 50) -> None:
        for what, value in (
            ("crash rate", rate),
            ("timeout rate", timeouts),
            ("crash + timeout rate", rate + timeouts),
        ):
            if not 0.0 <= value <= 1.0:
                raise ValueError(f"{what} {value} is outside 0..1")
        if spread < 1:
            raise ValueError(f"spread {spread} is below 1 call")
        self.rate, self.timeouts, self.spread = rate, timeouts, spread
        self._rng, self._lock = random.Random(seed), threading.Lock()
        self.injected = self.timeouts_injected = 0

    def plan(self) -> tuple[Literal["crash", "timeout"], int] | None:
        """What ends an invocation that starts now, and at which of its calls (1-based), or None: one draw."""
        with self._lock:
            roll = self._rng.random()
            if roll >= self.rate + self.timeouts:
                return None
            return ("crash" if roll < self.rate else "timeout"), self._rng.randint(1, self.spread)

    def count(self, fault: Literal["crash", "timeout"]) -> None:
        """Count ``fault`` as struck."""
        with self._lock:
            if fault == "crash":
                self.injected += 1
            else:
                self.timeouts_injected += 1


_CRASHES: list[Crashes] = []


def inject_crashes(crashes: Crashes | None) -> None:
    """Crash invocations of every event source in this process as ``crashes`` says (None: never)."""
    _CRASHES[:] = [crashes] if crashes is not None else []


_PLANS: dict[int, tuple[Crashes, Literal["crash", "timeout"], list[int]]] = {}
"""Per running invocation a :class:`Crashes` fault was drawn for: the fault and the calls left before it strikes."""
_PLANS_LOCK = threading.Lock()


def _strike(invocation: int, call: str, *, returning: bool = False) -> None:
    """Count down the fault planned for ``invocation`` at ``call`` (or strike it now when ``returning``); when it
    strikes, count and log it and end the invocation: a crash as :func:`kill_invocation` does, a timeout as its
    timer would. Raises :class:`LambdaKilled` when it strikes at a call."""
    with _PLANS_LOCK:
        planned = _PLANS.get(invocation)
        if planned is None:
            return
        crashes, fault, left = planned
        left[0] -= 1
        if left[0] > 0 and not returning:
            return
        del _PLANS[invocation]
    crashes.count(fault)
    LOG.info("invocation %s: %s injected at %s", invocation, fault, call)
    (_KILLED if fault == "crash" else _RAN_OUT).add(invocation)
    _TIMED_OUT.add(invocation)
    if not returning:
        raise LambdaKilled(f"invocation {invocation}: {fault} injected at {call}")


def _check_alive(call: str) -> None:
    """Raise :class:`LambdaKilled` when the invocation of this thread was ended, or when a :class:`Crashes` fault
    planned for it strikes at ``call`` (what is about to be called: an AWS operation, or a Kubernetes request's
    method and path); an injected end is logged with ``call``, so a run's log says where each invocation stopped."""
    invocation = getattr(_INVOCATION, "id", None)
    if invocation is None:
        return
    if invocation in _TIMED_OUT:
        raise LambdaKilled(f"invocation {invocation} ran past the function timeout or was killed")
    _strike(invocation, call)


@contextlib.contextmanager
def invocation(timeout: float) -> Iterator[int]:
    """Run the block as one invocation (its id for :func:`_check_alive`), ended after ``timeout`` seconds; the
    :class:`Crashes` injected (:func:`inject_crashes`) draw its fault as it starts."""
    invocation = next(_IDS)
    crashes = _CRASHES[0] if _CRASHES else None
    planned = crashes.plan() if crashes is not None else None
    if crashes is not None and planned is not None:
        with _PLANS_LOCK:
            _PLANS[invocation] = (crashes, planned[0], [planned[1]])
    timer = threading.Timer(timeout, _TIMED_OUT.add, args=(invocation,))
    timer.daemon = True
    timer.start()
    _INVOCATION.id = invocation
    try:
        yield invocation
    finally:
        timer.cancel()
        _INVOCATION.id = None
        with _PLANS_LOCK:
            _PLANS.pop(invocation, None)


def returned(invocation_id: int) -> bool:
    """Whether the answer of the invocation ``invocation_id``, whose handler just returned, reaches Lambda: not when
    it ran past its timeout or was ended, nor when a :class:`Crashes` fault planned for a later call than it made
    strikes now, as it returns (counted and logged as any other)."""
    _strike(invocation_id, "its return", returning=True)
    return invocation_id not in _TIMED_OUT


def kill_invocation(reason: str = "killed") -> NoReturn:
    """End the invocation running in this thread (or in a pool thread it started) now, as Lambda ends one whose
    runtime crashed: raises :class:`LambdaKilled` here, and every later AWS or Kubernetes call of the invocation
    raises it too (with :func:`install_function_timeouts` installed). Outside an invocation it only raises."""
    invocation = getattr(_INVOCATION, "id", None)
    if invocation is not None:
        _KILLED.add(invocation)
        _TIMED_OUT.add(invocation)
    raise LambdaKilled(f"invocation {invocation}: {reason}")


def install_function_timeouts() -> None:
    """Make the calls of an invocation past its timeout raise :class:`LambdaKilled` (see the module docstring).

    Patches botocore's ``BaseClient._make_api_call``, ``KubeRest.request`` and ``ThreadPoolExecutor.submit``
    (so pool threads work for the invocation that started them), once per process; calls outside an
    invocation of :class:`SqsEventSource` are unaffected.
    """
    if _INSTALLED:
        return
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
        _check_alive(operation)
        return api_call(self, operation, params)

    def checked_request(self: Any, *args: Any, **kwargs: Any) -> Any:
        _check_alive(" ".join(str(a) for a in args[:2]) or "a Kubernetes request")
        return request(self, *args, **kwargs)

    ThreadPoolExecutor.submit = inheriting_submit  # type: ignore[method-assign]
    BaseClient._make_api_call = checked_api_call
    KubeRest.request = checked_request  # type: ignore[method-assign]
    _INSTALLED.append(True)


def ended_by(invocation_id: int) -> Literal["killed", "timeout_injected", "timeout"]:
    """How the ended invocation ``invocation_id`` ended: killed (a crash), its timeout injected, or too slow."""
    if invocation_id in _KILLED:
        return "killed"
    if invocation_id in _RAN_OUT:
        return "timeout_injected"
    return "timeout"
