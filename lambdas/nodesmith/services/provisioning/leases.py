"""Run work under a lease in the shared state store, so two Lambda invocations never do it at once.

Karpenter runs one provisioner behind leader election; Nodesmith's reconcile Lambda has reserved
concurrency 1 (2 in watch mode, where the next watcher waits beside the current one), which does not
stop a manual invoke or a retry overlapping a slow pass. Every pass therefore takes the lease
:data:`RECONCILE_LEASE` (a DynamoDB conditional write, see :class:`nodesmith.core.ports.StateStore`)
before it snapshots, solves and launches: of two passes that start together, one runs and the other
is skipped, so nothing is launched twice.

The lease's TTL outlives the invocation (its function timeout plus :data:`LEASE_MARGIN_SECONDS`),
so a crashed or timed-out holder frees it at the latest one margin after Lambda killed it; a
finished holder releases it at once.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Generic, TypeVar

if TYPE_CHECKING:
    from collections.abc import Callable

    from nodesmith.core.ports import StateStore

__all__ = [
    "DEFAULT_LEASE_TTL_SECONDS",
    "LEASE_MARGIN_SECONDS",
    "RECONCILE_LEASE",
    "Leased",
    "lease_ttl",
    "with_lease",
]

LOG = logging.getLogger(__name__)

RECONCILE_LEASE = "reconcile"
"""Name of the lease held while snapshotting, solving and launching."""

LEASE_MARGIN_SECONDS = 30.0
"""How much longer than the holder's remaining invocation time the lease lasts (seconds)."""

DEFAULT_LEASE_TTL_SECONDS = 900.0 + LEASE_MARGIN_SECONDS
"""TTL when the remaining invocation time is unknown: Lambda's maximum timeout (900 s) plus the margin."""

T = TypeVar("T")


def lease_ttl(remaining_seconds: float | None) -> float:
    """Lease TTL (seconds) for an invocation with ``remaining_seconds`` left: that plus the margin.

    ``None`` (not in Lambda) gives :data:`DEFAULT_LEASE_TTL_SECONDS`.
    """
    if remaining_seconds is None or remaining_seconds <= 0:
        return DEFAULT_LEASE_TTL_SECONDS
    return remaining_seconds + LEASE_MARGIN_SECONDS


@dataclass(frozen=True, slots=True)
class Leased(Generic[T]):
    """The result of :func:`with_lease`: ``acquired`` and the work's ``value``, or who held the lease."""

    acquired: bool
    value: T | None = None
    held_by: str | None = None

    @property
    def skipped_reason(self) -> str:
        """``"skipped: lease held by <holder>"`` when the work did not run, else ''."""
        if self.acquired:
            return ""
        return f"skipped: lease held by {self.held_by or 'another invocation'}"


def with_lease(
    *,
    state: StateStore,
    name: str,
    holder: str,
    ttl_seconds: float,
    work: Callable[[], T],
    wall: Callable[[], float] = time.time,
) -> Leased[T]:
    """Run ``work`` while holding lease ``name`` for ``holder`` (until ``ttl_seconds`` from now, at most); skip it
    when another holder has the lease.

    ``wall`` gives epoch seconds for the store. The lease is released when ``work`` returns or raises (a failed
    release is logged: the TTL frees it). Errors of the store while acquiring propagate: without the lease
    nothing runs.
    """
    if not state.acquire_lease(name=name, holder=holder, ttl_seconds=ttl_seconds, now=wall()):
        held_by = state.lease_holder(name=name, now=wall())
        LOG.info("lease %s held by %s; %s skips", name, held_by, holder)
        return Leased(acquired=False, held_by=held_by)
    try:
        return Leased(acquired=True, value=work())
    finally:
        try:
            if not state.release_lease(name=name, holder=holder):
                LOG.warning("lease %s was no longer held by %s at release (it expired)", name, holder)
        except Exception as exc:
            LOG.warning("lease %s not released by %s (%s); it expires on its own", name, holder, exc)
