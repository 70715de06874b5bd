"""Background-thread runner shared by the simulated kubelet, kube-scheduler and controllers.

Each simulated component is deterministic: ``step(now)`` looks at the emulator's store and makes
the writes a real component would make at time ``now`` (epoch seconds). Tests call ``step``
directly with chosen times; the demo starts a :class:`Runner`, which calls ``step(clock())`` after
every batch of store changes of the watched resources, and at least every ``interval`` seconds (for
time-based transitions such as a node becoming Ready).
"""

from __future__ import annotations

import logging
import threading
import time
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    from nodesmith.sim.kube.store import Store

__all__ = ["Runner", "Steppable"]

LOG = logging.getLogger(__name__)


class Steppable(Protocol):
    """A simulated component: ``store``, the resources it reacts to, and ``step(now)``."""

    store: Store
    watch: Sequence[str]

    def step(self, now: float) -> object:
        """Make the writes due at ``now`` (epoch seconds)."""
        ...


class Runner:
    """Runs ``component.step`` in a daemon thread until :meth:`stop`.

    ``interval`` (seconds) bounds the time between steps when nothing changes; ``min_step_seconds``
    is the least time between two steps however many changes arrive (0: step after every batch of
    changes; in a burst of writes there always is one, and a component re-reading thousands of
    objects would then hold the GIL the whole time, as a real controller's rate-limited work queue
    does not). ``clock`` gives epoch seconds (inject a simulated clock for virtual time). A step
    that raises is logged and the loop carries on, as a controller would requeue.
    """

    def __init__(
        self,
        component: Steppable,
        *,
        interval: float = 0.2,
        min_step_seconds: float = 0.0,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.component = component
        self.interval = interval
        self.min_step_seconds = min_step_seconds
        self.clock = clock
        self.steps = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> Runner:
        """Start the thread (idempotent); returns self."""
        if self._thread is None:
            self._stop.clear()
            name = f"sim-{type(self.component).__name__}"
            self._thread = threading.Thread(target=self._run, name=name, daemon=True)
            self._thread.start()
        return self

    def stop(self, timeout: float = 5.0) -> None:
        """Stop the thread and wait for it (at most ``timeout`` seconds)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=timeout)
            self._thread = None

    def __enter__(self) -> Runner:
        return self.start()

    def __exit__(self, *_: object) -> None:
        self.stop()

    def _run(self) -> None:
        store = self.component.store
        sub = store.subscribe(resources=list(self.component.watch))
        try:
            while not self._stop.is_set() and not store.closed:
                started = time.monotonic()
                try:
                    self.component.step(self.clock())
                    self.steps += 1
                except Exception:  # a simulated controller requeues; it never dies
                    LOG.exception("%s step failed", type(self.component).__name__)
                sub.get(timeout=self.interval)
                rest = self.min_step_seconds - (time.monotonic() - started)
                if rest > 0 and self._stop.wait(rest):
                    break
                sub.drain()
        finally:
            store.unsubscribe(sub)
