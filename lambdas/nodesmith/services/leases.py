"""Run work under a lease in the shared state store, so two Lambda invocations never do it at once.

Karpenter runs one provisioner behind leader election; Nodesmith's reconcile Lambda has reserved
concurrency 1, but the interruption Lambda also launches replacement capacity through the same
reconcile path, and reserved concurrency does not stop a manual invoke or a retry overlapping a
slow pass. Both therefore take the lease :data:`RECONCILE_LEASE` (a DynamoDB conditional write, see
:class:`nodesmith.core.ports.StateStore`) before they snapshot, solve and launch: of two passes that
start together, one runs and the other is skipped, so nothing is launched twice.

The lease's TTL outlives the invocation (its function timeout plus :data:`LEASE_MARGIN_SECONDS`),
so a crashed or timed-out holder frees it at the latest one margin after Lambda killed it; a
finished holder releases it at once.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Generic, TypeVar

if TYPE_CHECKING:
    from collections.abc import Callable

    from nodesmith.core.ports import LeaseInfo, StateStore

__all__ = [
    "DEFAULT_LEASE_TTL_SECONDS",
    "LEASE_MARGIN_SECONDS",
    "RECONCILE_LEASE",
    "Leased",
    "lease_ttl",
    "with_lease",
]

LOG = logging.getLogger(__name__)

RECONCILE_LEASE = "reconcile"
"""Name of the lease held while snapshotting, solving and launching (reconcile and replacement launches)."""

LEASE_MARGIN_SECONDS = 30.0
"""How much longer than the holder's remaining invocation time the lease lasts (seconds)."""

DEFAULT_LEASE_TTL_SECONDS = 900.0 + LEASE_MARGIN_SECONDS
"""TTL when the remaining invocation time is unknown: Lambda's maximum timeout (900 s) plus the margin."""

T = TypeVar("T")


def lease_ttl(remaining_seconds: float | None) -> float:
    """Lease TTL (seconds) for an invocation with ``remaining_seconds`` left: that plus the margin.

    ``None`` (not in Lambda) gives :data:`DEFAULT_LEASE_TTL_SECONDS`.
    """
    if remaining_seconds is None or remaining_seconds <= 0:
        return DEFAULT_LEASE_TTL_SECONDS
    return remaining_seconds + LEASE_MARGIN_SECONDS


@dataclass(frozen=True, slots=True)
class Leased(Generic[T]):
    """The result of :func:`with_lease`: ``acquired`` and the work's ``value``, or who held the lease.

    ``covered`` is True when the work was skipped because the holder's run already does it;
    ``requested`` when it was skipped because the holder was asked for one more run (and will do it
    before it releases the lease). ``reruns`` counts the extra runs a holder did for such requests.
    """

    acquired: bool
    value: T | None = None
    held_by: str | None = None
    covered: bool = False
    requested: bool = False
    reruns: int = 0

    @property
    def skipped_reason(self) -> str:
        """``"skipped: lease held by <holder>"`` when the work did not run, else ''."""
        if self.acquired:
            return ""
        reason = f"skipped: lease held by {self.held_by or 'another invocation'}"
        if self.covered:
            return f"{reason} (its pass covers this work)"
        if self.requested:
            return f"{reason} (asked it for another pass)"
        return reason


def with_lease(
    *,
    state: StateStore,
    name: str,
    holder: str,
    ttl_seconds: float,
    work: Callable[[], T],
    wait_seconds: float = 0.0,
    poll_seconds: float = 0.5,
    covered: Callable[[LeaseInfo], bool] | None = None,
    request_after: float | None = None,
    again: Callable[[], object] | None = None,
    again_within_seconds: float = 0.0,
    again_until: float | None = None,
    work_began: Callable[[], float | None] | None = None,
    wall: Callable[[], float] = time.time,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> Leased[T]:
    """Run ``work`` while holding lease ``name`` for ``holder``; skip it when another holder has the lease.

    Tries to acquire at once, then every ``poll_seconds`` for up to ``wait_seconds`` (seconds; 0
    means one try). ``covered(info)`` may end the wait early: True when the current holder's run
    does this work anyway (e.g. it took the lease after what this caller needs was written). With
    ``request_after`` (epoch seconds) a caller that finds the lease held asks the holder for one
    more run starting after that moment (:meth:`~nodesmith.core.ports.StateStore.request_pass`)
    and returns at once (``requested``) instead of waiting: Karpenter's provisioner is likewise
    *triggered* by whoever needs a pass and batches the triggers into its next one.

    As the holder: when ``work`` returns, the lease is released unless a pass was requested after
    ``work`` started; then ``again`` runs (after re-taking the lease, which moves ``acquired_at`` so
    later callers see themselves covered), as often as requests keep coming, for up to
    ``again_within_seconds`` after the first run ended; or, with ``again_until`` (a ``clock`` value:
    the holder's own deadline, e.g. its Lambda timeout less a margin), as long as another run as long
    as the last one still ends by then. Requests still pending after that, or for a holder without
    ``again``, are left to whoever takes the lease next (logged). An error in ``again`` is logged and
    ends the reruns (``work``'s value stands). ``work_began`` (optional) tells, once ``work`` returned,
    when (epoch seconds) its last pass began, for a ``work`` that runs several (a woken reconcile that
    watches): requests before that moment were served by it; None or absent means when the lease was taken.

    ``wall`` gives epoch seconds for the store, ``clock`` monotonic seconds for the wait. The lease
    is released when ``work`` returns or raises (a failed release is logged: the TTL frees it).
    Errors of the store while acquiring propagate: without the lease nothing runs.
    """
    refused = _acquire(
        state=state,
        name=name,
        holder=holder,
        ttl_seconds=ttl_seconds,
        wait_seconds=wait_seconds,
        poll_seconds=poll_seconds,
        covered=covered,
        request_after=request_after,
        wall=wall,
        clock=clock,
        sleep=sleep,
    )
    if refused is not None:
        return refused
    started = wall()
    released = False
    reruns = 0
    try:
        run_began = clock()
        value = work()
        last_run = clock() - run_began
        began = work_began() if work_began is not None else None
        if began is not None:
            started = max(started, began)
        until = clock() + max(0.0, again_within_seconds)
        while True:
            try:
                released = state.release_unless_requested(name=name, holder=holder, since=started)
            except Exception as exc:
                LOG.warning("lease %s: could not check %s's release for requests (%s)", name, holder, exc)
                break  # released plainly below
            if released:
                break
            out_of_time = clock() >= until if again_until is None else clock() + last_run > again_until
            if again is None or out_of_time:
                LOG.warning("lease %s: a pass requested of %s is left to the next holder", name, holder)
                break
            if not state.acquire_lease(name=name, holder=holder, ttl_seconds=ttl_seconds, now=wall()):
                released = True  # expired and taken meanwhile: the new holder's pass covers the request
                break
            started = wall()
            run_began = clock()
            try:
                again()
                last_run = clock() - run_began
            except Exception:
                LOG.exception("lease %s: the pass %s ran again on request failed", name, holder)
                break
            reruns += 1
        return Leased(acquired=True, value=value, reruns=reruns)
    finally:
        if not released:
            _release(state, name, holder)


def _acquire(
    *,
    state: StateStore,
    name: str,
    holder: str,
    ttl_seconds: float,
    wait_seconds: float,
    poll_seconds: float,
    covered: Callable[[LeaseInfo], bool] | None,
    request_after: float | None,
    wall: Callable[[], float],
    clock: Callable[[], float],
    sleep: Callable[[float], None],
) -> Leased[Any] | None:
    """Take lease ``name`` for :func:`with_lease` (its arguments): None once held, else why it was not."""
    give_up = clock() + max(0.0, wait_seconds)
    while not state.acquire_lease(name=name, holder=holder, ttl_seconds=ttl_seconds, now=wall()):
        info = state.lease_info(name=name, now=wall())
        deferred = _defer_to_holder(
            state=state, name=name, holder=holder, info=info, covered=covered, request_after=request_after, now=wall
        )
        if deferred is not None:
            return deferred
        if clock() >= give_up:
            held_by = info.holder if info is not None else None
            LOG.info("lease %s held by %s; %s skips", name, held_by, holder)
            return Leased(acquired=False, held_by=held_by)
        sleep(max(0.0, min(poll_seconds, give_up - clock())))
    return None


def _defer_to_holder(
    *,
    state: StateStore,
    name: str,
    holder: str,
    info: LeaseInfo | None,
    covered: Callable[[LeaseInfo], bool] | None,
    request_after: float | None,
    now: Callable[[], float] = time.time,
) -> Leased[Any] | None:
    """Leave ``holder``'s work to the current holder of lease ``name`` (``info``, as just read), or None.

    :func:`with_lease`'s steps for a lease it did not get, once it has read the lease:
    ``covered`` when ``covered(info)`` says the holder's run does the work (no store call); ``requested``
    when a pass starting after ``request_after`` (epoch seconds) was recorded on the held lease (one
    :meth:`~nodesmith.core.ports.StateStore.request_pass`). None when the lease is free (``info`` is None,
    or it was freed before the request landed) or neither applies: take it or wait. ``now`` gives epoch
    seconds. Errors of the store propagate.
    """
    if info is None:
        return None
    if covered is not None and covered(info):
        LOG.info("lease %s held by %s, whose run covers %s's work", name, info.holder, holder)
        return Leased(acquired=False, held_by=info.holder, covered=True)
    if request_after is not None and state.request_pass(name=name, after=request_after, now=now()):
        LOG.info("lease %s held by %s; %s asked it for another pass", name, info.holder, holder)
        return Leased(acquired=False, held_by=info.holder, requested=True)
    return None


def _release(state: StateStore, name: str, holder: str) -> None:
    try:
        if not state.release_lease(name=name, holder=holder):
            LOG.warning("lease %s was no longer held by %s at release (it expired)", name, holder)
    except Exception as exc:
        LOG.warning("lease %s not released by %s (%s); it expires on its own", name, holder, exc)
