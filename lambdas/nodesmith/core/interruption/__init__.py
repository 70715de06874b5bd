"""Interruption: the EventBridge messages of the interruption queue and what to do about them.

:mod:`~nodesmith.core.interruption.messages` parses a message body into an :class:`InterruptionMessage`
(its kind, instances, account and region); :mod:`~nodesmith.core.interruption.verdict` decides the action
for the message and for each instance it names from what EC2 and the cluster say now. Both are re-exported
here.
"""

from nodesmith.core.interruption.messages import (
    ACTED_STATES,
    DETAIL_HEALTH,
    DETAIL_REBALANCE,
    DETAIL_SPOT_INTERRUPTION,
    DETAIL_STATE_CHANGE,
    SOURCE_EC2,
    SOURCE_HEALTH,
    SPOT_INTERRUPTION_NOTICE_SECONDS,
    EventEnvelope,
    HealthAffectedEntity,
    HealthEventDetail,
    InterruptionMessage,
    MalformedEventError,
    MessageKind,
    RebalanceRecommendationDetail,
    SpotInterruptionDetail,
    StateChangeDetail,
    parse_message,
)
from nodesmith.core.interruption.verdict import (
    EVENT_REASONS,
    NODEPOOL_TAG,
    OWNED,
    REMOVING_KINDS,
    Action,
    RebalanceAction,
    Verdict,
    action_for,
    cluster_tag,
    judge_instance,
    judge_message,
    not_ours,
    spot_deadline,
)

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
