"""The reconcile use case: one pass of Karpenter's provisioning loop, run from a schedule.

``reconcile`` snapshots the cluster (Nodes before Pods, as Karpenter does, so capacity is never
over-estimated), brings launched NodeClaims up to date (registration, initialization, liveness,
garbage collection, ``nodeclaims`` lifecycle), solves the pending pods against existing and
in-flight capacity, creates and launches a NodeClaim per plan, and reports what it did.

Capacity errors: when CreateFleet can fill none of a NodeClaim's offerings, the provider marks them
unavailable (Karpenter's 3-minute unavailable-offerings cache, ``karpenter-v1.md`` §2.5) and raises
:class:`~nodesmith.core.errors.InsufficientCapacityError`. Karpenter deletes the NodeClaim and
re-simulates in its next batch; a Lambda pass may be a minute apart, so here the affected pods are
solved again within the same call (bounded by ``max_solve_attempts``) against a catalogue with
those offerings unavailable, falling back to other types, zones, on-demand or the next NodePool.

The pass's state and steps are in :mod:`.reconcile_pass`; creating and launching NodeClaims in :mod:`.creation`.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from nodesmith.core.scheduling import solve
from nodesmith.core.scheduling.types import SchedulingInput, SchedulingResult
from nodesmith.services.provisioning.capacity import KeptCapacity, leaving_node_names
from nodesmith.services.provisioning.lifecycle import REGISTRATION_TTL_SECONDS
from nodesmith.services.provisioning.outcome import ReconcileOutcome
from nodesmith.services.provisioning.reconcile_pass import ReconcilePass

if TYPE_CHECKING:
    from nodesmith.services.ports import Ports
    from nodesmith.services.provisioning.fleet_listing import FleetListing

__all__ = ["MAX_POD_EVENTS", "MAX_SOLVE_ATTEMPTS", "ReconcileOptions", "ReconcileOutcome", "reconcile"]

MAX_SOLVE_ATTEMPTS = 6
"""Solves per pass: the first, plus re-solves after capacity errors. Each re-solve sees strictly
fewer available offerings, so the loop ends anyway; the bound caps CreateFleet calls per pass."""

MAX_POD_EVENTS = 100
"""At most this many pod Events (FailedScheduling, Nominated) per pass, to bound API calls."""

Solver = Callable[[SchedulingInput], SchedulingResult]


@dataclass(frozen=True, slots=True)
class ReconcileOptions:
    """How one pass runs (see :func:`reconcile`).

    ``provision_first`` (watch mode's batch passes and a wake's) solves and launches before the NodeClaim
    lifecycle; ``collect_garbage`` False (it ran less than
    :data:`~nodesmith.services.provisioning.lifecycle.GARBAGE_COLLECTION_INTERVAL_SECONDS` ago) does not list the fleet.
    ``max_solve_attempts`` bounds the solves per pass (re-solves after capacity errors), ``max_pod_events`` the
    pod Events; ``solver`` is the scheduler and ``clock`` (seconds, any origin) times it and the launches (a
    NodeClaim's ``Launched`` time is ``now`` plus the clock's seconds since the pass began). A deleting NodeClaim whose
    termination request is older than ``request_stale_seconds`` gets another (:func:`~.termination.requests.
    sweep_deletions`). ``static_capacity`` (Karpenter's feature gate ``StaticCapacity``) keeps static NodePools at
    their ``replicas`` (:meth:`~.reconcile_pass.ReconcilePass.scale_static`); off, they are left alone. A launched
    NodeClaim without a registered Node after ``registration_ttl_seconds`` is deleted and its instance terminated
    (Karpenter's ``registrationTTL``, 15 minutes). ``kept_capacity`` is what a long-lived caller keeps of the
    existing capacity between its passes (:class:`~.capacity.KeptCapacity`; None: derived afresh every pass).
    ``fleet_listing`` is what such a caller keeps of garbage collection's fleet listing
    (:class:`~.fleet_listing.FleetListing`): the listing runs across its passes, none waits for it, and the
    instance-gone check and the orphan sweep run in the first pass after it ended (None: the pass lists the fleet
    alongside its work and waits for it).
    """

    provision_first: bool = False
    collect_garbage: bool = True
    max_solve_attempts: int = MAX_SOLVE_ATTEMPTS
    max_pod_events: int = MAX_POD_EVENTS
    solver: Solver = solve
    clock: Callable[[], float] = time.perf_counter
    request_stale_seconds: float = 300.0
    static_capacity: bool = False
    registration_ttl_seconds: float = REGISTRATION_TTL_SECONDS
    kept_capacity: KeptCapacity | None = None
    fleet_listing: FleetListing | None = None


def reconcile(*, ports: Ports, now: float, options: ReconcileOptions | None = None) -> ReconcileOutcome:
    """Run one provisioning pass and return what it did.

    Steps: snapshot (Nodes, Pods, DaemonSets, NodePools, EC2NodeClasses, NodeClaims, our
    instances); with ``ports.reservations``, EC2NodeClass ``status.capacityReservations`` and the termination of
    the NodeClaims of Capacity Blocks about to end (:mod:`.reservations`); link NodeClaims to their Nodes and
    garbage-collect (liveness; instance gone and orphans after provisioning, below); make sure every deletion has a
    termination request on its way (``ports.queue``; a user's ``kubectl delete nodeclaim`` or ``delete node``,
    :func:`~.termination.requests.sweep_deletions`); finalize EC2NodeClasses
    (:func:`~.nodeclasses.finalize_nodeclasses`); load each EC2NodeClass's catalogue; launch NodeClaims left
    unlaunched by an earlier pass; keep static NodePools at their ``replicas``
    (``options.static_capacity``); solve the pending pods (and those of nodes going away) against registered nodes
    and in-flight NodeClaims; create and launch a NodeClaim per plan, re-solving pods after capacity errors;
    post Events.

    ``now`` is the pass time in epoch seconds (liveness, orphan grace, timestamps, names). Kubernetes and EC2
    errors on one object are reported in ``outcome.errors`` and do not stop the pass; errors while listing (the
    snapshot) propagate.

    With ``options.provision_first`` the pass solves and launches before the NodeClaim lifecycle, whose
    registration writes (labels, status, Events) then no longer sit between the pending pods and CreateFleet,
    as in Karpenter where provisioning and the lifecycle are separate controllers. Capacity is unaffected
    (nodes match NodeClaims by providerID, linked or not); NodeClaims left unlaunched wait for the next full
    pass (its garbage collection decides first). Such a pass provisions with the instances of in-flight
    NodeClaims only (:func:`~nodesmith.services.provisioning.inputs.provisioning_instances`) and lists the fleet,
    which only the lifecycle's garbage collection needs, after its launches.

    Garbage collection's listing of the fleet (``options.collect_garbage``) runs in the background from the pass's
    start, so pending pods never wait for it: a full pass's lifecycle runs before provisioning without it
    (registration, initialization, liveness), and the instance-gone check and the orphan sweep run once the pass
    has launched (:meth:`~.reconcile_pass.ReconcilePass.collect_fleet_garbage`), the pods of the nodes they remove
    provisioned for in the same pass; a ``provision_first`` pass's lifecycle takes the listing after its launches.

    With ``options.fleet_listing`` (a caller running pass after pass) the listing outlives the pass: a pass that
    finds it still under way skips the instance-gone check and the orphan sweep (``outcome.garbage_collected``
    False, so the collection stays due) instead of waiting for it.

    ``options.collect_garbage`` False does not list the fleet at all: the pass reads the instances of in-flight
    NodeClaims only, skips the instance-gone check and the orphan sweep (registration, initialization and
    liveness still run) and prices registered nodes by their labels; ``outcome.garbage_collected`` says which it
    did (a NodeClaim never launched still makes it list).
    """
    options = options or ReconcileOptions()
    # the fleet is listed only when garbage collection is due, and alongside the pass, never in front of CreateFleet
    run = ReconcilePass(ports=ports, now=now, options=options, fleet=options.collect_garbage)
    try:
        run.capacity_reservations()
        if options.provision_first:
            run.leaving = leaving_node_names(run.snap.nodes, nodeclaims=run.claims)
            run.prepare()
            run.provision()
            if options.collect_garbage:
                run.list_fleet()
            run.lifecycle()
            return run.finish()
        run.lifecycle()
        run.prepare()
        run.launch_leftovers()
        run.scale_static()
        run.provision()
        if options.collect_garbage:
            run.collect_fleet_garbage()
        return run.finish()
    finally:
        run.close()
