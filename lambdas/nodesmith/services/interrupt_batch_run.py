"""The state and per-item work of one interruption batch (:func:`nodesmith.services.interrupt_batch.handle_batch`).

:class:`BatchEntry` is one message of the batch with what its phases found and decided;
:class:`BatchRun` holds what the phases share (ports, idempotency, requeue, clocks, the outcome) and
does the per-instance work: cordon (``begin``), mark the interrupted offering, hand a burst's drains
off, store drain progress, and drain once per (event, instance, attempt). The phases themselves, and
the order they run in, are :mod:`nodesmith.services.interrupt_batch`'s.
"""

from __future__ import annotations

import logging
import math
import threading
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from nodesmith.core.errors import InProgressElsewhereError, NodesmithError, UnavailableOffering
from nodesmith.core.ports import DrainProgress
from nodesmith.services.batcher import Batcher
from nodesmith.services.interrupt import InstanceCase, InstanceOutcome, InstanceStatus, InterruptionRun
from nodesmith.services.interrupt_items import (
    BatchItem,
    BatchOutcome,
    continuation_body,
    outcome_from_dict,
    outcome_to_dict,
)

if TYPE_CHECKING:
    from collections.abc import Sequence

    from nodesmith.core.interruption import Action
    from nodesmith.core.ports import Cluster, StateStore
    from nodesmith.services.drain import DrainResult

__all__ = [
    "CONTINUATION_DELAY_SECONDS",
    "DRAIN_PROGRESS_TTL_SECONDS",
    "MAX_DRAIN_ATTEMPTS",
    "PROGRESS_BATCH_IDLE_SECONDS",
    "PROGRESS_BATCH_MAX_ITEMS",
    "PROGRESS_BATCH_MAX_SECONDS",
    "PROGRESS_SAVE_INTERVAL_SECONDS",
    "REMARK_AFTER_SECONDS",
    "SPOT_UNAVAILABLE_SECONDS",
    "TERMINATING_WAIT_MAX_SECONDS",
    "BatchEntry",
    "BatchRun",
    "DrainUnfinishedError",
    "Once",
    "RecentMarks",
    "Requeue",
    "RequeueBatch",
]

LOG = logging.getLogger(__name__)

CONTINUATION_DELAY_SECONDS = 5
"""SQS ``DelaySeconds`` of a continuation: kubectl's 5 s between PDB retries (max allowed is 900)."""
TERMINATING_WAIT_MAX_SECONDS = 60
"""Longest SQS delay of a continuation whose node has only terminating pods left (seconds): it waits until
their grace periods have run out (:attr:`~nodesmith.services.drain.DrainResult.terminating_until`), at most
this long, instead of looking again every :data:`CONTINUATION_DELAY_SECONDS`. In a 1,000-node burst each
node's evicted pods take their 30 s grace period to go, and continuations looking every 5 s took the
function's concurrency from nodes whose drain had not begun."""
MAX_DRAIN_ATTEMPTS = 120
"""Invocations one drain may take before it is abandoned (the node stays cordoned; logged)."""
DRAIN_PROGRESS_TTL_SECONDS = 86_400.0
"""How long stored drain progress is kept (seconds; DynamoDB TTL)."""
PROGRESS_SAVE_INTERVAL_SECONDS = 5.0
"""Shortest time between two progress writes of one drain attempt while it evicts (seconds). The first
round that evicts or deletes a pod is written at once and the attempt's end always is; rounds in between
only every this long. A resumed drain re-plans from the pods still on the node, so what a crash loses is
at most this long of the counts, never an eviction; and at 1,000 nodes the per-round writes were 3.7 of a
node's 33 API calls and the largest single share (17%) of the invocations' CPU."""
PROGRESS_BATCH_IDLE_SECONDS = 0.05
"""A batch of progress writes is sent once none has been added for this long (seconds) ..."""
PROGRESS_BATCH_MAX_SECONDS = 0.25
"""... or once it has been open this long (seconds), so no drain waits longer on its write ..."""
PROGRESS_BATCH_MAX_ITEMS = 25
"""... or once it holds this many writes (DynamoDB's ``BatchWriteItem`` limit), or one of every drain running."""
SPOT_UNAVAILABLE_SECONDS = 180.0
"""Karpenter's ``UnavailableOfferingsTTL``: an interrupted spot offering is avoided for 3 minutes."""
REMARK_AFTER_SECONDS = 30.0
"""A container writes the mark of an offering it marked unavailable again only once its own mark is this old
(seconds): the shared mark then expires at least ``SPOT_UNAVAILABLE_SECONDS - REMARK_AFTER_SECONDS`` (150 s)
after the offering's last interruption, instead of exactly 180 s after it."""

OfferingKey = tuple[str, str, str]
"""(instance type, zone, capacity type) of an offering."""


class RecentMarks:
    """The offerings this container marked unavailable lately, and when (epoch seconds); thread-safe.

    A burst interrupts many nodes of few offerings, and every batch used to write the mark of each offering it
    saw (``PutItem``): 163 writes at 1,000 nodes in ``bench/interruptions.py``, one for every six nodes, each
    extending a mark written seconds before. Kept by the handler for the container's life (one per warm Lambda
    container), a batch writes an offering's mark only when no batch of the container did in the last
    ``remark_after_seconds`` (:data:`REMARK_AFTER_SECONDS`), so a mark is renewed at that pace while its
    offering keeps being interrupted. Karpenter's interruption controller marks its in-memory cache on every
    message (``[aws]:pkg/controllers/interruption/controller.go``); a write to the shared table costs more.
    """

    def __init__(self, remark_after_seconds: float = REMARK_AFTER_SECONDS) -> None:
        self.remark_after = remark_after_seconds
        self._lock = threading.Lock()
        self._marked_at: dict[OfferingKey, float] = {}

    def claim(self, key: OfferingKey, now: float) -> bool:
        """True when ``key``'s mark is due (none written from here in the last ``remark_after_seconds`` before
        ``now``, epoch seconds): the caller writes it, and calls :meth:`release` if the write fails. False when
        it is not due, or another thread has just claimed it."""
        with self._lock:
            at = self._marked_at.get(key)
            if at is not None and now - at < self.remark_after:
                return False
            self._marked_at[key] = now
            return True

    def release(self, key: OfferingKey, now: float) -> None:
        """Forget the claim of ``key`` made at ``now`` (its write failed): the next batch writes the mark."""
        with self._lock:
            if self._marked_at.get(key) == now:
                del self._marked_at[key]


Once = Callable[[str, Callable[[], dict[str, Any]]], dict[str, Any]]
"""``once(key, work)``: run ``work`` unless ``key`` already ran (then return its stored result); raise
:class:`~nodesmith.core.errors.InProgressElsewhereError` while another invocation runs it."""
Requeue = Callable[[Mapping[str, Any], int], None]
"""``requeue(body, delay_seconds)``: send ``body`` (JSON object) to the interruption queue."""
RequeueBatch = Callable[["Sequence[tuple[Mapping[str, Any], int]]"], list[str | None]]
"""``requeue_batch([(body, delay_seconds), ...])``: send them all (``SendMessageBatch``); per message,
None when sent, else the reason it was not."""


def send_all(requeue_batch: RequeueBatch, messages: Sequence[tuple[Mapping[str, Any], int]]) -> list[str | None]:
    """``requeue_batch(messages)``, never raising: per message, None when sent, else the reason it was not. The
    batch send promises not to raise; if it does, nothing is known to be sent, and every message gets its error."""
    try:
        return requeue_batch(messages)
    except Exception as exc:
        return [f"{type(exc).__name__}: {exc}"] * len(messages)


class DrainUnfinishedError(NodesmithError):
    """A drain ran out of budget and no continuation queue is configured: fail the record so SQS
    delivers it again (raised inside the idempotent unit, so the redelivery drains again)."""


@dataclass(slots=True)
class BatchEntry:
    """One message of the batch: its item and action, the run that works its instances, and what the
    phases found (cases to drain, final outcomes by instance id, errors that fail its record)."""

    item: BatchItem
    action: Action
    run: InterruptionRun | None = None
    results: dict[str, InstanceOutcome] = field(default_factory=dict)
    cases: list[InstanceCase] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)

    def instance_ids(self) -> tuple[str, ...]:
        ids = self.item.message.instance_ids
        if self.item.continuation is not None:
            wanted = set(self.item.continuation.instance_ids)
            ids = tuple(i for i in ids if i in wanted)
        return ids


class BatchRun:
    """State shared by the phases of one :func:`~nodesmith.services.interrupt_batch.handle_batch` call."""

    def __init__(
        self,
        *,
        cluster: Cluster,
        state: StateStore | None,
        once: Once | None,
        requeue: Requeue | None,
        wall: Callable[[], float],
        continuation_delay_seconds: int,
        max_attempts: int,
        handoff_delay_seconds: int = 0,
        recent_marks: RecentMarks | None = None,
    ) -> None:
        self.cluster = cluster
        self.state = state
        self.once = once
        self.requeue = requeue
        self.wall = wall
        self.delay = continuation_delay_seconds
        self.handoff_delay = handoff_delay_seconds
        self.max_attempts = max_attempts
        self.run_id = uuid.uuid4().hex
        self.out = BatchOutcome()
        self.lock = threading.Lock()
        self.recent_marks = recent_marks or RecentMarks()  # this batch's own: one write per offering and batch
        self.cordoned_at = wall()  # epoch seconds: set again once every node of the batch is cordoned
        self.replacement_asked = False  # this batch asks for its hand-offs' replacement pass itself (at once)
        self.progress_writes: Batcher[DrainProgress] | None = None  # shared by the drains (open_progress_writes)

    # -- phase 1 ----------------------------------------------------------------------------------
    def begin(self, entry: BatchEntry, instance_id: str) -> InstanceCase | InstanceOutcome:
        assert entry.run is not None
        begun = entry.run.begin(instance_id)
        offering = begun.interrupted_offering if isinstance(begun, InstanceOutcome) else begun.offering
        if offering is not None and entry.item.continuation is None:
            self.mark(offering)
        return begun

    def mark(self, offering: UnavailableOffering) -> None:
        """Mark ``offering`` unavailable for :data:`SPOT_UNAVAILABLE_SECONDS` in the shared state store, unless
        :attr:`recent_marks` says this batch or (with the handler's) this container has just written it."""
        key = (offering.instance_type, offering.zone, offering.capacity_type)
        now = self.wall()
        if self.state is None or not self.recent_marks.claim(key, now):
            return
        try:
            self.state.mark_unavailable(
                instance_type=offering.instance_type,
                zone=offering.zone,
                capacity_type=offering.capacity_type,
                expires_at=now + SPOT_UNAVAILABLE_SECONDS,
                reason=offering.code,
            )
            with self.lock:
                self.out.offerings_marked += 1
        except Exception as exc:  # the mark only improves plans
            self.recent_marks.release(key, now)
            LOG.warning("could not mark %s/%s/%s unavailable: %s", offering.instance_type, offering.zone,
                        offering.capacity_type, exc)  # fmt: skip

    def handoff_message(self, entry: BatchEntry, cases: list[InstanceCase]) -> tuple[dict[str, Any], int]:
        """The hand-off continuation of one message's cordoned nodes ``cases``: its body and its SQS delay
        (seconds), as ``Requeue`` and ``RequeueBatch`` take them."""
        ids = [c.instance_id for c in cases]
        attempt = entry.item.attempt + 1
        located = [c.instance for c in cases if c.instance is not None]
        body = continuation_body(entry.item.event, attempt=attempt, instance_ids=ids, handoff=True,
                                 cordoned_at=self.cordoned_at, instances=located,
                                 replacement_asked=self.replacement_asked)  # fmt: skip
        return body, self.handoff_delay

    def handed_off(self, cases: list[InstanceCase]) -> list[InstanceOutcome]:
        """The outcomes of ``cases`` once their hand-off continuation was sent."""
        with self.lock:
            self.out.drains_handed_off += len(cases)
        detail = "cordoned; drain handed off to a continuation message (burst)"
        return [replace(c.outcome(InstanceStatus.DRAIN_HANDED_OFF, detail), continued=True) for c in cases]

    def hand_off(self, entry: BatchEntry, cases: list[InstanceCase]) -> list[InstanceOutcome]:
        """Send the drains of ``cases`` (one message's cordoned nodes) on to a hand-off continuation."""
        assert self.requeue is not None
        self.requeue(*self.handoff_message(entry, cases))  # raising fails the record: SQS delivers it again
        return self.handed_off(cases)

    # -- phase 3 ----------------------------------------------------------------------------------
    def open_progress_writes(self, drains: int) -> None:
        """Share progress writes between the ``drains`` drains about to run side by side: from here on
        :meth:`save` goes through a :class:`~nodesmith.services.batcher.Batcher` sending what they write at
        about the same time in one ``put_drains`` call (up to 25 items, DynamoDB's ``BatchWriteItem``). A batch is
        sent once it holds a write of every drain (so a lone drain never waits), once none has come for
        :data:`PROGRESS_BATCH_IDLE_SECONDS`, or :data:`PROGRESS_BATCH_MAX_SECONDS` after it opened.

        Why: a burst's hand-off runs ten drains, each of which wrote its own ``PutItem``: 2,338 at 1,000 nodes,
        the largest share (19%) of the interruption invocations' CPU samples in a profile of
        ``bench/interruptions.py``. Shared, they were 1,266-1,589 requests of 1.6-1.9 writes each in five runs: the
        drains of one invocation start up to seconds apart there, so fewer writes coincide than ten drains suggest."""
        if self.state is None or drains < 1:
            return
        self.progress_writes = Batcher(
            self._write_progress,
            idle_seconds=PROGRESS_BATCH_IDLE_SECONDS,
            max_seconds=PROGRESS_BATCH_MAX_SECONDS,
            max_items=min(drains, PROGRESS_BATCH_MAX_ITEMS),
        )

    def _write_progress(self, progress: list[DrainProgress]) -> dict[DrainProgress, BaseException]:
        """One ``put_drains`` call for ``progress``; the writes the store left unwritten, each with its error."""
        assert self.state is not None
        left = set(self.state.put_drains(progress=progress, expires_at=self.wall() + DRAIN_PROGRESS_TTL_SECONDS))
        return {p: NodesmithError("left unwritten by the state store") for p in progress if p.instance_id in left}

    def save(self, progress: DrainProgress, warnings: list[str]) -> None:
        """Store ``progress`` through the writes :meth:`open_progress_writes` opened (none without a state
        store); a failure becomes a warning in ``warnings``: progress helps resuming and reporting, and the
        drain itself is idempotent."""
        if self.progress_writes is None:
            return
        try:
            self.progress_writes.submit(progress)
        except Exception as exc:
            warnings.append(f"drain progress not stored: {exc}")

    def drain(self, entry: BatchEntry, case: InstanceCase) -> InstanceOutcome:
        """The idempotent unit: drain (resuming stored progress), remove, or enqueue a continuation.

        Progress is written when the attempt first evicts or deletes a pod, then at most every
        :data:`PROGRESS_SAVE_INTERVAL_SECONDS` while it evicts, and at its end (with the attempt count,
        so a drain that keeps failing to finish is abandoned after :data:`MAX_DRAIN_ATTEMPTS`). An
        invocation killed before its first write leaves no trace, and its message comes back under the
        same attempt (the queue's redrive policy bounds those).
        """
        item, run = entry.item, entry.run
        assert run is not None and case.node is not None
        message = item.message
        prior = self.prior_progress(entry, case)
        base = prior or DrainProgress(
            instance_id=case.instance_id,
            event_id=message.event_id,
            node_name=case.node.name,
            deadline=message.deadline,
            started_at=self.wall(),
        )
        attempts = base.attempts + 1
        if attempts > self.max_attempts:
            LOG.error("drain of %s abandoned after %d attempts; node %s stays cordoned",
                      case.instance_id, base.attempts, case.node.name)  # fmt: skip
            return case.outcome(InstanceStatus.DRAIN_ABANDONED, f"abandoned after {base.attempts} attempts")
        warnings: list[str] = []
        current = replace(base, attempts=attempts, replaced=True, updated_at=self.wall())
        last: DrainProgress | None = None  # what this attempt last wrote

        def store(progress: DrainProgress, *, final: bool) -> None:
            """Write ``progress`` unless it is what this attempt last wrote, or (``final`` False) the last
            write is under :data:`PROGRESS_SAVE_INTERVAL_SECONDS` old."""
            nonlocal last
            if last is not None and replace(progress, updated_at=last.updated_at) == last:
                return
            recent = last is not None and progress.updated_at - last.updated_at < PROGRESS_SAVE_INTERVAL_SECONDS
            if recent and not final:
                return
            self.save(progress, warnings)
            last = progress

        def totals(result: DrainResult) -> DrainProgress:
            return replace(
                current,
                evicted=base.evicted + result.evicted,
                force_deleted=base.force_deleted + result.force_deleted,
                blocked_responses=base.blocked_responses + result.blocked_responses,
                updated_at=self.wall(),
            )

        outcome = run.drain(case, case.node, on_step=lambda r: store(totals(r), final=False))
        final = totals(outcome.drain) if outcome.drain is not None else current
        unfinished = outcome.status is InstanceStatus.DRAIN_INCOMPLETE
        store(replace(final, done=not unfinished), final=True)
        if unfinished:
            if self.requeue is None:
                reason = outcome.drain.reason if outcome.drain is not None else outcome.detail
                raise DrainUnfinishedError(f"drain of {case.instance_id} unfinished: {reason}")
            located = [case.instance] if case.instance is not None else []
            body = continuation_body(item.event, attempt=item.attempt + 1, instance_ids=[case.instance_id],
                                     instances=located)  # fmt: skip
            # raising here undoes the idempotency record: the record is retried
            self.requeue(body, self.continuation_delay(outcome.drain))
            outcome = replace(outcome, continued=True)
        if warnings:
            outcome = replace(outcome, warnings=(*outcome.warnings, *warnings))
        return outcome

    def prior_progress(self, entry: BatchEntry, case: InstanceCase) -> DrainProgress | None:
        """The stored progress this attempt of ``case``'s drain resumes, or None when it starts afresh.

        Not read on the first delivery of a message that drains under attempt 0 (the original event, or its
        hand-off): no attempt of that drain has run before it, so there is nothing to resume (a
        continuation's first delivery still reads the attempt before it). That saves a strongly consistent
        read per interrupted node: 6% of the interruption invocations' CPU samples in a 1,000-node burst
        here. Redeliveries, the case stored progress is for (an invocation that crashed or timed out
        mid-drain), always read it. What the rule can miss is a duplicate of the event (another message
        with the same event id) whose invocation died mid-drain before this first delivery ran: its counts
        and attempt are not carried over, which changes the reported totals only, since a drain re-plans
        from the pods still on the node. Progress of another event's drain of the instance is ignored.
        """
        if self.state is None or (entry.item.first_delivery and entry.item.drain_attempt == 0):
            return None
        prior = self.state.get_drain(instance_id=case.instance_id)
        if prior is not None and prior.event_id != entry.item.message.event_id:
            return None  # another event's drain: this one starts afresh
        return prior

    def continuation_delay(self, drain: DrainResult | None) -> int:
        """The SQS delay of an unfinished drain's continuation (seconds): the continuation delay, or, when only
        terminating pods are left, until the last one's grace period has run out (+1 s, at most
        :data:`TERMINATING_WAIT_MAX_SECONDS`)."""
        if drain is None or drain.terminating_until is None:
            return self.delay
        wait = math.ceil(drain.terminating_until - self.wall()) + 1
        return max(self.delay, min(TERMINATING_WAIT_MAX_SECONDS, wait))

    @staticmethod
    def drain_key(entry: BatchEntry, case: InstanceCase) -> str:
        """The idempotency key of a drain: ``event id#instance id#attempt``. A hand-off drains under the
        original's key: a duplicate of the event drained in place (a small batch) and its hand-off (a
        burst) are the same drain, done once."""
        return f"{entry.item.message.event_id}#{case.instance_id}#{entry.item.drain_attempt}"

    def drain_once(self, entry: BatchEntry, case: InstanceCase) -> InstanceOutcome:
        key = self.drain_key(entry, case)

        def work() -> dict[str, Any]:
            return {**outcome_to_dict(self.drain(entry, case)), "run_id": self.run_id}

        if self.once is None:
            stored = work()
        else:
            try:
                stored = self.once(key, work)
            except InProgressElsewhereError:
                return case.outcome(InstanceStatus.IN_PROGRESS_ELSEWHERE, f"drain {key} runs in another invocation")
        if stored.get("run_id") == self.run_id:
            self.out.drains_run += 1
            return outcome_from_dict(stored)
        self.out.drains_replayed += 1
        return replace(outcome_from_dict(stored), replayed=True)
