"""Pods with the same namespace and labels are covered by the same PodDisruptionBudgets, so once they
were refused, a drain round sends one eviction for all of them and a refusal holds the others back;
pods with other labels, or never refused, are still each sent."""

from __future__ import annotations

from typing import Any

from test_interrupt_service import fakes, world

from nodesmith.services.drain import DrainResult, drain_node

WEB = {"app": "web", "pod-template-hash": "5d4f"}


def _drain(cluster: Any, clock: Any, *, budget: float) -> DrainResult:
    return drain_node(cluster=cluster, node=cluster.nodes["node-a"], now=clock.wall(), deadline=None,
                      budget_seconds=budget, sleep=clock.sleep, clock=clock)  # fmt: skip


def test_replicas_refused_by_their_budget_are_asked_once_a_round_after_the_first() -> None:
    pods = [fakes.make_pod(name, labels=WEB) for name in ("web-1", "web-2", "web-3")]
    clock, cluster, _ = world(pods=pods, pdb_blocks={p.key: -1 for p in pods})

    result = _drain(cluster, clock, budget=2.0)

    calls = cluster.args("evict")
    assert calls[:3] == ["default/web-1", "default/web-2", "default/web-3"]  # each asked once
    assert len(calls) > 4 and set(calls[3:]) == {"default/web-1"}  # then one eviction a round
    assert result.blocked == 3 and not result.complete
    assert result.blocked_responses == len(calls)


def test_pods_with_other_labels_are_each_still_asked() -> None:
    pods = [fakes.make_pod("web-1", labels=WEB), fakes.make_pod("api-1", labels={"app": "api"})]
    clock, cluster, _ = world(pods=pods, pdb_blocks={p.key: -1 for p in pods})

    _drain(cluster, clock, budget=2.0)

    calls = cluster.args("evict")
    assert calls.count("default/web-1") == calls.count("default/api-1") > 2


def test_once_the_budget_lets_one_go_the_next_replica_is_asked_at_once() -> None:
    pods = [fakes.make_pod(name, labels=WEB) for name in ("web-1", "web-2")]
    clock, cluster, _ = world(pods=pods, pdb_blocks={"default/web-1": 2, "default/web-2": 2}, instant_termination=True)

    result = _drain(cluster, clock, budget=10.0)

    at = [(arg, t) for call, arg, t in cluster.timeline if call == "evict"]
    assert [arg for arg, _ in at] == ["default/web-1", "default/web-2", "default/web-1", "default/web-1",
                                      "default/web-2", "default/web-2"]  # fmt: skip
    assert at[4][1] == at[3][1]  # web-2 right after web-1 went, not after a backoff
    assert result.complete and result.evicted == 2
