"""Capacity reservation accounting within one scheduling pass (Karpenter's ``ReservationManager``,
``[core]:pkg/controllers/provisioning/scheduling/reservationmanager.go``, and ``NodeClaim.offeringsToReserve``).

A reserved offering can take as many instances as its reservation has left (``Offering.reservation_capacity``). A
NodeClaim planned in the pass holds one slot of every reservation among its compatible reserved offerings (held
pessimistically: it will launch into one of them at most), and once none is left for a reservation, later
NodeClaims are planned without it. So one pass never plans more NodeClaims on a reservation than it can take.

Karpenter's provisioner runs its scheduler in ``ReservedOfferingModeStrict``: a pod that could use a reservation
whose slots the pass already handed out waits for a later pass. Here (as Karpenter's ``ReservedOfferingModeFallback``)
such a pod is planned at once on the NodePool's other offerings: the NodeClaim excludes the reservations with no slot
left (``karpenter.k8s.aws/capacity-reservation-id NotIn``), so it is priced and launched without them. A NodeClaim
that holds slots is pinned to them at the end of the pass (``NodeClaim.FinalizeScheduling``): capacity type
``reserved`` and ``capacity-reservation-id In`` the reservations it holds.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from nodesmith.core.scheduling.instancetypes import OfferingFilter

if TYPE_CHECKING:
    from collections.abc import Iterable

    from nodesmith.core.requirements import Requirements
    from nodesmith.core.scheduling.template import Template

__all__ = ["ReservationLedger"]


class ReservationLedger:
    """The slots each reservation has left in one pass, and which planned NodeClaim (by hostname) holds which.

    Built from every NodePool template's available reserved offerings: a reservation offered to several NodePools
    counts its smallest ``reservation_capacity`` (Karpenter: the catalogues may have been read at different times).
    Not thread-safe (one pass).
    """

    def __init__(self, templates: Iterable[Template]) -> None:
        self._left: dict[str, int] = {}
        self._held: dict[str, frozenset[str]] = {}
        for tpl in templates:
            for offerings in tpl.reserved.values():
                for o in offerings:
                    left = self._left.get(o.reservation_id)
                    if left is None or o.reservation_capacity < left:
                        self._left[o.reservation_id] = o.reservation_capacity

    def __bool__(self) -> bool:
        return bool(self._left)

    def held(self, hostname: str) -> frozenset[str]:
        """The reservation ids the NodeClaim ``hostname`` holds a slot of."""
        return self._held.get(hostname, frozenset())

    def to_reserve(self, tpl: Template, *, hostname: str, reqs: Requirements, mask: int) -> frozenset[str]:
        """The reservations a NodeClaim of ``tpl`` on ``hostname`` would hold with requirements ``reqs`` and the
        instance types ``mask``: those of its compatible available reserved offerings that still have a slot, or
        that it already holds. Changes nothing."""
        if not tpl.reserved:
            return frozenset()
        offers = OfferingFilter(reqs)
        held = self.held(hostname)
        out: set[str] = set()
        for i, offerings in tpl.reserved.items():  # the few types with reservations, not every type in mask
            if not mask >> i & 1:
                continue
            for o in offerings:
                if offers.allows(o) and (o.reservation_id in held or self._left.get(o.reservation_id, 0) > 0):
                    out.add(o.reservation_id)
        return frozenset(out)

    def exhausted_in(self, tpl: Template) -> frozenset[str]:
        """The reservations ``tpl`` offers that have no slot left in this pass."""
        return frozenset(
            o.reservation_id
            for offerings in tpl.reserved.values()
            for o in offerings
            if self._left.get(o.reservation_id, 0) <= 0
        )

    def hold(self, hostname: str, reservation_ids: frozenset[str]) -> None:
        """The NodeClaim ``hostname`` now holds exactly ``reservation_ids`` (from :meth:`to_reserve`): slots of new
        ones are taken, those it no longer needs given back."""
        held = self.held(hostname)
        for rid in reservation_ids - held:
            self._left[rid] = self._left.get(rid, 0) - 1
        for rid in held - reservation_ids:
            self._left[rid] = self._left.get(rid, 0) + 1
        if reservation_ids:
            self._held[hostname] = reservation_ids
        else:
            self._held.pop(hostname, None)
