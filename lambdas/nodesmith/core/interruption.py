"""Interruption messages: parse the EventBridge events that reach the interruption queue, decide the action.

Four event kinds arrive through EventBridge -> SQS (``karpenter-v1.md`` §4.1, §4.2; Karpenter
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
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from enum import StrEnum, unique
from typing import TYPE_CHECKING, Any, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from nodesmith.core.errors import NodesmithError
from nodesmith.core.model import CAPACITY_TYPE_SPOT, INSTANCE_GONE_STATES

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

    from nodesmith.core.ports import Instance

__all__ = [
    "ACTED_STATES",
    "DETAIL_HEALTH",
    "DETAIL_REBALANCE",
    "DETAIL_SPOT_INTERRUPTION",
    "DETAIL_STATE_CHANGE",
    "EVENT_REASONS",
    "NODEPOOL_TAG",
    "OWNED",
    "REMOVING_KINDS",
    "SOURCE_EC2",
    "SOURCE_HEALTH",
    "SPOT_INTERRUPTION_NOTICE_SECONDS",
    "Action",
    "EventEnvelope",
    "HealthAffectedEntity",
    "HealthEventDetail",
    "InterruptionMessage",
    "MalformedEventError",
    "MessageKind",
    "RebalanceAction",
    "RebalanceRecommendationDetail",
    "SpotInterruptionDetail",
    "StateChangeDetail",
    "Verdict",
    "action_for",
    "cluster_tag",
    "judge_instance",
    "judge_message",
    "not_ours",
    "parse_message",
    "spot_deadline",
]

SOURCE_EC2 = "aws.ec2"
SOURCE_HEALTH = "aws.health"
DETAIL_SPOT_INTERRUPTION = "EC2 Spot Instance Interruption Warning"
DETAIL_REBALANCE = "EC2 Instance Rebalance Recommendation"
DETAIL_STATE_CHANGE = "EC2 Instance State-change Notification"
DETAIL_HEALTH = "AWS Health Event"

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
    NO_OP = "no_op"


@unique
class Action(StrEnum):
    """What to do with the node of an interrupted instance."""

    CORDON_AND_DRAIN = "cordon_and_drain"
    CORDON = "cordon"
    EVENT_ONLY = "event_only"
    NONE = "none"


RebalanceAction = Literal["ignore", "event", "cordon", "drain"]
"""Setting ``NODESMITH_REBALANCE_ACTION``: what a rebalance recommendation does (default ``cordon``)."""

_REBALANCE_ACTIONS: dict[str, Action] = {
    "ignore": Action.NONE,
    "event": Action.EVENT_ONLY,
    "cordon": Action.CORDON,
    "drain": Action.CORDON_AND_DRAIN,
}


def action_for(kind: MessageKind, *, rebalance_action: RebalanceAction) -> Action:
    """The action for a message kind.

    Spot interruption, scheduled change, stopping and terminating instances are CORDON_AND_DRAIN
    (Karpenter ``[aws]:pkg/controllers/interruption/utils.go actionForMessage``). Karpenter only
    publishes an event for a rebalance recommendation (issue aws#2813); NTH drains on every one in
    queue mode (NTH #786), which churns. We make it a setting: ``ignore`` -> NONE, ``event`` ->
    EVENT_ONLY, ``cordon`` -> CORDON (new pods stop landing on the node; running ones stay),
    ``drain`` -> CORDON_AND_DRAIN. NO_OP is NONE.

    Raises ``ValueError`` for a ``rebalance_action`` outside ignore|event|cordon|drain.
    """
    if kind is MessageKind.NO_OP:
        return Action.NONE
    if kind is MessageKind.REBALANCE_RECOMMENDATION:
        try:
            return _REBALANCE_ACTIONS[rebalance_action]
        except KeyError:
            raise ValueError(
                f"rebalance_action must be one of {sorted(_REBALANCE_ACTIONS)}, got {rebalance_action!r}"
            ) from None
    return Action.CORDON_AND_DRAIN


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


class SpotInterruptionDetail(_Wire):
    """``EC2 Spot Instance Interruption Warning`` detail. ``instance-action`` is hibernate, stop or terminate."""

    instance_id: str = Field(alias="instance-id", pattern=_INSTANCE_ID_PATTERN)
    instance_action: str = Field(default="", alias="instance-action")


class RebalanceRecommendationDetail(_Wire):
    """``EC2 Instance Rebalance Recommendation`` detail."""

    instance_id: str = Field(alias="instance-id", pattern=_INSTANCE_ID_PATTERN)


class StateChangeDetail(_Wire):
    """``EC2 Instance State-change Notification`` detail: ``state`` is the EC2 state name."""

    instance_id: str = Field(alias="instance-id", pattern=_INSTANCE_ID_PATTERN)
    state: str


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
    more in words. ``state`` is the EC2 state of a state-change event, ``instance_action`` the spot
    warning's action, ``event_type_code`` the Health event type.
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


def _parse_spot(envelope: EventEnvelope, base: dict[str, Any]) -> InterruptionMessage:
    spot = _validate(SpotInterruptionDetail, envelope.detail, "detail")
    return InterruptionMessage(
        kind=MessageKind.SPOT_INTERRUPTED,
        instance_ids=(spot.instance_id,),
        instance_action=spot.instance_action,
        **base,
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
    (SOURCE_EC2, DETAIL_SPOT_INTERRUPTION): _parse_spot,
    (SOURCE_EC2, DETAIL_REBALANCE): _parse_rebalance,
    (SOURCE_EC2, DETAIL_STATE_CHANGE): _parse_state_change,
    (SOURCE_HEALTH, DETAIL_HEALTH): _parse_health,
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


# --- what to do: decided from what EC2 and the cluster say now, never from the message alone ---------------

OWNED = "owned"
"""The value of ``kubernetes.io/cluster/<name>`` on instances the cluster owns (``shared`` is not ours)."""

NODEPOOL_TAG = "karpenter.sh/nodepool"
"""The tag Karpenter (and Nodesmith) put on every instance launched for a NodePool."""

EVENT_REASONS: dict[MessageKind, tuple[str, str]] = {
    MessageKind.SPOT_INTERRUPTED: ("SpotInterrupted", "Warning"),
    MessageKind.REBALANCE_RECOMMENDATION: ("SpotRebalanceRecommendation", "Normal"),
    MessageKind.INSTANCE_STOPPING: ("InstanceStopping", "Warning"),
    MessageKind.INSTANCE_TERMINATING: ("InstanceTerminating", "Warning"),
    MessageKind.SCHEDULED_CHANGE: ("InstanceUnhealthy", "Warning"),
}
"""Kubernetes Event reason and type per message kind (Karpenter ``[aws]:pkg/controllers/interruption/events``);
the reason is also the NodeClaim's termination reason (``NodeClaimsTerminated`` by ``Reason``)."""

REMOVING_KINDS = frozenset(
    {
        MessageKind.SPOT_INTERRUPTED,
        MessageKind.SCHEDULED_CHANGE,
        MessageKind.INSTANCE_STOPPING,
        MessageKind.INSTANCE_TERMINATING,
    }
)
"""Kinds whose CORDON_AND_DRAIN ends with the instance terminated and the NodeClaim deleted (Karpenter deletes
the NodeClaim for all of them); a rebalance recommendation set to ``drain`` removes the node too."""

_SPOT_KINDS = frozenset({MessageKind.SPOT_INTERRUPTED, MessageKind.REBALANCE_RECOMMENDATION})


def cluster_tag(cluster_name: str) -> str:
    """The EC2 tag key marking a cluster's instances (Kubernetes cloud provider, EKS, Karpenter)."""
    return f"kubernetes.io/cluster/{cluster_name}"


def spot_deadline(received_at: float) -> float:
    """When a spot instance warned at ``received_at`` (epoch seconds our queue received the warning) goes away.

    EC2 sends the warning two minutes before it reclaims the instance (EC2 User Guide, "Spot Instance
    interruption notices"). Counting from our queue's receipt, not the event's ``time``, means a back-dated
    warning cannot make the drain force-delete pods early; a real warning that reached the queue late is
    counted a little generously, and the instance's own end still bounds it.
    """
    return received_at + SPOT_INTERRUPTION_NOTICE_SECONDS


def not_ours(tags: Mapping[str, str], cluster_name: str) -> str:
    """Why an instance with ``tags`` is not one Nodesmith may act on, or ``""`` when it is.

    Ours means what Karpenter's IAM policy requires before it terminates an instance: the tag
    ``kubernetes.io/cluster/<cluster_name>`` with the value ``owned`` (``shared`` resources are the
    account's) **and** ``karpenter.sh/nodepool`` (a managed node group's instances are owned by the
    cluster too, but were not launched for a NodePool). Reasons: ``not_owned``, ``no_nodepool_tag``.
    """
    if tags.get(cluster_tag(cluster_name)) != OWNED:
        return "not_owned"
    if not tags.get(NODEPOOL_TAG):
        return "no_nodepool_tag"
    return ""


@dataclass(frozen=True, slots=True)
class Verdict:
    """What to do about one instance of a message.

    ``ignored`` is a reason code (``foreign_account``, ``not_owned``, ``state_mismatch``, ...) when
    nothing is to be done, else ``""``. ``action`` is what to do with the node; ``removing`` says the
    NodeClaim is deleted and the node drained and terminated through the termination queue;
    ``deadline`` (epoch seconds, or None) is when the instance goes away; ``reason`` is Karpenter's
    Event reason for the kind, also the termination reason.
    """

    action: Action
    ignored: str = ""
    removing: bool = False
    deadline: float | None = None
    reason: str = ""


def judge_message(
    message: InterruptionMessage, *, account: str, region: str, rebalance_action: RebalanceAction
) -> Verdict:
    """The message-level verdict, before anything is read: ignored when the event is not for us, else the action.

    Ignored (in this order): another ``account`` or ``region`` than ours (``foreign_account``,
    ``foreign_region``: a rule in another account or region, or a forger, sent it), a NO_OP message (its own
    reason), an action of NONE (``action_none``, a rebalance recommendation set to ``ignore``).
    """
    if message.account != account:
        return Verdict(action=Action.NONE, ignored="foreign_account")
    if message.region != region:
        return Verdict(action=Action.NONE, ignored="foreign_region")
    if message.kind is MessageKind.NO_OP:
        return Verdict(action=Action.NONE, ignored=message.reason or "no_op")
    action = action_for(message.kind, rebalance_action=rebalance_action)
    if action is Action.NONE:
        return Verdict(action=action, ignored="action_none")
    reason = EVENT_REASONS[message.kind][0]
    removing = action is Action.CORDON_AND_DRAIN and (
        message.kind in REMOVING_KINDS or message.kind is MessageKind.REBALANCE_RECOMMENDATION
    )
    return Verdict(action=action, removing=removing, reason=reason)


def judge_instance(
    message_verdict: Verdict,
    message: InterruptionMessage,
    *,
    instance: Instance | None,
    has_nodeclaim: bool,
    cluster_name: str,
    received_at: float,
) -> Verdict:
    """The verdict for one instance the message names, from what EC2 (``instance``, just described; None when
    EC2 does not know it) and the cluster (``has_nodeclaim``) say now.

    Ignored: ``unknown_instance``; :func:`not_ours`' reasons; ``no_nodeclaim`` (not launched for this cluster's
    NodeClaims); ``not_spot`` (a spot warning or rebalance recommendation about an on-demand instance, which EC2
    never sends); ``state_mismatch`` (a state-change event whose state EC2 does not confirm: a forged
    ``terminated`` for a running instance must not skip its drain). A spot interruption's ``deadline`` is
    :func:`spot_deadline` of ``received_at`` (epoch seconds our queue received it).
    """
    if message_verdict.ignored:
        return message_verdict
    if instance is None:
        return replace(message_verdict, action=Action.NONE, ignored="unknown_instance")
    why = not_ours(instance.tags, cluster_name)
    if not why and not has_nodeclaim:
        why = "no_nodeclaim"
    if not why and message.kind in _SPOT_KINDS and instance.capacity_type != CAPACITY_TYPE_SPOT:
        why = "not_spot"
    if not why and message.kind in (MessageKind.INSTANCE_STOPPING, MessageKind.INSTANCE_TERMINATING):
        why = "" if instance.state in ACTED_STATES else "state_mismatch"
    if why:
        return replace(message_verdict, action=Action.NONE, ignored=why)
    deadline = spot_deadline(received_at) if message.kind is MessageKind.SPOT_INTERRUPTED else None
    return replace(message_verdict, deadline=deadline)
