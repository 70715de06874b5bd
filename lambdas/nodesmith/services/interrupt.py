"""Act on one interruption message: find our instance and node, taint and cordon, post Events, drain, clean up.

Karpenter's interruption controller (``karpenter-v1.md`` §4.3, ``[aws]:pkg/controllers/interruption/
controller.go``) deletes the NodeClaim, which runs the termination flow (taint, drain, terminate,
remove the node). Without a controller in the cluster we do that flow here, per instance named by
the message:

1. ``cloud.get_instance`` (a batch passes the instances it located at once: through their labelled NodeClaims
   for warnings sent while they run, else one ``DescribeInstances``, :mod:`~nodesmith.services.interrupt_locate`).
   An instance without the tag ``kubernetes.io/cluster/<cluster_name>`` is
   not ours: ignored ("foreign"), because EC2 events carry no cluster identity and an account-wide
   rule reaches every cluster's queue (NTH #787). An instance EC2 no longer knows is looked up among
   our nodes by instance id; not found -> ignored ("unknown instance").
2. The node: by the instance's private DNS name (the name EKS and Karpenter nodes get), checked
   against its providerID (``aws:///<zone>/<instance-id>``). Failing that, for an instance we launched,
   by its NodeClaim's ``status.nodeName`` (the NodeClaim names its node, as in Karpenter; a NodeClaim
   gone means its node went first); for any other instance, among all nodes by providerID, listed
   once per batch (:class:`NodeLookup`). No node -> nothing to drain.
3. Taint ``karpenter.sh/disrupted:NoSchedule`` and cordon (idempotent) -- first, so no new pod
   lands on the node while the rest happens.
4. Events on the node (or the NodeClaim): ``SpotInterrupted``, ``SpotRebalanceRecommendation``,
   ``InstanceStopping``, ``InstanceTerminating``, ``InstanceUnhealthy`` (scheduled change), plus
   ``TerminatingOnInterruption`` when the node will be removed (Karpenter
   ``[aws]:pkg/controllers/interruption/events/events.go``).
5. Drain (:func:`nodesmith.services.drain.drain_node`), except for a shutting-down/terminated
   instance, whose pods are already dying: its Node and NodeClaim are deleted straight away and the
   pod garbage collector removes the pods, so their controllers replace them at once (Karpenter
   removes the finalizer immediately when the instance is gone).
6. Once drained, an instance that Nodesmith (or Karpenter) launched -- tagged ``karpenter.sh/nodepool``
   or ``karpenter.sh/nodeclaim`` -- is terminated and its Node and NodeClaim deleted, as Karpenter's
   NodeClaim deletion does. Other instances of the cluster (managed node groups) are drained only.

Rebalance recommendations follow the ``rebalance_action`` setting (see
:func:`nodesmith.core.interruption.action_for`) and never terminate the instance.

Everything is idempotent, so a redelivered or duplicate message is harmless. A drain that does not
finish within the budget sets :attr:`InterruptionOutcome.needs_retry`.

:class:`InterruptionRun` splits the flow in two steps, :meth:`~InterruptionRun.begin` (locate,
cordon, Events) and :meth:`~InterruptionRun.drain` (drain, remove), so a batch of messages can
cordon every node before any drain starts (:mod:`nodesmith.services.interrupt_batch`, which also
stores drain progress and continues unfinished drains in later invocations).
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from nodesmith.core.errors import KubernetesError, UnavailableOffering
from nodesmith.core.interruption import Action, InterruptionMessage, MessageKind, RebalanceAction, action_for
from nodesmith.core.model import CAPACITY_TYPE_SPOT
from nodesmith.core.ports import ObjectRef
from nodesmith.services.drain import DrainActivity, DrainResult, cordon_node, drain_node
from nodesmith.services.interrupt_outcomes import InstanceOutcome, InstanceStatus, InterruptionOutcome

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

    from nodesmith.core.model import Node
    from nodesmith.core.ports import CloudProvider, Cluster, Instance

__all__ = [
    "EVENT_REASONS",
    "NODECLAIM_TAG",
    "NODEPOOL_TAG",
    "REMOVING_KINDS",
    "TERMINATING_ON_INTERRUPTION",
    "InstanceCase",
    "InstanceOutcome",
    "InstanceStatus",
    "InterruptionOutcome",
    "InterruptionRun",
    "NodeLookup",
    "Outcome",
    "cluster_tag",
    "handle_interruption",
]

NODEPOOL_TAG = "karpenter.sh/nodepool"
NODECLAIM_TAG = "karpenter.sh/nodeclaim"
TERMINATING_ON_INTERRUPTION = "TerminatingOnInterruption"

EVENT_REASONS: dict[MessageKind, tuple[str, str]] = {
    MessageKind.SPOT_INTERRUPTED: ("SpotInterrupted", "Warning"),
    MessageKind.REBALANCE_RECOMMENDATION: ("SpotRebalanceRecommendation", "Normal"),
    MessageKind.INSTANCE_STOPPING: ("InstanceStopping", "Warning"),
    MessageKind.INSTANCE_TERMINATING: ("InstanceTerminating", "Warning"),
    MessageKind.SCHEDULED_CHANGE: ("InstanceUnhealthy", "Warning"),
}
"""Kubernetes Event reason and type per message kind (Karpenter's interruption event reasons)."""

REMOVING_KINDS = frozenset(
    {
        MessageKind.SPOT_INTERRUPTED,
        MessageKind.SCHEDULED_CHANGE,
        MessageKind.INSTANCE_STOPPING,
        MessageKind.INSTANCE_TERMINATING,
    }
)
"""Kinds after which the instance is not coming back: drain, then terminate and remove the node."""
_GONE_STATES = frozenset({"shutting-down", "terminated"})


def cluster_tag(cluster_name: str) -> str:
    """The EC2 tag key marking an instance as part of ``cluster_name`` (EKS / Kubernetes cloud provider)."""
    return f"kubernetes.io/cluster/{cluster_name}"


Outcome = InterruptionOutcome


def _iso(epoch: float) -> str:
    try:
        return datetime.fromtimestamp(epoch, tz=UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    except (OverflowError, ValueError, OSError):
        return f"{epoch:.0f}"


def _event_message(message: InterruptionMessage, instance_id: str) -> str:
    kind = message.kind
    if kind is MessageKind.SPOT_INTERRUPTED:
        when = _iso(message.deadline) if message.deadline is not None else "soon"
        action = f" ({message.instance_action})" if message.instance_action else ""
        return f"Spot interruption warning for {instance_id}: EC2 reclaims it at {when}{action}"
    if kind is MessageKind.REBALANCE_RECOMMENDATION:
        return f"EC2 rebalance recommendation for {instance_id}: elevated risk of spot interruption"
    if kind is MessageKind.SCHEDULED_CHANGE:
        code = message.event_type_code or "scheduled change"
        return f"AWS Health scheduled change for {instance_id}: {code}"
    return f"Instance {instance_id} is {message.state or kind.value}"


@dataclass(slots=True)
class InstanceCase:
    """What is known about one instance while it is handled (between :meth:`InterruptionRun.begin` and
    :meth:`InterruptionRun.drain`)."""

    instance_id: str
    instance: Instance | None = None
    node: Node | None = None
    nodeclaim_name: str | None = None
    launched_by_us: bool = False
    gone: bool = False
    offering: UnavailableOffering | None = None
    cordoned: bool = False
    drain: DrainResult | None = None
    events: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    def ref(self) -> ObjectRef | None:
        """Where Events go: the Node, else the NodeClaim, else nowhere."""
        if self.node is not None:
            return ObjectRef(kind="Node", name=self.node.name)
        if self.nodeclaim_name:
            return ObjectRef(kind="NodeClaim", name=self.nodeclaim_name, api_version="karpenter.sh/v1")
        return None

    def outcome(self, status: InstanceStatus, detail: str, **removed: bool) -> InstanceOutcome:
        """Freeze into an :class:`InstanceOutcome`."""
        return InstanceOutcome(
            instance_id=self.instance_id,
            status=status,
            detail=detail,
            node_name=self.node.name if self.node is not None else None,
            nodeclaim_name=self.nodeclaim_name,
            cordoned=self.cordoned,
            events=tuple(self.events),
            drain=self.drain,
            interrupted_offering=self.offering,
            warnings=tuple(self.warnings),
            nodepool=self.instance.tags.get(NODEPOOL_TAG) if self.instance is not None else None,
            capacity_type=self.instance.capacity_type if self.instance is not None else None,
            **removed,
        )


class NodeLookup:
    """Nodes by providerID for the lookups neither a node's name nor a NodeClaim can answer (an instance
    not launched by us, or one EC2 no longer knows), listed once on the first need and shared by every
    instance of a batch (thread-safe).

    An API server cannot select nodes by ``spec.providerID`` (nodes select on ``metadata.name`` and
    ``spec.unschedulable`` only), so each such lookup means listing every node. A name misses whenever
    the node is already gone (a continuation or redelivery after the drain removed it, or after EC2
    reclaimed the instance); one list per lookup there made 1,959 list requests (500 nodes a page) in a
    1,000-node burst (``bench/interruptions.py``). Karpenter answers from its informer cache, indexed
    by providerID. Raises ``KubernetesError`` when the list fails (the next call tries again).
    """

    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster
        self._lock = threading.Lock()
        self._nodes: list[Node] | None = None

    def nodes(self) -> list[Node]:
        """Every node, listed on the first call."""
        with self._lock:
            if self._nodes is None:
                self._nodes = self.cluster.list_nodes()
            return self._nodes

    def by_provider_id(self, provider_id: str) -> Node | None:
        """The node whose ``spec.providerID`` is ``provider_id``, or None."""
        return next((n for n in self.nodes() if n.provider_id == provider_id), None)

    def by_instance_id(self, instance_id: str) -> Node | None:
        """The node whose providerID names the EC2 instance ``instance_id``, or None."""
        return next((n for n in self.nodes() if n.instance_id == instance_id), None)


class InterruptionRun:
    """One message's work: the ports, the clock and the drain budget shared by its instances.

    ``node_lookup`` is where nodes not found by name are looked for (a batch shares one; default: one of
    this run's own, :class:`NodeLookup`). ``post_events`` False skips the interruption Events (a
    continued drain already posted them). ``eviction_workers`` bounds parallel evictions per node.
    ``started_at`` (monotonic seconds, default now) is where the drain budget starts.
    ``post_drain_events`` (default: ``post_events``) posts the Event a drain starts with
    (a drain handed off after the cordon posts it although its cordon Events were posted already).
    ``instances_by_id`` (instance id -> Instance, or None when EC2 does not know it), when given,
    replaces the per-instance ``get_instance`` (a batch describes its instances in one call).
    ``drain_stall_seconds`` (None: never) ends a drain that has made no progress for that long, within
    the budget (:func:`~nodesmith.services.drain.drain_node`'s ``stall_seconds``): it continues in
    a later message, giving its turn to others. ``drain_activity`` is shared by the drains an
    invocation runs side by side (:class:`~nodesmith.services.drain.DrainActivity`): one waiting on a
    PodDisruptionBudget stalls only when none of them progresses. ``drain_waits_for_terminating`` False
    ends a drain once only terminating pods are left (``wait_for_terminating`` of
    :func:`~nodesmith.services.drain.drain_node`): it continues when their grace periods end.
    ``terminate_instance`` terminates one instance (default: a ``TerminateInstances`` call of its own; a
    batch passes :meth:`~nodesmith.services.batcher.Batcher.submit`, so removals finishing together share one).
    """

    def __init__(
        self,
        *,
        message: InterruptionMessage,
        cluster: Cluster,
        cloud: CloudProvider,
        cluster_name: str,
        action: Action,
        now: float,
        drain_budget_seconds: float,
        sleep: Callable[[float], None],
        clock: Callable[[], float],
        node_lookup: NodeLookup | None = None,
        post_events: bool = True,
        post_drain_events: bool | None = None,
        eviction_workers: int = 1,
        started_at: float | None = None,
        instances_by_id: Mapping[str, Instance | None] | None = None,
        drain_stall_seconds: float | None = None,
        drain_activity: DrainActivity | None = None,
        drain_waits_for_terminating: bool = True,
        terminate_instance: Callable[[str], None] | None = None,
    ) -> None:
        self.message = message
        self.terminate_instance = terminate_instance or (lambda iid: cloud.terminate(instance_ids=[iid]))
        self.drain_stall_seconds = drain_stall_seconds
        self.drain_activity = drain_activity
        self.drain_waits_for_terminating = drain_waits_for_terminating
        self.cluster = cluster
        self.cloud = cloud
        self.cluster_name = cluster_name
        self.action = action
        self.now = now
        self.sleep = sleep
        self.clock = clock
        self.start = clock() if started_at is None else started_at
        self.budget_end = self.start + max(0.0, drain_budget_seconds)
        self.removing = action is Action.CORDON_AND_DRAIN and message.kind in REMOVING_KINDS
        self.node_lookup = node_lookup if node_lookup is not None else NodeLookup(cluster)
        self.post_events = post_events
        self.post_drain_events = post_events if post_drain_events is None else post_drain_events
        self.eviction_workers = eviction_workers
        self.instances_by_id = instances_by_id

    def post(self, case: InstanceCase, reason: str, type_: str, *, enabled: bool | None = None) -> None:
        """Post an Event on the case's node or NodeClaim; failures become warnings (Events are best effort).

        ``enabled`` (default: ``post_events``) says whether this Event is posted at all.
        """
        ref = case.ref()
        if ref is None or not (self.post_events if enabled is None else enabled):
            return
        text = _event_message(self.message, case.instance_id)
        try:
            self.cluster.record_event(ref=ref, reason=reason, message=text, type_=type_)
        except KubernetesError as exc:
            case.warnings.append(f"event {reason} on {ref.kind}/{ref.name}: {exc}")
            return
        case.events.append(reason)

    def _node_for(self, instance: Instance, nodeclaim_name: str | None) -> Node | None:
        """The instance's node: by its private DNS name (the node name EKS and Karpenter nodes get; one
        GET) when its providerID matches; else, for an instance carrying its NodeClaim's name
        (``karpenter.sh/nodeclaim``), the node the NodeClaim's ``status.nodeName`` names (one or two GETs;
        no NodeClaim, or one naming the node already missed, is no node); else, and for a NodeClaim not yet
        marked registered (its node may have registered under another name since the last reconcile pass),
        by providerID among all nodes (:class:`NodeLookup`).

        In a burst most misses are nodes already removed (a duplicate, continuation or redelivery after
        the drain removed node and NodeClaim, node first): the NodeClaim answers those without listing
        every node, which at 1,000 nodes took 9.5% of an invocation process's samples in a profile of
        ``bench/interruptions.py``, and the API server's biggest responses.
        """
        tried = instance.private_dns_name
        if tried:
            node = self.cluster.get_node(name=tried)
            if node is not None and node.provider_id == instance.provider_id:
                return node
            if nodeclaim_name:
                claim = self.cluster.get_nodeclaim(name=nodeclaim_name)
                if claim is None:
                    return None  # removed: the node went first
                named = claim.status.node_name
                if named == tried:
                    return None  # its node, already deleted
                if named:
                    node = self.cluster.get_node(name=named)
                    return node if node is not None and node.provider_id == instance.provider_id else None
                # not marked registered yet: a node named otherwise may have registered since the last pass
        return self.node_lookup.by_provider_id(instance.provider_id)

    def locate(self, instance_id: str) -> InstanceCase | InstanceOutcome:
        """Find the instance and its node; an :class:`InstanceOutcome` when the instance is not ours."""
        case = InstanceCase(instance_id=instance_id)
        if self.instances_by_id is not None and instance_id in self.instances_by_id:
            instance = self.instances_by_id[instance_id]
        else:
            instance = self.cloud.get_instance(instance_id=instance_id)
        if instance is None:
            case.node = self.node_lookup.by_instance_id(instance_id)
            if case.node is None:
                return case.outcome(
                    InstanceStatus.UNKNOWN_INSTANCE, "EC2 does not know the instance and no node has it"
                )
            case.gone = True  # EC2 no longer lists it: it is long gone
            return case
        tag = cluster_tag(self.cluster_name)
        if tag not in instance.tags:
            return case.outcome(InstanceStatus.FOREIGN, f"instance is not tagged {tag}")
        case.instance = instance
        case.launched_by_us = NODEPOOL_TAG in instance.tags or NODECLAIM_TAG in instance.tags
        case.nodeclaim_name = instance.tags.get(NODECLAIM_TAG) or None
        case.gone = self.message.kind is MessageKind.INSTANCE_TERMINATING or instance.state in _GONE_STATES
        if self.message.kind is MessageKind.SPOT_INTERRUPTED:
            case.offering = UnavailableOffering(
                instance_type=instance.instance_type,
                zone=instance.zone,
                capacity_type=CAPACITY_TYPE_SPOT,
                code="SpotInterruption",
            )
        case.node = self._node_for(instance, case.nodeclaim_name)
        return case

    def begin(self, instance_id: str) -> InstanceCase | InstanceOutcome:
        """Locate, taint and cordon, post the Event: a case whose node must be drained, or the final outcome.

        The outcome is final for instances that are not ours, EVENT_ONLY and CORDON actions, and
        instances without a node (removed when they will not come back).
        """
        located = self.locate(instance_id)
        if isinstance(located, InstanceOutcome):
            return located
        case = located
        reason, type_ = EVENT_REASONS[self.message.kind]
        if self.action is Action.EVENT_ONLY:
            self.post(case, reason, type_)
            return case.outcome(InstanceStatus.EVENT_ONLY, "event posted")
        if case.node is not None:
            case.cordoned = cordon_node(cluster=self.cluster, node_name=case.node.name)
            if not case.cordoned:
                case.node = None  # deleted meanwhile
        self.post(case, reason, type_)
        if case.node is None:
            if self.removing and (case.gone or case.launched_by_us):
                return self.remove(case)  # Karpenter deletes the NodeClaim whether or not a node registered
            return case.outcome(InstanceStatus.NO_NODE, "no node for the instance")
        if self.action is Action.CORDON:
            return case.outcome(InstanceStatus.CORDONED, "tainted and cordoned")
        return case

    def handle(self, instance_id: str) -> InstanceOutcome:
        """Locate, cordon, post the Event, then drain and remove as the action says."""
        begun = self.begin(instance_id)
        if isinstance(begun, InstanceOutcome):
            return begun
        assert begun.node is not None  # begin returns a case only with a node to drain
        return self.drain(begun, begun.node)

    def drain(
        self, case: InstanceCase, node: Node, *, on_step: Callable[[DrainResult], None] | None = None
    ) -> InstanceOutcome:
        """Drain the cordoned node; remove it afterwards when the instance is not coming back.

        ``on_step`` is passed to :func:`~nodesmith.services.drain.drain_node` (progress reports).
        """
        if self.removing:
            self.post(case, TERMINATING_ON_INTERRUPTION, "Warning", enabled=self.post_drain_events)
            if case.gone:
                # The instance is already going and its pods with it: remove the node so they are replaced now.
                return self.remove(case)
        case.drain = drain_node(
            cluster=self.cluster,
            node=node,
            now=self.now + (self.clock() - self.start),
            deadline=self.message.deadline,
            budget_seconds=max(0.0, self.budget_end - self.clock()),
            stall_seconds=self.drain_stall_seconds,
            activity=self.drain_activity,
            wait_for_terminating=self.drain_waits_for_terminating,
            sleep=self.sleep,
            clock=self.clock,
            eviction_workers=self.eviction_workers,
            on_step=on_step,
        )
        if not case.drain.complete:
            return case.outcome(InstanceStatus.DRAIN_INCOMPLETE, case.drain.reason)
        if self.removing and case.launched_by_us:
            return self.remove(case)
        detail = "drained" if case.launched_by_us else "drained; not launched by Nodesmith, left to its owner"
        return case.outcome(InstanceStatus.DRAINED, detail)

    def remove(self, case: InstanceCase) -> InstanceOutcome:
        """Terminate the instance (when ours and still up), delete the Node and the NodeClaim."""
        terminated = node_deleted = nodeclaim_deleted = False
        if case.instance is not None and case.launched_by_us and case.instance.state not in _GONE_STATES:
            self.terminate_instance(case.instance_id)
            terminated = True
        if case.node is not None:
            self.cluster.delete_node(name=case.node.name)
            node_deleted = True
        if case.nodeclaim_name:
            self.cluster.delete_nodeclaim(name=case.nodeclaim_name)
            nodeclaim_deleted = True
        done = [
            what
            for what, flag in (
                ("instance terminated", terminated),
                ("node deleted", node_deleted),
                ("nodeclaim deleted", nodeclaim_deleted),
            )
            if flag
        ]
        return case.outcome(
            InstanceStatus.REMOVED,
            ", ".join(done) or "nothing left to remove",
            instance_terminated=terminated,
            node_deleted=node_deleted,
            nodeclaim_deleted=nodeclaim_deleted,
        )


def handle_interruption(
    *,
    message: InterruptionMessage,
    cluster: Cluster,
    cloud: CloudProvider,
    cluster_name: str,
    rebalance_action: RebalanceAction,
    now: float,
    drain_budget_seconds: float,
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
) -> InterruptionOutcome:
    """Act on ``message`` for every instance it names; see the module docstring for the flow.

    ``now`` is the wall time in epoch seconds; ``drain_budget_seconds`` bounds the time spent
    draining all the message's nodes together (seconds); ``sleep`` and ``clock`` (monotonic seconds)
    are injectable for tests. A NO_OP message or an action of NONE touches nothing.

    Raises :class:`~nodesmith.core.errors.KubernetesError` (or the cloud provider's errors) when a
    call that must succeed fails -- taint/cordon, listing, deleting, terminating -- so the message is
    retried; Event failures and per-pod eviction errors are reported, not raised.
    """
    action = action_for(message.kind, rebalance_action=rebalance_action)
    if message.kind is MessageKind.NO_OP:
        return InterruptionOutcome(event_id=message.event_id, kind=message.kind, action=action, reason=message.reason)
    if action is Action.NONE:
        ignored = tuple(
            InstanceOutcome(iid, InstanceStatus.IGNORED, f"{message.kind.value} is configured to be ignored")
            for iid in message.instance_ids
        )
        return InterruptionOutcome(
            event_id=message.event_id, kind=message.kind, action=action, instances=ignored, reason="action_none"
        )
    run = InterruptionRun(
        message=message,
        cluster=cluster,
        cloud=cloud,
        cluster_name=cluster_name,
        action=action,
        now=now,
        drain_budget_seconds=drain_budget_seconds,
        sleep=sleep,
        clock=clock,
    )
    results = tuple(run.handle(iid) for iid in message.instance_ids)
    return InterruptionOutcome(event_id=message.event_id, kind=message.kind, action=action, instances=results)
