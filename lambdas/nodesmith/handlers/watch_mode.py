"""The reconcile handler's watch mode (``NODESMITH_RECONCILE_MODE=watch``).

One invocation runs :func:`nodesmith.services.watch.watch` until :data:`EXIT_MARGIN_SECONDS` plus
the drain budget before its timeout, so it leaves before Lambda kills it. With a state store, it
watches only while it holds the reconcile lease, named after the moment it will leave
(:func:`~nodesmith.services.watch.holder_name`); scheduled invocations that find the lease taken
return at once unless that moment is within a schedule period, in which case they wait for the
release and take over (:func:`~nodesmith.services.watch.handover_wait`). Without a state store
(the embedded default) the invocation simply watches.

Pending pods come from the Kubernetes watch API (:class:`~nodesmith.services.pod_watch.PendingPodWatch`:
one list, then a resumed watch in a background thread), which wakes the batcher the moment a pod
becomes pending; when that watch cannot list within :data:`SYNC_WAIT_SECONDS` the invocation falls
back to listing pods every poll.
"""

from __future__ import annotations

import math
import threading
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from nodesmith.handlers.observability import logger
from nodesmith.services.capacity import pending_pods
from nodesmith.services.pod_watch import PendingPodWatch
from nodesmith.services.watch import POLL_SECONDS, WatchOutcome, handover_wait, holder_name, watch

if TYPE_CHECKING:
    from collections.abc import Callable

    from nodesmith.core.ports import CloudProvider, Cluster

__all__ = [
    "BURST_WATCH_SECONDS",
    "EXIT_MARGIN_SECONDS",
    "LEASE",
    "SYNC_WAIT_SECONDS",
    "WatchRun",
    "lease_requests",
    "run_watch",
    "warm_scheduler",
    "watch_burst",
]

EXIT_MARGIN_SECONDS = 30.0
"""Seconds kept free before the function timeout, on top of one pass's drain budget."""

LEASE = "reconcile"
"""The reconcile lease (the same name :mod:`nodesmith.services.leases` uses)."""

_LEASE_SLACK_SECONDS = 30.0

SYNC_WAIT_SECONDS = 10.0
"""How long the pod watch may take to list before the invocation falls back to polling."""

WATCHED_POLL_SECONDS = 1.0
"""The batcher's safety-net poll while the pod watch wakes it (it only reads memory)."""

REQUEST_CHECK_SECONDS = 1.0
"""How often (seconds) the watch reads the lease for passes requested by interruption batches."""

BURST_WATCH_SECONDS = 150.0
"""How long after a burst's cordon (seconds) a woken reconcile invocation keeps provisioning for pods that
turn unschedulable (:func:`watch_burst`): the 2-minute spot interruption notice (EC2 docs), by which the
drains end, plus 30 s for the last evicted pods' replacements to be created and tried by the kube-scheduler."""


@dataclass(frozen=True, slots=True)
class WatchRun:
    """The result of :func:`run_watch`: the last pass's value, passes and batches, or why it skipped."""

    value: Any = None
    passes: int = 0
    batches: tuple[int, ...] = ()
    stopped: str = ""
    skipped: str = ""


def run_watch(
    *,
    run_pass: Callable[[], Any],
    cluster: Cluster,
    run_full: Callable[[], Any] | None = None,
    remaining_seconds: float,
    drain_budget_seconds: float,
    request_id: str,
    state: Any = None,
    wall: Callable[[], float] = time.time,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
    watch_pods: bool = True,
    warm: Callable[[], object] | None = None,
) -> WatchRun:
    """Watch for pending pods for ``remaining_seconds`` minus the margins, under the lease when ``state`` is set.

    ``state`` is a :class:`~nodesmith.core.ports.StateStore` (lease calls only) or None.
    ``run_pass`` runs one provisioning pass (after a batch of pending pods); ``run_full`` (default
    ``run_pass``) one provisioning + disruption pass (at start and every resync). The last value of
    either is returned. ``watch_pods`` False lists pods every poll instead of watching them
    (``sleep`` is then used as is). ``warm`` (e.g. :func:`warm_scheduler`) runs after every full
    pass, so what a batch pass needs is loaded while no pod waits.
    """
    budget = remaining_seconds - EXIT_MARGIN_SECONDS - drain_budget_seconds
    if budget <= 0:
        return WatchRun(value=(run_full or run_pass)(), passes=1, stopped="no time to watch")
    last: list[Any] = [None]

    def one() -> None:
        last[0] = run_pass()

    def full() -> None:
        last[0] = (run_full or run_pass)()
        if warm is not None:
            warm()

    if state is None:
        source, close = _pending_source(cluster=cluster, sleep=sleep, clock=clock, watched=watch_pods)
        try:
            out = watch(run_pass=one, run_resync=full, stop_at=clock() + budget, clock=clock, **source)
        finally:
            close()
        return WatchRun(value=last[0], passes=out.passes, batches=tuple(out.batches), stopped=out.stopped)

    wait = handover_wait(holder=state.lease_holder(name=LEASE, now=wall()), now=wall())
    give_up = clock() + wait
    while True:
        leave_at = wall() + budget
        holder = holder_name(request_id=request_id, leave_at=leave_at)
        ttl = budget + drain_budget_seconds + _LEASE_SLACK_SECONDS
        if state.acquire_lease(name=LEASE, holder=holder, ttl_seconds=ttl, now=wall()):
            break
        if clock() >= give_up:
            held_by = state.lease_holder(name=LEASE, now=wall())
            return WatchRun(skipped=f"skipped: lease held by {held_by or 'another invocation'}")
        sleep(0.2)
        budget = remaining_seconds - EXIT_MARGIN_SECONDS - drain_budget_seconds - (clock() - (give_up - wait))

    def renew() -> bool:
        return bool(state.renew_lease(name=LEASE, holder=holder, ttl_seconds=ttl, now=wall()))

    requested = lease_requests(state, wall=wall, clock=clock)
    source, close = _pending_source(cluster=cluster, sleep=sleep, clock=clock, watched=watch_pods)
    try:
        out = watch(
            run_pass=one,
            run_resync=full,
            stop_at=clock() + budget,
            renew=renew,
            clock=clock,
            requested=requested,
            **source,
        )
    finally:
        close()
        state.release_lease(name=LEASE, holder=holder)
    return WatchRun(value=last[0], passes=out.passes, batches=tuple(out.batches), stopped=out.stopped)


def lease_requests(
    state: Any, *, wall: Callable[[], float] = time.time, clock: Callable[[], float] = time.monotonic
) -> Callable[[float], bool]:
    """The batcher's ``requested(since)`` hook for the holder of the reconcile lease in ``state`` (a
    :class:`~nodesmith.core.ports.StateStore`): True when an interruption batch asked for a pass starting
    after ``since`` (the ``clock`` time the last pass began; :meth:`~nodesmith.core.ports.StateStore.request_pass`).
    Reads the lease at most every :data:`REQUEST_CHECK_SECONDS`; store errors propagate."""
    asked_at = [-REQUEST_CHECK_SECONDS]

    def requested(since: float) -> bool:
        if clock() - asked_at[0] < REQUEST_CHECK_SECONDS:
            return False
        asked_at[0] = clock()
        info = state.lease_info(name=LEASE, now=wall())
        return bool(info and info.requested_at is not None and info.requested_at > wall() - (clock() - since))

    return requested


def watch_burst(
    *,
    run_pass: Callable[[], Any],
    cluster: Cluster,
    seconds: float,
    requested: Callable[[float], bool] | None = None,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
    watch_pods: bool = True,
) -> WatchOutcome:
    """After a woken pass (an interruption burst), keep provisioning for ``seconds`` as pods turn unschedulable.

    The caller holds the reconcile lease and has just run a provisioning pass for the burst's cordoned
    nodes. The kube-scheduler places the evicted pods' replacements on its own, not always where that
    pass packed them, so a few can be left unschedulable when the last capacity fills differently;
    Karpenter's provisioner launches for them within its batch window (1 s idle, 10 s at most), where the
    schedule would leave them for up to a minute. So, like watch mode but without resyncs or disruption,
    ``run_pass`` runs whenever a batch of newly unschedulable pods closes (pods from the pod watch, or
    listed every poll with ``watch_pods`` False or when the watch does not list in
    :data:`SYNC_WAIT_SECONDS`) and whenever ``requested`` (:func:`lease_requests`) says a batch cordoned
    more nodes since the last pass (at once, or after resting as long as the last pass took:
    :func:`~nodesmith.services.watch.watch`). Returns :class:`~nodesmith.services.watch.WatchOutcome` (passes run
    here, batch sizes); exceptions of ``run_pass`` propagate.
    """
    if seconds <= 0:
        return WatchOutcome(stopped="deadline")

    source, close = _pending_source(cluster=cluster, sleep=sleep, clock=clock, watched=watch_pods)
    try:
        return watch(
            run_pass=run_pass,
            stop_at=clock() + seconds,
            clock=clock,
            requested=requested,
            resync_seconds=math.inf,
            catch_up=False,
            **source,
        )
    finally:
        close()


def _pending_source(
    *,
    cluster: Cluster,
    sleep: Callable[[float], None],
    clock: Callable[[], float],
    watched: bool,
) -> tuple[dict[str, Any], Callable[[], None]]:
    """The batcher's pending-pod keyword arguments and a ``close``: the pod watch when it syncs, else listing.

    With the watch: ``pending_pods`` reads memory, ``sleep`` returns as soon as a pod becomes
    pending, ``arrived_at`` says when each did. Listing: every :data:`POLL_SECONDS`, ``sleep`` as given.
    """

    def listed() -> set[str]:
        return {p.key for p in pending_pods(cluster.list_pods())}

    polling: dict[str, Any] = {"pending_pods": listed, "sleep": sleep, "poll_seconds": POLL_SECONDS}
    if not watched:
        return polling, lambda: None
    changed = threading.Event()
    tracker = PendingPodWatch(cluster=cluster, on_change=changed.set, clock=clock)
    if not tracker.start(wait_seconds=SYNC_WAIT_SECONDS):
        tracker.stop()
        logger.warning("pod watch did not list in %.0fs; polling pods instead", SYNC_WAIT_SECONDS)
        return polling, lambda: None

    def wait(seconds: float) -> None:
        changed.wait(seconds)
        changed.clear()

    watching: dict[str, Any] = {
        "pending_pods": tracker.pending,
        "sleep": wait,
        "poll_seconds": WATCHED_POLL_SECONDS,
        "arrived_at": tracker.arrived_at,
    }
    return watching, tracker.stop


def warm_scheduler(*, cluster: Cluster, cloud: CloudProvider) -> int:
    """Load every EC2NodeClass's catalogue now and build the scheduler's per-type data for it.

    Watch mode runs it after each full (resync) pass, so the pass a batch of pending pods triggers
    finds the catalogue (its EC2 and pricing reads, refreshed every 5 minutes), the resolved node
    class (subnets, security groups, AMIs) and the solver's per-type requirements
    (:func:`~nodesmith.core.scheduling.instancetypes.type_info`) already built, instead of building
    them between the pods becoming unschedulable and CreateFleet. With ``cloud.prefetch``
    (:meth:`~nodesmith.adapters.aws.provider.Ec2CloudProvider.prefetch`) caches about to expire are
    refreshed now too. Returns how many instance types are ready; a node class that fails is logged
    and skipped (the pass reports it).
    """
    from nodesmith.core.scheduling.instancetypes import type_info

    prefetch = getattr(cloud, "prefetch", None)  # Ec2CloudProvider: also refreshes caches about to expire
    ready = 0
    for nodeclass in cluster.list_ec2nodeclasses():
        try:
            types = prefetch(nodeclass=nodeclass) if prefetch is not None else cloud.instance_types(nodeclass=nodeclass)
            for it in types:
                type_info(it)
                ready += 1
        except Exception as exc:  # warming only saves time; the pass itself reports the failure
            logger.warning("could not warm the catalogue of EC2NodeClass %s: %s", nodeclass.name, exc)
    return ready
