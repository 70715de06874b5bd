"""The interruption use case: verify a batch of EC2 and Health messages against EC2 and the cluster, then
cordon, mark, tell, and hand each node to the termination queue.

Karpenter's interruption controller (``[aws]:pkg/controllers/interruption/controller.go``, ``karpenter-v1.md``
§4.3) parses a message, marks a spot offering unavailable, posts the Event and deletes the NodeClaim; its
termination controller drains. Here, per batch (:class:`InterruptionBatch`), in two steps:

1. :meth:`~InterruptionBatch.prepare`: each message is judged on its own first
   (:func:`~nodesmith.core.interruption.judge_message`: our account and region, a kind we act on); the
   instances of the rest are described in one ``DescribeInstances``, and each one tagged as ours has its
   NodeClaim read (named by its ``karpenter.sh/nodeclaim`` tag; its providerID must name the instance) and
   its node (the NodeClaim's ``status.nodeName``, else the instance's private DNS name; providerID again).
   Each instance is then judged on what was just read (:func:`~nodesmith.core.interruption.judge_instance`),
   never on what the message says about it, and the spot offerings of the interrupted instances that are ours
   are marked unavailable in one call (Karpenter's unavailable-offerings cache), before any pass is asked for.
2. :meth:`~InterruptionBatch.handle`, per message; the messages of a batch may be handled at once (Karpenter
   handles a receive's messages ten at a time). For each instance that is ours: for the kinds that end the
   instance, request its termination first
   (:func:`~nodesmith.services.termination.requests.request_termination`: annotate the reason and a spot
   warning's deadline, counted from when our queue received it, delete the NodeClaim), so a
   ``karpenter.sh/disrupted`` taint always has its request behind it (a disruption pass removes a taint that
   nothing covers, :mod:`nodesmith.services.disruption.orphans`); then taint
   ``karpenter.sh/disrupted:NoSchedule`` and cordon the node when it will be drained, only cordon it for a
   rebalance recommendation set to ``cordon`` (its pods stay; the taint would mean Karpenter is disrupting the
   node, and keep consolidation, drift and expiration away from it for good); and post Karpenter's Event
   (``SpotInterrupted``, ``InstanceStopping``, ...; ``TerminatingOnInterruption`` when it will go). A message that
   repeats one already handled (its NodeClaim's termination was requested for the same reason, and SQS had not delivered
   it before) and finds that delivery's writes all landed (the NodeClaim deleting, its node tainted) only moves the
   deadline earlier, if it does, and sends the request again (the FIFO termination queue drops one it already took);
   one that finds them half done (that delivery ended between two writes) finishes them. Of two copies handled at
   once, the guarded request lets exactly one through.
3. :meth:`~InterruptionBatch.send`, once every message of the batch was handled: the requests go to the
   termination queue together (one ``SendMessageBatch`` per ten requests, not one call per node); a message
   whose request SQS refused is delivered again.

The reconcile function is woken as soon as the batch cordons its first node to drain, for a provisioning pass
whose snapshot treats the pods of cordoned nodes as pending, so replacement capacity launches while the nodes
drain.

Every Kubernetes and EC2 write is idempotent, so a redelivered message is harmless.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from nodesmith.core.drain import DISRUPTED_TAINT, carries_disrupted_taint
from nodesmith.core.errors import ConflictError, UnavailableOffering
from nodesmith.core.interruption import (
    EVENT_REASONS,
    Action,
    MessageKind,
    Verdict,
    judge_instance,
    judge_message,
    not_ours,
)
from nodesmith.core.model import CAPACITY_TYPE_SPOT
from nodesmith.core.ports import ObjectRef
from nodesmith.core.termination import REQUESTED_AT_ANNOTATION, TERMINATION_REASON_ANNOTATION, TerminationRequest
from nodesmith.services.parallel import map_ordered
from nodesmith.services.termination.requests import request_termination

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping, Sequence

    from nodesmith.core.api.nodeclaim import NodeClaim
    from nodesmith.core.interruption import InterruptionMessage, RebalanceAction
    from nodesmith.core.model import Node
    from nodesmith.core.ports import Instance
    from nodesmith.services.ports import Ports

__all__ = [
    "InstanceOutcome",
    "InterruptionBatch",
    "InterruptionSettings",
    "MessageOutcome",
    "Received",
]

LOG = logging.getLogger(__name__)

NODECLAIM_TAG = "karpenter.sh/nodeclaim"
"""The instance tag naming its NodeClaim (Karpenter and Nodesmith put it on every instance they launch)."""

TERMINATING_ON_INTERRUPTION = "TerminatingOnInterruption"


@dataclass(frozen=True, slots=True)
class Received:
    """One interruption queue message as read: its SQS ``message_id``, the parsed ``message``, ``received_at``
    (epoch seconds our queue received it: SQS's ``SentTimestamp``, which no sender can set) and ``redelivered``
    (SQS delivered it before: ``ApproximateReceiveCount`` above 1)."""

    message_id: str
    message: InterruptionMessage
    received_at: float
    redelivered: bool = False


@dataclass(frozen=True, slots=True)
class InterruptionSettings:
    """Who we are and what we do: the AWS ``account`` and ``region`` events must come from, the rebalance
    recommendation policy, how many reads of a batch run at once, and ``clock`` (epoch seconds) for the wake."""

    account: str
    region: str
    rebalance_action: RebalanceAction = "cordon"
    workers: int = 10
    clock: Callable[[], float] = time.time


@dataclass(frozen=True, slots=True)
class InstanceOutcome:
    """What became of one instance of a message: its ``verdict`` and what was done (``cordoned``, ``requested``:
    its termination request was sent; ``duplicate``: it was already being terminated for this reason)."""

    instance_id: str
    verdict: Verdict
    node: str | None = None
    nodeclaim: str | None = None
    nodepool: str | None = None
    capacity_type: str | None = None
    cordoned: bool = False
    requested: bool = False
    duplicate: bool = False
    events: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class MessageOutcome:
    """What became of one message: its message-level ``verdict`` and its instances' outcomes."""

    message_id: str
    event_id: str
    kind: MessageKind
    verdict: Verdict
    instances: tuple[InstanceOutcome, ...] = ()

    @property
    def ignored(self) -> str:
        """The reason nothing was done about the message (the first instance's when all were ignored), or ``""``."""
        if self.verdict.ignored:
            return self.verdict.ignored
        reasons = [i.verdict.ignored for i in self.instances]
        return reasons[0] if reasons and all(reasons) else ""


@dataclass(frozen=True, slots=True)
class _Found:
    """What the cluster says about one instance: its NodeClaim and node (either may be None)."""

    nodeclaim: NodeClaim | None
    node: Node | None


_NOT_FOUND = _Found(nodeclaim=None, node=None)


class InterruptionBatch:
    """One batch of received messages, worked in two steps (see the module docstring): :meth:`prepare` once,
    then :meth:`handle` per message, from any number of threads at once, then :meth:`send` once.

    Records with the same ``message_id`` are copies of one message (SQS delivers at least once, and Lambda's
    batching window gathers several receives into a batch): they are one message, a first delivery when any copy
    is, and the caller handles it once. ``now`` is the batch's wall time (epoch seconds). Raises
    :class:`~nodesmith.core.errors.KubernetesError` or the cloud provider's errors from :meth:`prepare` (the whole
    batch is delivered again) and from :meth:`handle` (that message is).
    """

    def __init__(
        self, *, ports: Ports, settings: InterruptionSettings, received: Sequence[Received], now: float
    ) -> None:
        self.ports, self.settings, self.now = ports, settings, now
        self.received: dict[str, Received] = {}
        for r in received:  # copies of one message: the first delivery among them is the message
            kept = self.received.get(r.message_id)
            if kept is None or (kept.redelivered and not r.redelivered):
                self.received[r.message_id] = r
        self.verdicts = {
            r.message_id: judge_message(
                r.message,
                account=settings.account,
                region=settings.region,
                rebalance_action=settings.rebalance_action,
            )
            for r in received
        }
        self.instances: dict[str, Instance | None] = {}
        self.found: dict[str, _Found] = {}
        self.judged: dict[tuple[str, str], Verdict] = {}
        self.acted = False
        self._wake_lock, self._lock = threading.Lock(), threading.Lock()
        self._unsent: list[tuple[str, TerminationRequest]] = []  # (message id, request) made by handle()

    def prepare(self) -> None:
        """Describe the acted-on messages' instances in one call, read each owned one's NodeClaim and node,
        judge every instance and mark the interrupted spot offerings unavailable."""
        ids = list(
            dict.fromkeys(
                iid
                for mid, r in self.received.items()
                if not self.verdicts[mid].ignored
                for iid in r.message.instance_ids
            )
        )
        if not ids:
            return
        described = self.ports.cloud.get_instances(instance_ids=ids)
        self.instances = {iid: described.get(iid) for iid in ids}
        owned = [i for i in self.instances.values() if i is not None and not not_ours(i.tags, self.ports.cluster_name)]
        found = map_ordered(self._find, owned, workers=self.settings.workers, name="locate")
        self.found = {i.instance_id: f for i, f in zip(owned, found, strict=True)}
        for mid, received in self.received.items():
            for iid in () if self.verdicts[mid].ignored else received.message.instance_ids:
                self.judged[mid, iid] = judge_instance(
                    self.verdicts[mid],
                    received.message,
                    instance=self.instances.get(iid),
                    has_nodeclaim=self.found.get(iid, _NOT_FOUND).nodeclaim is not None,
                    cluster_name=self.ports.cluster_name,
                    received_at=received.received_at,
                )
        self._mark()

    def _find(self, instance: Instance) -> _Found:
        cluster = self.ports.cluster
        name = instance.tags.get(NODECLAIM_TAG, "")
        claim = cluster.get_nodeclaim(name=name) if name else None
        if claim is None or claim.status.provider_id != instance.provider_id:
            return _Found(nodeclaim=None, node=None)
        for node_name in (claim.status.node_name, instance.private_dns_name):
            if node_name:
                node = cluster.get_node(name=node_name)
                if node is not None and node.provider_id == instance.provider_id:
                    return _Found(nodeclaim=claim, node=node)
        return _Found(nodeclaim=claim, node=None)

    def handle(self, message_id: str) -> MessageOutcome:
        """Act on one prepared message (see the module docstring); returns what was done."""
        received = self.received[message_id]
        message, verdict = received.message, self.verdicts[message_id]
        outcome = MessageOutcome(message_id=message_id, event_id=message.event_id, kind=message.kind, verdict=verdict)
        if verdict.ignored:
            return outcome
        results = [
            self._act(received, self.judged[message_id, iid], iid, self.found.get(iid, _NOT_FOUND))
            for iid in message.instance_ids
        ]
        return replace(outcome, instances=tuple(results))

    def _act(self, received: Received, verdict: Verdict, instance_id: str, found: _Found) -> InstanceOutcome:
        instance = self.instances.get(instance_id)
        claim, node = found.nodeclaim, found.node
        result = InstanceOutcome(
            instance_id=instance_id,
            verdict=verdict,
            node=node.name if node is not None else None,
            nodeclaim=claim.name if claim is not None else None,
            nodepool=claim.nodepool_name if claim is not None else None,
            capacity_type=instance.capacity_type if instance is not None else None,
        )
        if verdict.ignored or claim is None or instance is None:
            return result
        if verdict.removing and self._repeat(received, verdict, claim) and _carried_out(claim, node):
            self._queue(received, self._resend(verdict, claim))
            return replace(result, duplicate=True)
        request = None
        if verdict.removing:  # requested before the taint: a karpenter.sh/disrupted taint always has its request
            request = self._request(received, verdict, claim)
            if request is None:
                return replace(result, duplicate=True)
        cordoned = False
        if verdict.action in (Action.CORDON, Action.CORDON_AND_DRAIN) and node is not None:
            draining = verdict.action is Action.CORDON_AND_DRAIN
            taint = DISRUPTED_TAINT if draining else None
            cordoned = self.ports.cluster.taint_and_cordon(node_name=node.name, taint=taint)
            node = node if cordoned else None  # deleted meanwhile
            self._wake_once(cordoned and draining)
        posted = self._post_events(received.message, verdict, instance_id, claim, node)
        if request is not None:
            self._queue(received, request)
        return replace(result, cordoned=cordoned, events=posted)

    def _queue(self, received: Received, request: TerminationRequest) -> None:
        """Keep ``request`` for :meth:`send`."""
        if self.ports.queue is not None:
            with self._lock:
                self._unsent.append((received.message_id, request))

    def _repeat(self, received: Received, verdict: Verdict, claim: NodeClaim) -> bool:
        """Whether ``claim``'s termination was already requested for this reason by a delivery before this one (a
        duplicate of the message). A redelivery is never a repeat: the delivery before it may have died before it
        sent the request."""
        annotations = claim.metadata.annotations
        return (
            not received.redelivered
            and REQUESTED_AT_ANNOTATION in annotations
            and annotations.get(TERMINATION_REASON_ANNOTATION) == verdict.reason
        )

    def _resend(self, verdict: Verdict, claim: NodeClaim) -> TerminationRequest:
        """The request of a repeat whose NodeClaim is deleting and whose node is tainted: its deadline brought
        forward when this copy's is earlier, and the request itself, sent again, since the delivery that wrote
        them may have ended before its send (the FIFO termination queue drops a request it took in the last
        5 minutes: one drain per node and reason)."""
        if verdict.deadline is not None:
            return request_termination(
                cluster=self.ports.cluster, nodeclaim=claim, reason=verdict.reason, now=self.now,
                deadline=verdict.deadline,
            )  # fmt: skip
        return TerminationRequest.for_nodeclaim(claim, verdict.reason)

    def _request(self, received: Received, verdict: Verdict, claim: NodeClaim) -> TerminationRequest | None:
        """Request ``claim``'s termination, guarded by the ``resourceVersion`` read in :meth:`prepare`, so of two
        invocations handling copies of one message at once exactly one requests it; the other, refused (409),
        reads the NodeClaim again and finds a repeat (None)."""
        cluster = self.ports.cluster
        try:
            return request_termination(
                cluster=cluster, nodeclaim=claim, reason=verdict.reason, now=self.now, deadline=verdict.deadline,
                guarded=True,
            )  # fmt: skip
        except ConflictError:
            fresh = cluster.get_nodeclaim(name=claim.name)
            if fresh is None or self._repeat(received, verdict, fresh):
                return None
            return request_termination(
                cluster=cluster, nodeclaim=fresh, reason=verdict.reason, now=self.now, deadline=verdict.deadline
            )

    def _wake_once(self, acted: bool) -> None:
        """Wake the reconcile function as soon as the batch cordons its first node or requests its first
        termination, once: an invocation that ends at its timeout still woke it. Its pass, and the passes it runs
        as more nodes are cordoned, provision for these pods; a failure is logged (the schedule's next pass does)."""
        with self._wake_lock:
            if not acted or self.acted:
                return
            self.acted = True
        if self.ports.wake is None:
            return
        try:
            self.ports.wake(self.settings.clock())
        except Exception as exc:
            LOG.warning("interruption batch: wake the reconcile function: %s", exc)

    def send(self, outcomes: Mapping[str, MessageOutcome]) -> tuple[dict[str, MessageOutcome], set[str]]:
        """Send the termination requests :meth:`handle` made, all in one go (the queue takes them ten to a
        ``SendMessageBatch``), once every message of the batch was handled; wake the reconcile function when one
        was sent. Returns ``outcomes`` (message id -> what :meth:`handle` returned) with each sent request's
        instance marked ``requested``, and the ids of the messages a request of which SQS did not take: they are
        to be delivered again (a redelivery requests the termination again). Never raises."""
        with self._lock:
            unsent, self._unsent = self._unsent, []
        if not unsent or self.ports.queue is None:
            return dict(outcomes), set()
        problems = self.ports.queue.send(requests=[request for _, request in unsent])
        refused = {p.split(":", 1)[0] for p in problems}
        failed = {mid for mid, request in unsent if request.nodeclaim in refused}
        sent = {(mid, request.instance_id) for mid, request in unsent if request.nodeclaim not in refused}
        self._wake_once(bool(sent))
        for problem in problems:
            LOG.warning("interruption batch: termination request not sent: %s", problem)
        marked = {
            mid: replace(outcome, instances=tuple(
                replace(i, requested=True) if (mid, i.instance_id) in sent else i for i in outcome.instances
            ))
            for mid, outcome in outcomes.items()
        }  # fmt: skip
        return marked, failed

    def _post_events(
        self, message: InterruptionMessage, verdict: Verdict, instance_id: str, claim: NodeClaim, node: Node | None
    ) -> tuple[str, ...]:
        """Post the kind's Event (and ``TerminatingOnInterruption`` when the node goes) on the node, else the
        NodeClaim; best effort."""
        ref = (
            ObjectRef(kind="Node", name=node.name)
            if node is not None
            else ObjectRef(
                kind="NodeClaim", name=claim.name, api_version="karpenter.sh/v1", uid=claim.metadata.uid or ""
            )
        )
        reason, type_ = EVENT_REASONS[message.kind]
        posted = [(reason, type_, _describe(message, instance_id))]
        if verdict.removing:
            posted.append(
                (TERMINATING_ON_INTERRUPTION, "Warning", f"Interrupted {instance_id}: draining and terminating")
            )
        for what, kind, text in posted:
            self.ports.cluster.record_event(ref=ref, reason=what, message=text, type_=kind)
        return tuple(p[0] for p in posted)

    def _mark(self) -> None:
        """Mark the offerings of the interrupted spot instances that are ours unavailable, in one call, before
        any wake, so the pass it asks for does not launch into them; a failure is logged only (the marks improve
        the next plans, they decide nothing)."""
        offerings: dict[tuple[str, str], UnavailableOffering] = {}
        for (mid, iid), verdict in self.judged.items():
            instance = self.instances.get(iid)
            if (
                verdict.ignored
                or instance is None
                or self.received[mid].message.kind is not MessageKind.SPOT_INTERRUPTED
                or instance.capacity_type != CAPACITY_TYPE_SPOT
            ):
                continue
            offerings.setdefault((instance.instance_type, instance.zone), UnavailableOffering(
                instance_type=instance.instance_type, zone=instance.zone, capacity_type=CAPACITY_TYPE_SPOT,
                code="SpotInterruption",
            ))  # fmt: skip
        if not offerings:
            return
        try:
            self.ports.cloud.mark_unavailable(offerings=list(offerings.values()))
        except Exception as exc:
            LOG.warning("interruption batch: mark %d offering(s) unavailable: %s", len(offerings), exc)


def _carried_out(claim: NodeClaim, node: Node | None) -> bool:
    """Whether the writes of an earlier delivery for ``claim`` all landed: the NodeClaim is deleting and its node
    (when there is one) carries ``karpenter.sh/disrupted``. A delivery that ended between them left work that a
    duplicate must finish, not skip."""
    if claim.metadata.deletion_timestamp is None:
        return False
    return node is None or carries_disrupted_taint(node.taints)


def _describe(message: InterruptionMessage, instance_id: str) -> str:
    """The Event message for ``message`` about ``instance_id`` (what EC2 or AWS Health said)."""
    kind = message.kind
    if kind is MessageKind.SPOT_INTERRUPTED:
        return f"Spot interruption warning for {instance_id} ({message.instance_action or 'terminate'})"
    if kind is MessageKind.REBALANCE_RECOMMENDATION:
        return f"EC2 rebalance recommendation for {instance_id}: elevated risk of spot interruption"
    if kind is MessageKind.SCHEDULED_CHANGE:
        return f"AWS Health scheduled change for {instance_id}: {message.event_type_code or 'scheduled change'}"
    if kind is MessageKind.CAPACITY_RESERVATION_INTERRUPTED:
        return f"Capacity reservation interruption warning for {instance_id} ({message.instance_action or 'terminate'})"
    return f"Instance {instance_id} is {message.state or kind.value}"
