"""What a reconcile pass reports: :class:`ReconcileOutcome` (the handler's metrics and log line), the
cost of the launched NodeClaims by NodePool and capacity type (:func:`cost_by_pool`), and the pods'
``Nominated`` / ``FailedScheduling`` Events (:func:`post_pod_events`).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from nodesmith.core.ports import Cluster, Instance, ObjectRef
from nodesmith.core.requirements import LABEL_INSTANCE_TYPE, LABEL_ZONE
from nodesmith.services.breakdown import PoolKey, pool_key
from nodesmith.services.parallel import map_ordered
from nodesmith.services.provisioning.capacity import offering_price

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

    from nodesmith.core.api.nodeclaim import NodeClaim
    from nodesmith.core.disruption.static import StaticDecision
    from nodesmith.core.model import InstanceType, Node, Pod
    from nodesmith.services.provisioning.inputs import Snapshot

__all__ = ["EVENT_WORKERS", "ReconcileOutcome", "cost_by_pool", "pod_ref", "post_pod_events"]

EVENT_WORKERS = 8
"""How many pod Events a pass posts at once (:func:`post_pod_events`)."""


@dataclass(slots=True)
class ReconcileOutcome:
    """What one reconcile pass saw and did (the handler turns it into metrics and a log line).

    Counts are per pass. ``pods_pending`` counts pods Nodesmith provisions for at the snapshot;
    ``oldest_pending_age_seconds`` is the age of the oldest of them (0 when none);
    ``pods_scheduled`` are pods nominated to NodeClaims launched in this pass;
    ``pods_awaiting_capacity`` fit existing or in-flight capacity (kube-scheduler binds them once
    the node is Ready); ``pods_rescheduled`` are pods on nodes going away (deleted, deleting or
    tainted ``karpenter.sh/disrupted``) that were provisioned for ahead of their eviction.
    ``launch_failures`` maps an EC2 error code (or ``NodeClassNotReady``) to failed launches.
    ``cost_per_hour`` is the price of every launched NodeClaim after the pass (USD/hour),
    ``new_cost_per_hour`` that of the ones launched now. ``scheduling_duration_seconds`` sums the
    solver's wall time. ``unschedulable`` maps ``namespace/name`` to a reason. ``utilization`` is
    the percent of allocatable that pods request, per NodePool and resource, after the pass
    (:func:`~nodesmith.services.provisioning.utilization.nodepool_utilization`).

    Breakdowns for the metrics' dimensions (:mod:`~nodesmith.services.breakdown`): ``created_by``,
    ``launched_by``, ``registered_by``, ``initialized_by`` count NodeClaims by (NodePool, capacity
    type); ``terminated_by`` by (reason, NodePool, capacity type); ``cost_by`` is
    ``cost_per_hour`` split by (NodePool, capacity type) (USD/hour).

    ``garbage_collected`` is True when the pass listed every instance of ours and so ran the instance-gone
    check and the orphan sweep (:func:`~nodesmith.services.provisioning.lifecycle.collect_garbage`); a pass that did not
    priced registered nodes by their labels. ``terminations_requested`` names the NodeClaims whose termination
    request the pass sent (deletions nobody had asked for yet, or whose request went stale).
    ``static_decisions`` are the pass's static NodePool decisions (gate ``StaticCapacity``) and ``static_removed`` the
    NodeClaims a static scale-down removed.
    ``launch_templates_deleted`` names the launch templates of deleted EC2NodeClasses the pass deleted
    (:func:`~nodesmith.services.provisioning.nodeclasses.finalize_nodeclasses`).
    ``snapshot`` is the cluster as the pass left it: what it read, less the Nodes and NodeClaims it deleted,
    with the NodeClaims it wrote (registration, launches) as written and the ones it created. The disruption
    pass of the same invocation decides on it instead of listing the cluster again.
    """

    pods_pending: int = 0
    oldest_pending_age_seconds: float = 0.0
    pods_scheduled: int = 0
    pods_awaiting_capacity: int = 0
    pods_rescheduled: int = 0
    nodeclaims_created: int = 0
    nodeclaims_launched: int = 0
    nodeclaims_registered: int = 0
    nodeclaims_initialized: int = 0
    nodeclaims_terminated: int = 0
    orphans_terminated: int = 0
    launch_failures: dict[str, int] = field(default_factory=dict)
    offerings_marked_unavailable: int = 0
    cost_per_hour: float = 0.0
    new_cost_per_hour: float = 0.0
    scheduling_duration_seconds: float = 0.0
    solve_attempts: int = 0
    unschedulable: dict[str, str] = field(default_factory=dict)
    launched: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    utilization: dict[str, dict[str, float]] = field(default_factory=dict)
    created_by: dict[PoolKey, int] = field(default_factory=dict)
    launched_by: dict[PoolKey, int] = field(default_factory=dict)
    registered_by: dict[PoolKey, int] = field(default_factory=dict)
    initialized_by: dict[PoolKey, int] = field(default_factory=dict)
    terminated_by: dict[tuple[str, str, str], int] = field(default_factory=dict)
    cost_by: dict[PoolKey, float] = field(default_factory=dict)
    garbage_collected: bool = False
    terminations_requested: list[str] = field(default_factory=list)
    static_decisions: list[StaticDecision] = field(default_factory=list)
    static_removed: list[str] = field(default_factory=list)
    launch_templates_deleted: list[str] = field(default_factory=list)
    snapshot: Snapshot | None = None

    @property
    def unschedulable_reasons(self) -> dict[str, int]:
        """Distinct unschedulable reasons with how many pods gave each."""
        return dict(Counter(self.unschedulable.values()))


def pod_ref(pod: Pod) -> ObjectRef:
    """The Event target for ``pod``."""
    return ObjectRef(kind="Pod", name=pod.name, namespace=pod.namespace, uid=pod.uid)


def cost_by_pool(
    claims: Sequence[NodeClaim],
    instances: Mapping[str, Instance],
    catalogue: Mapping[str, InstanceType],
    *,
    nodes: Sequence[Node] = (),
) -> dict[PoolKey, float]:
    """Hourly price (USD) of the instances behind the given NodeClaims, by (NodePool, capacity type).

    ``instances`` are ours by id. ``nodes``: when ``instances`` is not the whole fleet (a pass that did not
    list it), a NodeClaim whose instance is not there is priced by the offering its registered Node's
    well-known labels name (``node.kubernetes.io/instance-type``, ``topology.kubernetes.io/zone``,
    ``karpenter.sh/capacity-type``); leave it empty when ``instances`` is every live instance, so that a
    NodeClaim whose instance is gone costs nothing.
    """
    by_provider = {n.provider_id: n for n in nodes if n.provider_id}
    total: dict[PoolKey, float] = {}
    for nc in claims:
        provider_id = nc.status.provider_id or ""
        inst = instances.get(provider_id.rsplit("/", 1)[-1]) if provider_id else None
        if inst is not None:
            key = pool_key(nodeclaim=nc, capacity_type=inst.capacity_type)
            total[key] = total.get(key, 0.0) + offering_price(
                catalogue, instance_type=inst.instance_type, zone=inst.zone, capacity_type=inst.capacity_type
            )
            continue
        node = by_provider.get(provider_id) if provider_id else None
        if node is None:
            continue
        labels = node.labels
        key = pool_key(nodeclaim=nc, labels=labels)
        total[key] = total.get(key, 0.0) + offering_price(
            catalogue,
            instance_type=labels.get(LABEL_INSTANCE_TYPE, ""),
            zone=labels.get(LABEL_ZONE, ""),
            capacity_type=key[1],
        )
    return total


def post_pod_events(
    *, cluster: Cluster, pending: Sequence[Pod], nominated: Sequence[tuple[Pod, str]], out: ReconcileOutcome, limit: int
) -> None:
    """Post at most ``limit`` pod Events: ``Nominated`` for pods planned onto a NodeClaim, then
    ``FailedScheduling`` with the reason for unschedulable ones (Karpenter's pod event reasons).

    They go out :data:`EVENT_WORKERS` at a time: client-go's recorder, which Karpenter uses, sends
    Events from its own goroutine so a pass never waits on them. ``record_event`` is best effort (never
    raises).
    """
    events: list[tuple[Pod, str, str, str]] = [
        (pod, "Nominated", f"Pod should schedule on: nodeclaim/{claim}", "Normal") for pod, claim in nominated
    ]
    by_key = {p.key: p for p in pending}
    for key, reason in sorted(out.unschedulable.items()):
        target = by_key.get(key)
        if target is not None:
            events.append((target, "FailedScheduling", f"Failed to schedule pod, {reason}", "Warning"))

    def post(event: tuple[Pod, str, str, str]) -> None:
        pod, reason, message, type_ = event
        cluster.record_event(ref=pod_ref(pod), reason=reason, message=message, type_=type_)

    map_ordered(post, events[: max(0, limit)], workers=EVENT_WORKERS, name="pod-events")
