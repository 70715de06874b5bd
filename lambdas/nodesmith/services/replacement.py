"""Replacement capacity for interrupted nodes: one provisioning pass under the reconcile lease.

The interruption Lambda cordons (taints ``karpenter.sh/disrupted``) every node of a batch, then
calls the callable :func:`replacement_launcher` builds: :func:`nodesmith.services.reconcile.provision_leaving`
(the reconcile scheduler and launcher, for the pods of nodes going away and pending pods) while
holding the reconcile lease (:mod:`nodesmith.services.leases`), so it never launches for the same
pods as a concurrent reconcile pass or another interruption invocation.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

from nodesmith.services.leases import RECONCILE_LEASE, with_lease

if TYPE_CHECKING:
    from collections.abc import Callable

    from nodesmith.core.ports import CloudProvider, Cluster, StateStore
    from nodesmith.services.reconcile import ReconcileOutcome

__all__ = ["CLOCK_SKEW_SECONDS", "Replacement", "replacement_launcher"]

CLOCK_SKEW_SECONDS = 1.0
"""Margin (seconds) for clock differences between Lambda containers when comparing lease times."""


@dataclass(frozen=True, slots=True)
class Replacement:
    """What the replacement pass did: NodeClaims launched, pods placed, or why it did not run.

    ``skipped`` is ``"skipped: lease held by <holder>"`` when another pass held the reconcile
    lease (that pass, or the next scheduled one, provisions for the cordoned nodes); ``seconds``
    is its wall time. ``created_by`` / ``launched_by`` are ``(NodePool, capacity type, count)``
    triples (JSON-safe, for the metrics' dimensions).
    """

    ran: bool
    skipped: str = ""
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
    wall: Callable[[], float] = time.time,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
    provision: Callable[..., ReconcileOutcome] | None = None,
) -> Callable[[], Replacement]:
    """A ``replace`` callable for :func:`handle_batch`: one :func:`provision_leaving` under the reconcile lease.

    The callable is invoked once the batch's nodes are cordoned. When another pass holds the lease
    and took it after that moment (plus :data:`CLOCK_SKEW_SECONDS`), its snapshot already sees these
    nodes as leaving, so this pass is skipped at once; otherwise it waits up to ``wait_seconds`` for
    the lease (a pass that started too early to see these nodes) and then runs, or is skipped when
    the wait runs out (the scheduled reconcile then provisions for the nodes). Without a ``state``
    store there is no lease (single container, tests, the embedded default) and the pass just runs.
    ``provision`` defaults to :func:`~nodesmith.services.reconcile.provision_leaving`, imported when
    the pass runs, so a cold interruption Lambda cordons before it loads the scheduler. ``wall``
    (epoch seconds), ``clock`` (monotonic seconds) and ``sleep`` drive the wait (injectable for tests).
    """

    def run() -> Replacement:
        started = clock()
        ready_at = wall()  # the batch's nodes are tainted by now: a snapshot taken later sees them leaving

        def work() -> ReconcileOutcome:
            if provision is not None:
                return provision(cluster=cluster, cloud=cloud, cluster_name=cluster_name, now=wall())
            from nodesmith.services.reconcile import provision_leaving

            return provision_leaving(cluster=cluster, cloud=cloud, cluster_name=cluster_name, now=wall())

        if state is None:
            out: ReconcileOutcome | None = work()
        else:
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
                covered=lambda info: info.acquired_at >= ready_at + CLOCK_SKEW_SECONDS,
            )
            if not leased.acquired:
                return Replacement(ran=False, skipped=leased.skipped_reason, seconds=clock() - started)
            out = leased.value
        assert out is not None
        return Replacement(
            ran=True,
            nodeclaims_launched=out.nodeclaims_launched,
            launched=tuple(out.launched),
            pods_rescheduled=out.pods_rescheduled,
            pods_scheduled=out.pods_scheduled,
            offerings_marked_unavailable=out.offerings_marked_unavailable,
            errors=tuple(out.errors),
            seconds=clock() - started,
            created_by=tuple((pool, kind, n) for (pool, kind), n in sorted(out.created_by.items())),
            launched_by=tuple((pool, kind, n) for (pool, kind), n in sorted(out.launched_by.items())),
        )

    return run
