"""When and how long :class:`~nodesmith.adapters.kube.calls.KubeRest` waits before trying a request again.

Which failures are retried (the rules :func:`retryable` applies):

* 429 TooManyRequests: API Priority and Fairness rejected the request before any handler ran, and says
  when to come back in ``Retry-After`` (Kubernetes docs, "API Priority and Fairness"); always safe to
  send again. Except the Eviction API's 429 for a PodDisruptionBudget (a ``DisruptionBudget`` cause in
  the Status): that is an answer, which the caller acts on.
* 500, 502, 503, 504 and no answer at all (connection refused, reset or timed out): the request may or
  may not have been applied, so only a request that is safe to repeat is sent again (``repeatable``:
  reads, deletes, writes without a ``resourceVersion`` precondition; see ``KubeRest.request``).
* Anything else (400, 401, 403, 404, 409, 410, 422, ...) is an answer and is never retried here; 409 on
  a guarded write is the caller's to re-read (optimistic concurrency, Kubernetes API concepts).

Waits are exponential with jitter, at least what ``Retry-After`` asks (capped), and bounded in total.
"""

from __future__ import annotations

import random
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

from pydantic_core import from_json

if TYPE_CHECKING:
    from collections.abc import Callable

__all__ = ["RetryPolicy", "disruption_budget_refusal", "retry_after_seconds", "retryable"]

_TRANSIENT = frozenset({500, 502, 503, 504})


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """Bounds of the retries of one Kubernetes API request (all times in seconds)."""

    attempts: int = 5
    """Tries of one request at most, the first included (1 never retries)."""
    base_seconds: float = 0.2
    """The wait before the second try, before jitter; each later wait doubles it."""
    max_seconds: float = 5.0
    """The longest backoff wait, before jitter and ``Retry-After``."""
    retry_after_cap_seconds: float = 10.0
    """The longest ``Retry-After`` honoured: a server asking for more is retried after this long."""
    budget_seconds: float = 20.0
    """The most one request waits between its tries in total; a wait that would pass it is not taken and the
    last failure is raised instead."""
    conflict_attempts: int = 5
    """Read-modify-write rounds of a guarded write (re-read after a 409 or a write that may not have landed)
    before ``ConflictError``."""
    sleep: Callable[[float], None] = time.sleep
    """How to wait (injectable for tests)."""
    jitter: Callable[[], float] = random.random
    """A number in [0, 1) per wait: the wait is its backoff times ``0.5 + jitter() / 2`` (equal jitter)."""

    def wait(self, retry: int, retry_after: float | None) -> float:
        """Seconds to wait before retry number ``retry`` (1 before the second try): the jittered exponential
        backoff, or ``retry_after`` (capped at :attr:`retry_after_cap_seconds`) when that is longer."""
        backoff = min(self.max_seconds, self.base_seconds * 2.0 ** (retry - 1)) * (0.5 + self.jitter() / 2)
        if retry_after is None:
            return backoff
        return max(backoff, min(retry_after, self.retry_after_cap_seconds))


def disruption_budget_refusal(body: bytes | str | None) -> bool:
    """Whether a 429's Status body is the Eviction API's PodDisruptionBudget refusal (a ``DisruptionBudget``
    cause in ``details.causes``, ``k8s.io/api/policy/v1`` ``DisruptionBudgetCause``)."""
    if not body:
        return False
    try:
        doc = from_json(body)
    except ValueError:
        return False
    causes = ((doc.get("details") or {}).get("causes") or []) if isinstance(doc, dict) else []
    return any(isinstance(c, dict) and (c.get("reason") or c.get("type")) == "DisruptionBudget" for c in causes)


def retryable(status: int, body: bytes | str | None, *, repeatable: bool) -> bool:
    """Whether a request that failed with HTTP ``status`` (0: no answer) and ``body`` may be sent again (see the
    module docstring); ``repeatable`` says it is safe to repeat after a failure that may have applied it."""
    if status == 429:
        return not disruption_budget_refusal(body)
    return repeatable and (status == 0 or status in _TRANSIENT)


def retry_after_seconds(value: str | None) -> float | None:
    """The seconds of a ``Retry-After`` header (delay-seconds form, as the API server sends it); None when absent
    or not a non-negative number (an HTTP-date is not honoured: the backoff applies)."""
    if not value:
        return None
    try:
        seconds = float(value)
    except ValueError:
        return None
    return seconds if seconds >= 0 else None
