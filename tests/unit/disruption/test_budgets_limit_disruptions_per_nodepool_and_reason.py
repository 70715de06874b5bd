"""Disruption budgets: counts, percentages (rounded up), cron schedules with durations, reasons,
nodes already disrupting, and failing closed on a misconfigured budget (Karpenter v1 nodepool.go)."""

from __future__ import annotations

import random
from datetime import UTC, datetime

import pytest
from croniter import CroniterBadDateError, croniter
from disruption_factories import NOW, make_node, make_nodepool

from nodesmith.core.api.nodepool import Budget
from nodesmith.core.disruption import DisruptionSnapshot, decide
from nodesmith.core.disruption.budgets import (
    UNBOUNDED,
    BudgetNode,
    allowed_by_budget,
    allowed_disruptions,
    budget_is_active,
    budget_mapping,
)
from nodesmith.core.disruption.cron import CronError, last_hit, parse_cron


def at(text: str) -> float:
    """Epoch seconds of a UTC wall time like ``2025-06-02 09:30``."""
    return datetime.strptime(text, "%Y-%m-%d %H:%M").replace(tzinfo=UTC).timestamp()


def nodes(pool: str, n: int, *, disrupting: int = 0) -> list[BudgetNode]:
    return [BudgetNode(nodepool=pool, counted=True, disrupting=i < disrupting) for i in range(n)]


@pytest.mark.parametrize(
    ("percent", "pool_size", "expected"), [("10%", 5, 1), ("25%", 10, 3), ("10%", 10, 1), ("0%", 10, 0)]
)
def test_percentage_budgets_round_up(percent: str, pool_size: int, expected: int) -> None:
    budget = Budget(nodes=percent)
    assert allowed_by_budget(budget, now=NOW, num_nodes=pool_size) == expected


def test_count_budget_is_independent_of_pool_size() -> None:
    assert allowed_by_budget(Budget(nodes="2"), now=NOW, num_nodes=50) == 2
    assert allowed_by_budget(Budget(nodes=3), now=NOW, num_nodes=1) == 3


def test_scheduled_budget_applies_only_within_duration_after_the_cron_fires() -> None:
    budget = Budget(nodes="0", schedule="0 9 * * *", duration="1h")
    assert budget_is_active(budget, now=at("2025-06-02 09:00"))
    assert budget_is_active(budget, now=at("2025-06-02 09:59"))
    assert not budget_is_active(budget, now=at("2025-06-02 10:00")), (
        "a hit exactly `duration` ago is over (Next(now-d) > now)"
    )
    assert not budget_is_active(budget, now=at("2025-06-02 08:59"))
    assert allowed_by_budget(budget, now=at("2025-06-02 12:00"), num_nodes=10) == UNBOUNDED


def test_weekday_business_hours_freeze_and_macros() -> None:
    freeze = Budget(nodes="0", schedule="0 8 * * mon-fri", duration="10h")
    assert budget_is_active(freeze, now=at("2025-06-06 17:59"))  # Friday
    assert not budget_is_active(freeze, now=at("2025-06-07 09:00"))  # Saturday
    daily = Budget(nodes="1", schedule="@daily", duration="30m")
    assert budget_is_active(daily, now=at("2025-06-07 00:10"))
    assert not budget_is_active(daily, now=at("2025-06-07 00:31"))


def test_minimum_over_budgets_that_apply_to_the_reason() -> None:
    pool = make_nodepool(
        budgets=[
            {"nodes": "50%"},
            {"nodes": "0", "reasons": ["Drifted"]},
            {"nodes": "1", "reasons": ["Empty", "Underutilized"]},
        ]
    )
    assert allowed_disruptions(pool, now=NOW, num_nodes=10, reason="Drifted").allowed == 0
    assert allowed_disruptions(pool, now=NOW, num_nodes=10, reason="Empty").allowed == 1
    only_drift = make_nodepool(budgets=[{"nodes": "0", "reasons": ["Drifted"]}])
    assert allowed_disruptions(only_drift, now=NOW, num_nodes=10, reason="Empty").allowed == UNBOUNDED


def test_nodes_already_disrupting_or_not_ready_consume_the_budget() -> None:
    pool = make_nodepool(budgets=[{"nodes": "2"}])
    got = budget_mapping(nodepools=[pool], nodes=nodes("default", 5, disrupting=1), now=NOW, reason="Empty")
    assert got["default"].allowed == 1
    got = budget_mapping(nodepools=[pool], nodes=nodes("default", 5, disrupting=3), now=NOW, reason="Empty")
    assert got["default"].allowed == 0, "never negative"
    uninitialized = [BudgetNode("default", counted=False, disrupting=False)] * 10 + nodes("default", 10)
    pct = make_nodepool(budgets=[{"nodes": "10%"}])
    assert budget_mapping(nodepools=[pct], nodes=uninitialized, now=NOW, reason="Empty")["default"].allowed == 1


@pytest.mark.parametrize("schedule", ["61 * * * *", "0 0 * * 7", "0 0 31 13 *", "*/0 * * * *", "0 0 * * 1-9"])
def test_misconfigured_budget_fails_closed_for_every_reason(schedule: str) -> None:
    pool = make_nodepool(
        budgets=[{"nodes": "100%"}, {"nodes": "5", "schedule": schedule, "duration": "1h", "reasons": ["Drifted"]}]
    )
    for reason in ("Empty", "Drifted", "Underutilized"):
        got = allowed_disruptions(pool, now=NOW, num_nodes=10, reason=reason)
        assert got.allowed == 0
        assert got.error is not None and "budgets[1]" in got.error


def test_emptiness_removes_only_what_the_default_ten_percent_budget_allows() -> None:
    pool = make_nodepool()  # Karpenter's default budget: 10%
    cluster = [make_node(f"empty-{i}") for i in range(12)]
    plan = decide(DisruptionSnapshot(nodes=cluster, nodepools=[pool], instance_types=[]), now=NOW, expire=False)
    assert plan.command is not None and plan.command.method == "emptiness"
    assert len(plan.command.nodes) == 2, "ceil(10% of 12) = 2"
    assert sum("Empty budget exhausted" in r.reason for r in plan.rejected) == 10


def test_a_freeze_window_blocks_emptiness_until_it_ends() -> None:
    pool = make_nodepool(budgets=[{"nodes": "100%"}, {"nodes": "0", "schedule": "0 9 * * *", "duration": "8h"}])
    cluster = [make_node("empty-a")]
    frozen = decide(
        DisruptionSnapshot(nodes=cluster, nodepools=[pool], instance_types=[]), now=at("2025-10-13 12:00"), expire=False
    )
    assert frozen.command is None
    assert any("Empty budget exhausted" in r.reason for r in frozen.rejected)
    thawed = decide(
        DisruptionSnapshot(nodes=cluster, nodepools=[pool], instance_types=[]), now=at("2025-10-13 17:00"), expire=False
    )
    assert thawed.command is not None and thawed.command.nodes == ("empty-a",)


def test_cron_parser_refuses_what_robfig_cron_refuses() -> None:
    for bad in (
        "* * * *",
        "60 * * * *",
        "* 24 * * *",
        "* * 0 * *",
        "* * * 0 *",
        "5-1 * * * *",
        "a * * * *",
        "@weekly2",
    ):
        with pytest.raises(CronError):
            parse_cron(bad)


def test_last_hit_agrees_with_croniter_on_random_schedules() -> None:
    rng = random.Random(20250602)
    fields = [
        lambda: rng.choice(["*", "0", "*/15", "5,35", "10-20", "30/10"]),
        lambda: rng.choice(["*", "0", "9", "*/6", "8-18", "22"]),
        lambda: rng.choice(["*", "1", "15", "1-7", "*/10", "31"]),
        lambda: rng.choice(["*", "1", "6", "*/3", "jan-mar", "12"]),
        lambda: rng.choice(["*", "0", "1-5", "sat,sun", "*/2", "3"]),
    ]
    for _ in range(300):
        expr = " ".join(f() for f in fields)
        now = NOW + rng.randint(0, 365 * 86400)
        window = rng.choice([600, 3600, 8 * 3600, 3 * 86400, 40 * 86400])
        try:
            expected = croniter(expr, datetime.fromtimestamp(now, tz=UTC)).get_prev(float)
        except CroniterBadDateError:  # never fires (e.g. 31 February)
            expected = float("-inf")
        if (datetime.fromtimestamp(now, tz=UTC).second == 0) and croniter.match(
            expr, datetime.fromtimestamp(now, tz=UTC)
        ):
            expected = now
        want = expected if expected > now - window else None
        assert last_hit(parse_cron(expr), at_or_before=now, after=now - window) == want, (expr, now, window)
