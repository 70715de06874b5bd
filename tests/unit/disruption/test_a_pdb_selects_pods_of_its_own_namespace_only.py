"""A PodDisruptionBudget selects pods of its own namespace only (Kubernetes: "A PodDisruptionBudget ... selector
... within its namespace"): a budget allowing no disruption blocks the pods it selects there and no pod elsewhere,
and a budget without a status counts its own namespace's pods."""

from __future__ import annotations

from disruption_factories import make_pdb, make_pod

from nodesmith.core.disruption.pdb import PdbLimits


def test_a_budget_blocks_the_pods_of_its_namespace_and_no_other() -> None:
    here = make_pod("web-1", namespace="shop", node="n1", labels={"app": "web"})
    there = make_pod("web-2", namespace="blog", node="n2", labels={"app": "web"})
    limits = PdbLimits([make_pdb("web", app="web", namespace="shop", allowed=0)], [here, there])
    assert limits.blocks(here) == "PodDisruptionBudget shop/web allows 0 disruptions (pod shop/web-1)"
    assert limits.blocks(there) is None
    assert limits.allowance(there) is None and limits.allowance(here) == ("shop/web", 0)


def test_a_budget_without_status_counts_only_its_namespaces_pods() -> None:
    shop = [make_pod(f"web-{i}", namespace="shop", node="n1", labels={"app": "web"}) for i in range(3)]
    blog = [make_pod(f"web-{i}", namespace="blog", node="n2", labels={"app": "web"}) for i in range(5)]
    budget = make_pdb("web", app="web", namespace="shop", min_available=2)
    limits = PdbLimits([budget], [*shop, *blog])
    assert limits.allowance(shop[0]) == ("shop/web", 1)  # 3 healthy, 2 must stay: blog's 5 do not count
    assert limits.allowance(blog[0]) is None
    several = PdbLimits([budget, make_pdb("all", app="web", namespace="shop", allowed=3)], [*shop, *blog])
    assert several.allowance(shop[0]) == ("shop/web", 0)  # two budgets select it: the Eviction API refuses it
    assert several.blocks(blog[0]) is None
