"""A PodDisruptionBudget that refused once is asked by one replica at a time, across the drains of one
invocation, and once it lets one go the next is asked at once with the backoff starting again from
100 ms: the budget frees a place per replacement that becomes Ready, and replicas waiting out backoffs
grown to seconds meanwhile let most of a 20-replica budget's evictions reach the deadline (1,000 nodes)."""

from __future__ import annotations

import itertools
from typing import TYPE_CHECKING, Any

import pytest
from test_interrupt_service import fakes

from nodesmith.services.drain import (
    BACKOFF_INITIAL_SECONDS,
    BUDGET_POLL_SECONDS,
    POLL_SECONDS,
    DrainActivity,
    DrainResult,
    backoff_seconds,
    drain_node,
)

if TYPE_CHECKING:
    from nodesmith.core.model import Pod

WEB = {"app": "web", "pod-template-hash": "5d4f"}
GROUP = ("default", frozenset(WEB.items()))
READY_SECONDS = 1.0  # an evicted replica's replacement is Ready this long after the eviction


class BudgetCluster(fakes.FakeCluster):  # type: ignore[misc, name-defined]
    """A ``maxUnavailable: 1`` budget over the ``app=web`` pods: one eviction, then refusals until the
    evicted pod's replacement is Ready ``READY_SECONDS`` later."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(instant_termination=True, **kwargs)
        self.free_at = -1.0
        self.answers: list[tuple[str, float, str]] = []  # (pod key, monotonic time, answer)

    def evict(self, *, pod: Pod, grace_period_seconds: int | None = None) -> str:
        if pod.labels.get("app") == "web" and pod.key in self.pods and self.clock() < self.free_at:
            self._record(("evict", pod.key))
            answer = "blocked"
        else:
            answer = str(super().evict(pod=pod, grace_period_seconds=grace_period_seconds))
            if answer == "evicted":
                self.free_at = self.clock() + READY_SECONDS
        self.answers.append((pod.key, self.clock(), answer))
        return answer


def _world(per_node: dict[str, int]) -> tuple[Any, BudgetCluster]:
    clock = fakes.FakeClock()
    nodes = [fakes.make_node(name, instance_id=f"i-{n:017x}") for n, name in enumerate(per_node)]
    pods = [fakes.make_pod(f"{node}-web-{i}", node=node, labels=WEB) for node, count in per_node.items()
            for i in range(count)]  # fmt: skip
    return clock, BudgetCluster(clock=clock, nodes=nodes, pods=pods)


def _drain(cluster: Any, clock: Any, node: str, *, budget: float, activity: DrainActivity | None) -> DrainResult:
    return drain_node(cluster=cluster, node=cluster.nodes[node], now=clock.wall(), deadline=None,
                      budget_seconds=budget, sleep=clock.sleep, clock=clock, activity=activity)  # fmt: skip


def test_after_each_eviction_the_next_replica_goes_within_a_backoff_step_of_the_budget_freeing() -> None:
    clock, cluster = _world({"node-a": 6})

    result = _drain(cluster, clock, "node-a", budget=60.0, activity=None)

    went = [t for _, t, answer in cluster.answers if answer == "evicted"]
    assert result.complete and len(went) == 6
    gaps = [b - a for a, b in itertools.pairwise(went)]
    # refusals after each eviction: 0.1, 0.2, 0.4 (0.7 s), then 0.8 s more lands past the 1 s of the replacement
    assert max(gaps) <= READY_SECONDS + backoff_seconds(4) + 1e-9
    assert max(gaps) < backoff_seconds(7)  # the per-pod backoffs had reached the 5 s cap by the fourth


def test_a_refused_budget_is_asked_by_one_replica_a_turn_not_by_each() -> None:
    clock, cluster = _world({"node-a": 4})

    _drain(cluster, clock, "node-a", budget=6.0, activity=None)

    refused = [t for _, t, answer in cluster.answers if answer == "blocked"]
    assert refused[:3] == [refused[0]] * 3  # the first round asks every replica: one went, three were refused
    assert len(refused) > 6 and len(set(refused[3:])) == len(refused[3:])  # then one a turn


def test_drains_sharing_an_invocation_wait_for_the_turn_of_a_budget_another_was_refused_by() -> None:
    clock, cluster = _world({"node-a": 2, "node-b": 2})
    shared = DrainActivity()
    _drain(cluster, clock, "node-a", budget=0.0, activity=shared)  # one round: one goes, the other is refused
    before = len(cluster.args("evict"))

    result = _drain(cluster, clock, "node-b", budget=0.0, activity=shared)

    assert len(cluster.args("evict")) == before  # not its turn yet: nothing sent
    assert result.blocked == 2 and result.blocked_responses == 0 and not result.complete


def test_a_drain_of_another_invocation_still_asks_its_own_replicas() -> None:
    clock, cluster = _world({"node-a": 2, "node-b": 2})
    _drain(cluster, clock, "node-a", budget=0.0, activity=DrainActivity())
    before = len(cluster.args("evict"))

    result = _drain(cluster, clock, "node-b", budget=0.0, activity=DrainActivity())

    assert len(cluster.args("evict")) == before + 2
    assert result.blocked_responses == 2


def test_turns_one_in_flight_backoff_on_refusal_and_at_once_after_a_pod_went() -> None:
    turns = DrainActivity()
    assert not turns.refused(GROUP)
    turns.answered(GROUP, 10.0, let_go=False)
    assert turns.refused(GROUP) and turns.next_try(GROUP) == pytest.approx(10.0 + BACKOFF_INITIAL_SECONDS)
    assert not turns.take_turn(GROUP, 10.05)  # backing off
    assert turns.take_turn(GROUP, 10.1)
    assert not turns.take_turn(GROUP, 10.2)  # one in flight
    turns.answered(GROUP, 10.1, let_go=False)
    assert turns.next_try(GROUP) == pytest.approx(10.1 + backoff_seconds(2))
    assert turns.take_turn(GROUP, 10.3)
    turns.answered(GROUP, 10.3, let_go=None)  # another error: the turn is given back as it was
    assert turns.next_try(GROUP) == pytest.approx(10.1 + backoff_seconds(2)) and turns.take_turn(GROUP, 10.3)
    turns.answered(GROUP, 10.3, let_go=True)
    assert turns.refused(GROUP) and turns.take_turn(GROUP, 10.3)  # still one at a time, but at once
    turns.answered(GROUP, 10.3, let_go=False)
    assert turns.next_try(GROUP) == pytest.approx(10.3 + BACKOFF_INITIAL_SECONDS)  # the backoff starts again


def test_a_turn_taken_by_a_drain_that_dies_mid_eviction_is_given_back_to_the_others() -> None:
    clock, cluster = _world({"node-a": 1, "node-b": 1})
    shared = DrainActivity()
    shared.answered(GROUP, clock(), let_go=False)  # the budget refused before: its pods take turns
    clock.sleep(1.0)

    def dying(**_: Any) -> str:
        raise RuntimeError("the invocation is ending")

    cluster.evict = dying
    with pytest.raises(RuntimeError):
        _drain(cluster, clock, "node-a", budget=5.0, activity=shared)

    assert shared.take_turn(GROUP, clock())  # not left in flight for node-b's drain


def test_first_round_refusals_sent_together_by_several_drains_count_once() -> None:
    turns = DrainActivity()
    # three drains of one invocation reach the group in their first rounds, before any refusal is known
    for sent in (10.0, 10.0, 10.02):
        turns.answered(GROUP, sent, let_go=False)

    assert turns.next_try(GROUP) == pytest.approx(10.0 + BACKOFF_INITIAL_SECONDS)  # not 0.2 or 0.4 s later
    assert turns.take_turn(GROUP, 10.1)
    turns.answered(GROUP, 10.1, let_go=False)
    assert turns.next_try(GROUP) == pytest.approx(10.1 + backoff_seconds(2))  # the next refusal is the second


def test_a_refusal_sent_before_a_replica_went_leaves_the_next_turn_at_once() -> None:
    turns = DrainActivity()
    turns.answered(GROUP, 10.0, let_go=False)
    assert turns.take_turn(GROUP, 10.5)
    turns.answered(GROUP, 10.5, let_go=True)  # the budget let one go
    turns.answered(GROUP, 10.45, let_go=False)  # a slower answer to an eviction sent before it

    assert turns.next_try(GROUP) == pytest.approx(10.5) and turns.take_turn(GROUP, 10.5)


def test_a_drain_waiting_for_its_budget_lists_the_pods_at_most_every_poll_and_after_each_eviction() -> None:
    clock, cluster = _world({"node-a": 6})

    result = _drain(cluster, clock, "node-a", budget=60.0, activity=None)

    lists = [at for call, _, at in cluster.timeline if call == "list_pods"]
    refusals = sum(1 for _, _, answer in cluster.answers if answer == "blocked")
    assert result.complete and refusals >= 10  # retries every 100 ms to 800 ms between the six evictions
    # one list after each eviction (and the first), else one per second of waiting: not one per retry
    assert len(lists) <= 1 + 6 + (lists[-1] - lists[0]) / POLL_SECONDS
    assert len(lists) < 1 + 6 + refusals / 2


class NeverFreeing(BudgetCluster):
    """The budget lets one replica go, and its replacement never becomes Ready."""

    def evict(self, *, pod: Pod, grace_period_seconds: int | None = None) -> str:
        answer = super().evict(pod=pod, grace_period_seconds=grace_period_seconds)
        self.free_at = float("inf")
        return answer


@pytest.mark.parametrize("waits_for_terminating", [False, True])
def test_a_drain_waiting_only_for_budget_turns_lists_the_pods_every_budget_poll(waits_for_terminating: bool) -> None:
    clock, world = _world({"node-a": 3})
    cluster = NeverFreeing(clock=clock, nodes=list(world.nodes.values()), pods=list(world.pods.values()))
    cluster.instant_termination = False  # the evicted replica stays terminating through the whole drain
    budget = 6 * BUDGET_POLL_SECONDS

    result = drain_node(cluster=cluster, node=cluster.nodes["node-a"], now=clock.wall(), deadline=None,
                        budget_seconds=budget, sleep=clock.sleep, clock=clock,
                        wait_for_terminating=waits_for_terminating)  # fmt: skip

    lists = [at for call, _, at in cluster.timeline if call == "list_pods"]
    assert not result.complete and result.evicted == 1 and result.blocked == 2
    if waits_for_terminating:  # the evicted pod may go any moment: kubectl's 1 s poll
        assert len(lists) >= budget / POLL_SECONDS
    else:  # only this drain's evictions change the pods: the first list, one after the eviction, then slowly
        assert len(lists) <= 2 + budget / BUDGET_POLL_SECONDS
