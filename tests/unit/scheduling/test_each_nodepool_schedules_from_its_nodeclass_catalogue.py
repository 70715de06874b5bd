"""Each NodePool schedules from its own EC2NodeClass's catalogue (``nodepool_instance_types``):
the node class's kubelet maxPods shapes allocatable, its subnets' zones the offerings."""

from __future__ import annotations

from dataclasses import replace

from scheduling_support import make_input, make_nodepool, make_pod, make_type

from nodesmith.core.scheduling import solve

POOL = "karpenter.sh/nodepool"


def _catalogue(*, pods: int, zones: tuple[str, ...]) -> list:
    return [make_type("m5.large", 2, 8, pods=pods, zones=zones), make_type("m5.xlarge", 4, 16, pods=pods, zones=zones)]


def test_two_nodepools_get_their_own_allocatable_and_zones() -> None:
    dense = _catalogue(pods=110, zones=("us-west-2a", "us-west-2b", "us-west-2c"))
    sparse = _catalogue(pods=4, zones=("us-west-2c",))
    pods = [make_pod(f"d{i}", cpu="10m", memory="16Mi", node_selector={POOL: "dense"}) for i in range(8)]
    pods += [make_pod(f"s{i}", cpu="10m", memory="16Mi", node_selector={POOL: "sparse"}) for i in range(8)]
    inp = replace(
        make_input(pods, nodepools=[make_nodepool("dense"), make_nodepool("sparse")], types=dense),
        nodepool_instance_types={"sparse": sparse},
    )
    result = solve(inp)

    assert result.unschedulable == {}
    by_pool: dict[str, list] = {}
    for plan in result.nodeclaims:
        by_pool.setdefault(plan.nodepool, []).append(plan)
    # maxPods 110: one node holds all eight; maxPods 4: eight pods need two nodes of four.
    assert len(by_pool["dense"]) == 1
    assert sorted(len(p.pods) for p in by_pool["sparse"]) == [4, 4]
    assert {it.capacity["pods"] for p in by_pool["sparse"] for it in p.instance_types} == {4}
    # The sparse node class has subnets in us-west-2c only; the dense one may use any zone.
    assert all(p.zones == frozenset({"us-west-2c"}) or p.zone == "us-west-2c" for p in by_pool["sparse"])
    dense_zones = {o.zone for it in by_pool["dense"][0].instance_types for o in it.offerings if o.available}
    assert dense_zones == {"us-west-2a", "us-west-2b", "us-west-2c"}


def test_a_nodepool_not_named_uses_the_shared_catalogue() -> None:
    only_c = _catalogue(pods=110, zones=("us-west-2c",))
    pod = make_pod("p", node_selector={"topology.kubernetes.io/zone": "us-west-2a"})
    shared = make_input([pod], nodepools=[make_nodepool("default")], types=_catalogue(pods=110, zones=("us-west-2a",)))

    assert len(solve(replace(shared, nodepool_instance_types={"other": only_c})).nodeclaims) == 1
    refused = solve(replace(shared, nodepool_instance_types={"default": only_c}))
    assert refused.nodeclaims == () and "default/p" in refused.unschedulable
