"""The unavailable-offerings cache's two layers: marking offerings and merging other containers' marks.

The in-memory layer (:class:`~nodesmith.adapters.aws.unavailable.UnavailableOfferings`) lives as long
as the Lambda container; with a ``state`` store (:class:`~nodesmith.core.ports.StateStore`, the
DynamoDB state table) every (type, zone, capacity type) mark is also written there with its expiry in
epoch seconds, and :func:`sync_unavailable` merges the marks other containers wrote (another
reconcile, or the interruption Lambda marking a spot-interrupted offering). A failing state store is
logged and the in-memory layer keeps working: the shared cache only improves plans.

A container writes an offering's shared mark again only once :class:`SharedWrites` says it is due (a tenth of the
TTL after its last write): a burst of interruptions of one spot offering is one write per container, not one per
message, and the shared expiry lags the newest mark by at most that tenth.
"""

from __future__ import annotations

import logging
import threading
from typing import TYPE_CHECKING

from nodesmith.core.model import CAPACITY_TYPE_ON_DEMAND, CAPACITY_TYPE_SPOT

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    from nodesmith.adapters.aws.unavailable import UnavailableOfferings
    from nodesmith.core.errors import UnavailableOffering
    from nodesmith.core.ports import StateStore

__all__ = ["SHARED_REFRESH_FRACTION", "SharedWrites", "remember_unavailable", "sync_unavailable"]

LOG = logging.getLogger(__name__)

SHARED_REFRESH_FRACTION = 0.1
"""The fraction of the unavailable-offerings TTL after which a container writes an offering's shared mark again."""


class SharedWrites:
    """When this container last wrote each (type, zone, capacity type) mark to the state store (epoch seconds),
    so it is written again only ``refresh_seconds`` later. Thread-safe (a batch's rounds mark at once)."""

    def __init__(self, *, refresh_seconds: float) -> None:
        self._refresh = refresh_seconds
        self._lock = threading.Lock()
        self._at: dict[tuple[str, str, str], float] = {}

    def due(self, key: tuple[str, str, str], *, now: float) -> bool:
        """Whether ``key``'s mark is to be written at ``now``: never written here, or ``refresh_seconds`` ago."""
        with self._lock:
            last = self._at.get(key)
        return last is None or now - last >= self._refresh

    def wrote(self, key: tuple[str, str, str], *, now: float) -> None:
        """Note that ``key``'s mark was written at ``now``."""
        with self._lock:
            self._at[key] = now


def remember_unavailable(
    errors: Sequence[UnavailableOffering],
    *,
    local: UnavailableOfferings,
    state: StateStore | None,
    ttl_seconds: float,
    wall_clock: Callable[[], float],
    written: SharedWrites | None = None,
) -> None:
    """Mark ``errors``' offerings unavailable in ``local`` and, when given, in ``state``; with ``written``, only
    the shared marks it says are due are written (and noted there).

    ``AuthFailure.ServiceLinkedRoleCreationNotPermitted`` makes all of spot unavailable, in memory
    only; an error without type or zone is skipped; one without a capacity type counts as
    on-demand. Shared marks expire ``ttl_seconds`` after ``wall_clock()`` (epoch seconds). A state
    store error is logged per offering, never raised: it must not fail a launch.
    """
    shared: list[tuple[str, str, str, str]] = []
    for error in errors:
        if error.code == "AuthFailure.ServiceLinkedRoleCreationNotPermitted":
            local.mark_capacity_type(capacity_type=CAPACITY_TYPE_SPOT, reason=error.code)
        elif error.instance_type and error.zone:
            capacity_type = error.capacity_type or CAPACITY_TYPE_ON_DEMAND
            local.mark(
                instance_type=error.instance_type, zone=error.zone, capacity_type=capacity_type, reason=error.code
            )
            shared.append((error.instance_type, error.zone, capacity_type, error.code))
    if state is None or not shared:
        return
    now = wall_clock()
    expires_at = now + ttl_seconds
    for instance_type, zone, capacity_type, code in shared:
        key = (instance_type, zone, capacity_type)
        if written is not None and not written.due(key, now=now):
            continue
        try:
            state.mark_unavailable(
                instance_type=instance_type,
                zone=zone,
                capacity_type=capacity_type,
                expires_at=expires_at,
                reason=code,
            )
            if written is not None:
                written.wrote(key, now=now)
        except Exception as exc:  # the shared layer only improves plans; never fail a launch over it
            LOG.warning("could not share unavailable offering %s/%s/%s: %s", instance_type, zone, capacity_type, exc)


def sync_unavailable(*, local: UnavailableOfferings, state: StateStore | None, wall_clock: Callable[[], float]) -> int:
    """Merge ``state``'s unexpired offering marks into ``local``; returns how many.

    Each mark stays for its remaining seconds (expiry minus ``wall_clock()``, epoch seconds). No
    store, or a store error (logged), gives 0: plans then rely on this container's marks only.
    """
    if state is None:
        return 0
    now = wall_clock()
    try:
        marks = state.list_unavailable(now=now)
    except Exception as exc:
        LOG.warning("could not read shared unavailable offerings: %s", exc)
        return 0
    for mark in marks:
        local.merge(
            instance_type=mark.instance_type,
            zone=mark.zone,
            capacity_type=mark.capacity_type,
            seconds=mark.expires_at - now,
        )
    return len(marks)
