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
from nodesmith.core.ports import Instance
from nodesmith.services.drain import DrainResult
from nodesmith.services.interrupt import InstanceOutcome, InstanceStatus, InterruptionOutcome

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

    from nodesmith.core.interruption import InterruptionMessage
    from nodesmith.services.replacement import Replacement

__all__ = [
    "CARRIED_TAG_PREFIXES",
    "CONTINUATION_KEY",
    "MAX_CARRIED_INSTANCES",
    "BatchItem",
    "BatchOutcome",
    "Continuation",
    "ItemResult",
    "continuation_body",
    "drain_from_dict",
    "instance_from_dict",
    "instance_to_dict",
    "outcome_from_dict",
    "outcome_to_dict",
]

CONTINUATION_KEY = "nodesmith-continuation"
"""Top-level key a continuation message adds to the original EventBridge event."""


CARRIED_TAG_PREFIXES = ("kubernetes.io/cluster/", "karpenter.sh/", "karpenter.k8s.aws/")
"""The instance tags a continuation carries: those the interruption handler reads (our cluster's tag, the
NodePool and NodeClaim tags). Other tags (up to 50 of 256 characters each) would only bloat the message."""


MAX_CARRIED_INSTANCES = 100
"""Instances one continuation carries at most (about 400 bytes each: far under SQS's 256 KiB per message, even
for an AWS Health event naming many instances)."""


def instance_to_dict(instance: Instance) -> dict[str, Any]:
    """What a continuation carries of an instance the interruption handler located: its type, zone, capacity
    type, state, launch time (epoch seconds), private DNS name, image and the tags of
    :data:`CARRIED_TAG_PREFIXES` (JSON-safe; read back with :func:`instance_from_dict`)."""
    return {
        "type": instance.instance_type,
        "zone": instance.zone,
        "capacity-type": instance.capacity_type,
        "state": instance.state,
        "launch-time": instance.launch_time,
        "private-dns-name": instance.private_dns_name,
        "image-id": instance.image_id,
        "tags": {k: v for k, v in instance.tags.items() if k.startswith(CARRIED_TAG_PREFIXES)},
    }


_CARRIED_STRINGS = ("type", "zone", "capacity-type", "state", "private-dns-name", "image-id")


def instance_from_dict(instance_id: str, data: object) -> Instance | None:
    """The :class:`~nodesmith.core.ports.Instance` :func:`instance_to_dict` wrote for ``instance_id``, or None
    when ``data`` is not such a document (the handler then describes the instance, as for an original)."""
    if not isinstance(data, dict):
        return None
    strings = [data.get(k) for k in _CARRIED_STRINGS]
    launched, tags = data.get("launch-time"), data.get("tags")
    if not all(isinstance(v, str) for v in strings) or not isinstance(tags, dict):
        return None
    if not isinstance(launched, int | float) or isinstance(launched, bool) or not math.isfinite(launched):
        return None
    if not all(isinstance(k, str) and isinstance(v, str) for k, v in tags.items()):
        return None
    instance_type, zone, capacity_type, state, dns, image = (str(v) for v in strings)
    return Instance(
        instance_id=instance_id,
        instance_type=instance_type,
        zone=zone,
        capacity_type=capacity_type,
        state=state,
        launch_time=float(launched),
        private_dns_name=dns,
        image_id=image,
        tags=dict(tags),
    )


@dataclass(frozen=True, slots=True)
class Continuation:
    """The marker of a continuation message: which attempt (1 = first continuation) for which instances.

    ``handoff`` is True for a drain handed off after the cordon (a burst): it runs the replacement
    pass and posts the drain's Events like an original message. ``cordoned_at`` (epoch seconds, hand-offs
    only) is when the original's invocation had cordoned the nodes: a replacement pass begun after it
    already sees them leaving, so the hand-off need not ask for another. ``replacement_asked`` (hand-offs
    only) says the original's invocation asked for that pass itself, right after handing off (a burst's
    at-once replacement): the hand-off then asks for none, not even to find the reconcile lease covering
    it (at 1,000 nodes those lease reads and requests were about one DynamoDB call per node, in the
    middle of the burst). The mark is written before that ask is made: if the ask then fails (the wake and
    the pass run in its place both fail; logged), the scheduled reconcile's pass provisions for these pods,
    within a minute. ``instances`` are those of
    ``instance_ids`` the message carries as the invocation before it located them
    (:func:`instance_to_dict`): the continuation uses them instead of describing them again.
    """

    attempt: int
    instance_ids: tuple[str, ...]
    handoff: bool = False
    cordoned_at: float | None = None
    instances: tuple[Instance, ...] = ()
    replacement_asked: bool = False

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
        carried = raw.get("instances")
        found = [instance_from_dict(i, carried.get(i)) for i in ids_] if isinstance(carried, dict) else []
        instances = tuple(i for i in found if i is not None)
        asked = handoff and raw.get("replacement-asked") is True
        return cls(attempt=attempt, instance_ids=ids_, handoff=handoff, cordoned_at=cordoned_at, instances=instances,
                   replacement_asked=asked)  # fmt: skip


def continuation_body(
    event: Mapping[str, Any],
    *,
    attempt: int,
    instance_ids: Sequence[str],
    handoff: bool = False,
    cordoned_at: float | None = None,
    instances: Sequence[Instance] = (),
    replacement_asked: bool = False,
) -> dict[str, Any]:
    """The original event with the continuation marker for ``attempt`` and ``instance_ids`` (and
    ``"handoff": true`` for a drain handed off after the cordon, with ``"cordoned-at"``, epoch seconds,
    when given, and ``"replacement-asked": true`` when the cordoning invocation asks for the replacement
    pass itself: :attr:`Continuation.replacement_asked`). ``instances`` (those located of ``instance_ids``)
    go along under ``"instances"`` (:func:`instance_to_dict`), so the continuation does not describe them
    again: a burst's hand-offs and continuations otherwise repeated the originals' DescribeInstances for
    every node."""
    body = {k: v for k, v in event.items() if k != CONTINUATION_KEY}
    body[CONTINUATION_KEY] = {"attempt": attempt, "instance-ids": list(instance_ids)}
    wanted = set(instance_ids)
    carried = {i.instance_id: instance_to_dict(i) for i in instances if i.instance_id in wanted}
    carried = dict(list(carried.items())[:MAX_CARRIED_INSTANCES])
    if carried:
        body[CONTINUATION_KEY]["instances"] = carried
    if handoff:
        body[CONTINUATION_KEY]["handoff"] = True
        if cordoned_at is not None:
            body[CONTINUATION_KEY]["cordoned-at"] = round(cordoned_at, 3)
        if replacement_asked:
            body[CONTINUATION_KEY]["replacement-asked"] = True
    return body


@dataclass(frozen=True, slots=True)
class BatchItem:
    """One SQS record: its message id, the parsed message, the event as received, its continuation, and
    ``first_delivery``: True when SQS says no invocation received the record before
    (``ApproximateReceiveCount`` 1), False when it did or when that is not known."""

    item_id: str
    message: InterruptionMessage
    event: Mapping[str, Any]
    continuation: Continuation | None = None
    first_delivery: bool = False

    @property
    def attempt(self) -> int:
        """0 for an original message, n for the n-th continuation."""
        return self.continuation.attempt if self.continuation else 0

    @property
    def drain_attempt(self) -> int:
        """The drain attempt this message runs: 0 for an original message and its hand-off (the hand-off
        drains under the original's attempt), else :attr:`attempt`."""
        return 0 if self.continuation is not None and self.continuation.handoff else self.attempt


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
    ``drains_handed_off`` drains sent on to a hand-off continuation (a burst); ``drains_deferred`` drains of
    continuations sent back to the queue before they began (``defer_drains_after_seconds``).
    ``replace_seconds`` runs from the end of the cordons to the replacement's answer, so in a burst it includes
    the hand-offs sent meanwhile.
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
    drains_deferred: int = 0


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
