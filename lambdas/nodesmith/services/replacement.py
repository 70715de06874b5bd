"""Replacement capacity for interrupted nodes: one provisioning pass under the reconcile lease.

The interruption Lambda cordons (taints ``karpenter.sh/disrupted``) every node of a batch, then
calls the callable :func:`replacement_launcher` builds: :func:`nodesmith.services.reconcile.provision_leaving`
(the reconcile scheduler and launcher, for the pods of nodes going away and pending pods) while
holding the reconcile lease (:mod:`nodesmith.services.leases`), so it never launches for the same
pods as a concurrent reconcile pass or another interruption invocation.
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from dataclasses import dataclass
from typing import TYPE_CHECKING

from nodesmith.services.leases import RECONCILE_LEASE, Leased, with_lease

if TYPE_CHECKING:
    from collections.abc import Callable

    from nodesmith.core.ports import CloudProvider, Cluster, LeaseInfo, StateStore
    from nodesmith.services.reconcile import ReconcileOutcome

__all__ = ["CLOCK_SKEW_SECONDS", "WOKEN", "Replacement", "replacement_launcher"]

LOG = logging.getLogger(__name__)

WOKEN = "skipped: woke the reconcile function for the pass"
"""``Replacement.skipped`` when the pass was left to the reconcile function."""

CLOCK_SKEW_SECONDS = 1.0
"""Margin (seconds) for clock differences between Lambda containers when comparing lease times."""


@dataclass(frozen=True, slots=True)
class Replacement:
    """What the replacement pass did: NodeClaims launched, pods placed, or why it did not run.

    ``skipped`` is ``"skipped: lease held by <holder> (...)"`` when another pass held the reconcile lease: its
    pass already covers the cordoned nodes, or (``requested``) it was asked for another pass, which it runs
    before it lets go of the lease; or (``woke``) the lease was free and the reconcile function was woken to
    run the pass (``skipped`` is :data:`WOKEN`). ``reruns`` counts the passes this one ran again on others'
    request (their launches are included in the counts); ``seconds`` is the wall time of all of them.
    ``created_by`` / ``launched_by`` are ``(NodePool, capacity type, count)`` triples (JSON-safe, for the
    metrics' dimensions).
    """

    ran: bool
    skipped: str = ""
    requested: bool = False
    woke: bool = False
    reruns: int = 0
    nodeclaims_launched: int = 0
    launched: tuple[str, ...] = ()
    pods_rescheduled: int = 0
    pods_scheduled: int = 0
    offerings_marked_unavailable: int = 0
    errors: tuple[str, ...] = ()
    seconds: float = 0.0
    created_by: tuple[tuple[str, str, int], ...] = ()
    launched_by: tuple[tuple[str, str, int], ...] = ()


def replacement_launcher(
    *,
    cluster: Cluster,
    cloud: CloudProvider,
    cluster_name: str,
    state: StateStore | None,
    holder: str,
    ttl_seconds: float,
    wait_seconds: float = 10.0,
    again_until: float | None = None,
    wake: Callable[[float], None] | None = None,
    wall: Callable[[], float] = time.time,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
    provision: Callable[..., ReconcileOutcome] | None = None,
) -> Callable[[float], Replacement]:
    """A ``replace`` callable for :func:`handle_batch`: one :func:`provision_leaving` under the reconcile lease.

    The callable is invoked once the batch's nodes are cordoned, with the moment they all were (``ready_at``,
    epoch seconds; default: now). When another pass holds the lease and took it after that moment
    (plus :data:`CLOCK_SKEW_SECONDS`), its snapshot already sees these nodes as leaving, so
    this pass is skipped at once. When the holder started too early to see them, it is asked for another pass
    (:meth:`~nodesmith.core.ports.StateStore.request_pass`), which it runs before it lets go of the lease, and
    this one is skipped at once too: in a burst, hundreds of invocations would otherwise each wait for the
    lease in turn, holding the concurrency the next messages' cordons need. Holding the lease, this pass runs
    again as long as such requests come in, for up to ``wait_seconds``, or with ``again_until`` (a ``clock``
    value: the invocation's own deadline less a margin) as long as another pass as long as the last still ends
    by then; a request still pending then is left to the next holder (the next interruption batch or the
    scheduled reconcile). With ``wake`` (the reconcile function's asynchronous invoke, given the cordon time
    in epoch seconds), the lease is not read: the pass is asked for in one conditional write
    (:meth:`~nodesmith.core.ports.StateStore.request_pass`), which a held lease takes (its holder runs the pass;
    one that took the lease after the cordon, whose pass covers these nodes already, finds the request no later
    than its pass and lets go) and a free one refuses, with no attempt to take it; free, the reconcile function is
    woken for the pass instead, so a pass longer than this invocation's timeout still ends (killed at the
    timeout, it would launch nothing, and so would the next batch's); if the wake fails, this pass runs here.
    Every batch of a burst thus costs one state-table call for its pass: reading the lease first made two, both on
    the path of an invocation that has to end before its turn of the event source takes the next batch.
    ``wait_seconds`` also bounds the wait for a lease that frees between two checks. Without a ``state`` store
    there is no lease (single container, tests, the embedded default) and the pass just runs. ``provision`` defaults to
    :func:`~nodesmith.services.reconcile.provision_leaving`, imported when the pass runs, so a cold
    interruption Lambda cordons before it loads the scheduler. ``wall`` (epoch seconds), ``clock`` (monotonic
    seconds) and ``sleep`` drive the wait (injectable for tests).
    """

    def run(ready_at: float | None = None) -> Replacement:
        started = clock()
        if ready_at is None:  # the batch's nodes are tainted by now: a snapshot taken later sees them leaving
            ready_at = wall()
        outs: list[ReconcileOutcome] = []
        sees_them = ready_at + CLOCK_SKEW_SECONDS  # a pass starting after this sees these nodes leaving

        def covered(info: LeaseInfo) -> bool:  # the holder took the lease late enough to see them
            return info.acquired_at >= sees_them

        def work() -> ReconcileOutcome:
            if provision is not None:
                out = provision(cluster=cluster, cloud=cloud, cluster_name=cluster_name, now=wall())
            else:
                from nodesmith.services.reconcile import provision_leaving

                out = provision_leaving(cluster=cluster, cloud=cloud, cluster_name=cluster_name, now=wall())
            outs.append(out)
            return out

        if state is None:
            work()
            reruns = 0
        else:
            if wake is not None:
                # held (every batch of a burst after the first): left to the holder in this one conditional write
                if state.request_pass(name=RECONCILE_LEASE, after=sees_them, now=wall()):
                    skipped = Leased(acquired=False, requested=True).skipped_reason
                    return Replacement(ran=False, skipped=skipped, requested=True, seconds=clock() - started)
                try:  # free
                    wake(ready_at)
                except Exception as exc:  # no wake queued: run the pass here, as without one
                    LOG.warning("waking the reconcile function failed, running the pass here: %s", exc)
                else:
                    seconds = clock() - started
                    return Replacement(ran=False, skipped=WOKEN, requested=True, woke=True, seconds=seconds)
            leased = with_lease(
                state=state,
                name=RECONCILE_LEASE,
                holder=holder,
                ttl_seconds=ttl_seconds,
                work=work,
                wait_seconds=wait_seconds,
                wall=wall,
                clock=clock,
                sleep=sleep,
                covered=covered,
                request_after=sees_them,
                again=work,
                again_within_seconds=wait_seconds,
                again_until=again_until,
            )
            if not leased.acquired:
                return Replacement(
                    ran=False, skipped=leased.skipped_reason, requested=leased.requested, seconds=clock() - started
                )
            reruns = leased.reruns
        created: Counter[tuple[str, str]] = Counter()
        launched: Counter[tuple[str, str]] = Counter()
        for out in outs:
            created.update(out.created_by)
            launched.update(out.launched_by)
        return Replacement(
            ran=True,
            reruns=reruns,
            nodeclaims_launched=sum(out.nodeclaims_launched for out in outs),
            launched=tuple(name for out in outs for name in out.launched),
            pods_rescheduled=max(out.pods_rescheduled for out in outs),
            pods_scheduled=sum(out.pods_scheduled for out in outs),
            offerings_marked_unavailable=sum(out.offerings_marked_unavailable for out in outs),
            errors=tuple(e for out in outs for e in out.errors),
            seconds=clock() - started,
            created_by=tuple((pool, kind, n) for (pool, kind), n in sorted(created.items())),
            launched_by=tuple((pool, kind, n) for (pool, kind), n in sorted(launched.items())),
        )

    return run
