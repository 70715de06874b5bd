"""Pending pods kept current by the Kubernetes watch API, for watch mode's batcher.

Listing every pod every poll costs a full LIST each time and still sees a pod up to a poll late.
:class:`PendingPodWatch` instead lists the unbound pods once
(``spec.nodeName=``), then follows :meth:`~nodesmith.core.ports.Cluster.watch_pods` from that
list's ``resourceVersion`` in a background thread, resuming each stream where the last one ended
(client-go's reflector: list, watch, resume; ``410 Gone`` -> list again; a lost connection resumes,
a refused watch lists again, both after a doubling back-off). Every change that adds a
pending pod (:func:`~nodesmith.services.provisioning.capacity.pending_pods`: unbound, marked Unschedulable by the
kube-scheduler, not a DaemonSet/mirror pod, not terminating or finished) wakes the batcher at once
through ``on_change``, so a batch opens the moment the kube-scheduler gives up on a pod.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import TYPE_CHECKING

from nodesmith.core.errors import KubernetesError
from nodesmith.services.provisioning.capacity import pending_pods

if TYPE_CHECKING:
    from collections.abc import Callable

    from nodesmith.core.ports import Cluster, PodEvent

__all__ = ["MAX_RETRY_SECONDS", "RETRY_SECONDS", "STREAM_SECONDS", "PendingPodWatch"]

LOG = logging.getLogger(__name__)

STREAM_SECONDS = 60
"""Each watch request asks the API server to end after this long (then it is resumed)."""

RETRY_SECONDS = 1.0
"""Wait after a failed list or watch before trying again (seconds), doubled per failure in a row."""

MAX_RETRY_SECONDS = 8.0
"""The longest wait between failed attempts (the batcher's resync passes still see new pods)."""


class PendingPodWatch:
    """The set of pending pods (``namespace/name``), kept by list + watch in a daemon thread.

    ``cluster`` provides ``watch_pods``; ``on_change`` is called (from the watch thread) whenever
    a pod becomes pending or the set is replaced by a list. :attr:`relists` counts lists (the
    first one included), :attr:`resumes` watches resumed from a resourceVersion,
    :attr:`expired` 410 answers, :attr:`errors` other failures. Call :meth:`start`, then
    :meth:`pending` as often as needed (no API call), and :meth:`stop` when done. ``clock``
    (monotonic seconds) stamps when each pod became pending (:meth:`arrived_at`).
    """

    def __init__(
        self,
        *,
        cluster: Cluster,
        on_change: Callable[[], None] | None = None,
        stream_seconds: int = STREAM_SECONDS,
        retry_seconds: float = RETRY_SECONDS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._cluster = cluster
        self._on_change = on_change
        self._stream_seconds = stream_seconds
        self._retry_seconds = retry_seconds
        self._lock = threading.Lock()
        self._pending: dict[str, float] = {}  # key -> clock() when it was first seen pending
        self._clock = clock
        self._stopped = threading.Event()
        self._synced = threading.Event()
        self._thread: threading.Thread | None = None
        self.resource_version = ""
        self.relists = 0
        self.resumes = 0
        self.expired = 0
        self.errors = 0

    # -- consumer side -----------------------------------------------------------------------------

    def start(self, *, wait_seconds: float = 10.0) -> bool:
        """Start the watch thread; wait up to ``wait_seconds`` for the first list. True once synced."""
        self._thread = threading.Thread(target=self.run, name="nodesmith-pod-watch", daemon=True)
        self._thread.start()
        return self._synced.wait(wait_seconds)

    def stop(self) -> None:
        """Stop after the current stream (its thread is a daemon: nothing waits for it)."""
        self._stopped.set()

    def pending(self) -> set[str]:
        """The pods pending now, as far as the watch has seen (a copy)."""
        with self._lock:
            return set(self._pending)

    def arrived_at(self, keys: set[str]) -> tuple[float, float] | None:
        """The first and last ``clock`` time at which any of ``keys`` became pending (None: none known)."""
        with self._lock:
            times = [self._pending[k] for k in keys if k in self._pending]
        return (min(times), max(times)) if times else None

    @property
    def synced(self) -> bool:
        """True once the first list arrived."""
        return self._synced.is_set()

    # -- watch side --------------------------------------------------------------------------------

    def apply(self, event: PodEvent) -> bool:
        """Fold one event into the pending set; True when a pod became pending (or a list arrived)."""
        now = self._clock()
        with self._lock:
            if event.type == "SYNCED":
                old = self._pending
                self._pending = {p.key: old.get(p.key, now) for p in pending_pods(event.pods)}
                return True
            grew = False
            for pod in event.pods:
                if event.type != "DELETED" and pending_pods([pod]):
                    grew = grew or pod.key not in self._pending
                    self._pending.setdefault(pod.key, now)
                else:
                    self._pending.pop(pod.key, None)
            return grew

    def run(self) -> None:
        """The thread's loop: list, then watch and resume until :meth:`stop` (also usable inline in tests)."""
        failures = 0
        while not self._stopped.is_set():
            since = self.resource_version
            if since:
                self.resumes += 1
            try:
                for event in self._cluster.watch_pods(
                    resource_version=since, unscheduled_only=True, timeout_seconds=self._stream_seconds
                ):
                    failures = 0
                    if event.type == "SYNCED":
                        self.relists += 1
                    changed = self.apply(event)
                    if event.resource_version:
                        self.resource_version = event.resource_version
                    if event.type == "SYNCED":
                        self._synced.set()
                    if changed and self._on_change is not None:
                        self._on_change()
                    if self._stopped.is_set():
                        return
            except KubernetesError as exc:
                if exc.status == 410:
                    self.expired += 1
                    self.resource_version = ""  # too old: list again
                    LOG.info("pod watch expired at %s; listing again", since)
                    continue
                self.errors += 1
                failures += 1
                if exc.status not in (0, 429, 500, 503, 504):
                    self.resource_version = ""  # refused (403, 400, ...): a fresh list keeps the set current
                delay = min(self._retry_seconds * 2 ** (failures - 1), MAX_RETRY_SECONDS)
                LOG.warning("pod watch failed %d time(s) (retrying in %.1fs): %s", failures, delay, exc)
                self._stopped.wait(delay)
