"""What a warm reconcile container keeps between its passes, and the passes it runs with it.

A Lambda container lives on between invocations, and a watching invocation or a wake runs pass after pass. What one
pass derives and the next can use again lives in one :class:`WarmContainer` per container (the reconcile handler
holds it), so a pass over a cluster that did not change costs what changed, as Karpenter's controllers keep their
state in memory between reconciles. A new container starts empty: everything kept is also recorded in the cluster
(the NodeClaims' conditions and annotations), or derived again at a cost.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from nodesmith.services.provisioning.capacity import KeptCapacity
from nodesmith.services.provisioning.fleet_listing import FleetListing
from nodesmith.services.provisioning.lifecycle import GARBAGE_COLLECTION_INTERVAL_SECONDS, REGISTRATION_TTL_SECONDS
from nodesmith.services.provisioning.reconcile import ReconcileOptions, ReconcileOutcome, reconcile

if TYPE_CHECKING:
    from collections.abc import Callable

    from nodesmith.core.disruption import DisruptionSettings
    from nodesmith.services.disruption.service import Consolidated, DisruptionOutcome, PendingCommand
    from nodesmith.services.ports import Ports
    from nodesmith.services.provisioning.inputs import Snapshot

__all__ = ["PassSettings", "WarmContainer"]


@dataclass(frozen=True, slots=True)
class PassSettings:
    """The configuration a container's passes run with (the reconcile function's environment, parsed).

    ``request_stale_seconds``: a deleting NodeClaim whose termination request is older gets another
    (:class:`~nodesmith.services.provisioning.reconcile.ReconcileOptions`). ``static_capacity``: Karpenter's feature
    gate ``StaticCapacity``. ``registration_ttl_seconds``: Karpenter's ``registrationTTL`` (15 minutes).
    ``disruption``: the disruption pass's settings, None when disruption is off. ``validation_delay_seconds``: how long
    a disruption command waits before it is validated again and executed (Karpenter: 15 s).
    """

    request_stale_seconds: float = 300.0
    static_capacity: bool = False
    registration_ttl_seconds: float = REGISTRATION_TTL_SECONDS
    disruption: DisruptionSettings | None = None
    validation_delay_seconds: float = 15.0


@dataclass(slots=True)
class WarmContainer:
    """One container's reconcile state, kept from pass to pass; not thread-safe (a container runs one pass at a time).

    * ``kept_capacity``: the existing capacity derived from each unchanged registered node
      (:class:`~nodesmith.services.provisioning.capacity.KeptCapacity`);
    * ``fleet_listing``: garbage collection's fleet listing, run across the passes of a watching invocation or a wake
      (:class:`~nodesmith.services.provisioning.fleet_listing.FleetListing`);
    * ``collected``: the cloud provider of the last pass that listed the fleet and collected garbage, and when
      (epoch seconds) that pass ended, on the pass's clock (see :meth:`garbage_collection_due`);
    * ``pending`` and ``recent_events``: the disruption commands found, for exact re-validation, and the rejection
      Events posted, for deduplication (:func:`~nodesmith.services.disruption.service.disrupt`);
    * ``consolidated``: the consolidation state the last disruption pass found nothing in, and the node views it
      keeps (:class:`~nodesmith.services.disruption.consolidated.Consolidated`), made by the first disruption pass;
    * ``last_pass_began``: when (epoch seconds) a provisioning pass last began (see :meth:`began_since`).

    ``clock`` (monotonic seconds) times the passes; injectable.
    """

    kept_capacity: KeptCapacity = field(default_factory=KeptCapacity)
    fleet_listing: FleetListing = field(default_factory=FleetListing)
    collected: tuple[object, float] | None = None
    pending: dict[str, PendingCommand] = field(default_factory=dict)
    recent_events: dict[str, float] = field(default_factory=dict)
    consolidated: Consolidated | None = None
    last_pass_began: float | None = None
    clock: Callable[[], float] = time.monotonic

    def garbage_collection_due(self, *, cloud: object, now: float) -> bool:
        """True when a pass at ``now`` (epoch seconds) with the cloud provider ``cloud`` lists the fleet and collects
        garbage: this container never did with that provider (a new container, or its ports replaced), or the pass
        that last did ended at least
        :data:`~nodesmith.services.provisioning.lifecycle.GARBAGE_COLLECTION_INTERVAL_SECONDS` (2 minutes) before
        ``now``, or after it (the clock went back: better list than trust a time to come).

        Karpenter's garbage collection controllers requeue 2 minutes after each reconcile returns, whatever triggers
        its provisioning (``[core]:pkg/controllers/nodeclaim/garbagecollection/controller.go``,
        ``[aws]:pkg/controllers/nodeclaim/garbagecollection/controller.go``); scheduled passes, watch mode's batch
        passes and a wake's passes follow the same cadence here, counted from the end of the collecting pass, so
        passes longer than the interval (a very large fleet) do not list the fleet every time.
        """
        if not self._collected_with(cloud) or self.collected is None:
            return True
        elapsed = now - self.collected[1]
        return elapsed < 0 or elapsed >= GARBAGE_COLLECTION_INTERVAL_SECONDS

    def began_since(self, at: float) -> bool:
        """Whether a provisioning pass of this container began at or after ``at`` (epoch seconds): that pass saw
        whatever was done in the cluster before ``at`` (a wake for nodes cordoned then is served)."""
        return self.last_pass_began is not None and self.last_pass_began >= at

    def provision(
        self,
        *,
        ports: Ports,
        settings: PassSettings,
        now: float | None = None,
        provision_first: bool = False,
        more_to_come: bool = False,
    ) -> ReconcileOutcome:
        """One provisioning pass (:func:`~nodesmith.services.provisioning.reconcile.reconcile`) at ``now`` (epoch
        seconds; default the wall clock) with ``ports`` and what this container keeps.

        ``provision_first``: launch before the NodeClaim lifecycle (watch mode's batch passes and a wake's). The pass
        lists the fleet for garbage collection (the instance-gone check and the orphan sweep) only when
        :meth:`garbage_collection_due` says so; in between, it reads only the instances of in-flight NodeClaims, by
        id. ``more_to_come``: the pass is one of an invocation that runs pass after pass (watch mode, a wake), so,
        once this container has collected with its cloud provider, the fleet listing runs across them
        (``fleet_listing``) and no pass waits for it. A scheduled pass, and a container's first collection, list and
        wait within the pass: the first finds the instance cache cold, and the disruption pass after it would
        otherwise describe the whole fleet by id for drift's launch facts, reading it twice. Raises what
        :func:`~nodesmith.services.provisioning.reconcile.reconcile` raises.
        """
        self.last_pass_began = time.time()
        at = self.last_pass_began if now is None else now
        began = self.clock()
        outcome = reconcile(
            ports=ports,
            now=at,
            options=ReconcileOptions(
                provision_first=provision_first,
                collect_garbage=self.garbage_collection_due(cloud=ports.cloud, now=at),
                request_stale_seconds=settings.request_stale_seconds,
                static_capacity=settings.static_capacity,
                registration_ttl_seconds=settings.registration_ttl_seconds,
                kept_capacity=self.kept_capacity,
                fleet_listing=self.fleet_listing if more_to_come and self._collected_with(ports.cloud) else None,
            ),
        )
        if outcome.garbage_collected:  # the pass's end, on the pass's clock
            self.collected = (ports.cloud, at + self.clock() - began)
        return outcome

    def disrupt(
        self, *, ports: Ports, settings: PassSettings, now: float | None = None, snapshot: Snapshot | None = None
    ) -> DisruptionOutcome | None:
        """One disruption pass (:func:`~nodesmith.services.disruption.service.disrupt`) at ``now`` (epoch seconds;
        default the wall clock) with what this container keeps; None when ``settings.disruption`` is None (off).
        ``snapshot`` is the provisioning pass's, as that pass left the cluster (None: the pass lists the cluster).
        Raises what :func:`~nodesmith.services.disruption.service.disrupt` raises."""
        if settings.disruption is None:
            return None
        from nodesmith.services.disruption.service import Consolidated, disrupt

        if self.consolidated is None:
            self.consolidated = Consolidated()
        return disrupt(
            ports=ports,
            now=time.time() if now is None else now,
            settings=settings.disruption,
            pending=self.pending,
            recent_events=self.recent_events,
            validation_delay=settings.validation_delay_seconds,
            snapshot=snapshot,
            consolidated=self.consolidated,
        )

    def _collected_with(self, cloud: object) -> bool:
        """Whether this container's last collecting pass used ``cloud``."""
        return self.collected is not None and self.collected[0] is cloud
