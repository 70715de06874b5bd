"""What an interruption did to each instance and message: :class:`InstanceStatus`, the per-instance
:class:`InstanceOutcome` and the per-message :class:`InterruptionOutcome` with its tallies and log form.
The flow that produces them is in :mod:`nodesmith.services.interrupt`.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from enum import StrEnum, unique
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from nodesmith.core.errors import UnavailableOffering
    from nodesmith.core.interruption import Action, MessageKind
    from nodesmith.services.drain import DrainResult

__all__ = ["InstanceOutcome", "InstanceStatus", "InterruptionOutcome"]


@unique
class InstanceStatus(StrEnum):
    """What happened to one instance of a message."""

    IGNORED = "ignored"  # the action is NONE
    FOREIGN = "foreign"  # not tagged for this cluster
    UNKNOWN_INSTANCE = "unknown_instance"  # EC2 does not know it and no node has it
    NO_NODE = "no_node"  # ours, but no Node (not registered yet, or already removed)
    EVENT_ONLY = "event_only"
    CORDONED = "cordoned"
    DRAINED = "drained"  # drained; not terminated (not launched by us, or a rebalance)
    DRAIN_INCOMPLETE = "drain_incomplete"  # budget spent: retry
    REMOVED = "removed"  # node (and instance / NodeClaim when ours) removed
    IN_PROGRESS_ELSEWHERE = "in_progress_elsewhere"  # another invocation holds the drain: retry the record
    DRAIN_ABANDONED = "drain_abandoned"  # too many attempts: left cordoned, no more retries
    DRAIN_HANDED_OFF = "drain_handed_off"  # cordoned; a continuation message drains it (a burst)
    DRAIN_DEFERRED = "drain_deferred"  # a continuation sent back to the queue unbegun: the batch had its fill


_IGNORED_STATUSES = frozenset(
    {
        InstanceStatus.IGNORED,
        InstanceStatus.FOREIGN,
        InstanceStatus.UNKNOWN_INSTANCE,
        InstanceStatus.IN_PROGRESS_ELSEWHERE,
    }
)


@dataclass(frozen=True, slots=True)
class InstanceOutcome:
    """The result for one instance: ``status`` and ``detail`` (words), and what was done.

    ``events`` lists the Event reasons posted. ``interrupted_offering`` is the (type, zone, spot)
    offering to mark unavailable after a spot interruption (Karpenter keeps it out for 3 minutes).
    ``replayed`` is True when the outcome is the stored result of an earlier delivery of the same
    message (idempotency): nothing was done again. ``continued`` is True when an unfinished drain
    was handed to a continuation message. ``nodepool`` / ``capacity_type`` (from the instance's
    ``karpenter.sh/nodepool`` tag and its lifecycle) are the metric dimensions of its termination.
    """

    instance_id: str
    status: InstanceStatus
    detail: str = ""
    node_name: str | None = None
    nodeclaim_name: str | None = None
    cordoned: bool = False
    events: tuple[str, ...] = ()
    drain: DrainResult | None = None
    instance_terminated: bool = False
    node_deleted: bool = False
    nodeclaim_deleted: bool = False
    interrupted_offering: UnavailableOffering | None = None
    warnings: tuple[str, ...] = ()
    replayed: bool = False
    continued: bool = False
    nodepool: str | None = None
    capacity_type: str | None = None


@dataclass(frozen=True, slots=True)
class InterruptionOutcome:
    """Everything the handler needs for logs and metrics about one message.

    Aggregates are over the message's instances: counts of nodes and pods; ``drain_seconds`` is the
    total drain time in seconds.
    """

    event_id: str
    kind: MessageKind
    action: Action
    instances: tuple[InstanceOutcome, ...] = ()
    reason: str = ""

    @property
    def ignored(self) -> bool:
        """True when nothing was done for any instance (no-op, action NONE, foreign or unknown)."""
        return all(i.status in _IGNORED_STATUSES for i in self.instances)

    @property
    def ignore_reason(self) -> str:
        """A low-cardinality reason for an ignored message (metric dimension), else ''."""
        if not self.ignored:
            return ""
        if self.reason:
            return self.reason
        statuses = {i.status for i in self.instances}
        return next(iter(statuses)).value if len(statuses) == 1 else "mixed"

    @property
    def needs_retry(self) -> bool:
        """True when the message should come back: a drain did not finish and no continuation carries it on,
        or another invocation holds the drain. SQS may deliver one message twice at once; if the invocation
        holding the drain then dies, acknowledging the copy here would delete the only message that can
        resume it. Coming back after the visibility timeout, the copy finds the drain done (its stored
        result answers) or its holder's claim expired (and resumes it from the stored progress)."""
        return any(
            (i.status is InstanceStatus.DRAIN_INCOMPLETE and not i.continued)
            or i.status is InstanceStatus.IN_PROGRESS_ELSEWHERE
            for i in self.instances
        )

    @property
    def nodes_cordoned(self) -> int:
        """Nodes tainted and cordoned."""
        return sum(1 for i in self.instances if i.cordoned)

    @property
    def pods_evicted(self) -> int:
        """Pods whose eviction was accepted."""
        return sum(i.drain.evicted for i in self.instances if i.drain)

    @property
    def pods_blocked_by_pdb(self) -> int:
        """Pods whose eviction a PodDisruptionBudget refused (429) at least once."""
        return sum(i.drain.blocked for i in self.instances if i.drain)

    @property
    def pods_force_deleted(self) -> int:
        """Pods deleted directly because of the deadline."""
        return sum(i.drain.force_deleted for i in self.instances if i.drain)

    @property
    def pods_remaining(self) -> int:
        """Pods still to leave their nodes."""
        return sum(i.drain.remaining for i in self.instances if i.drain)

    @property
    def drain_seconds(self) -> float:
        """Seconds spent draining."""
        return sum(i.drain.duration_seconds for i in self.instances if i.drain)

    @property
    def nodeclaims_terminated(self) -> int:
        """NodeClaims deleted."""
        return sum(1 for i in self.instances if i.nodeclaim_deleted)

    def as_log(self) -> dict[str, Any]:
        """A JSON-ready summary for one structured log line."""
        return {
            "event_id": self.event_id,
            "kind": self.kind.value,
            "action": self.action.value,
            "reason": self.reason,
            "needs_retry": self.needs_retry,
            "instances": [asdict(i) for i in self.instances],
        }
