"""Interruption verdicts: what to do about a parsed message and each instance it names.

The action per message kind follows Karpenter (``[aws]:pkg/controllers/interruption/utils.go
actionForMessage``; a rebalance recommendation's action is a setting). The verdict is decided from what EC2
and the cluster say now, never from the message alone: the message must be for our account and region, the
instance must be ours (Karpenter's IAM conditions: the cluster tag ``owned`` and ``karpenter.sh/nodepool``),
have a NodeClaim, and EC2 must confirm what a state-change event claims.

Pure: stdlib only, no clock (the time our queue received the message is passed in).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from enum import StrEnum, unique
from typing import TYPE_CHECKING, Literal

from nodesmith.core.interruption.messages import (
    ACTED_STATES,
    SPOT_INTERRUPTION_NOTICE_SECONDS,
    InterruptionMessage,
    MessageKind,
)
from nodesmith.core.model import CAPACITY_TYPE_RESERVED, CAPACITY_TYPE_SPOT

if TYPE_CHECKING:
    from collections.abc import Mapping

    from nodesmith.core.ports import Instance

__all__ = [
    "EVENT_REASONS",
    "NODEPOOL_TAG",
    "OWNED",
    "REMOVING_KINDS",
    "Action",
    "RebalanceAction",
    "Verdict",
    "action_for",
    "cluster_tag",
    "judge_instance",
    "judge_message",
    "not_ours",
    "spot_deadline",
]


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

    Spot interruption, capacity reservation interruption, scheduled change, stopping and terminating instances are
    CORDON_AND_DRAIN (Karpenter ``[aws]:pkg/controllers/interruption/utils.go actionForMessage``). Karpenter only
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
    MessageKind.CAPACITY_RESERVATION_INTERRUPTED: ("CapacityReservationInstanceInterrupted", "Warning"),
}
"""Kubernetes Event reason and type per message kind (Karpenter ``[aws]:pkg/controllers/interruption/events``);
the reason is also the NodeClaim's termination reason (``NodeClaimsTerminated`` by ``Reason``)."""

REMOVING_KINDS = frozenset(
    {
        MessageKind.SPOT_INTERRUPTED,
        MessageKind.SCHEDULED_CHANGE,
        MessageKind.INSTANCE_STOPPING,
        MessageKind.INSTANCE_TERMINATING,
        MessageKind.CAPACITY_RESERVATION_INTERRUPTED,
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
    never sends); ``not_reserved`` (a capacity reservation warning about an instance EC2 says runs in no capacity
    reservation); ``state_mismatch`` (a state-change event whose state EC2 does not confirm: a forged
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
    if (
        not why
        and message.kind is MessageKind.CAPACITY_RESERVATION_INTERRUPTED
        and (instance.capacity_type != CAPACITY_TYPE_RESERVED or not instance.reservation_id)
    ):
        why = "not_reserved"
    if not why and message.kind in (MessageKind.INSTANCE_STOPPING, MessageKind.INSTANCE_TERMINATING):
        why = "" if instance.state in ACTED_STATES else "state_mismatch"
    if why:
        return replace(message_verdict, action=Action.NONE, ignored=why)
    deadline = spot_deadline(received_at) if message.kind is MessageKind.SPOT_INTERRUPTED else None
    return replace(message_verdict, deadline=deadline)
