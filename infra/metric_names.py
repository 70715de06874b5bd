"""The one list of Nodesmith's CloudWatch metric names: the dashboard and alarms read only these.

The Lambdas emit these as CloudWatch embedded metric format (Powertools ``Metrics``) in namespace
:data:`NAMESPACE`. Keeping the names here lets a test compare them with what the code emits, so a
renamed metric cannot silently leave a dashboard graph or an alarm empty.

Dimension contract: the dashboard and alarms aggregate with CloudWatch Metrics Insights
(``SELECT SUM(Name) FROM Nodesmith``), i.e. across every dimension set. Emit each data point under
exactly one dimension set (``service`` plus any breakdown such as ``NodePool``, ``CapacityType``,
``Zone``, ``Reason``, ``Decision``); emitting the same point twice would count it twice.

Units follow the suffix: ``...Seconds`` in seconds, ``...Percent`` in percent, ``...USDPerHour``
in US dollars per hour (CloudWatch has no currency unit, so the unit is ``None`` and the name says
it), everything else a count; :data:`UNITS` spells that out and a test holds the code to it.
Karpenter's Prometheus counterpart is noted where there is one (``karpenter-v1.md`` §5).

Breakdown dimensions in use (:class:`Dimension`): ``NodePool`` and ``CapacityType`` (NodeClaims
created, launched, registered, initialized; cost per NodePool), ``Reason``, ``NodePool`` and
``CapacityType`` (NodeClaims terminated), ``NodePool`` and ``Resource`` (utilisation), ``Reason``
(ignored interruption messages and termination requests), ``ErrorCode`` (launch failures),
``MessageType`` (received messages), ``Method`` (disruption). :data:`BREAKDOWNS` lists the exact set
for each broken-down metric.
"""

from __future__ import annotations

from enum import StrEnum, unique

__all__ = ["BREAKDOWNS", "NAMESPACE", "UNITS", "Dimension", "MetricName"]

NAMESPACE = "Nodesmith"
"""CloudWatch namespace of every custom metric (Powertools ``POWERTOOLS_METRICS_NAMESPACE``)."""


@unique
class MetricName(StrEnum):
    """Custom metric names, grouped as the dashboard shows them. Members compare equal to the name."""

    # Capacity and cost
    PODS_PENDING = "PodsPending"  # gauge; karpenter_scheduler_unschedulable_pods_count
    OLDEST_PENDING_POD_AGE_SECONDS = "OldestPendingPodAgeSeconds"  # gauge; pods_unbound_time_seconds
    PODS_SCHEDULED = "PodsScheduled"  # count of pods placed by a reconcile pass
    CLUSTER_COST_USD_PER_HOUR = "ClusterCostUSDPerHour"  # gauge, the whole cluster
    NODEPOOL_COST_USD_PER_HOUR = "NodePoolCostUSDPerHour"  # gauge by NodePool, CapacityType; nodepools_cost_total
    NODEPOOL_UTILIZATION_PERCENT = "NodePoolUtilizationPercent"  # gauge by NodePool, Resource (cpu, memory)

    # Provisioning
    SCHEDULING_DURATION_SECONDS = "SchedulingDurationSeconds"  # scheduler_scheduling_duration_seconds
    NODECLAIMS_CREATED = "NodeClaimsCreated"  # by NodePool, CapacityType; nodeclaims_created_total
    NODECLAIMS_LAUNCHED = "NodeClaimsLaunched"
    NODECLAIMS_REGISTERED = "NodeClaimsRegistered"
    NODECLAIMS_INITIALIZED = "NodeClaimsInitialized"
    LAUNCH_FAILURES = "LaunchFailures"  # cloudprovider_instance_launch_failures_total
    OFFERINGS_MARKED_UNAVAILABLE = "OfferingsMarkedUnavailable"  # ICE cache insertions

    # Interruptions and drains (the interruption function, then the termination function)
    INTERRUPTION_MESSAGES_RECEIVED = "InterruptionMessagesReceived"  # interruption_received_messages_total
    INTERRUPTION_MESSAGES_ACKNOWLEDGED = "InterruptionMessagesAcknowledged"  # interruption_deleted_messages_total
    # by Reason: foreign_account, foreign_region, not_owned, no_nodepool_tag, no_nodeclaim, state_mismatch,
    # not_spot, unknown_instance, action_none, ...: nothing was done about the message
    INTERRUPTION_MESSAGES_IGNORED = "InterruptionMessagesIgnored"
    INTERRUPTION_MESSAGES_MALFORMED = "InterruptionMessagesMalformed"  # unparseable, acknowledged
    INTERRUPTION_QUEUE_AGE_SECONDS = "InterruptionQueueAgeSeconds"  # interruption_message_queue_duration_seconds
    NODES_CORDONED = "NodesCordoned"
    # by Reason: nodeclaim_gone, not_deleting, no_finalizer, instance_mismatch, not_owned, no_nodepool_tag:
    # the cluster or EC2 does not back the request, nothing was done
    TERMINATION_REQUESTS_IGNORED = "TerminationRequestsIgnored"
    TERMINATION_REQUESTS_MALFORMED = "TerminationRequestsMalformed"  # not a termination request, acknowledged
    PODS_EVICTED = "PodsEvicted"  # pods_drained_total
    PODS_BLOCKED_BY_PDB = "PodsBlockedByPDB"  # eviction answered 429
    PODS_FORCE_DELETED = "PodsForceDeleted"  # terminationGracePeriod expired
    DRAIN_DURATION_SECONDS = "DrainDurationSeconds"  # nodes_termination_duration_seconds
    DRAINS_MISSED_DEADLINE = "DrainsMissedDeadline"  # pods still on the node when EC2 reclaimed it
    NODECLAIMS_TERMINATED = "NodeClaimsTerminated"  # by Reason, NodePool, CapacityType; nodeclaims_disrupted_total

    # Disruption
    DISRUPTION_DECISIONS = "DisruptionDecisions"  # voluntary_disruption_decisions_total
    DISRUPTION_SAVINGS_USD_PER_HOUR = "DisruptionSavingsUSDPerHour"

    # Controller health
    RECONCILE_DURATION_SECONDS = "ReconcileDurationSeconds"
    RECONCILE_ERRORS = "ReconcileErrors"


@unique
class Dimension(StrEnum):
    """Breakdown dimensions the code emits besides ``service`` (one set per data point)."""

    NODEPOOL = "NodePool"
    CAPACITY_TYPE = "CapacityType"
    RESOURCE = "Resource"
    REASON = "Reason"
    ERROR_CODE = "ErrorCode"
    MESSAGE_TYPE = "MessageType"
    METHOD = "Method"


UNITS: dict[MetricName, str] = {
    name: (
        "Seconds"
        if name.endswith("Seconds")
        else "Percent"
        if name.endswith("Percent")
        else "None"
        if name.endswith("USDPerHour")
        else "Count"
    )
    for name in MetricName
}
"""CloudWatch unit of each metric, as the code must emit it (EMF ``Unit``)."""

_POOL = frozenset({Dimension.NODEPOOL, Dimension.CAPACITY_TYPE})

BREAKDOWNS: dict[MetricName, frozenset[Dimension]] = {
    MetricName.NODECLAIMS_CREATED: _POOL,
    MetricName.NODECLAIMS_LAUNCHED: _POOL,
    MetricName.NODECLAIMS_REGISTERED: _POOL,
    MetricName.NODECLAIMS_INITIALIZED: _POOL,
    MetricName.NODECLAIMS_TERMINATED: _POOL | {Dimension.REASON},
    MetricName.NODEPOOL_COST_USD_PER_HOUR: _POOL,
    MetricName.NODEPOOL_UTILIZATION_PERCENT: frozenset({Dimension.NODEPOOL, Dimension.RESOURCE}),
    MetricName.LAUNCH_FAILURES: frozenset({Dimension.ERROR_CODE}),
    MetricName.INTERRUPTION_MESSAGES_RECEIVED: frozenset({Dimension.MESSAGE_TYPE}),
    MetricName.INTERRUPTION_MESSAGES_IGNORED: frozenset({Dimension.REASON}),
    MetricName.TERMINATION_REQUESTS_IGNORED: frozenset({Dimension.REASON}),
    MetricName.DISRUPTION_DECISIONS: frozenset({Dimension.METHOD}),
    MetricName.DISRUPTION_SAVINGS_USD_PER_HOUR: frozenset({Dimension.METHOD}),
}
"""The breakdown dimensions (besides ``service``) each of these metrics is always emitted under.

The dashboard's per-NodePool graphs search exactly these schemas; a test holds every data point
the code emits for these names to its set."""
