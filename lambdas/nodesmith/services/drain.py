"""Drain a node through the Eviction API within a time budget (shared by interruption and disruption).

The caller cordons and taints the node first (:func:`cordon_node`). :func:`drain_node` then loops:
list the node's pods, plan with :func:`nodesmith.core.drain.plan_drain`, force-delete what the
deadline requires, evict the current tier, and wait, until the node is drained or the budget is
spent. An eviction refused by a PodDisruptionBudget (HTTP 429) is retried per pod with exponential
backoff from 100 ms, doubling, capped at 5 s (Karpenter retries 100 ms..10 s; kubectl waits a flat
5 s; ``karpenter-v1.md`` §3.7, ``interruption-peers.md`` §1.3). 404 and 409 on eviction mean the pod
is gone or was replaced: done, as in Karpenter. Other Kubernetes errors on one pod are retried the
same way and counted, so one flaky call does not abandon the rest of the node.

Evictions of one round are sent in parallel, at most ``eviction_workers`` at a time (kubectl sends
one goroutine per pod; a bound keeps a pod-dense node from exhausting the client's connection
pool), and their answers are applied in plan order, so results do not depend on thread timing.
``on_step`` is called with the result so far after every round in which a pod was evicted or
deleted, which is how the interruption flow stores drain progress while the drain runs (not after
rounds that were only refused: a PodDisruptionBudget answering 429 every few hundred milliseconds
would cost a progress write each time; the interruption flow also spaces its writes, see
:data:`nodesmith.services.interrupt_batch_run.PROGRESS_SAVE_INTERVAL_SECONDS`).

Events (:mod:`nodesmith.services.events`, Karpenter's reasons): ``Evicted`` on each pod whose
eviction was accepted, ``Disrupted`` on each pod deleted for the deadline, ``FailedDraining`` on
the node when the budget runs out with pods left.

Time: ``clock`` is a monotonic clock in seconds and ``sleep`` waits; both are injectable so tests
run instantly. Wall time inside the loop is ``now + (clock() - start)``.
"""

from __future__ import annotations

import contextlib
import math
import threading
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from nodesmith.core.drain import DISRUPTED_TAINT, DrainPlan, plan_drain
from nodesmith.core.errors import ConflictError, KubernetesError, NotFoundError
from nodesmith.services import events
from nodesmith.services.parallel import map_ordered

if TYPE_CHECKING:
    from collections.abc import Callable

    from nodesmith.core.model import Node, Pod
    from nodesmith.core.ports import Cluster

__all__ = [
    "BACKOFF_CAP_SECONDS",
    "BACKOFF_INITIAL_SECONDS",
    "BUDGET_POLL_SECONDS",
    "POLL_SECONDS",
    "DrainActivity",
    "DrainResult",
    "backoff_seconds",
    "cordon_node",
    "drain_node",
]

BACKOFF_INITIAL_SECONDS = 0.1
BACKOFF_CAP_SECONDS = 5.0
POLL_SECONDS = 1.0
"""How often the drain re-lists pods while waiting for terminating pods to go (kubectl polls every 1 s)."""
BUDGET_POLL_SECONDS = 5.0
"""How often it re-lists them while all it waits for is PodDisruptionBudget turns (seconds)."""
_MAX_NAMED_PODS = 20  # pods named in a result, so one log line stays readable


def backoff_seconds(attempt: int) -> float:
    """Delay before retry number ``attempt`` (1-based): 0.1 s doubling, capped at 5 s."""
    return min(BACKOFF_CAP_SECONDS, BACKOFF_INITIAL_SECONDS * 2.0 ** max(0, attempt - 1))


@dataclass(frozen=True, slots=True)
class DrainResult:
    """What one :func:`drain_node` call did. Counts are pods; times are seconds.

    ``complete`` is True when no pod that must leave the node is left (the plan is drained).
    ``evicted`` counts pods whose eviction was accepted (or that were already gone);
    ``blocked`` pods answered 429 at least once, or held back because their budget group was
    (:class:`DrainActivity`; ``blocked_responses`` counts the 429 answers);
    ``force_deleted`` pods were deleted directly because of the deadline; ``remaining`` pods still
    have to leave when the call returned, ``waiting`` of them because of do-not-disrupt;
    ``skipped`` pods are left alone (DaemonSet, mirror, terminal, ...). ``errors`` counts other
    failed Kubernetes calls. ``blocked_pods``/``waiting_pods``/``remaining_pods`` name (up to 20)
    ``namespace/name`` for logs, so an operator can see which pod held the node (NTH #535).
    ``terminating_until`` (epoch seconds) is set when the only pods left are terminating (their
    evictions went through): the latest of their ``deletionTimestamp`` values, when each one's grace period
    has run out and its kubelet has killed it, so nothing is left to do on the node before then.
    """

    node_name: str
    complete: bool
    duration_seconds: float
    evicted: int = 0
    blocked: int = 0
    blocked_responses: int = 0
    force_deleted: int = 0
    remaining: int = 0
    waiting: int = 0
    skipped: int = 0
    errors: int = 0
    reason: str = ""
    blocked_pods: tuple[str, ...] = ()
    waiting_pods: tuple[str, ...] = ()
    remaining_pods: tuple[str, ...] = ()
    last_error: str = ""
    terminating_until: float | None = None


BudgetGroup = tuple[str, frozenset[tuple[str, str]]]
"""What decides which PodDisruptionBudgets cover a pod: its namespace and labels (a budget's selector matches
labels, within the budget's namespace), so pods alike in both are answered alike by their budgets."""


@dataclass(slots=True)
class _Turn:
    """One budget group's turn: refusals since the budget last let a pod go, when it may be asked next, and
    whether an eviction of it is in flight."""

    refusals: int = 0
    next_try: float = -math.inf
    asking: bool = False


class DrainActivity:
    """What the drains running side by side (one invocation's) share: when any of them last evicted or deleted
    a pod (``last``, the ``clock`` of :func:`drain_node`, monotonic seconds; -inf before the first), and the
    turns of the PodDisruptionBudgets that refused them.

    A drain given one (``activity``) and waiting on a PodDisruptionBudget stalls only once none of
    them has made progress for its ``stall_seconds``: until then the invocation runs anyway, and the
    budget's replacement pods may become Ready and let its next eviction through, where continuing
    in a new message would wait behind every message queued meanwhile (a minute in a burst of 1,000).

    Budget turns (:meth:`take_turn`, :meth:`answered`): once a budget group (same namespace and labels, so the
    same budgets) has been refused, its pods on every node of the invocation are asked one at a time, with
    one exponential backoff (:func:`backoff_seconds`) between refusals, and once the budget lets one go the
    next is asked at once and the backoff starts again from 100 ms. A budget lets one pod go per replacement
    that becomes Ready (``maxUnavailable: 1``), and per-pod backoffs had grown to seconds by the time it did:
    with five nodes of four replicas each in one invocation and a replacement Ready 1 s after each eviction,
    the twenty evictions took more than 56 s with per-pod backoffs and take 29 s with turns. The order is
    Karpenter's (its eviction queue retries each pod from 100 ms, doubling to 10 s); the shared turn only
    keeps the replicas from waiting out their own backoffs, and from each spending an eviction call to hear
    the same refusal.
    Thread-safe.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.last = -math.inf
        self._turns: dict[BudgetGroup, _Turn] = {}

    def note(self, t: float) -> None:
        """Record progress at monotonic time ``t`` (seconds)."""
        with self._lock:
            self.last = max(self.last, t)

    def refused(self, group: BudgetGroup) -> bool:
        """True once ``group``'s budget has refused an eviction: from then on its pods take turns."""
        with self._lock:
            return group in self._turns

    def take_turn(self, group: BudgetGroup, t: float) -> bool:
        """Claim the next eviction of ``group`` at monotonic time ``t``: False while another is in flight or
        before its backoff has passed. A True must be followed by :meth:`answered`."""
        with self._lock:
            turn = self._turns.setdefault(group, _Turn())
            if turn.asking or turn.next_try > t:
                return False
            turn.asking = True
            return True

    def answered(self, group: BudgetGroup, t: float, *, let_go: bool | None) -> None:
        """Record the answer to ``group``'s eviction sent at ``t``: ``let_go`` True (accepted, or the pod was
        gone), False (refused by its budget: the next turn waits the backoff), None (another error: the turn
        is given back unchanged, the pod retries on its own backoff).

        A refusal of an eviction sent before the turn's current wait was set (``next_try`` already past ``t``)
        is not counted again: the drains of one invocation that reach the group in their first rounds send
        its replicas together, before any refusal is known, and the budget's one answer to them all used to
        count once per drain, starting the backoff at 0.8-1.6 s instead of 0.1 s.
        """
        with self._lock:
            turn = self._turns.setdefault(group, _Turn())
            turn.asking = False
            if let_go is True:
                turn.refusals, turn.next_try = 0, t
            elif let_go is False:
                if turn.next_try > t:
                    return  # sent alongside one whose refusal (or release) already set the wait
                turn.refusals += 1
                turn.next_try = t + backoff_seconds(turn.refusals)

    def next_try(self, group: BudgetGroup) -> float:
        """When ``group`` may next be asked (monotonic seconds; -inf: now)."""
        with self._lock:
            turn = self._turns.get(group)
            return -math.inf if turn is None else turn.next_try


def cordon_node(*, cluster: Cluster, node_name: str) -> bool:
    """Taint ``karpenter.sh/disrupted:NoSchedule`` and cordon (idempotent). False when the node is gone.

    Raises :class:`~nodesmith.core.errors.KubernetesError` when the API call fails.
    """
    return cluster.taint_and_cordon(node_name=node_name, taint=DISRUPTED_TAINT)


@dataclass(slots=True)
class _State:
    evicted: set[str] = field(default_factory=set)
    blocked: set[str] = field(default_factory=set)
    force_deleted: dict[str, int] = field(default_factory=dict)
    attempts: dict[str, int] = field(default_factory=dict)
    next_try: dict[str, float] = field(default_factory=dict)
    blocked_responses: int = 0
    errors: int = 0
    last_error: str = ""


def _pod_id(pod: Pod) -> str:
    return pod.uid or pod.key


def _retry_later(state: _State, pid: str, t: float) -> None:
    attempt = state.attempts.get(pid, 0) + 1
    state.attempts[pid] = attempt
    state.next_try[pid] = t + backoff_seconds(attempt)


def _force_delete(cluster: Cluster, plan: DrainPlan, state: _State) -> None:
    for item in plan.force_delete:
        pid = _pod_id(item.pod)
        if state.force_deleted.get(pid) == item.grace_period_seconds:
            continue  # already asked with this grace; the API server only shortens it
        with contextlib.suppress(NotFoundError):
            cluster.delete_pod(pod=item.pod, grace_period_seconds=item.grace_period_seconds)
            events.pod_force_deleted(cluster, item.pod, grace_period_seconds=item.grace_period_seconds, why=item.reason)
        state.force_deleted[pid] = item.grace_period_seconds


def _attempt(cluster: Cluster, pod: Pod) -> str | KubernetesError:
    """One eviction: its outcome, or the Kubernetes error it raised (anything else propagates).

    An accepted eviction posts ``Evicted`` on the pod here, in the eviction's own worker.
    """
    try:
        answer = cluster.evict(pod=pod)
        if answer == "evicted":
            events.pod_evicted(cluster, pod)
        return answer
    except (NotFoundError, ConflictError):
        return "gone"
    except KubernetesError as exc:
        return exc


def _budget_group(pod: Pod) -> BudgetGroup:
    """``pod``'s :data:`BudgetGroup`: its namespace and labels."""
    return pod.namespace, frozenset(pod.labels.items())


def _due(plan: DrainPlan, state: _State, t: float, turns: DrainActivity) -> list[tuple[Pod, bool]]:
    """The pods of the plan's tier to send this round, each with whether it holds its budget group's turn."""
    due: list[tuple[Pod, bool]] = []
    for pod in plan.evict:
        pid = _pod_id(pod)
        if state.next_try.get(pid, 0.0) > t:
            continue
        group = _budget_group(pod)
        if not turns.refused(group):
            due.append((pod, False))
            continue
        state.blocked.add(pid)  # its budget has refused: it waits for the group's turn like the refused ones
        if turns.take_turn(group, t):
            due.append((pod, True))
    return due


def _evict(cluster: Cluster, plan: DrainPlan, state: _State, t: float, *, workers: int, turns: DrainActivity) -> None:
    """One round of evictions: every due pod of the plan's tier is sent, except that the pods of a budget group
    that has refused (:class:`DrainActivity`: same namespace and labels, so the same budgets, e.g. the
    replicas of one Deployment) are sent one at a time across the invocation's drains, when the group's turn
    comes. Their budgets answer each of them alike, and at 1,000 interrupted nodes with four replicas of a
    budgeted Deployment on each, refusals were 62% of all eviction calls. Pods of groups never refused are
    all sent.
    """
    due = _due(plan, state, t, turns)
    try:
        answers = map_ordered(lambda d: _attempt(cluster, d[0]), due, workers=workers, name="evict")
    except BaseException:  # e.g. the invocation is ending: give the turns taken back for the batch's other drains
        for pod, turn in due:
            if turn:
                turns.answered(_budget_group(pod), t, let_go=None)
        raise
    heard: dict[BudgetGroup, bool | None] = {}  # per group: True if any pod went, else False if any was refused
    for (pod, turn), outcome in zip(due, answers, strict=True):
        pid, group = _pod_id(pod), _budget_group(pod)
        if isinstance(outcome, KubernetesError):
            state.errors += 1
            state.last_error = f"evict {pod.key}: {outcome}"
            _retry_later(state, pid, t)
            if turn:
                heard.setdefault(group, None)
        elif outcome == "blocked":
            state.blocked.add(pid)
            state.blocked_responses += 1
            if heard.get(group) is not True:
                heard[group] = False
        else:
            state.evicted.add(pid)
            state.next_try.pop(pid, None)
            if turn:
                heard[group] = True
    for group, went in heard.items():
        turns.answered(group, t, let_go=went)


def _result(*, node: Node, plan: DrainPlan, state: _State, duration: float, reason: str) -> DrainResult:
    still_blocked = [p.key for p in plan.evict if _pod_id(p) in state.blocked]
    remaining = [p.key for p in (*plan.evict, *plan.later, *plan.terminating)]
    remaining += [f.pod.key for f in plan.force_delete] + [w.pod.key for w in plan.waiting]
    return DrainResult(
        node_name=node.name,
        complete=plan.drained,
        duration_seconds=duration,
        evicted=len(state.evicted),
        blocked=len(state.blocked),
        blocked_responses=state.blocked_responses,
        force_deleted=len(state.force_deleted),
        remaining=plan.remaining,
        waiting=len(plan.waiting),
        skipped=len(plan.skipped),
        errors=state.errors,
        reason=reason,
        blocked_pods=tuple(still_blocked[:_MAX_NAMED_PODS]),
        waiting_pods=tuple(w.pod.key for w in plan.waiting[:_MAX_NAMED_PODS]),
        remaining_pods=tuple(sorted(remaining)[:_MAX_NAMED_PODS]),
        last_error=state.last_error,
        terminating_until=_terminating_until(plan),
    )


def _terminating_until(plan: DrainPlan) -> float | None:
    """The latest ``deletionTimestamp`` (epoch seconds) when every pod left is terminating, else None."""
    if not plan.terminating or plan.evict or plan.later or plan.force_delete or plan.waiting:
        return None
    stamps = [p.deletion_timestamp for p in plan.terminating]
    return None if any(t is None for t in stamps) else max(t for t in stamps if t is not None)


def _poll_for(plan: DrainPlan, poll_seconds: float, *, wait_for_terminating: bool) -> float:
    """How long the pods listed for ``plan`` stay good enough to plan from (seconds): ``poll_seconds`` while
    something on the node changes without this drain (pods terminating that it waits for, pods waiting for
    their do-not-disrupt annotation to go, a later tier waiting on the current one), else
    :data:`BUDGET_POLL_SECONDS`: only this drain's evictions change the pods then, and each one that goes
    is followed by a list anyway. At 1,000 interrupted nodes, drains waiting only for their budgets' turns
    listed their nodes' pods every second."""
    if plan.waiting or plan.later or (plan.terminating and wait_for_terminating):
        return poll_seconds
    return max(poll_seconds, BUDGET_POLL_SECONDS)


def _wake_at(plan: DrainPlan, state: _State, turns: DrainActivity, t: float, poll_seconds: float) -> float:
    """When a round at ``t`` that made no progress looks again (monotonic seconds): the first pod retry or
    budget turn due, at the latest ``poll_seconds`` later."""
    retries = [state.next_try[_pod_id(p)] for p in plan.evict if _pod_id(p) in state.next_try]
    for group in {_budget_group(p) for p in plan.evict if _pod_id(p) in state.blocked}:
        turn = turns.next_try(group)  # passed already: another drain's eviction of it is in flight
        retries.append(turn if turn > t else t + BACKOFF_INITIAL_SECONDS)
    return min([t + poll_seconds, *retries])


def drain_node(
    *,
    cluster: Cluster,
    node: Node,
    now: float,
    deadline: float | None,
    budget_seconds: float,
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
    poll_seconds: float = POLL_SECONDS,
    eviction_workers: int = 1,
    on_step: Callable[[DrainResult], None] | None = None,
    stall_seconds: float | None = None,
    activity: DrainActivity | None = None,
    wait_for_terminating: bool = True,
) -> DrainResult:
    """Evict the pods of an already cordoned ``node`` until it is drained or ``budget_seconds`` pass.

    ``now`` (epoch seconds) is the wall time at the call, ``deadline`` (epoch seconds or None) when
    the node goes away; see :func:`nodesmith.core.drain.plan_drain` for which pods are evicted,
    force-deleted, waited for or left. Returns a :class:`DrainResult`; ``complete`` False with a ``reason``
    when the budget ran out. ``eviction_workers`` bounds the evictions in flight at once (1:
    one after another). ``on_step`` receives the result so far after every round that evicted or
    force-deleted a pod; an exception it raises propagates. ``stall_seconds``
    (None: never) ends the call early, incomplete, once that long has passed without an eviction or
    deletion going through (only pods blocked by a PodDisruptionBudget, waited for or still
    terminating are left): the caller continues later instead of waiting in place (Karpenter's
    termination controller evicts and requeues the node rather than blocking on it). With an
    ``activity`` shared by drains running side by side, each reports its progress there, and one with
    a pod refused by a PodDisruptionBudget counts the stall from the latest progress of any of them
    (:class:`DrainActivity`), so it stalls no earlier than the last of them would have.
    ``wait_for_terminating`` False ends the call, incomplete, as soon as every pod left is terminating
    (its eviction went through): ``terminating_until`` then says when their grace periods end and
    the node can be looked at again, instead of polling it here in the meantime.
    However little budget is left (0 included), one round of evictions and deletions is made: a
    drain resumed under load, whose invocation spent its budget before reaching the node, would
    otherwise only ever list the pods and continue again, evicting nothing (seen at 1,000 nodes).

    The node's pods are listed again after a round that evicted or deleted a pod, and otherwise at most
    every ``poll_seconds``: a round that only waits for a budget's turn (its retries come every 100 ms to
    a few seconds) plans from the last list, since only this drain evicts the node's pods. At 1,000
    interrupted nodes a list per retry was 12 pod lists per node. A pod that goes meanwhile (a
    terminating one the kubelet removed) is seen up to ``poll_seconds`` later, as by kubectl's 1 s poll;
    an eviction of a pod already gone is answered 404 and counted as gone. While nothing but budget
    turns is waited for (no pod it waits for is terminating, waiting or in a later tier), the list is
    renewed every :data:`BUDGET_POLL_SECONDS` instead.

    Raises :class:`~nodesmith.core.errors.KubernetesError` when listing pods or deleting a pod
    fails (the caller retries the whole message); eviction errors are retried within the budget.
    """
    start = clock()
    end = start + max(0.0, budget_seconds)
    turns = activity if activity is not None else DrainActivity()  # alone, its budget groups' turns are its own
    state = _State()
    last_progress = start
    rounds = 0
    pods: list[Pod] = []
    listed_at = -math.inf
    progressed = True  # the first round lists the pods
    poll = poll_seconds  # how long the last list stays good (:func:`_poll_for` of the last plan)
    while True:
        t = clock()
        if progressed or t - listed_at >= poll:
            pods, listed_at = cluster.list_pods(node_name=node.name), t
        plan = plan_drain(node=node, pods=pods, now=now + (t - start), deadline=deadline)
        if plan.drained:
            return _result(node=node, plan=plan, state=state, duration=t - start, reason="")
        if not wait_for_terminating and _terminating_until(plan) is not None:
            reason = f"only {plan.remaining} terminating pod(s) left; continuing when their grace periods end"
            return _result(node=node, plan=plan, state=state, duration=t - start, reason=reason)
        if t >= end and rounds > 0:
            reason = f"drain budget of {budget_seconds:g}s spent with {plan.remaining} pod(s) left"
            result = _result(node=node, plan=plan, state=state, duration=t - start, reason=reason)
            events.node_failed_to_drain(cluster, node.name, remaining=plan.remaining, blocked=result.blocked_pods)
            return result
        rounds += 1
        done_before = len(state.evicted) + len(state.force_deleted)
        _force_delete(cluster, plan, state)
        _evict(cluster, plan, state, t, workers=eviction_workers, turns=turns)
        progressed = len(state.evicted) + len(state.force_deleted) > done_before
        if on_step is not None and progressed:
            on_step(_result(node=node, plan=plan, state=state, duration=clock() - start, reason="in progress"))
        if progressed:
            last_progress = clock()
            if activity is not None:
                activity.note(last_progress)
            continue  # progress: look again at once (pods with no grace are already gone)
        since = last_progress
        if activity is not None and any(_pod_id(p) in state.blocked for p in plan.evict):
            since = max(since, activity.last)  # waiting on a budget: as long as the others progress
        if stall_seconds is not None and clock() - since >= stall_seconds:
            reason = f"no progress for {stall_seconds:g}s with {plan.remaining} pod(s) left; continuing later"
            return _result(node=node, plan=plan, state=state, duration=clock() - start, reason=reason)
        poll = _poll_for(plan, poll_seconds, wait_for_terminating=wait_for_terminating)
        delay = min(_wake_at(plan, state, turns, t, poll), end) - clock()
        if delay > 0:
            sleep(delay)
