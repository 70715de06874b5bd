"""A new NodeClaim keeps every instance type that fits all its pods, cheapest offering first."""

from __future__ import annotations

from dataclasses import replace

from scheduling_support import ZONES, make_input, make_nodepool, make_pod, make_type

from nodesmith.core.scheduling import solve

GENERAL = [
    make_type("m5.large", 2, 8, pods=29, od_price=0.096),
    make_type("m5.xlarge", 4, 16, od_price=0.192),
    make_type("m5.2xlarge", 8, 32, od_price=0.384),
    make_type("c5.xlarge", 4, 8, od_price=0.17),
]


def names(result_types: tuple[object, ...]) -> list[str]:
    return [t.name for t in result_types]  # type: ignore[attr-defined]


def test_every_type_that_fits_is_kept_and_ordered_by_cheapest_offering() -> None:
    # 7270Mi fits m5.large (8Gi - 674Mi reserved = 7518Mi) but not c5.xlarge (8Gi - 993Mi = 7199Mi).
    result = solve(make_input([make_pod(cpu="1500m", memory="7270Mi")], types=GENERAL))
    (nc,) = result.nodeclaims
    assert names(nc.instance_types) == ["m5.large", "m5.xlarge", "m5.2xlarge"]
    assert nc.price_per_hour == min(o.price for o in GENERAL[0].offerings)
    assert nc.capacity_types == frozenset({"spot", "on-demand"})
    assert nc.zones == frozenset(ZONES)
    assert nc.zone is None and nc.capacity_type is None


def test_types_that_no_longer_fit_drop_out_as_pods_are_added() -> None:
    pods = [make_pod(cpu="1500m", memory="1Gi") for _ in range(4)]
    (nc,) = solve(replace(make_input(pods, types=GENERAL), packing="karpenter")).nodeclaims
    assert len(nc.pods) == 4
    assert names(nc.instance_types) == ["m5.2xlarge"]  # 6 cpu of pods: only the 8-vCPU type remains
    assert nc.requests["cpu"] == 6000 and nc.requests["pods"] == 4


def test_requirements_list_the_kept_types_and_capacity_types() -> None:
    pool = make_nodepool(
        requirements=[{"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]}]
    )
    (nc,) = solve(make_input([make_pod(cpu="3")], nodepools=[pool], types=GENERAL)).nodeclaims
    by_key = {r.key: r for r in nc.requirements}
    assert by_key["node.kubernetes.io/instance-type"].values == ("c5.xlarge", "m5.2xlarge", "m5.xlarge")
    assert by_key["karpenter.sh/capacity-type"].values == ("on-demand",)
    assert by_key["karpenter.sh/nodepool"].values == ("default",)
    assert "kubernetes.io/hostname" not in by_key
    assert nc.capacity_type == "on-demand"
    assert names(nc.instance_types) == ["c5.xlarge", "m5.xlarge", "m5.2xlarge"]
    assert nc.price_per_hour == 0.17
    assert nc.nodeclass == "default" and nc.labels["karpenter.sh/nodepool"] == "default"


def test_unavailable_offerings_are_not_used_for_price_or_zones() -> None:
    cheap_but_gone = make_type(
        "m5.large",
        2,
        8,
        pods=29,
        od_price=0.05,
        unavailable=frozenset((z, ct) for z in ZONES for ct in ("spot", "on-demand")),
    )
    other = make_type("m5.xlarge", 4, 16, od_price=0.192, unavailable=frozenset({("us-west-2a", "spot")}))
    (nc,) = solve(make_input([make_pod(cpu="1")], types=[cheap_but_gone, other])).nodeclaims
    assert names(nc.instance_types) == ["m5.xlarge"]
    assert nc.price_per_hour == min(o.price for o in other.offerings if o.available)


def test_pods_fill_planned_nodeclaims_before_opening_new_ones_least_loaded_first() -> None:
    small = [make_type("m5.large", 2, 8, pods=29, od_price=0.096)]
    pods = [make_pod(cpu="1200m") for _ in range(2)] + [make_pod(cpu="500m") for _ in range(2)]
    result = solve(make_input(pods, types=small))
    assert [len(nc.pods) for nc in result.nodeclaims] == [2, 2]
    assert [[p.requests["cpu"] for p in nc.pods] for nc in result.nodeclaims] == [[1200, 500], [1200, 500]]
