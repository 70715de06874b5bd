"""Phase 3 of an interruption batch (:mod:`nodesmith.services.interrupt_batch`): the drains, and the tasks' shared
plumbing (log keys, errors recorded on their message).

The drains begin nearest deadline first, ``workers`` at a time. A batch can hold more continuations (a burst's
hand-offs, later attempts of long drains) than one invocation drains within its budget, when the event source's
batches (``nodesmith:interruptionBatchSize``) are larger than the drains run at once. A continuation none of whose
drains has begun by ``defer_at`` then goes back to the queue as it came, at that moment and not when a worker
frees up, so it waits for no invocation that cannot take it (Karpenter's termination controller likewise requeues
a node it cannot work on now instead of holding it).
"""

from __future__ import annotations

import logging
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from nodesmith.services.interrupt import InstanceCase, InstanceOutcome, InstanceStatus
from nodesmith.services.interrupt_batch_run import send_all
from nodesmith.services.log_context import log_context
from nodesmith.services.parallel import map_ordered

if TYPE_CHECKING:
    from collections.abc import Callable

    from nodesmith.services.interrupt_batch_run import BatchEntry, BatchRun, RequeueBatch

__all__ = ["drain_all", "gather", "send_back"]

LOG = logging.getLogger(__name__)

DEFERRED_DETAIL = "sent back to the queue: its drain could not begin in time in this invocation"


def _task_keys(entry: BatchEntry, arg: Any) -> dict[str, Any]:
    """The log keys of one task: its message's event id and its instance (``arg`` is an id or a case)."""
    item = entry.item
    keys: dict[str, Any] = {"event_ids": None, "event_id": item.message.event_id, "message_id": item.item_id}
    if isinstance(arg, str):
        keys["instance_id"] = arg
    elif isinstance(arg, InstanceCase):
        keys["instance_id"] = arg.instance_id
        keys["node"] = arg.node.name if arg.node is not None else None
        keys["nodeclaim"] = arg.nodeclaim_name
    return keys


def _safe(fn: Callable[..., Any], entry: BatchEntry, arg: Any) -> Any:
    """``fn(entry, arg)`` under the task's log keys; an Exception is recorded on ``entry`` and returned."""
    with log_context(**_task_keys(entry, arg)):
        try:
            return fn(entry, arg)
        except Exception as exc:
            entry.errors.append(f"{type(exc).__name__}: {exc}")
            LOG.warning("interruption work failed for %s: %s", entry.item.item_id, exc, exc_info=True)
            return exc


def gather(tasks: list[tuple[BatchEntry, Any]], fn: Callable[..., Any], workers: int) -> list[Any]:
    """Run ``fn(entry, arg)`` for every task in a pool, results in order; an Exception is recorded on its item
    (the record fails, SQS delivers it again) and returned in its place, not raised."""
    if not tasks:
        return []
    return map_ordered(lambda t: _safe(fn, *t), tasks, workers=workers, name="interruption")


def drain_all(
    batch: BatchRun,
    acting: list[BatchEntry],
    workers: int,
    *,
    defer_at: float | None,
    send_batch: RequeueBatch | None,
    clock: Callable[[], float],
) -> None:
    """Every case's drain through :meth:`BatchRun.drain_once`, ``workers`` at a time, nearest deadline first;
    outcomes go to each entry's ``results``.

    The same drain twice in one batch (SQS delivered a message twice at once) runs once here, not only
    through the idempotency store: the copy gets the first's outcome, marked replayed, or its error.
    Once ``clock()`` reaches ``defer_at`` (monotonic seconds; None: never), every continuation none of whose
    drains has begun goes back to the queue through ``send_batch`` (:func:`send_back`); one not sent drains here
    after all, and originals are never sent back.
    """
    first: dict[str, InstanceOutcome | None] = {}
    drains: list[tuple[BatchEntry, InstanceCase]] = []
    copies: list[tuple[BatchEntry, InstanceCase, str]] = []
    for e in sorted(acting, key=_deadline):
        for c in e.cases:
            key = batch.drain_key(e, c)
            if key in first:
                copies.append((e, c, key))
            else:
                first[key] = None
                drains.append((e, c))
    batch.open_progress_writes(min(len(drains), workers))  # the drains running side by side share writes
    outcomes = _dispatch(batch, drains, workers, defer_at=defer_at, send_batch=send_batch, clock=clock)
    for (e, case), outcome in zip(drains, outcomes, strict=True):
        if isinstance(outcome, InstanceOutcome):
            e.results[case.instance_id] = first[batch.drain_key(e, case)] = outcome
    for e, case, key in copies:
        known = first[key]
        if known is None:
            e.errors.append(f"drain {key} failed in this batch")
        else:
            e.results[case.instance_id] = replace(known, replayed=True)
            batch.out.drains_replayed += 1


def _dispatch(
    batch: BatchRun,
    drains: list[tuple[BatchEntry, InstanceCase]],
    workers: int,
    *,
    defer_at: float | None,
    send_batch: RequeueBatch | None,
    clock: Callable[[], float],
) -> list[Any]:
    """Run ``drains`` in order, ``workers`` at a time, sending the unbegun continuations back at ``defer_at``
    (:func:`drain_all`). Returns one result per drain, in order: its outcome, an Exception (recorded on its
    entry), or the deferred outcome of a drain sent back."""
    results: list[Any] = [None] * len(drains)
    pending = list(range(len(drains)))  # indexes into drains, in the order they begin
    begun: set[int] = set()  # id() of the entries with a drain begun
    swept = defer_at is None
    running: dict[Future[Any], int] = {}
    with ThreadPoolExecutor(max_workers=max(1, min(workers, len(drains))), thread_name_prefix="interruption") as pool:
        while pending or running:
            if not swept and clock() >= defer_at:  # type: ignore[operator]  # swept is True when defer_at is None
                swept = True
                pending = _sweep(batch, drains, pending, begun=begun, results=results, send_batch=send_batch)
            while pending and len(running) < max(1, workers):
                i = pending.pop(0)
                begun.add(id(drains[i][0]))
                running[pool.submit(_safe, batch.drain_once, *drains[i])] = i
            if not running:
                continue
            timeout = None if swept or not pending else max(0.0, defer_at - clock())  # type: ignore[operator]
            done, _ = wait(running, timeout=timeout, return_when=FIRST_COMPLETED)
            for future in done:
                results[running.pop(future)] = future.result()
    return results


def _sweep(
    batch: BatchRun,
    drains: list[tuple[BatchEntry, InstanceCase]],
    pending: list[int],
    *,
    begun: set[int],
    results: list[Any],
    send_batch: RequeueBatch | None,
) -> list[int]:
    """Send back the continuations among ``pending`` none of whose drains has begun; returns what is still to
    run (every original, and the continuations not sent), in order."""
    unbegun: dict[int, BatchEntry] = {}
    for i in pending:
        entry = drains[i][0]
        if entry.item.continuation is not None and id(entry) not in begun:
            unbegun[id(entry)] = entry
    sent = {id(e) for e in send_back(batch, list(unbegun.values()), send_batch)}
    left: list[int] = []
    for i in pending:
        entry, case = drains[i]
        if id(entry) in sent:
            results[i] = entry.results[case.instance_id]
        else:
            left.append(i)
    return left


def _deadline(entry: BatchEntry) -> float:
    """When ``entry``'s instances go (epoch seconds); a message with no deadline (a state change) sorts last."""
    deadline = entry.item.message.deadline
    return float("inf") if deadline is None else deadline


def send_back(batch: BatchRun, entries: list[BatchEntry], send_batch: RequeueBatch | None) -> list[BatchEntry]:
    """Send the continuations ``entries`` back to the queue as they came, without a delay, in ``SendMessageBatch``
    calls; each one sent is done here (its instances' outcome ``DRAIN_DEFERRED``, continued, counted in
    ``batch.out.drains_deferred``). Returns the entries sent; a refused one is logged and left to drain here."""
    if not entries or send_batch is None:
        return []
    errors = send_all(send_batch, [(dict(e.item.event), 0) for e in entries])
    sent: list[BatchEntry] = []
    for e, error in zip(entries, errors, strict=True):
        if error is not None:
            LOG.warning("continuation %s not sent back, drained here instead: %s", e.item.item_id, error)
            continue
        sent.append(e)
        for c in e.cases:
            deferred = c.outcome(InstanceStatus.DRAIN_DEFERRED, DEFERRED_DETAIL)
            e.results[c.instance_id] = replace(deferred, continued=True)
        batch.out.drains_deferred += len(e.cases)
    return sent
