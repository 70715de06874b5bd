"""Expiration: NodeClaims past ``expireAfter`` are deleted regardless of budgets and
do-not-disrupt (Karpenter v1 ``nodeclaim/expiration``); ``Never`` disables it."""

from __future__ import annotations

from disruption_factories import DAY, HOUR, NOW, catalogue, make_node, make_nodeclaim, make_nodepool, make_pod

from nodesmith.core.disruption import DisruptionSnapshot, decide
from nodesmith.core.disruption.expiration import expired_nodes

TYPES = catalogue()


def test_node_older_than_expire_after_expires_even_with_a_zero_budget_and_do_not_disrupt() -> None:
    pool = make_nodepool(expire_after="24h", budgets=[{"nodes": "0"}])
    protected = make_pod("db", node="old", annotations={"karpenter.sh/do-not-disrupt": "true"})
    old = make_node("old", pods=(protected,), created=NOW - 25 * HOUR)
    young = make_node("young", created=NOW - 23 * HOUR)
    plan = decide(DisruptionSnapshot(nodes=[old, young], nodepools=[pool], instance_types=TYPES), now=NOW)
    assert [(d.method, d.nodes) for d in plan.expirations] == [("expiration", ("old",))]
    assert plan.expirations[0].cause == "Expired"
    assert plan.expirations[0].pods == ("default/db",)
    assert plan.command is None, "the zero budget still blocks every graceful method"


def test_never_disables_expiration() -> None:
    pool = make_nodepool(expire_after="Never")
    ancient = make_node("ancient", created=NOW - 400 * DAY)
    assert expired_nodes(nodes=[ancient], nodepools=[pool], now=NOW) == []


def test_nodeclaim_expire_after_wins_over_the_nodepool_template() -> None:
    pool = make_nodepool(expire_after="720h")
    claim = make_nodeclaim("nc-1", node="n1", created=NOW - 2 * DAY, expire_after="24h")
    node = make_node("n1", nodeclaim=claim, created=NOW - 2 * DAY)
    expired = expired_nodes(nodes=[node], nodepools=[pool], now=NOW)
    assert [e.node for e in expired] == ["n1"]
    assert expired[0].expired_at == NOW - DAY


def test_node_of_unknown_age_never_expires() -> None:
    pool = make_nodepool(expire_after="1h")
    assert expired_nodes(nodes=[make_node("n1", created=0.0)], nodepools=[pool], now=NOW) == []


def test_expired_nodes_consume_budget_and_are_not_candidates_for_other_methods() -> None:
    pool = make_nodepool(expire_after="24h", budgets=[{"nodes": "1"}])
    old = make_node("old", created=NOW - 2 * DAY)  # empty and expired
    empty = make_node("empty", created=NOW - HOUR)
    plan = decide(DisruptionSnapshot(nodes=[old, empty], nodepools=[pool], instance_types=TYPES), now=NOW)
    assert [d.nodes for d in plan.expirations] == [("old",)]
    assert plan.command is None, "the expiring node already uses the pool's single disruption"
    assert not any(r.node == "old" for r in plan.rejected)
