"""Watch mode: one reconcile invocation reacts to new pending pods for most of its lifetime.

Poll mode runs one reconcile pass per scheduled invocation (once a minute, EventBridge's floor), so
a pod waits 30 s on average before anything is launched for it. Karpenter's provisioner instead
watches pods and batches them (``[core]:pkg/controllers/provisioning/batcher.go``): a batch opens
with the first new pending pod and closes after :data:`BATCH_IDLE_SECONDS` without another one, or
:data:`BATCH_MAX_SECONDS` after it opened (``karpenter-v1.md`` §2.1). :func:`watch` does that inside
one invocation: it reads the pending pods whenever its ``sleep`` returns (watch mode's returns as
soon as the pod watch of :mod:`.pod_watch` reports a change, and at least every poll), runs a pass
when a batch closes and at least every ``resync_seconds`` anyway (registration, initialization,
disruption), and returns before ``stop_at`` so the invocation ends well inside its timeout.

Hand-over between invocations goes through the reconcile lease (:mod:`.leases`): the watcher's
lease holder name carries the epoch second at which it will leave (:func:`holder_name`); a
scheduled invocation that finds the lease taken waits for it only when that moment is near
(:func:`handover_wait`), so the next watcher takes over within a poll of the old one leaving, while
the invocations in between return at once. Two watchers are never active: each runs only while it
holds the lease and ``renew`` (extending it) is checked on every pass.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Callable

__all__ = [
    "BATCH_IDLE_SECONDS",
    "BATCH_MAX_SECONDS",
    "HANDOVER_WINDOW_SECONDS",
    "POLL_SECONDS",
    "WatchOutcome",
    "handover_wait",
    "holder_name",
    "watch",
]

BATCH_IDLE_SECONDS = 1.0
"""Karpenter's ``BATCH_IDLE_DURATION``: a batch closes after this long without a new pending pod."""

BATCH_MAX_SECONDS = 10.0
"""Karpenter's ``BATCH_MAX_DURATION``: a batch closes this long after it opened, whatever arrives."""

POLL_SECONDS = 0.2
"""How often pending pods are listed (seconds)."""

RESYNC_SECONDS = 10.0
"""A pass runs at least this often even without new pods (lifecycle, disruption), like Karpenter's 10 s loop."""

HANDOVER_WINDOW_SECONDS = 75.0
"""A scheduled invocation waits for a watcher leaving within this many seconds (one schedule period + slack)."""


@dataclass(slots=True)
class WatchOutcome:
    """What one :func:`watch` did: passes run, batches closed (with their sizes) and why it stopped."""

    passes: int = 0
    batches: list[int] = field(default_factory=list)
    stopped: str = ""


@dataclass(slots=True)
class _Batch:
    """The batch being gathered: its new pending pods, the ``clock`` times (seconds) it opened and last
    grew, and whether an interruption batch asked for a pass meanwhile (``owed``)."""

    pods: set[str] = field(default_factory=set)
    opened: float = 0.0
    last_seen: float = 0.0
    owed: bool = False

    def add(self, first: float, last: float) -> None:
        """Pods that turned pending between ``first`` and ``last``: they open the batch, or extend its idle
        window."""
        if self.pods:
            self.last_seen = max(self.last_seen, last)
        else:
            self.opened, self.last_seen = first, last


def holder_name(*, request_id: str, leave_at: float) -> str:
    """The lease holder name of a watcher: ``<request id>@<epoch second it leaves>``."""
    return f"{request_id}@{int(leave_at)}"


def handover_wait(*, holder: str | None, now: float, window: float = HANDOVER_WINDOW_SECONDS) -> float:
    """Seconds a new invocation should wait for the lease held by ``holder`` (0: do not wait).

    Waits (until one second after the announced departure) only when ``holder`` is a watcher
    (:func:`holder_name`) leaving within ``window`` seconds of ``now`` (epoch seconds).
    """
    if not holder or "@" not in holder:
        return 0.0
    try:
        leave_at = float(holder.rsplit("@", 1)[1])
    except ValueError:
        return 0.0
    remaining = leave_at - now
    if remaining > window:
        return 0.0
    return max(0.0, remaining) + 1.0


def watch(
    *,
    run_pass: Callable[[], object],
    pending_pods: Callable[[], set[str]],
    stop_at: float,
    renew: Callable[[], bool] | None = None,
    run_resync: Callable[[], object] | None = None,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
    poll_seconds: float = POLL_SECONDS,
    idle_seconds: float = BATCH_IDLE_SECONDS,
    max_seconds: float = BATCH_MAX_SECONDS,
    resync_seconds: float = RESYNC_SECONDS,
    arrived_at: Callable[[set[str]], tuple[float, float] | None] | None = None,
    requested: Callable[[float], bool] | None = None,
    catch_up: bool = True,
) -> WatchOutcome:
    """Run reconcile passes as pending pods arrive until ``stop_at`` (a ``clock`` value, seconds).

    ``run_pass`` runs one reconcile pass; ``pending_pods`` returns the ids (``namespace/name`` or
    uid) of the pods waiting for capacity now. A pass runs first (catch up), then whenever a batch
    closes (``idle_seconds`` without a new pending pod, or ``max_seconds`` after the batch's first
    one) and every ``resync_seconds``. ``run_resync`` (default ``run_pass``) is what runs at start
    and on resyncs — the full pass with disruption — so a batch only waits for provisioning.
    ``renew`` is called before every pass; False (the lease was lost) stops the watch at once.
    ``sleep`` is called with the time to the next due moment (at most ``poll_seconds``); one that
    returns early when the pending pods change (watch mode's, woken by the pod watch) lets a
    batch open and close on time without polling. ``arrived_at`` (optional) gives the first and
    last ``clock`` time at which the given pods became pending: a pod that arrived while a pass ran
    then opens its batch at that moment, not when the pass ended, so the batch's idle and maximum
    windows are real time as in Karpenter (whose provisioner does not wait for disruption).
    ``requested(since)`` (optional, checked every loop) is True when someone asked the lease holder for
    a pass starting after ``since`` (the ``clock`` time the last pass started): an interruption batch
    whose cordons the pass did not see asked it
    (:meth:`~nodesmith.core.ports.StateStore.request_pass`), so that the cordoned nodes' pods get their
    replacement capacity before they are evicted. A provisioning pass runs for it at once, with the pods
    of the open batch, except right after a pass: then once the function has rested as long as that pass
    took. In a burst (a thousand interruptions cordoned over ten seconds, every batch asking) passes
    ran back to back, each listing every pod, Node and NodeClaim of the cluster again; resting keeps the
    passes, and the API server's busiest lists, to half the time, and a request waits at most one pass's
    duration (a second or two at 1,000 nodes) where Karpenter's batcher can hold it for ten.
    ``catch_up`` False skips the first pass (the caller has just run one) and lets
    the pods pending at the start open the first batch (they may have turned unschedulable after that
    pass began). Exceptions of ``run_pass`` propagate.
    """
    out = WatchOutcome()
    full = run_resync or run_pass

    started = [clock()]

    def one_pass(*, resync: bool = True) -> bool:
        if renew is not None and not renew():
            out.stopped = "lease lost"
            return False
        started[0] = clock()
        (full if resync else run_pass)()
        out.passes += 1
        return True

    # taken before the pass: pods arriving during a pass open the next batch; without the catch-up pass,
    # the pods pending now may have arrived after the caller's pass began: they open the first batch
    seen = pending_pods() if catch_up else set()
    if catch_up and not one_pass():
        return out
    last_pass = clock()
    batch = _Batch()
    while True:
        now = clock()
        if now >= stop_at:
            out.stopped = "deadline"
            return out
        current = pending_pods()
        new = current - seen
        seen = current
        if new:
            first, last = (now, now) if arrived_at is None else arrived_at(new) or (now, now)
            batch.add(min(first, now), min(last, now))
            batch.pods |= new
        if requested is not None and requested(started[0]):
            batch.owed = True
        # a requested pass runs once the function has rested as long as its last pass took (at once after a
        # short one); the pods' batch closes on its idle or maximum window
        rested = last_pass + (last_pass - started[0])
        closes = (batch.owed and now >= rested) or (
            bool(batch.pods) and (now - batch.last_seen >= idle_seconds or now - batch.opened >= max_seconds)
        )
        if closes or now - last_pass >= resync_seconds:
            if batch.pods:
                out.batches.append(len(batch.pods))
            batch = _Batch()
            seen = pending_pods()
            if not one_pass(resync=not closes):
                return out
            last_pass = clock()
            continue
        # sleep until the next thing due (a batch closing, a resync, the deadline), at most a poll;
        # a ``sleep`` that returns early when pods change makes the batch open at once
        due = min(stop_at, last_pass + resync_seconds)
        if batch.pods:
            due = min(due, batch.last_seen + idle_seconds, batch.opened + max_seconds)
        if batch.owed:
            due = min(due, rested)
        sleep(max(0.0, min(poll_seconds, due - now)))
