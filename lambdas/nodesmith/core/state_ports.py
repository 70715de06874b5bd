"""Ports for what every Lambda container of one Nodesmith shares: the state store (the reconcile lease, the
unavailable-offerings marks) and the termination queue.

Adapters implement them (:class:`nodesmith.adapters.aws.state.DynamoStateStore`, the SQS termination queue); tests
implement them with fakes. Every method takes keyword-only arguments; times are epoch seconds passed in by the
caller.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from collections.abc import Sequence

    from nodesmith.core.termination import TerminationRequest

__all__ = ["LeaseInfo", "OfferingMark", "StateStore", "TerminationQueue"]


@dataclass(frozen=True, slots=True)
class OfferingMark:
    """An offering (instance type, zone, capacity type) unavailable until ``expires_at`` (epoch seconds).

    ``reason`` is the EC2 error code (``InsufficientInstanceCapacity``) or ``SpotInterruption``.
    """

    instance_type: str
    zone: str
    capacity_type: str
    expires_at: float
    reason: str = ""


@dataclass(frozen=True, slots=True)
class LeaseInfo:
    """Who holds a lease: ``holder``, since ``acquired_at`` (its last acquire), until ``expires_at`` (epoch seconds)."""

    holder: str
    acquired_at: float
    expires_at: float


class StateStore(Protocol):
    """State shared by every Lambda container of one Nodesmith: the reconcile lease and capacity marks.

    The DynamoDB implementation is :class:`nodesmith.adapters.aws.state.DynamoStateStore`. Times are
    epoch seconds passed in by the caller (the core keeps no clock); expired entries are never
    returned, whether or not the store has deleted them yet (DynamoDB TTL deletes within days).
    """

    def acquire_lease(self, *, name: str, holder: str, ttl_seconds: float, now: float) -> bool:
        """Take lease ``name`` for ``holder`` until ``now + ttl_seconds``.

        True when it was free, expired, or already ``holder``'s (then it is extended); False while
        another holder has it.
        """
        ...

    def renew_lease(self, *, name: str, holder: str, ttl_seconds: float, now: float) -> bool:
        """Extend ``holder``'s lease to ``now + ttl_seconds``; False when ``holder`` no longer has it."""
        ...

    def release_lease(self, *, name: str, holder: str) -> bool:
        """Give the lease up; False when ``holder`` did not have it (expired and taken, or never held)."""
        ...

    def lease_holder(self, *, name: str, now: float) -> str | None:
        """Who holds lease ``name`` at ``now``, or None when it is free or expired."""
        ...

    def lease_info(self, *, name: str, now: float) -> LeaseInfo | None:
        """The holder of lease ``name`` and when it took it, or None when it is free or expired at ``now``."""
        ...

    def mark_unavailable(
        self, *, instance_type: str, zone: str, capacity_type: str, expires_at: float, reason: str = ""
    ) -> None:
        """Mark an offering unavailable until ``expires_at`` (a later mark of the same offering wins)."""
        ...

    def list_unavailable(self, *, now: float) -> list[OfferingMark]:
        """Every offering marked unavailable at ``now``."""
        ...


class TerminationQueue(Protocol):
    """The termination queue (SQS): where termination requests go, one message per NodeClaim."""

    def send(self, *, requests: Sequence[TerminationRequest]) -> list[str]:
        """Send each request (``SendMessageBatch``, ten a call); returns why each one that was not sent was not,
        as ``"<nodeclaim>: <reason>"`` (empty: all sent). Never raises."""
        ...
