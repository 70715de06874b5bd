"""Injected API server failures: the faults a real cluster's API server answers now and then.

:class:`KubeFaults` decides, per request, whether the emulator answers it with a fault instead of
(or before) serving it. Set it on a running emulator (``emulator.faults = KubeFaults(...)``; None,
the default, turns faults off and costs one attribute read per request). Kinds (:data:`FaultKind`):

* ``throttle``: 429 TooManyRequests with a ``Retry-After`` header (seconds), as API Priority and
  Fairness rejects a request it has no seat for (Kubernetes docs, "API Priority and Fairness");
  nothing is served. The body is a ``meta/v1 Status`` with ``details.retryAfterSeconds``.
* ``error``: 500 InternalError; nothing is served.
* ``conflict``: 409 Conflict on an update or patch that carries ``metadata.resourceVersion``, as
  optimistic concurrency refuses a write based on a stale version (Kubernetes API concepts,
  "Resource versions"); an unconditional write never conflicts (the API server retries those
  itself). Nothing is written.
* ``slow``: the answer comes after ``delay_seconds``, then the request is served.
* ``lost``: the request is served, then the connection closes without an answer (a write happened
  but its client cannot know: a timeout after the commit, a broken connection).
* ``cut``: a watch stream is closed after 1 to ``cut_after_events`` events, without the chunked
  terminator (a connection lost mid-stream).
* ``expired``: a watch that resumes from a ``resourceVersion`` gets the ``ERROR`` event with a 410
  ``Expired`` Status ("too old resource version"), as the watch cache answers a version it no longer
  holds (Kubernetes API concepts, "Efficient detection of changes").

Operations are ``"<verb> <resource>"`` with Kubernetes verbs (get, list, watch, create, update,
patch, delete, deletecollection) and the resource's plural, ``/subresource`` included
(``"create pods/eviction"``, ``"update nodeclaims/status"``). Draws come from one
``random.Random(seed)``: the same sequence of requests meets the same faults.
"""

from __future__ import annotations

import random
import threading
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal, get_args

__all__ = ["FAULT_KINDS", "Fault", "FaultKind", "KubeFaults", "Request", "request_of"]

FaultKind = Literal["throttle", "error", "conflict", "slow", "lost", "cut", "expired"]
FAULT_KINDS: tuple[FaultKind, ...] = get_args(FaultKind)

_ANY_REQUEST: tuple[FaultKind, ...] = ("throttle", "error", "slow")


@dataclass(frozen=True, slots=True)
class Request:
    """What the fault layer knows of a request: ``verb`` and ``resource`` (see the module docstring),
    ``guarded`` when a write carries a ``resourceVersion`` precondition, ``resumes`` when a watch starts
    from a ``resourceVersion``."""

    verb: str
    resource: str
    guarded: bool = False
    resumes: bool = False

    @property
    def operation(self) -> str:
        """``"<verb> <resource>"``."""
        return f"{self.verb} {self.resource}"

    def kinds(self) -> tuple[FaultKind, ...]:
        """The fault kinds this request can meet."""
        out = list(_ANY_REQUEST)
        if self.verb in ("update", "patch") and self.guarded:
            out.append("conflict")
        if self.verb != "watch":
            out.append("lost")
        else:
            out.append("cut")
            if self.resumes:
                out.append("expired")
        return tuple(out)


@dataclass(frozen=True, slots=True)
class Fault:
    """One injected fault: its ``kind``, ``retry_after`` (seconds, for ``throttle``), ``delay`` (seconds, for
    ``slow``) and ``cut_after`` (events sent before the stream is cut, for ``cut``)."""

    kind: FaultKind
    retry_after: int = 0
    delay: float = 0.0
    cut_after: int = 0


Rate = float | Mapping[str, float]


class KubeFaults:
    """Seeded, rate-controlled fault injection for the Kubernetes API emulator (thread-safe).

    ``rates`` maps an operation to how often it fails: ``"patch nodes"``, ``"patch *"`` (any resource),
    ``"* nodes"`` (any verb) or ``"*"``, the most specific key winning. A number is the probability
    (0 to 1) that a request meets one of the kinds it can meet, chosen by the ``kinds`` weights (default:
    all equal); a mapping gives each kind its own probability (their sum at most 1), e.g.
    ``{"patch nodes": {"conflict": 0.2}, "*": 0.05}``. ``retry_after_seconds`` is the ``Retry-After`` of a
    429, ``delay_seconds`` how late a slow answer comes, ``cut_after_events`` the most events a cut watch
    sends first. Raises ``ValueError`` for an unknown kind or a probability outside [0, 1].
    """

    def __init__(
        self,
        *,
        seed: int = 0,
        rates: Mapping[str, Rate],
        kinds: Mapping[str, float] | None = None,
        retry_after_seconds: int = 1,
        delay_seconds: float = 0.05,
        cut_after_events: int = 3,
    ) -> None:
        weights = dict.fromkeys(FAULT_KINDS, 1.0) if kinds is None else dict(kinds)
        self._rates = {op: _check_rate(op, rate) for op, rate in rates.items()}
        self._weights = {_check_kind(k): float(w) for k, w in weights.items()}
        if retry_after_seconds < 0 or delay_seconds < 0 or cut_after_events < 1:
            raise ValueError("retry_after_seconds and delay_seconds must be >= 0, cut_after_events >= 1")
        self.retry_after_seconds = retry_after_seconds
        self.delay_seconds = delay_seconds
        self.cut_after_events = cut_after_events
        self._random = random.Random(seed)
        self._lock = threading.Lock()
        self._by_kind: Counter[str] = Counter()
        self._by_operation: Counter[str] = Counter()

    def _rate(self, request: Request) -> Rate:
        for key in (request.operation, f"{request.verb} *", f"* {request.resource}", "*"):
            if key in self._rates:
                return self._rates[key]
        return 0.0

    def _chances(self, request: Request) -> list[tuple[FaultKind, float]]:
        """Each kind this request can meet with its probability."""
        rate, kinds = self._rate(request), request.kinds()
        if not isinstance(rate, float):
            return [(k, rate.get(k, 0.0)) for k in kinds]
        total = sum(self._weights.get(k, 0.0) for k in kinds)
        if rate <= 0.0 or total <= 0.0:
            return []
        return [(k, rate * self._weights.get(k, 0.0) / total) for k in kinds]

    def draw(self, request: Request) -> Fault | None:
        """The fault ``request`` meets, counted, or None. One draw per request that has a chance of a fault."""
        chances = self._chances(request)
        if not chances:
            return None
        with self._lock:
            roll = self._random.random()
            for kind, chance in chances:
                if roll < chance:
                    fault = Fault(
                        kind=kind,
                        retry_after=self.retry_after_seconds,
                        delay=self.delay_seconds,
                        cut_after=self._random.randint(1, self.cut_after_events) if kind == "cut" else 0,
                    )
                    self._by_kind[kind] += 1
                    self._by_operation[request.operation] += 1
                    return fault
                roll -= chance
        return None

    def counts(self) -> dict[str, int]:
        """Faults injected so far by kind (every kind present, 0 when none)."""
        with self._lock:
            return {kind: self._by_kind[kind] for kind in FAULT_KINDS}

    def by_operation(self) -> dict[str, int]:
        """Faults injected so far by operation (``"patch nodes"``), only those that met one."""
        with self._lock:
            return dict(self._by_operation)

    @property
    def total(self) -> int:
        """Faults injected so far, all kinds."""
        with self._lock:
            return sum(self._by_kind.values())


_VERBS = {"POST": "create", "PUT": "update", "PATCH": "patch"}


def request_of(
    method: str, *, plural: str, name: str | None, sub: str | None, query: Mapping[str, str], body: Any
) -> Request:
    """The :class:`Request` of an HTTP ``method`` on a resource route (``plural``, optional ``name`` and
    ``sub``resource) with its ``query`` and parsed ``body``."""
    watch = method == "GET" and name is None and query.get("watch") in ("true", "1")
    if method == "GET":
        verb = "get" if name is not None else "watch" if watch else "list"
    elif method == "DELETE":
        verb = "delete" if name is not None else "deletecollection"
    else:
        verb = _VERBS.get(method, method.lower())
    meta = body.get("metadata") if isinstance(body, dict) else None
    guarded = verb in ("update", "patch") and isinstance(meta, dict) and bool(meta.get("resourceVersion"))
    resumes = watch and query.get("resourceVersion", "") not in ("", "0") and query.get("sendInitialEvents") != "true"
    return Request(verb=verb, resource=f"{plural}/{sub}" if sub else plural, guarded=guarded, resumes=resumes)


def _check_kind(kind: str) -> FaultKind:
    if kind not in FAULT_KINDS:
        raise ValueError(f"unknown fault kind {kind!r}: expected one of {', '.join(FAULT_KINDS)}")
    return kind


def _check_probability(what: str, value: float) -> float:
    if not 0.0 <= value <= 1.0:
        raise ValueError(f"{what}: a probability must be within [0, 1], not {value}")
    return float(value)


def _check_rate(operation: str, rate: Rate) -> Rate:
    if isinstance(rate, int | float):
        return _check_probability(operation, rate)
    chances: dict[str, float] = {_check_kind(k): _check_probability(f"{operation} {k}", p) for k, p in rate.items()}
    _check_probability(f"{operation} (all kinds)", sum(chances.values()))
    return chances
