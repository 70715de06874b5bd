"""Handle a batch of interruption messages: cordon everything first, launch replacements, then drain.

What the single-message flow (:mod:`nodesmith.services.interrupt`) did one record at a time, a batch
does in three phases, so one slow drain never delays another node's cordon (NTH #310, one
PDB-blocked drain starving the other events) and pods have somewhere to go before the two minutes
of a spot interruption run out:

1. **Cordon**: every instance of every message is located, tainted ``karpenter.sh/disrupted`` and
   cordoned in parallel (``cordon_workers`` threads; the batch's instances located in one NodeClaim
   list, those it does not answer for described in one call (:mod:`~nodesmith.services.interrupt_locate`),
   each node fetched by name, nodes missing by name found in one list for the batch), and its Event
   posted. A spot-interrupted offering (type, zone, spot)
   is marked unavailable for 3 minutes in the shared state store (once per offering and batch, and not again
   for 30 s by the same warm container), so
   the replacement and every later plan avoid it
   (Karpenter ``[aws]:pkg/controllers/interruption/controller.go``, ``karpenter-v1.md`` §2.5).
2. **Replace**: one provisioning pass (``replace_capacity``, normally
   :func:`nodesmith.services.replacement.replacement_launcher`: the
   reconcile scheduler and launcher under the reconcile lease) plans and launches capacity for the
   evictable pods of all the cordoned nodes at once.
3. **Drain**: nodes drain in parallel (``drain_workers``), evictions within a node in parallel
   (``eviction_workers``). Each (event, instance, attempt) drain runs through ``once`` (Powertools
   idempotency in the Lambda), so the same event delivered twice, or redelivered after a timeout,
   drains once. Progress (:class:`~nodesmith.core.ports.DrainProgress`) is stored as the drain
   goes. A drain that runs out of the invocation's budget enqueues a *continuation* -- the
   original event plus ``"nodesmith-continuation": {"attempt": n, "instance-ids": [...]}`` and the instances
   as located (:func:`~nodesmith.services.interrupt_items.continuation_body`, so it does not describe them again) --
   with an SQS delay, inside the idempotent unit, and its record is acknowledged; the continuation
   has its own idempotency key (attempt n), so it is never deduplicated away. After a crash or
   timeout the original record comes back after the visibility timeout and, the in-progress
   marker having expired, the drain resumes from the stored progress (the cluster itself says
   which pods are left: eviction is idempotent). Nodes removed together terminate their instances in
   shared ``TerminateInstances`` calls (:class:`~nodesmith.services.batcher.Batcher`, as Karpenter's batcher).

**Burst hand-off**: a batch whose original messages leave at least ``handoff_min_drains`` nodes to
drain is a sign of a burst (a full batch; more messages are waiting behind it), and so is one whose
originals leave any node to drain beside a continuation (a burst's drains are already on the queue). Holding
those records for the replacement wait and the drain would keep this invocation from cordoning the
nodes of the next batch, so after phase 1 such a batch hands each message's drain to a
*hand-off continuation* (attempt 1, ``"handoff": true``, delayed ``handoff_delay_seconds``; its drain keeps
the original's idempotency key, attempt 0, so a duplicate drained in place is not drained again) and
acknowledges: the invocations stay seconds long and every node of the burst is cordoned first (the delay
keeps the hand-offs behind the burst's originals still arriving, which a hand-off received at once would
keep waiting for an invocation while it drains); the hand-off
continuations then do phases 2 and 3 (one replacement pass, then drain) like an original
(Karpenter splits the same way: its interruption controller only taints and deletes the
NodeClaim, the termination controller drains later). With ``replace_at_handoff`` (the reconcile
function runs the pass), the batch that hands off asks for the replacement pass at once, for the
nodes it cordoned, rather than when its hand-offs arrive, and while it sends them: the request is one
state-table call (or the reconcile function's wake), and one after the other the two steps took longer than the
cordons in a 1,000-node burst on the bench, holding the invocation's turn of the event source.

Errors: a failure of one instance fails only its own record (SQS delivers it again); a failing
replacement pass is reported and the drains go on (the scheduled reconcile catches up). Only
:class:`BaseException` (the Lambda being killed, or a test simulating it) escapes.
"""

from __future__ import annotations

import logging
import time
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TYPE_CHECKING

from nodesmith.core.errors import TerminationError
from nodesmith.core.interruption import Action, MessageKind, RebalanceAction, action_for
from nodesmith.services.batcher import Batcher
from nodesmith.services.drain import DrainActivity
from nodesmith.services.interrupt import (
    InstanceCase,
    InstanceOutcome,
    InstanceStatus,
    InterruptionOutcome,
    InterruptionRun,
    NodeLookup,
)
from nodesmith.services.interrupt_batch_run import (
    CONTINUATION_DELAY_SECONDS,
    DRAIN_PROGRESS_TTL_SECONDS,
    MAX_DRAIN_ATTEMPTS,
    REMARK_AFTER_SECONDS,
    SPOT_UNAVAILABLE_SECONDS,
    BatchEntry,
    BatchRun,
    DrainUnfinishedError,
    Once,
    RecentMarks,
    Requeue,
    RequeueBatch,
    send_all,
)
from nodesmith.services.interrupt_drains import drain_all, gather
from nodesmith.services.interrupt_items import (
    CONTINUATION_KEY,
    BatchItem,
    BatchOutcome,
    Continuation,
    ItemResult,
    continuation_body,
)
from nodesmith.services.interrupt_locate import locate_instances
from nodesmith.services.replacement import Replacement

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    from nodesmith.core.ports import CloudProvider, Cluster, StateStore

__all__ = [
    "CONTINUATION_DELAY_SECONDS",
    "CONTINUATION_KEY",
    "DRAIN_PROGRESS_TTL_SECONDS",
    "MAX_DRAIN_ATTEMPTS",
    "REMARK_AFTER_SECONDS",
    "SPOT_UNAVAILABLE_SECONDS",
    "BatchItem",
    "BatchOutcome",
    "Continuation",
    "DrainUnfinishedError",
    "ItemResult",
    "Once",
    "RecentMarks",
    "Requeue",
    "RequeueBatch",
    "continuation_body",
    "handle_batch",
]

LOG = logging.getLogger(__name__)


def handle_batch(
    *,
    items: Sequence[BatchItem],
    cluster: Cluster,
    cloud: CloudProvider,
    cluster_name: str,
    rebalance_action: RebalanceAction,
    now: float,
    drain_budget_seconds: float,
    state: StateStore | None = None,
    replace_capacity: Callable[[float], Replacement] | None = None,
    once: Once | None = None,
    requeue: Requeue | None = None,
    requeue_batch: RequeueBatch | None = None,
    handoff_min_drains: int | None = None,
    handoff_delay_seconds: int = 0,
    recent_marks: RecentMarks | None = None,
    replace_at_handoff: bool = False,
    defer_drains_after_seconds: float | None = None,
    cordon_workers: int = 16,
    drain_workers: int = 16,
    eviction_workers: int = 4,
    continuation_delay_seconds: int = CONTINUATION_DELAY_SECONDS,
    continuation_stall_seconds: float | None = None,
    max_attempts: int = MAX_DRAIN_ATTEMPTS,
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
    wall: Callable[[], float] = time.time,
) -> BatchOutcome:
    """Cordon, replace and drain for every message of ``items`` (see the module docstring).

    ``now`` is the wall time at the start (epoch seconds); ``drain_budget_seconds`` is the time the
    whole batch may work before drains stop and continue later (seconds, counted from the call);
    ``sleep``/``clock`` (monotonic seconds)/``wall`` (epoch seconds) are injectable for tests.
    ``state`` stores drain progress and spot marks (None: neither). ``replace_capacity(ready_at)`` runs the
    replacement pass for nodes all cordoned by ``ready_at`` (epoch seconds; a hand-off's from its original's
    invocation) (None: none). ``once`` makes each drain idempotent (None: always run);
    ``requeue`` sends a continuation (None: an unfinished drain fails its record instead, and SQS
    redelivers it after the visibility timeout). ``handoff_min_drains`` (None: never) turns on the
    burst hand-off (module docstring): when the original messages leave at least that many nodes
    to drain, or any beside a continuation, and ``requeue`` is set, their drains go to hand-off continuations
    after the cordon, all sent in ``SendMessageBatch`` calls when ``requeue_batch`` is given (a message whose
    continuation was not sent fails its record, so SQS delivers it again and its cordon is repeated),
    each with an SQS delay of ``handoff_delay_seconds`` (0..900): for that long a hand-off cannot be
    received, so the event source's pollers take the burst's originals that arrived after it, and the
    invocations it would hold do not hold up their cordons.
    ``recent_marks`` (None: the batch's own) are the offerings marked unavailable lately by the container's
    earlier batches: a batch writes the mark of an offering only when none did in the last
    :data:`~nodesmith.services.interrupt_batch_run.REMARK_AFTER_SECONDS`, and otherwise once.
    ``replace_at_handoff``: a batch that handed its drains off still calls ``replace_capacity`` at once, for
    the nodes it cordoned, instead of leaving the pass to its hand-offs, which a burst's backlog holds back
    (at 1,000 nodes they came 15 s after their cordon, and the replacements launched 15 s later than the issue's
    "at once"). Set it only when ``replace_capacity`` does not run the pass in this invocation (it wakes the
    reconcile function, or asks the lease holder for another pass): a pass here would hold the invocation the
    hand-off frees for the next batch.
    ``defer_drains_after_seconds`` (None: never) sends a continuation message (a hand-off, or a later attempt)
    whose drains have not begun that many seconds after the call back to the queue as it came, without a delay, in
    ``SendMessageBatch`` calls (``requeue_batch``), and acknowledges it; its drains keep their attempt and
    idempotency key (a message not sent drains here after all). Drains begin nearest deadline first. An event
    source batch can then be larger than the drains one invocation finishes within its budget (with 50 hand-offs
    to an invocation and no deferral, invocations ran past the function timeout).
    ``continuation_stall_seconds`` (None: wait within the budget) ends a continuation's drain (a
    burst's hand-off, or a drain that was blocked before) once it has made no progress for that
    long: one blocked by a PodDisruptionBudget then continues ``continuation_delay_seconds`` later
    in a new message instead of sleeping in an invocation, and with it a share of the function's
    concurrency, that a burst's other nodes need for their first evictions (Karpenter's termination
    controller likewise requeues a node whose drain is blocked instead of waiting on it); while
    another drain of the batch still progresses, the invocation runs anyway, and one held up by a
    budget keeps retrying until then (:class:`~nodesmith.services.drain.DrainActivity`). A hand-off's
    drain does not wait in place for the pods it evicted to go: once only terminating pods are left,
    it continues when their grace periods end (at 1,000 nodes, each hand-off otherwise held its
    invocation for the stall limit, listing the node's pods every second, for pods that take 30 s);
    a pod that goes early is seen only then, and its node removed up to a grace period later.
    Worker counts bound the thread pools.

    Returns one :class:`ItemResult` per item, in order. NO_OP messages should not be passed in
    (the handler acknowledges them); if they are, they are reported as such.
    """
    batch = BatchRun(
        cluster=cluster,
        state=state,
        once=once,
        requeue=requeue,
        wall=wall,
        continuation_delay_seconds=continuation_delay_seconds,
        max_attempts=max_attempts,
        handoff_delay_seconds=handoff_delay_seconds,
        recent_marks=recent_marks,
    )
    entries = [BatchEntry(item=i, action=action_for(i.message.kind, rebalance_action=rebalance_action)) for i in items]
    acting = [e for e in entries if e.action is not Action.NONE and e.item.message.kind is not MessageKind.NO_OP]
    t0 = clock()
    instances = locate_instances(cloud=cloud, cluster=cluster, cluster_name=cluster_name, acting=acting, now=now)
    nodes = NodeLookup(cluster)  # nodes not found by name: listed once for the whole batch
    # the batch's removals, finishing together in parallel drains, share TerminateInstances calls (as Karpenter's)
    terminations: Batcher[str] = Batcher(lambda ids: _terminate(cloud, ids))
    activity = DrainActivity()  # a drain held up by a budget waits while the batch's others progress
    for e in acting:
        e.run = InterruptionRun(
            message=e.item.message,
            cluster=cluster,
            cloud=cloud,
            cluster_name=cluster_name,
            action=e.action,
            now=now,
            drain_budget_seconds=drain_budget_seconds,
            sleep=sleep,
            clock=clock,
            instances_by_id=instances,
            node_lookup=nodes,
            post_events=e.item.continuation is None,
            post_drain_events=e.item.continuation is None or e.item.continuation.handoff,
            eviction_workers=eviction_workers,
            started_at=t0,  # one budget for the whole batch, counted from the call
            drain_stall_seconds=continuation_stall_seconds if e.item.continuation is not None else None,
            drain_activity=activity,
            # a burst's hand-off continues when its evicted pods' grace periods end, not polling them meanwhile
            drain_waits_for_terminating=e.item.continuation is None or not e.item.continuation.handoff,
            terminate_instance=terminations.submit,
        )

    # 1. cordon every node of the batch
    tasks = [(e, iid) for e in acting for iid in e.instance_ids()]
    for (e, iid), begun in zip(tasks, gather(tasks, batch.begin, cordon_workers), strict=True):
        if isinstance(begun, InstanceOutcome):
            e.results[iid] = begun
        elif isinstance(begun, InstanceCase):
            e.cases.append(begun)
    batch.out.cordon_seconds = clock() - t0
    batch.cordoned_at = wall()

    # 1b. a burst: hand the originals' drains off and acknowledge, so this invocation is free for the next batch
    originals = [e for e in acting if e.cases and e.item.continuation is None]
    burst = handoff_min_drains is not None and _is_burst(originals, acting, handoff_min_drains)
    asked: Future[Replacement] | None = None
    t1 = clock()
    if burst and requeue is not None:
        # the hand-offs say whether the pass is asked for here, so they do not look for it in the lease again
        batch.replacement_asked = replace_at_handoff and replace_capacity is not None
        with ThreadPoolExecutor(max_workers=1, thread_name_prefix="interruption-replace") as pool:
            if replace_capacity is not None and batch.replacement_asked:
                # 2 (a burst's, at once): asked for while the hand-offs are sent, not after them
                asked = pool.submit(_replace, replace_capacity, batch.cordoned_at)
            _hand_off(batch, originals, requeue_batch, cordon_workers)

    # 2. replacement capacity for the pods of the nodes about to be drained
    fresh = [e for e in acting if e.cases and _asks_for_replacement(e.item.continuation)]
    if asked is not None:
        # the nodes cordoned here are the batch's latest: a pass begun after them sees every one leaving
        batch.out.replacement = asked.result()
    elif replace_capacity is not None and fresh:
        batch.out.replacement = _replace(replace_capacity, _ready_at(batch, fresh))
    batch.out.replace_seconds = clock() - t1

    # 3. drain, in parallel, each drain once per (event, instance, attempt)
    t2 = clock()
    defer_at = None if defer_drains_after_seconds is None or requeue_batch is None else t0 + defer_drains_after_seconds
    drain_all(batch, acting, drain_workers, defer_at=defer_at, send_batch=requeue_batch, clock=clock)
    batch.out.drain_seconds = clock() - t2
    batch.out.items = [_item_result(e) for e in entries]
    return batch.out


def _is_burst(originals: list[BatchEntry], acting: list[BatchEntry], min_drains: int) -> bool:
    """Whether the batch hands its originals' drains off (module docstring, "Burst hand-off"): they leave at
    least ``min_drains`` nodes to drain, or at least one beside a continuation. A continuation in the batch
    says a burst's drains are already under way on the queue the next warnings wait in; an original drained
    in place beside it would hold this invocation for the drain (6-12 s on the bench) while those warnings
    wait, uncordoned, for the event source's bounded concurrency."""
    leaving = sum(len(e.cases) for e in originals)
    beside = any(e.item.continuation is not None for e in acting)
    return leaving >= min_drains or (leaving > 0 and beside)


def _terminate(cloud: CloudProvider, instance_ids: list[str]) -> dict[str, BaseException]:
    """Terminate ``instance_ids`` in one request; the instances that failed, each with its own error. The
    provider tells them apart (:class:`~nodesmith.core.errors.TerminationError`: it retries a refused call's
    ids one by one, as Karpenter's terminate batcher does), so one instance's failure (its termination
    protection, say) fails only its own record. Any other exception (a ``LaunchError`` it could not pin on
    an id) propagates, and the :class:`~nodesmith.services.batcher.Batcher` raises it to every instance of
    the request."""
    try:
        cloud.terminate(instance_ids=instance_ids)
    except TerminationError as exc:
        return dict(exc.failed)
    return {}


def _hand_off(batch: BatchRun, originals: list[BatchEntry], send_batch: RequeueBatch | None, workers: int) -> None:
    """Hand every original message's drains off to a continuation: all in ``SendMessageBatch`` calls
    when ``send_batch`` is given, else one ``requeue`` per message in parallel. A message whose
    continuation was not sent fails its record (an error on its entry); the others are handed off
    (counted in ``batch.out.drains_handed_off``)."""
    handed = [(e, list(e.cases)) for e in originals]
    for e in originals:
        e.cases = []
    if send_batch is None:
        for (e, _), sent in zip(handed, gather(handed, batch.hand_off, workers), strict=True):
            if isinstance(sent, list):
                e.results.update((o.instance_id, o) for o in sent)
        return
    errors = send_all(send_batch, [batch.handoff_message(e, cases) for e, cases in handed])
    for (e, cases), error in zip(handed, errors, strict=True):
        if error is None:
            e.results.update((o.instance_id, o) for o in batch.handed_off(cases))
        else:
            e.errors.append(f"hand-off continuation not sent: {error}")
            LOG.warning("hand-off of %s not sent: %s", e.item.item_id, error)


def _asks_for_replacement(continuation: Continuation | None) -> bool:
    """Whether a message's nodes need the batch's replacement pass: an original's do, and a hand-off's unless
    the invocation that cordoned them asked for it (:attr:`Continuation.replacement_asked`); a later
    continuation's pods were planned for by its first attempt."""
    if continuation is None:
        return True
    return continuation.handoff and not continuation.replacement_asked


def _ready_at(batch: BatchRun, fresh: list[BatchEntry]) -> float:
    """When the nodes the replacement pass is for were all cordoned (epoch seconds): a hand-off's nodes when the
    original's invocation cordoned them (its ``cordoned-at``), the others' in this batch. A pass begun after it
    sees every one of them leaving. Without that time, a burst's hand-offs, handled a minute after their cordon,
    each asked the lease holder for one more pass of the whole cluster (130 s of passes at 1,000 nodes)."""
    times = [
        e.item.continuation.cordoned_at
        if e.item.continuation is not None and e.item.continuation.cordoned_at is not None
        else batch.cordoned_at
        for e in fresh
    ]
    return max(times)


def _replace(replace_capacity: Callable[[float], Replacement], ready_at: float) -> Replacement:
    """Run the replacement pass for nodes cordoned by ``ready_at`` (epoch seconds); its failure is reported,
    never raised (the scheduled reconcile catches up)."""
    try:
        return replace_capacity(ready_at)
    except Exception as exc:
        LOG.warning("replacement capacity pass failed: %s", exc, exc_info=True)
        return Replacement(ran=False, errors=(f"{type(exc).__name__}: {exc}",))


def _item_result(e: BatchEntry) -> ItemResult:
    message = e.item.message
    if e.errors:
        return ItemResult(item_id=e.item.item_id, outcome=None, error="; ".join(e.errors))
    if message.kind is MessageKind.NO_OP or e.action is Action.NONE:
        ignored = tuple(
            InstanceOutcome(iid, InstanceStatus.IGNORED, f"{message.kind.value} is configured to be ignored")
            for iid in message.instance_ids
        )
        outcome = InterruptionOutcome(
            event_id=message.event_id,
            kind=message.kind,
            action=e.action,
            instances=ignored,
            reason=message.reason or "action_none",
        )
    else:
        ordered = tuple(e.results[i] for i in e.instance_ids() if i in e.results)
        outcome = InterruptionOutcome(event_id=message.event_id, kind=message.kind, action=e.action, instances=ordered)
    return ItemResult(item_id=e.item.item_id, outcome=outcome)
