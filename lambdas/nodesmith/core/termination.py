"""Termination requests and the rules of a node's termination (Karpenter's termination controller).

A node is terminated the way Karpenter terminates it (``karpenter-v1.md`` §3.7,
``[core]:pkg/controllers/node/termination/``): its NodeClaim, which carries the finalizer
:data:`TERMINATION_FINALIZER`, is deleted; the node is tainted ``karpenter.sh/disrupted:NoSchedule``
and drained through the Eviction API; then the instance is terminated, the Node deleted and the
finalizer removed, last. The cluster is the state of that work: a NodeClaim with a
``deletionTimestamp`` and our finalizer is being terminated, and the pods still on its node say how
far the drain got.

Whoever asks for a termination (the interruption function, a disruption pass, the reconcile pass for a
NodeClaim or Node a user deleted) annotates the NodeClaim (:func:`request_annotations`), deletes it,
and sends a :class:`TerminationRequest` to the termination queue. The request names ids only; it is
a nudge to look, never a source of facts: the termination function acts only on a NodeClaim that
the cluster says is being deleted, and reads the deadline from the NodeClaim
(:func:`termination_deadline`), never from the message.

Pure: pydantic and the standard library; times are epoch seconds passed in.
"""

from __future__ import annotations

import hashlib
import json
import math
from typing import TYPE_CHECKING

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from nodesmith.core.errors import NodesmithError
from nodesmith.core.model import instance_id_of
from nodesmith.core.timestamps import from_rfc3339, to_rfc3339

if TYPE_CHECKING:
    from nodesmith.core.api.nodeclaim import NodeClaim

__all__ = [
    "REQUESTED_AT_ANNOTATION",
    "TERMINATION_FINALIZER",
    "TERMINATION_REASON_ANNOTATION",
    "TERMINATION_TIMESTAMP_ANNOTATION",
    "MalformedRequestError",
    "TerminationRequest",
    "parse_request",
    "request_annotations",
    "retry_after_seconds",
    "termination_deadline",
]

TERMINATION_FINALIZER = "karpenter.sh/termination"
"""Karpenter's finalizer on NodeClaims and Nodes (``[core]:pkg/apis/v1/labels.go TerminationFinalizer``)."""

TERMINATION_TIMESTAMP_ANNOTATION = "karpenter.sh/nodeclaim-termination-timestamp"
"""When the node must be gone (RFC 3339), Karpenter's annotation: pods whose grace period would run past
it are deleted directly, bypassing PodDisruptionBudgets, and the instance is terminated by then."""

TERMINATION_REASON_ANNOTATION = "nodesmith.dev/termination-reason"
"""Why the NodeClaim is being terminated, in Karpenter's reasons (``SpotInterrupted``, ``Drifted``, ...)."""

REQUESTED_AT_ANNOTATION = "nodesmith.dev/termination-requested-at"
"""When a termination request was last sent (or a drain round last ran) for the NodeClaim (RFC 3339): the
reconcile pass sends another when it is missing or stale, so a lost message delays a termination, never
strands it."""

_INSTANCE_ID = r"^(i-[0-9a-f]{8,17})?$"  # empty: a NodeClaim deleted before its launch
_DNS_SUBDOMAIN = r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$"
_MAX_BODY = 1024
_MAX_SQS_ID = 128  # MessageGroupId / MessageDeduplicationId length limit (SQS API reference)


class MalformedRequestError(NodesmithError):
    """A termination queue message is not a :class:`TerminationRequest`; ``reason`` says what and where."""

    def __init__(self, reason: str) -> None:
        super().__init__(f"malformed termination request: {reason}")
        self.reason = reason


class TerminationRequest(BaseModel):
    """One termination queue message: ``{"nodeclaim": ..., "instanceId": ..., "reason": ...}``.

    ``nodeclaim`` is the NodeClaim's name (a DNS subdomain), ``instance_id`` its EC2 instance (empty for a
    NodeClaim deleted before it launched one), ``reason``
    a Karpenter reason (letters only) for logs. Unknown fields are refused: a message carries ids, never
    facts such as a state, a deadline or tags.
    """

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True, str_strip_whitespace=False)

    nodeclaim: str = Field(pattern=_DNS_SUBDOMAIN, max_length=253)
    instance_id: str = Field(alias="instanceId", pattern=_INSTANCE_ID)
    reason: str = Field(pattern=r"^[A-Za-z]{1,64}$")

    @classmethod
    def for_nodeclaim(cls, nodeclaim: NodeClaim, reason: str) -> TerminationRequest:
        """The request for ``nodeclaim`` (its instance from ``status.providerID``, empty before launch) and
        ``reason``. Raises pydantic's ``ValidationError`` when the name or reason does not fit the message."""
        return cls(nodeclaim=nodeclaim.name, instance_id=instance_id_of(nodeclaim.status.provider_id) or "",
                   reason=reason)  # fmt: skip

    def body(self) -> str:
        """The message body (compact JSON, the aliases as keys)."""
        return json.dumps(self.model_dump(by_alias=True), separators=(",", ":"))

    def group_id(self) -> str:
        """The FIFO ``MessageGroupId``: one group per NodeClaim, so SQS never has two rounds of one node in
        flight at once (a group's next message waits until the one in flight is deleted or visible again).
        The NodeClaim's name when it fits SQS's 128 characters, else its SHA-256 (hex)."""
        return self.nodeclaim if len(self.nodeclaim) <= _MAX_SQS_ID else _sha256(self.nodeclaim)

    def deduplication_id(self) -> str:
        """The FIFO ``MessageDeduplicationId``: SHA-256 (hex) of NodeClaim, instance and reason, so a request
        repeated within SQS's 5-minute deduplication interval (a redelivered warning, a retried send) is
        accepted and dropped, and one drain per node and reason is started."""
        return _sha256(f"{self.nodeclaim}/{self.instance_id}/{self.reason}")


def _sha256(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def parse_request(body: str) -> TerminationRequest:
    """Parse a termination queue message body; raises :class:`MalformedRequestError` naming the field."""
    if len(body) > _MAX_BODY:
        raise MalformedRequestError(f"body is {len(body)} characters; a request is under {_MAX_BODY}")
    try:
        return TerminationRequest.model_validate_json(body)
    except ValidationError as exc:
        problems = [f"{'.'.join(str(p) for p in e['loc']) or '<root>'}: {e['msg']}" for e in exc.errors()[:3]]
        raise MalformedRequestError("; ".join(problems)) from None


def request_annotations(
    *, reason: str, now: float, deadline: float | None, current: dict[str, str] | None = None
) -> dict[str, str]:
    """The annotations a termination request writes on the NodeClaim before deleting it.

    Always :data:`REQUESTED_AT_ANNOTATION` (``now``) and :data:`TERMINATION_REASON_ANNOTATION` (kept when one
    is already there: the first reason stands); with a ``deadline`` (epoch seconds), the earlier of it and the
    :data:`TERMINATION_TIMESTAMP_ANNOTATION` already in ``current``.
    """
    current = current or {}
    out = {REQUESTED_AT_ANNOTATION: to_rfc3339(now), TERMINATION_REASON_ANNOTATION: current.get(
        TERMINATION_REASON_ANNOTATION) or reason}  # fmt: skip
    if deadline is not None:
        existing = from_rfc3339(current.get(TERMINATION_TIMESTAMP_ANNOTATION))
        due = min(deadline, existing) if existing is not None else deadline
        out[TERMINATION_TIMESTAMP_ANNOTATION] = to_rfc3339(math.ceil(due))  # never earlier than asked
    return out


def termination_deadline(
    *, annotations: dict[str, str], deletion_timestamp: float | None, grace_period_seconds: float | None
) -> float | None:
    """When the node must be gone (epoch seconds), or None when nothing bounds its drain.

    The earlier of the NodeClaim's :data:`TERMINATION_TIMESTAMP_ANNOTATION` (a spot interruption's notice) and
    its deletion time plus ``spec.terminationGracePeriod`` (Karpenter: ``nodeTerminationTime = deletionTimestamp
    + terminationGracePeriod``). Both are read from the cluster.
    """
    candidates = [from_rfc3339(annotations.get(TERMINATION_TIMESTAMP_ANNOTATION))]
    if deletion_timestamp is not None and grace_period_seconds is not None:
        candidates.append(deletion_timestamp + grace_period_seconds)
    known = [c for c in candidates if c is not None]
    return min(known) if known else None


def retry_after_seconds(
    *, attempt: int, now: float, next_due: float | None, initial_seconds: float, max_seconds: float
) -> int:
    """How long (whole seconds, at least 1) a drain round that left pods waits before the next one.

    Exponential from ``initial_seconds`` by delivery ``attempt`` (1-based: SQS's ``ApproximateReceiveCount``),
    capped at ``max_seconds`` (Karpenter's eviction queue backs off 100 ms to 10 s; an SQS redelivery is the
    unit here), and never later than ``next_due`` (epoch seconds: the next pod due to be deleted for the
    deadline, or the deadline itself), so a deadline is kept to the second.
    """
    wait = min(max_seconds, initial_seconds * 2.0 ** max(0, attempt - 1))
    if next_due is not None:
        wait = min(wait, max(0.0, next_due - now))
    return max(1, math.ceil(wait))
