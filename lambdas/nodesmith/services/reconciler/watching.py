"""The reconcile function's watch mode (``NODESMITH_RECONCILE_MODE=watch``) and a wake's burst of passes.

One invocation runs :func:`nodesmith.services.provisioning.watch.watch` until :data:`EXIT_MARGIN_SECONDS` before its
timeout, so it leaves before Lambda kills it. With a state store, it
watches only while it holds the reconcile lease, named after the moment it will leave
(:func:`~nodesmith.services.provisioning.watch.holder_name`); scheduled invocations that find the lease taken
return at once unless that moment is within a schedule period, in which case they wait for the
release and take over (:func:`~nodesmith.services.provisioning.watch.handover_wait`). Without a state store
(the embedded default) the invocation simply watches.

Pending pods come from the Kubernetes watch API (:class:`~nodesmith.services.provisioning.pod_watch.PendingPodWatch`:
one list, then a resumed watch in a background thread), which wakes the batcher the moment a pod
becomes pending; when that watch cannot list within :data:`SYNC_WAIT_SECONDS` the invocation falls
back to listing pods every poll. The invocation's passes read pods, Nodes, NodeClaims and NodePools from memory
kept current by watches (:meth:`~nodesmith.adapters.kube.cluster.KubeCluster.follow`). Nodes cordoned for an
interruption or a disruption owe a pass too
(:class:`~nodesmith.services.provisioning.watch.CordonWatch`), so their pods' capacity launches while they drain.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from nodesmith.services.provisioning.capacity import pending_pods
from nodesmith.services.provisioning.pod_watch import PendingPodWatch
from nodesmith.services.provisioning.watch import (
    POLL_SECONDS,
    CordonWatch,
    PendingSource,
    WatchOutcome,
    WatchTiming,
    handover_wait,
    holder_name,
    watch,
)

if TYPE_CHECKING:
    from collections.abc import Callable

    from nodesmith.core.ports import CloudProvider, Cluster

LOG = logging.getLogger(__name__)

__all__ = [
    "BURST_WATCH_SECONDS",
    "EXIT_MARGIN_SECONDS",
    "LEASE",
    "SYNC_WAIT_SECONDS",
    "Clock",
    "WatchPasses",
    "WatchRun",
    "pending_source",
    "run_watch",
    "warm_alongside",
    "warm_scheduler",
    "watch_burst",
]

EXIT_MARGIN_SECONDS = 30.0
"""Seconds kept free before the function timeout (a pass in progress must end before Lambda stops it)."""

LEASE = "reconcile"
"""The reconcile lease (the same name :mod:`nodesmith.services.provisioning.leases` uses)."""

_LEASE_SLACK_SECONDS = 30.0

SYNC_WAIT_SECONDS = 10.0
"""How long the pod watch may take to list before the invocation falls back to polling."""

WATCHED_POLL_SECONDS = 1.0
"""The batcher's safety-net poll while the pod watch wakes it (it only reads memory)."""

BURST_WATCH_SECONDS = 150.0
"""How long after a wake (seconds) the woken reconcile invocation keeps provisioning for nodes cordoned and pods
that turn unschedulable (:func:`watch_burst`): the 2-minute spot interruption notice (EC2 docs), by which the
drains end, plus 30 s for the last evicted pods' replacements to be created and tried by the kube-scheduler."""


@dataclass(frozen=True, slots=True)
class Clock:
    """Time for the watch: ``wall`` epoch seconds (the lease), ``monotonic`` seconds, ``sleep``; injectable."""

    wall: Callable[[], float] = time.time
    monotonic: Callable[[], float] = time.monotonic
    sleep: Callable[[float], None] = time.sleep


@dataclass(frozen=True, slots=True)
class WatchPasses:
    """What :func:`run_watch` runs: ``provision`` (one provisioning pass, for a batch of pods or new cordons),
    ``full`` (provisioning and disruption, at start and every resync), ``warm`` (optional: :func:`warm_scheduler`,
    while the cluster is first listed and after every full pass, so what a pass needs is loaded while no pod
    waits) and ``settle`` (optional: what keeps the cluster, listed into memory, out of the cyclic collector's way,
    the reconcile handler's :func:`~nodesmith.handlers.heap.settle`; run once the watch cache has listed)."""

    provision: Callable[[], Any]
    full: Callable[[], Any]
    warm: Callable[[], object] | None = None
    settle: Callable[[], object] | None = None


@dataclass(frozen=True, slots=True)
class WatchRun:
    """The result of :func:`run_watch`: the last pass's value, passes and batches, or why it skipped."""

    value: Any = None
    passes: int = 0
    batches: tuple[int, ...] = ()
    stopped: str = ""
    skipped: str = ""


def run_watch(*, passes: WatchPasses, cluster: Cluster, remaining_seconds: float, request_id: str,
              state: Any = None, clock: Clock | None = None, watch_pods: bool = True) -> WatchRun:  # fmt: skip
    """Watch for pending pods (and new cordons) for ``remaining_seconds`` minus :data:`EXIT_MARGIN_SECONDS`, under
    the lease when ``state`` (a :class:`~nodesmith.core.ports.StateStore`, lease calls only) is set.

    ``passes`` are the passes to run; the last value of either is returned. ``watch_pods`` False lists pods
    every poll instead of watching them.
    """
    clock = clock or Clock()
    budget = remaining_seconds - EXIT_MARGIN_SECONDS
    if budget <= 0:
        return WatchRun(value=passes.full(), passes=1, stopped="no time to watch")
    last: list[Any] = [None]

    def one() -> None:
        last[0] = passes.provision()

    def full() -> None:
        last[0] = passes.full()
        if passes.warm is not None:
            passes.warm()

    holder = ""
    renew = None
    if state is not None:
        wait = handover_wait(holder=state.lease_holder(name=LEASE, now=clock.wall()), now=clock.wall())
        give_up = clock.monotonic() + wait
        while True:
            holder = holder_name(request_id=request_id, leave_at=clock.wall() + budget)
            ttl = budget + _LEASE_SLACK_SECONDS
            if state.acquire_lease(name=LEASE, holder=holder, ttl_seconds=ttl, now=clock.wall()):
                break
            if clock.monotonic() >= give_up:
                held_by = state.lease_holder(name=LEASE, now=clock.wall())
                return WatchRun(skipped=f"skipped: lease held by {held_by or 'another invocation'}")
            clock.sleep(0.2)
            budget = remaining_seconds - EXIT_MARGIN_SECONDS - (clock.monotonic() - (give_up - wait))

        def renew() -> bool:
            return bool(state.renew_lease(name=LEASE, holder=holder, ttl_seconds=ttl, now=clock.wall()))

    warmed = warm_alongside(passes.warm)  # the catalogue's AWS reads while the cluster is listed, not after
    unfollow = _follow(cluster, settle=passes.settle)
    source, close = pending_source(cluster=cluster, clock=clock, watched=watch_pods)
    try:
        warmed()
        out = watch(
            run_pass=one,
            run_resync=full,
            source=source,
            stop_at=clock.monotonic() + budget,
            renew=renew,
            cordons=CordonWatch(cluster=cluster, clock=clock.monotonic),
            timing=WatchTiming(clock=clock.monotonic),
        )
    finally:
        close()
        unfollow()
        if state is not None:
            state.release_lease(name=LEASE, holder=holder)
    return WatchRun(value=last[0], passes=out.passes, batches=tuple(out.batches), stopped=out.stopped)


def warm_alongside(work: Callable[[], object] | None) -> Callable[[], None]:
    """Start ``work`` (the catalogue warm-up, :func:`warm_scheduler`) in a thread of its own and return what waits
    for it to end. A pass needs both the cluster (listed by the watch cache, :func:`_follow`, or by a scheduled
    pass itself) and the catalogue, read from EC2, SSM and the Pricing API: reading them at once, from two
    services, puts the longer of the two on the way to CreateFleet instead of their sum. A failure is logged
    (warming only saves time; the pass reads again and reports it)."""
    if work is None:
        return lambda: None

    def run() -> None:
        try:
            work()
        except Exception as exc:
            LOG.warning("could not warm the catalogue while the cluster was listed: %s", exc)

    thread = threading.Thread(target=run, name="warm-catalogue", daemon=True)
    thread.start()
    return thread.join


def _follow(cluster: Cluster, *, settle: Callable[[], object] | None) -> Callable[[], None]:
    """Have ``cluster`` keep the kinds every pass lists in memory, when it can
    (:meth:`~nodesmith.adapters.kube.cluster.KubeCluster.follow`: one list each, then watches, a 410 Gone answered
    by listing again), so the watching invocation's passes read memory; returns what stops it. A container's next
    watching invocation resumes from what the last one held (one short watch each to the API server's bookmark) instead
    of listing again. A kind not current within :data:`SYNC_WAIT_SECONDS` is read from the API as in poll mode. What
    is held lives as long as the container: ``settle`` runs once it is listed, so no collection traverses it again.
    """
    follow = getattr(cluster, "follow", None)
    if follow is None:
        return lambda: None
    if not follow(wait_seconds=SYNC_WAIT_SECONDS):
        LOG.warning("watch cache did not list in %.0fs; its passes list from the API", SYNC_WAIT_SECONDS)
    if settle is not None:
        settle()
    unfollow: Callable[[], None] = cluster.unfollow  # type: ignore[attr-defined]
    return unfollow


def watch_burst(
    *,
    run_pass: Callable[[], Any],
    cluster: Cluster,
    seconds: float,
    clock: Clock | None = None,
    watch_pods: bool = True,
) -> WatchOutcome:
    """After a woken pass, keep provisioning for ``seconds`` as nodes are cordoned and pods turn unschedulable.

    An interruption batch wakes the reconcile function once its nodes are cordoned; the woken invocation runs a
    provisioning pass, then this: like watch mode but without resyncs or disruption, ``run_pass`` runs when more
    nodes are cordoned (:class:`~nodesmith.services.provisioning.watch.CordonWatch`: later batches of the burst,
    whose wakes wait behind this invocation) and when a batch of newly unschedulable pods closes (the
    kube-scheduler does not always place evicted pods where a pass packed them; Karpenter's provisioner launches
    for them within its batch window, where the schedule would leave them for a minute). Exceptions of
    ``run_pass`` propagate.
    """
    if seconds <= 0:
        return WatchOutcome(stopped="deadline")
    clock = clock or Clock()
    source, close = pending_source(cluster=cluster, clock=clock, watched=watch_pods)
    try:
        return watch(
            run_pass=run_pass,
            source=source,
            stop_at=clock.monotonic() + seconds,
            cordons=CordonWatch(cluster=cluster, clock=clock.monotonic),
            catch_up=False,
            timing=WatchTiming(resync_seconds=math.inf, clock=clock.monotonic),
        )
    finally:
        close()


def pending_source(*, cluster: Cluster, clock: Clock, watched: bool) -> tuple[PendingSource, Callable[[], None]]:
    """Where the batcher reads pending pods, and a ``close``: the pod watch when it syncs, else listing.

    With the watch: ``pending`` reads memory, ``sleep`` returns as soon as a pod becomes pending,
    ``arrived_at`` says when each did. Listing: every :data:`POLL_SECONDS`, ``clock.sleep`` as given.
    """

    def listed() -> set[str]:
        return {p.key for p in pending_pods(cluster.list_pods())}

    polling = PendingSource(pending=listed, sleep=clock.sleep, poll_seconds=POLL_SECONDS)
    if not watched:
        return polling, lambda: None
    changed = threading.Event()
    tracker = PendingPodWatch(cluster=cluster, on_change=changed.set, clock=clock.monotonic)
    if not tracker.start(wait_seconds=SYNC_WAIT_SECONDS):
        tracker.stop()
        LOG.warning("pod watch did not list in %.0fs; polling pods instead", SYNC_WAIT_SECONDS)
        return polling, lambda: None

    def wait(seconds: float) -> None:
        changed.wait(seconds)
        changed.clear()

    watching = PendingSource(
        pending=tracker.pending, sleep=wait, poll_seconds=WATCHED_POLL_SECONDS, arrived_at=tracker.arrived_at
    )
    return watching, tracker.stop


def warm_scheduler(*, cluster: Cluster, cloud: CloudProvider) -> int:
    """Load every EC2NodeClass's catalogue now and build the scheduler's per-type data for it.

    Watch mode runs it while the cluster is first listed and after each full (resync) pass, so the pass a batch
    of pending pods triggers finds the catalogue (its EC2 and pricing reads, refreshed every 5 minutes), the
    resolved node class (subnets, security groups, AMIs) and the solver's per-type requirements
    (:func:`~nodesmith.core.scheduling.instancetypes.type_info`) already built, instead of building them between
    the pods becoming unschedulable and CreateFleet; a scheduled pass, and a wake's first, run it while they list
    the cluster (:func:`warm_alongside`). With ``cloud.prefetch``
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
            LOG.warning("could not warm the catalogue of EC2NodeClass %s: %s", nodeclass.name, exc)
    return ready
