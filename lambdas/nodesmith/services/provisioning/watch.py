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

import math
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Callable

    from nodesmith.core.ports import Cluster

__all__ = [
    "BATCH_IDLE_SECONDS",
    "BATCH_MAX_SECONDS",
    "HANDOVER_WINDOW_SECONDS",
    "POLL_SECONDS",
    "CordonWatch",
    "PendingSource",
    "WatchOutcome",
    "WatchTiming",
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


@dataclass(frozen=True, slots=True)
class PendingSource:
    """Where :func:`watch` learns of pending pods: ``pending()`` gives the ids of the pods waiting for capacity now;
    ``sleep(seconds)`` waits, at most ``poll_seconds`` at a time (one that returns as soon as pods change, woken by
    the pod watch, lets a batch open on time without polling); ``arrived_at(ids)`` (optional) gives the first and
    last ``clock`` time the given pods became pending, so a pod that arrived during a pass opens its batch then."""

    pending: Callable[[], set[str]]
    sleep: Callable[[float], None] = time.sleep
    poll_seconds: float = POLL_SECONDS
    arrived_at: Callable[[set[str]], tuple[float, float] | None] | None = None


@dataclass(frozen=True, slots=True)
class WatchTiming:
    """Karpenter's batch windows (seconds): a batch closes ``idle_seconds`` after its last pod or ``max_seconds``
    after its first; a full pass runs at least every ``resync_seconds``; ``clock`` is monotonic seconds."""

    idle_seconds: float = BATCH_IDLE_SECONDS
    max_seconds: float = BATCH_MAX_SECONDS
    resync_seconds: float = RESYNC_SECONDS
    clock: Callable[[], float] = time.monotonic


@dataclass(slots=True)
class _Batch:
    """The batch being gathered: its new pending pods, the ``clock`` times (seconds) it opened and last
    grew, and whether a pass is owed for nodes cordoned since the last one (``owed``)."""

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


class CordonWatch:
    """A pass owed for nodes cordoned since the last one: the cluster, not a message, says when.

    The interruption function and the disruption pass cordon and taint a node before it drains; its pods then
    count as pending for the next provisioning pass
    (:func:`~nodesmith.services.provisioning.capacity.reschedulable_pods`), so their replacement capacity
    launches while the node drains, as Karpenter's provisioner schedules "deleting-node pods" at once.
    :meth:`owed` lists the cordoned nodes (a field selector on
    ``spec.unschedulable``) at most every ``every`` seconds and says whether one was not cordoned at the last
    pass (:meth:`passed`, called as a pass begins). Listing errors propagate.
    """

    def __init__(self, *, cluster: Cluster, every: float = 1.0, clock: Callable[[], float] = time.monotonic) -> None:
        self.cluster, self.every, self.clock = cluster, every, clock
        self._seen: set[str] | None = None
        self._listed: set[str] = set()
        self._at = -math.inf

    def owed(self) -> bool:
        """True when a node was cordoned since the last :meth:`passed`."""
        if self.clock() - self._at >= self.every:
            self._listed, self._at = self.cluster.cordoned_node_names(), self.clock()
        return self._seen is not None and bool(self._listed - self._seen)

    def passed(self) -> None:
        """A pass begins: what is cordoned now, it sees."""
        self._listed, self._at = self.cluster.cordoned_node_names(), self.clock()
        self._seen = set(self._listed)


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
    source: PendingSource,
    stop_at: float,
    run_resync: Callable[[], object] | None = None,
    renew: Callable[[], bool] | None = None,
    cordons: CordonWatch | None = None,
    catch_up: bool = True,
    timing: WatchTiming | None = None,
) -> WatchOutcome:
    """Run reconcile passes as pending pods arrive until ``stop_at`` (a ``timing.clock`` value, seconds).

    ``run_pass`` runs one provisioning pass, ``run_resync`` (default ``run_pass``) the full pass with
    disruption; pending pods come from ``source``. A full pass runs first (catch up), then a provisioning pass
    whenever a batch closes (:class:`WatchTiming`'s idle or maximum window, as Karpenter's batcher,
    ``karpenter-v1.md`` §2.1) and a full one every ``resync_seconds``. With ``cordons``, a pass is also owed as
    soon as a node was cordoned since the last one (:class:`CordonWatch`), so its pods get replacement capacity
    before they are evicted; right after a pass it runs once the function has rested as long as that pass
    took, so a burst of cordons is served by a pass at a time rather than back to back. ``renew`` is called
    before every pass; False (the lease was lost) stops the watch at once. ``catch_up`` False skips the first
    pass (the caller has just run one) and lets the pods pending at the start open the first batch.
    Exceptions of ``run_pass`` and of the sources propagate.
    """
    timing = timing or WatchTiming()
    clock = timing.clock
    out = WatchOutcome()
    full = run_resync or run_pass
    started = [clock()]

    def one_pass(*, resync: bool = True) -> bool:
        if renew is not None and not renew():
            out.stopped = "lease lost"
            return False
        started[0] = clock()
        if cordons is not None:
            cordons.passed()
        (full if resync else run_pass)()
        out.passes += 1
        return True

    # taken before the pass: pods arriving during a pass open the next batch; without the catch-up pass,
    # the pods pending now may have arrived after the caller's pass began: they open the first batch
    seen = source.pending() if catch_up else set()
    if catch_up and not one_pass():
        return out
    if not catch_up and cordons is not None:
        cordons.passed()
    last_pass = clock()
    batch = _Batch()
    while True:
        now = clock()
        if now >= stop_at:
            out.stopped = "deadline"
            return out
        current = source.pending()
        new = current - seen
        seen = current
        if new:
            first, last = (now, now) if source.arrived_at is None else source.arrived_at(new) or (now, now)
            batch.add(min(first, now), min(last, now))
            batch.pods |= new
        if cordons is not None and cordons.owed():
            batch.owed = True
        rested = last_pass + (last_pass - started[0])
        closes = (batch.owed and now >= rested) or (
            bool(batch.pods)
            and (now - batch.last_seen >= timing.idle_seconds or now - batch.opened >= timing.max_seconds)
        )
        if closes or now - last_pass >= timing.resync_seconds:
            if batch.pods:
                out.batches.append(len(batch.pods))
            batch = _Batch()
            seen = source.pending()
            if not one_pass(resync=not closes):
                return out
            last_pass = clock()
            continue
        # sleep until the next thing due (a batch closing, a resync, the deadline), at most a poll
        due = min(stop_at, last_pass + timing.resync_seconds)
        if batch.pods:
            due = min(due, batch.last_seen + timing.idle_seconds, batch.opened + timing.max_seconds)
        if batch.owed:
            due = min(due, rested)
        source.sleep(max(0.0, min(source.poll_seconds, due - now)))
