"""The ports a use case acts through, as one parameter object.

Every use case of :mod:`nodesmith.services` acts on one cluster through the same few ports
(:mod:`nodesmith.core.ports`); :class:`Ports` carries them together, so a service's signature names what
it decides on, not its plumbing. Handlers build one from :mod:`nodesmith.handlers.wiring`; tests from fakes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Callable

    from nodesmith.core.ports import (
        CapacityReservations,
        CloudProvider,
        Cluster,
        LaunchTemplateCleanup,
        NodeClassFinalizers,
        NodeClassReadiness,
        NodeOverlays,
        TerminationQueue,
    )

__all__ = ["Ports"]


@dataclass(frozen=True, slots=True)
class Ports:
    """The Kubernetes API (``cluster``), EC2 (``cloud``), the cluster's name (its EC2 ownership tag,
    ``kubernetes.io/cluster/<cluster_name>``), and optionally the termination ``queue`` (termination requests
    go there; None: they are not sent) and ``wake(after)`` (asks the reconcile function for a provisioning pass
    that sees the cluster as of ``after``, epoch seconds; None: the next scheduled pass provisions), ``overlays``
    (the NodeOverlays to apply to each NodePool's instance types when the ``NodeOverlay`` feature gate is on;
    None: the gate is off and no overlay is read), and ``reservations``, EC2's capacity reservations (the
    ``ReservedCapacity`` gate: None when it is off, and then no EC2NodeClass status or Capacity Block expiry is
    looked after). With both ``finalizers`` (Kubernetes) and ``templates`` (EC2), the reconcile pass finalizes
    EC2NodeClasses (their ``karpenter.k8s.aws/termination`` finalizer and launch templates); None: it leaves them
    alone. With ``readiness`` (EC2), the pass writes each EC2NodeClass's status conditions (``Ready``,
    ``SubnetsReady``, ...); None: they are not written."""

    cluster: Cluster
    cloud: CloudProvider
    cluster_name: str
    queue: TerminationQueue | None = None
    wake: Callable[[float], None] | None = None
    overlays: NodeOverlays | None = None
    reservations: CapacityReservations | None = None
    finalizers: NodeClassFinalizers | None = None
    templates: LaunchTemplateCleanup | None = None
    readiness: NodeClassReadiness | None = None
