"""Capacity reservations an EC2NodeClass selects, and how many instances each can still take.

Follows Karpenter's AWS provider (``pkg/providers/capacityreservation/{provider,types}.go``):

* each ``capacityReservationSelectorTerms`` term is one ``DescribeCapacityReservations`` call (terms are ORed):
  ``id`` -> ``CapacityReservationIds`` (no ``MaxResults``); otherwise filters ``state=active`` plus ``owner-id``,
  ``instance-match-criteria``, ``tag:<key>`` (``tag-key`` for the value ``*``), ``MaxResults`` 1000; only active
  reservations whose ``EndDate`` has not passed are kept, each once. Open ODCRs are used only when selected.
* the available count of a reservation is EC2's ``AvailableInstanceCount`` at the last describe, lowered by one per
  launch into it (``MarkLaunched``) and set to 0 by a capacity error on it (``MarkUnavailable``) until the next
  describe; reserved launches do not use the 3-minute unavailable-offerings cache.
"""

from __future__ import annotations

import logging
import threading
from datetime import datetime
from typing import TYPE_CHECKING, Any

from nodesmith.adapters.aws.nodeclass_spec import field_value
from nodesmith.core.capacityreservations import RESERVATION_TYPE_DEFAULT, CapacityReservation
from nodesmith.core.errors import LaunchError, NodeClassNotReadyError

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Mapping, Sequence

__all__ = [
    "ReservationAvailability",
    "describe_capacity_reservations",
    "describe_capacity_reservations_by_id",
    "reservation_from_ec2",
    "select_described",
]

LOG = logging.getLogger(__name__)

MAX_RESULTS = 1000


def reservation_from_ec2(item: Mapping[str, Any]) -> CapacityReservation:
    """A DescribeCapacityReservations item as a :class:`CapacityReservation` (``EndDate``, a datetime or an ISO 8601
    string as the AWS CLI prints it, to epoch seconds). Raises ``ValueError`` for an unreadable ``EndDate``."""
    end = item.get("EndDate")
    if isinstance(end, str):
        end = datetime.fromisoformat(end.replace("Z", "+00:00"))
    end_time = end.timestamp() if isinstance(end, datetime) else None
    return CapacityReservation(
        id=str(item["CapacityReservationId"]),
        instance_type=str(item.get("InstanceType", "")),
        zone=str(item.get("AvailabilityZone", "")),
        owner_id=str(item.get("OwnerId", "")),
        available_count=int(item.get("AvailableInstanceCount", 0) or 0),
        reservation_type=str(item.get("ReservationType") or RESERVATION_TYPE_DEFAULT),
        instance_match_criteria=str(item.get("InstanceMatchCriteria") or "open"),
        interruptible=bool(item.get("Interruptible", False)),
        end_time=end_time,
    )


def _term_query(term: Mapping[str, Any]) -> dict[str, Any]:
    if term_id := field_value(term, "id"):
        return {"CapacityReservationIds": [str(term_id)]}
    filters: list[dict[str, Any]] = [{"Name": "state", "Values": ["active"]}]
    if owner := field_value(term, "ownerID"):
        filters.append({"Name": "owner-id", "Values": [str(owner)]})
    if criteria := field_value(term, "instanceMatchCriteria"):
        filters.append({"Name": "instance-match-criteria", "Values": [str(criteria)]})
    for key, value in sorted((field_value(term, "tags") or {}).items()):
        filters.append(
            {"Name": "tag-key", "Values": [key]} if value == "*" else {"Name": f"tag:{key}", "Values": [value]}
        )
    return {"Filters": filters, "MaxResults": MAX_RESULTS}


def _term_selects(term: Mapping[str, Any], item: Mapping[str, Any]) -> bool:
    if term_id := field_value(term, "id"):
        return bool(item.get("CapacityReservationId") == term_id)
    if str(item.get("State", "active")) != "active":
        return False
    owner, criteria = field_value(term, "ownerID"), field_value(term, "instanceMatchCriteria")
    if (owner and item.get("OwnerId") != owner) or (criteria and item.get("InstanceMatchCriteria") != criteria):
        return False
    tags = {str(t.get("Key")): str(t.get("Value", "")) for t in item.get("Tags") or []}
    return all(k in tags and (v == "*" or tags[k] == v) for k, v in (field_value(term, "tags") or {}).items())


def select_described(
    items: Sequence[Mapping[str, Any]], *, terms: Sequence[Mapping[str, Any]], now: float
) -> list[CapacityReservation]:
    """The reservations ``terms`` select among DescribeCapacityReservations ``items`` already fetched (an
    ``aws ec2 describe-capacity-reservations`` answer), with the filters :func:`describe_capacity_reservations`
    sends applied here: ids alone, else active plus owner, match criteria and tags (``*``: any value); ended ones
    left out; once each, by id. Raises ``ValueError`` for an unreadable item."""
    found: dict[str, CapacityReservation] = {}
    for item in items:
        if str(item.get("State", "active")) != "active" or not any(_term_selects(t, item) for t in terms):
            continue
        reservation = reservation_from_ec2(item)
        if reservation.end_time is None or reservation.end_time > now:
            found[reservation.id] = reservation
    return [found[k] for k in sorted(found)]


def describe_capacity_reservations(
    *, ec2: Any, terms: Sequence[Mapping[str, Any]], now: float
) -> list[CapacityReservation]:
    """Every active, unexpired reservation a term of ``terms`` selects, once each, sorted by id (see the module
    docstring). ``now`` is epoch seconds. Raises ``NodeClassNotReadyError`` naming the term when EC2 refuses it (an
    unknown id, a denied call)."""
    found: dict[str, CapacityReservation] = {}
    for term in terms:
        query = _term_query(term)
        try:
            pages = ec2.get_paginator("describe_capacity_reservations").paginate(**query)
            items = [item for page in pages for item in page.get("CapacityReservations", [])]
        except Exception as exc:
            raise NodeClassNotReadyError(f"capacityReservationSelectorTerms {dict(term)}: {exc}") from exc
        for item in items:
            if str(item.get("State", "active")) != "active":
                continue
            reservation = reservation_from_ec2(item)
            if reservation.end_time is not None and reservation.end_time <= now:
                continue
            found[reservation.id] = reservation
    return [found[k] for k in sorted(found)]


def describe_capacity_reservations_by_id(*, ec2: Any, ids: Iterable[str], now: float) -> list[CapacityReservation]:
    """The active, unexpired reservations among ``ids``, one DescribeCapacityReservations each (an id EC2 does not
    know is left out). Raises ``LaunchError`` naming the id for another refusal."""
    found: list[CapacityReservation] = []
    for rid in sorted(set(ids)):
        try:
            items = ec2.describe_capacity_reservations(CapacityReservationIds=[rid]).get("CapacityReservations", [])
        except Exception as exc:
            code = str(getattr(exc, "response", {}).get("Error", {}).get("Code", ""))
            if "NotFound" in code or code == "InvalidParameterValue":
                continue
            raise LaunchError(f"DescribeCapacityReservations {rid}: {exc}", code=code or type(exc).__name__) from exc
        for item in items:
            reservation = reservation_from_ec2(item)
            if str(item.get("State", "active")) == "active" and (reservation.end_time or now + 1) > now:
                found.append(reservation)
    return found


class ReservationAvailability:
    """How many instances each reservation can still take, between describes (thread-safe).

    :meth:`observe` records EC2's counts from a describe; :meth:`mark_launched` takes one off after a launch into a
    reservation; :meth:`mark_unavailable` sets a reservation to 0 after a capacity error on it. A mark holds until
    a describe made after it (``clock`` monotonic seconds). A launch under way :meth:`hold` s a slot of each
    reservation it targets until it :meth:`release` s them, so launches at once from one container never ask a
    reservation for more instances than it has (Karpenter's scheduler keeps the same count per reservation).
    """

    def __init__(self, *, clock: Callable[[], float]) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self._counts: dict[str, int] = {}
        self._marked: dict[str, float] = {}
        self._held: dict[str, int] = {}

    def observe(self, reservations: Iterable[CapacityReservation], *, described_at: float) -> None:
        """Take the counts of a describe made at ``described_at`` (monotonic seconds), except for reservations
        marked after it."""
        with self._lock:
            for r in reservations:
                if self._marked.get(r.id, float("-inf")) > described_at:
                    continue
                self._counts[r.id] = r.available_count
                self._marked.pop(r.id, None)

    def available(self, reservation: CapacityReservation) -> int:
        """The instances ``reservation`` can take now (its described count when nothing was recorded)."""
        with self._lock:
            return self._counts.get(reservation.id, reservation.available_count)

    def known_full(self, reservation_id: str, *, described: int = 1) -> bool:
        """True when ``reservation_id`` can take no more instances now: launches, a capacity error or launches under
        way since its offering was built (``described``: its count then, used when nothing was recorded)."""
        with self._lock:
            return self._free(reservation_id, described) <= 0

    def _free(self, reservation_id: str, described: int) -> int:
        return self._counts.get(reservation_id, described) - self._held.get(reservation_id, 0)

    def hold(self, reservation_ids: Iterable[str]) -> list[str]:
        """Hold one slot of each reservation in ``reservation_ids`` that has one free (one never described counts
        as having one); returns the ids held."""
        held: list[str] = []
        with self._lock:
            for rid in dict.fromkeys(reservation_ids):
                if self._free(rid, 1) > 0:
                    self._held[rid] = self._held.get(rid, 0) + 1
                    held.append(rid)
        return held

    def release(self, reservation_ids: Iterable[str]) -> None:
        """Give back the slots :meth:`hold` took (after the launch answered and :meth:`mark_launched` counted it)."""
        with self._lock:
            for rid in reservation_ids:
                left = self._held.get(rid, 0) - 1
                if left > 0:
                    self._held[rid] = left
                else:
                    self._held.pop(rid, None)

    def mark_launched(self, reservation_id: str) -> None:
        """One instance launched into ``reservation_id``."""
        with self._lock:
            self._counts[reservation_id] = max(0, self._counts.get(reservation_id, 1) - 1)
            self._marked[reservation_id] = self._clock()

    def mark_unavailable(self, reservation_ids: Iterable[str]) -> None:
        """EC2 answered a capacity error for these reservations: none can take an instance until described again."""
        with self._lock:
            for rid in reservation_ids:
                self._counts[rid] = 0
                self._marked[rid] = self._clock()
