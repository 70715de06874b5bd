"""The messages of an interruption batch and what becomes of them: SQS records as :class:`BatchItem`,
continuation markers (:class:`Continuation`, :func:`continuation_body`), per-record results
(:class:`ItemResult`, :class:`BatchOutcome`), and instance outcomes as the JSON the idempotency store
keeps for each drain. The phases that produce them are in :mod:`nodesmith.services.interrupt_batch`.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

from nodesmith.core.errors import UnavailableOffering
from nodesmith.services.drain import DrainResult
from nodesmith.services.interrupt import InstanceOutcome, InstanceStatus, InterruptionOutcome

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

    from nodesmith.core.interruption import InterruptionMessage
    from nodesmith.services.replacement import Replacement

__all__ = [
    "CONTINUATION_KEY",
    "BatchItem",
    "BatchOutcome",
    "Continuation",
    "ItemResult",
    "continuation_body",
    "drain_from_dict",
    "outcome_from_dict",
    "outcome_to_dict",
]

CONTINUATION_KEY = "nodesmith-continuation"
"""Top-level key a continuation message adds to the original EventBridge event."""


@dataclass(frozen=True, slots=True)
class Continuation:
    """The marker of a continuation message: which attempt (1 = first continuation) for which instances.

    ``handoff`` is True for a drain handed off after the cordon (a burst): it runs the replacement
    pass and posts the drain's Events like an original message. ``cordoned_at`` (epoch seconds, hand-offs
    only) is when the original's invocation had cordoned the nodes: a replacement pass begun after it
    already sees them leaving, so the hand-off need not ask for another.
    """

    attempt: int
    instance_ids: tuple[str, ...]
    handoff: bool = False
    cordoned_at: float | None = None

    @classmethod
    def from_event(cls, event: Mapping[str, Any]) -> Continuation | None:
        """The marker in ``event``, or None when absent or not one we wrote (then it is an original)."""
        raw = event.get(CONTINUATION_KEY)
        if not isinstance(raw, dict):
            return None
        attempt, ids = raw.get("attempt"), raw.get("instance-ids")
        if not isinstance(attempt, int) or isinstance(attempt, bool) or attempt < 1 or not isinstance(ids, list):
            return None
        ids_ = tuple(str(i) for i in ids if isinstance(i, str))
        handoff = raw.get("handoff") is True
        at = raw.get("cordoned-at")
        cordoned_at: float | None = None
        if handoff and isinstance(at, int | float) and not isinstance(at, bool) and math.isfinite(at):
            cordoned_at = float(at)
        return cls(attempt=attempt, instance_ids=ids_, handoff=handoff, cordoned_at=cordoned_at)


def continuation_body(
    event: Mapping[str, Any],
    *,
    attempt: int,
    instance_ids: Sequence[str],
    handoff: bool = False,
    cordoned_at: float | None = None,
) -> dict[str, Any]:
    """The original event with the continuation marker for ``attempt`` and ``instance_ids`` (and
    ``"handoff": true`` for a drain handed off after the cordon, with ``"cordoned-at"``, epoch seconds,
    when given)."""
    body = {k: v for k, v in event.items() if k != CONTINUATION_KEY}
    body[CONTINUATION_KEY] = {"attempt": attempt, "instance-ids": list(instance_ids)}
    if handoff:
        body[CONTINUATION_KEY]["handoff"] = True
        if cordoned_at is not None:
            body[CONTINUATION_KEY]["cordoned-at"] = round(cordoned_at, 3)
    return body


@dataclass(frozen=True, slots=True)
class BatchItem:
    """One SQS record: its message id, the parsed message, the event as received, its continuation."""

    item_id: str
    message: InterruptionMessage
    event: Mapping[str, Any]
    continuation: Continuation | None = None

    @property
    def attempt(self) -> int:
        """0 for an original message, n for the n-th continuation."""
        return self.continuation.attempt if self.continuation else 0


@dataclass(frozen=True, slots=True)
class ItemResult:
    """What happened to one record: its outcome, and ``error`` (non-empty: let SQS deliver it again)."""

    item_id: str
    outcome: InterruptionOutcome | None
    error: str = ""

    @property
    def failed(self) -> bool:
        """True when the record must be retried."""
        return bool(self.error) or (self.outcome is not None and self.outcome.needs_retry)


@dataclass(slots=True)
class BatchOutcome:
    """Per-record results plus the batch's phases (seconds) and what the replacement did.

    ``drains_run`` counts drains actually performed by this invocation, ``drains_replayed`` those
    answered from an earlier delivery's stored result; ``offerings_marked`` spot offerings marked;
    ``drains_handed_off`` drains sent on to a hand-off continuation (a burst).
    """

    items: list[ItemResult] = field(default_factory=list)
    replacement: Replacement | None = None
    cordon_seconds: float = 0.0
    replace_seconds: float = 0.0
    drain_seconds: float = 0.0
    drains_run: int = 0
    drains_replayed: int = 0
    offerings_marked: int = 0
    drains_handed_off: int = 0


# --- outcomes as JSON (the idempotency store keeps the result of each drain) -----------------------


def outcome_to_dict(outcome: InstanceOutcome) -> dict[str, Any]:
    """``outcome`` as a JSON object (what the idempotency store keeps for one drain)."""
    data = asdict(outcome)
    data["status"] = outcome.status.value
    return data


def drain_from_dict(data: Mapping[str, Any] | None) -> DrainResult | None:
    """The :class:`DrainResult` stored by :func:`outcome_to_dict`, or None."""
    if data is None:
        return None
    fields: dict[str, Any] = {k: tuple(v) if isinstance(v, list) else v for k, v in data.items()}
    return DrainResult(**fields)


def outcome_from_dict(data: Mapping[str, Any]) -> InstanceOutcome:
    """The :class:`InstanceOutcome` stored by :func:`outcome_to_dict` (raises ``KeyError``/``ValueError`` on
    a document it did not write)."""
    offering = data.get("interrupted_offering")
    return InstanceOutcome(
        instance_id=str(data["instance_id"]),
        status=InstanceStatus(data["status"]),
        detail=str(data.get("detail", "")),
        node_name=data.get("node_name"),
        nodeclaim_name=data.get("nodeclaim_name"),
        cordoned=bool(data.get("cordoned")),
        events=tuple(data.get("events") or ()),
        drain=drain_from_dict(data.get("drain")),
        instance_terminated=bool(data.get("instance_terminated")),
        node_deleted=bool(data.get("node_deleted")),
        nodeclaim_deleted=bool(data.get("nodeclaim_deleted")),
        interrupted_offering=None if offering is None else UnavailableOffering(**offering),
        warnings=tuple(data.get("warnings") or ()),
        continued=bool(data.get("continued")),
        nodepool=data.get("nodepool"),
        capacity_type=data.get("capacity_type"),
    )
