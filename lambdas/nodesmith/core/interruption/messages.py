"""Interruption messages: parse the EventBridge events that reach the interruption queue into a message kind.

Five event kinds arrive through EventBridge -> SQS (``karpenter-v1.md`` §4.1, §4.2; Karpenter
``[aws]:pkg/controllers/interruption/parser.go`` and ``messages/*``):

========================  ======================================  =========================================
source                    detail-type                             acted on
========================  ======================================  =========================================
``aws.ec2``               ``EC2 Spot Instance Interruption        always: two minutes' notice (EC2 User Guide,
                          Warning``                               "Spot Instance interruption notices")
``aws.ec2``               ``EC2 Instance Rebalance                always (what to do is configurable)
                          Recommendation``
``aws.ec2``               ``EC2 Instance State-change             state ``stopping``/``stopped`` and
                          Notification``                          ``shutting-down``/``terminated`` only
``aws.health``            ``AWS Health Event``                    ``service == "EC2"`` and
                                                                  ``eventTypeCategory == "scheduledChange"``
``aws.ec2``               ``EC2 Capacity Reservation Instance     always: the reservation's owner reclaims
                          Interruption Warning``                  the instance (an interruptible ODCR)
========================  ======================================  =========================================

Anything else (another source or detail-type, an envelope ``version`` other than ``"0"``, a state we
do not act on, a Health event of another service or category) is a well-formed :attr:`MessageKind.NO_OP`
with a reason. Bodies that are not JSON, or whose envelope or detail does not match the schema, raise
:class:`MalformedEventError`; the handler logs and acknowledges them (Karpenter deletes unparseable
messages too, and NTH issues #272/#550 show what crashing on them costs).

Pure: stdlib and pydantic only, no clock.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from datetime import UTC, datetime
from enum import StrEnum, unique
from functools import partial
from typing import TYPE_CHECKING, Any, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from nodesmith.core.errors import NodesmithError
from nodesmith.core.model import INSTANCE_GONE_STATES

if TYPE_CHECKING:
    from collections.abc import Callable

__all__ = [
    "ACTED_STATES",
    "DETAIL_CAPACITY_RESERVATION_INTERRUPTION",
    "DETAIL_HEALTH",
    "DETAIL_REBALANCE",
    "DETAIL_SPOT_INTERRUPTION",
    "DETAIL_STATE_CHANGE",
    "SOURCE_EC2",
    "SOURCE_HEALTH",
    "SPOT_INTERRUPTION_NOTICE_SECONDS",
    "CapacityReservationInterruptionDetail",
    "EventEnvelope",
    "HealthAffectedEntity",
    "HealthEventDetail",
    "InterruptionMessage",
    "MalformedEventError",
    "MessageKind",
    "RebalanceRecommendationDetail",
    "SpotInterruptionDetail",
    "StateChangeDetail",
    "parse_message",
]

SOURCE_EC2 = "aws.ec2"
SOURCE_HEALTH = "aws.health"
DETAIL_SPOT_INTERRUPTION = "EC2 Spot Instance Interruption Warning"
DETAIL_REBALANCE = "EC2 Instance Rebalance Recommendation"
DETAIL_STATE_CHANGE = "EC2 Instance State-change Notification"
DETAIL_HEALTH = "AWS Health Event"
DETAIL_CAPACITY_RESERVATION_INTERRUPTION = "EC2 Capacity Reservation Instance Interruption Warning"

SPOT_INTERRUPTION_NOTICE_SECONDS = 120.0
"""EC2 issues the spot interruption warning two minutes before it stops or terminates the instance."""

STOPPING_STATES = frozenset({"stopping", "stopped"})
ACTED_STATES = STOPPING_STATES | INSTANCE_GONE_STATES
"""EC2 instance states Karpenter acts on (``messages/statechange/model.go``); others are no-ops."""

_ENVELOPE_VERSION = "0"  # every Karpenter parser is registered for version "0"
_MAX_BODY_BYTES = 256 * 1024  # SQS maximum message size
_INSTANCE_ID_PATTERN = r"^i-[0-9a-f]{8,17}$"
"""EC2 instance ids: ``i-`` and 8 (older) or 17 hex digits."""
_INSTANCE_ID = re.compile(_INSTANCE_ID_PATTERN)


class MalformedEventError(NodesmithError):
    """The message body is not an EventBridge event we can read: not JSON, or a field fails the schema.

    ``reason`` says what and where (``detail.instance-id: String should match pattern ...``); the
    handler logs it with the SQS message id and acknowledges the message.
    """

    def __init__(self, reason: str) -> None:
        super().__init__(f"malformed interruption event: {reason}")
        self.reason = reason


@unique
class MessageKind(StrEnum):
    """What an interruption message means (Karpenter's ``messages.Kind`` values)."""

    SPOT_INTERRUPTED = "spot_interrupted"
    REBALANCE_RECOMMENDATION = "rebalance_recommendation"
    INSTANCE_STOPPING = "instance_stopping"
    INSTANCE_TERMINATING = "instance_terminating"
    SCHEDULED_CHANGE = "scheduled_change"
    CAPACITY_RESERVATION_INTERRUPTED = "capacity_reservation_interrupted"
    NO_OP = "no_op"


# --- pydantic models of the wire format --------------------------------------------------------


class _Wire(BaseModel):
    """Base of the wire models: aliases are the JSON names, unknown fields are ignored."""

    model_config = ConfigDict(populate_by_name=True, extra="ignore", frozen=True)


class EventEnvelope(_Wire):
    """The EventBridge event envelope (EventBridge User Guide, "Amazon EventBridge events").

    ``account`` (12 digits) and ``region`` are required: the handler acts only on events of its own
    account and region, and an event without them cannot show that. ``time`` is ISO 8601
    (``2021-11-11T21:29:54Z``; a time without a zone is taken as UTC) and is only reported: no
    deadline is ever computed from it. ``detail`` is validated by the model of its detail-type.
    """

    version: str
    id: str = Field(min_length=1)
    detail_type: str = Field(alias="detail-type")
    source: str
    account: str = Field(pattern=r"^[0-9]{12}$")
    time: datetime
    region: str = Field(pattern=r"^[a-z]{2}(-[a-z]+)+-[0-9]+$")
    resources: list[str] = Field(default_factory=list)
    detail: dict[str, Any]


class _InstanceWarning(_Wire):
    """The detail of an EC2 warning about one instance: its id and what EC2 will do to it (``instance-action``)."""

    instance_id: str = Field(alias="instance-id", pattern=_INSTANCE_ID_PATTERN)
    instance_action: str = Field(default="", alias="instance-action")


class SpotInterruptionDetail(_InstanceWarning):
    """``EC2 Spot Instance Interruption Warning`` detail. ``instance-action`` is hibernate, stop or terminate."""


class RebalanceRecommendationDetail(_Wire):
    """``EC2 Instance Rebalance Recommendation`` detail."""

    instance_id: str = Field(alias="instance-id", pattern=_INSTANCE_ID_PATTERN)


class StateChangeDetail(_Wire):
    """``EC2 Instance State-change Notification`` detail: ``state`` is the EC2 state name."""

    instance_id: str = Field(alias="instance-id", pattern=_INSTANCE_ID_PATTERN)
    state: str


class CapacityReservationInterruptionDetail(_InstanceWarning):
    """``EC2 Capacity Reservation Instance Interruption Warning`` detail (EC2 User Guide, "Interruptible Capacity
    Reservations"; Karpenter ``messages/capacityreservationinterruption``): the instance the reservation's owner
    reclaims. ``instance-action`` is what EC2 will do (``terminate``); its other fields (``instance-termination-time``,
    ...) are the sender's word and not read."""


class HealthAffectedEntity(_Wire):
    """One ``affectedEntities[]`` item; for EC2 events ``entityValue`` is the instance id."""

    entity_value: str = Field(default="", alias="entityValue")


class HealthEventDetail(_Wire):
    """``AWS Health Event`` detail (AWS Health User Guide, "Monitoring AWS Health events with EventBridge")."""

    event_arn: str = Field(default="", alias="eventArn")
    service: str
    event_type_code: str = Field(default="", alias="eventTypeCode")
    event_type_category: str = Field(alias="eventTypeCategory")
    affected_entities: list[HealthAffectedEntity] = Field(default_factory=list, alias="affectedEntities")


# --- the parsed message ------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class InterruptionMessage:
    """One parsed interruption message: what its sender *claims*, to be checked against EC2 and the cluster.

    ``event_time`` is the envelope's ``time`` in epoch seconds, for logs only: a sender can write any
    time there, so deadlines are counted from when our queue received the message instead
    (:func:`spot_deadline`). ``account`` and ``region`` are the envelope's.
    ``instance_ids`` is empty only for NO_OP. ``reason`` is a short machine-friendly code
    (``unsupported_event``, ``unhandled_state``, ``non_ec2_health``, ``not_scheduled_change``,
    ``no_instances``, ``unsupported_version``) for NO_OP and empty otherwise; ``description`` says
    more in words. ``state`` is the EC2 state of a state-change event, ``instance_action`` the spot or capacity
    reservation warning's action, ``event_type_code`` the Health event type.
    """

    kind: MessageKind
    event_id: str
    instance_ids: tuple[str, ...]
    event_time: float
    account: str = ""
    region: str = ""
    source: str = ""
    detail_type: str = ""
    reason: str = ""
    description: str = ""
    state: str = ""
    instance_action: str = ""
    event_type_code: str = ""


_M = TypeVar("_M", bound="_Wire")


def _describe(exc: ValidationError, prefix: str) -> str:
    parts = []
    for err in exc.errors()[:5]:
        loc = ".".join(str(p) for p in err["loc"])
        where = f"{prefix}.{loc}" if prefix and loc else (prefix or loc or "<root>")
        parts.append(f"{where}: {err['msg']}")
    return "; ".join(parts)


def _decode(body: str | bytes) -> dict[str, Any]:
    if isinstance(body, bytes | bytearray):
        if len(body) > _MAX_BODY_BYTES:
            raise MalformedEventError(f"body is {len(body)} bytes, larger than an SQS message can be")
        try:
            text = bytes(body).decode("utf-8")
        except UnicodeDecodeError as exc:
            raise MalformedEventError(f"body is not UTF-8: {exc.reason} at byte {exc.start}") from None
    elif isinstance(body, str):
        text = body
        if len(text) > _MAX_BODY_BYTES:
            raise MalformedEventError(f"body is {len(text)} characters, larger than an SQS message can be")
    else:
        raise MalformedEventError(f"body must be str or bytes, got {type(body).__name__}")
    if not text.strip():
        raise MalformedEventError("body is empty")
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise MalformedEventError(f"body is not JSON: {exc.msg} at line {exc.lineno} column {exc.colno}") from None
    except (ValueError, RecursionError) as exc:  # int digit limit, nesting deeper than the parser allows
        raise MalformedEventError(f"body is not usable JSON: {type(exc).__name__}: {exc}"[:300]) from None
    if not isinstance(data, dict):
        raise MalformedEventError(f"body is JSON {type(data).__name__}, expected an object (EventBridge event)")
    return data


def _epoch(moment: datetime) -> float:
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    try:
        return moment.timestamp()
    except (OverflowError, ValueError, OSError) as exc:
        raise MalformedEventError(f"time: {moment.isoformat()} cannot be converted to epoch seconds ({exc})") from None


def _validate(model: type[_M], data: dict[str, Any], prefix: str) -> _M:
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise MalformedEventError(_describe(exc, prefix)) from None
    except (ValueError, OverflowError, RecursionError) as exc:  # defensive: pydantic wraps almost everything
        raise MalformedEventError(f"{prefix or 'event'}: {type(exc).__name__}: {exc}"[:300]) from None


def _no_op(base: dict[str, Any], reason: str, description: str) -> InterruptionMessage:
    return InterruptionMessage(kind=MessageKind.NO_OP, instance_ids=(), reason=reason, description=description, **base)


def _parse_warning(
    model: type[_InstanceWarning], kind: MessageKind, envelope: EventEnvelope, base: dict[str, Any]
) -> InterruptionMessage:
    """A warning about one instance (a spot interruption, a capacity reservation interruption) as ``kind``."""
    warning = _validate(model, envelope.detail, "detail")
    return InterruptionMessage(
        kind=kind, instance_ids=(warning.instance_id,), instance_action=warning.instance_action, **base
    )


def _parse_rebalance(envelope: EventEnvelope, base: dict[str, Any]) -> InterruptionMessage:
    rebalance = _validate(RebalanceRecommendationDetail, envelope.detail, "detail")
    return InterruptionMessage(kind=MessageKind.REBALANCE_RECOMMENDATION, instance_ids=(rebalance.instance_id,), **base)


def _parse_state_change(envelope: EventEnvelope, base: dict[str, Any]) -> InterruptionMessage:
    change = _validate(StateChangeDetail, envelope.detail, "detail")
    if change.state in STOPPING_STATES:
        kind = MessageKind.INSTANCE_STOPPING
    elif change.state in INSTANCE_GONE_STATES:
        kind = MessageKind.INSTANCE_TERMINATING
    else:
        acted = ", ".join(sorted(ACTED_STATES))
        return _no_op(base, "unhandled_state", f"instance {change.instance_id} is {change.state!r}; acted on: {acted}")
    return InterruptionMessage(kind=kind, instance_ids=(change.instance_id,), state=change.state, **base)


def _parse_health(envelope: EventEnvelope, base: dict[str, Any]) -> InterruptionMessage:
    health = _validate(HealthEventDetail, envelope.detail, "detail")
    if health.service != "EC2":
        return _no_op(base, "non_ec2_health", f"AWS Health event for service {health.service!r}, only EC2 is acted on")
    if health.event_type_category != "scheduledChange":
        return _no_op(
            base,
            "not_scheduled_change",
            f"AWS Health event category {health.event_type_category!r}, only 'scheduledChange' is acted on",
        )
    ids = tuple(
        dict.fromkeys(e.entity_value for e in health.affected_entities if _INSTANCE_ID.fullmatch(e.entity_value))
    )
    if not ids:
        name = health.event_type_code or health.event_arn
        return _no_op(base, "no_instances", f"AWS Health event {name} names no EC2 instance")
    return InterruptionMessage(
        kind=MessageKind.SCHEDULED_CHANGE,
        instance_ids=ids,
        event_type_code=health.event_type_code,
        **base,
    )


_PARSERS: dict[tuple[str, str], Callable[[EventEnvelope, dict[str, Any]], InterruptionMessage]] = {
    (SOURCE_EC2, DETAIL_SPOT_INTERRUPTION): partial(
        _parse_warning, SpotInterruptionDetail, MessageKind.SPOT_INTERRUPTED
    ),
    (SOURCE_EC2, DETAIL_REBALANCE): _parse_rebalance,
    (SOURCE_EC2, DETAIL_STATE_CHANGE): _parse_state_change,
    (SOURCE_HEALTH, DETAIL_HEALTH): _parse_health,
    (SOURCE_EC2, DETAIL_CAPACITY_RESERVATION_INTERRUPTION): partial(
        _parse_warning, CapacityReservationInterruptionDetail, MessageKind.CAPACITY_RESERVATION_INTERRUPTED
    ),
}


def parse_message(body: str | bytes) -> InterruptionMessage:
    """Parse one SQS message body (an EventBridge event as JSON) into an :class:`InterruptionMessage`.

    Dispatches on (version, source, detail-type) like Karpenter's ``EventParser``; unknown
    combinations and events we do not act on become NO_OP with a ``reason``. A Health event yields
    one message naming every affected instance (entity values that are not instance ids are dropped).

    Raises :class:`MalformedEventError` (and nothing else) when the body is not UTF-8 JSON, is not an
    object, or the envelope or the detail of a known kind does not match the schema.
    """
    envelope = _validate(EventEnvelope, _decode(body), "")
    base: dict[str, Any] = {
        "event_id": envelope.id,
        "event_time": _epoch(envelope.time),
        "account": envelope.account,
        "region": envelope.region,
        "source": envelope.source,
        "detail_type": envelope.detail_type,
    }
    parser = _PARSERS.get((envelope.source, envelope.detail_type))
    if parser is None:
        return _no_op(
            base, "unsupported_event", f"no parser for source {envelope.source!r} detail-type {envelope.detail_type!r}"
        )
    if envelope.version != _ENVELOPE_VERSION:
        return _no_op(base, "unsupported_version", f"envelope version {envelope.version!r}; only '0' is understood")
    return parser(envelope, base)
