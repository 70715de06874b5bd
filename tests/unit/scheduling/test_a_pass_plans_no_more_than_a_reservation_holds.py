"""One pass plans no more NodeClaims on a capacity reservation than it can take (Karpenter's ``ReservationManager``):
each NodeClaim holds a slot of the reservations it could launch into and is pinned to them (``FinalizeScheduling``);
once a reservation has no slot left, later NodeClaims are planned, priced and launched without it; a NodeClaim whose
pods narrow it away from a reservation gives its slot back; a NodePool that only allows reserved capacity leaves the
pods beyond the reservation's count unschedulable, saying why."""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Any

import pytest
from scheduling_support import make_input, make_nodepool, make_pod, make_type

from nodesmith.core.capacityreservations import CapacityReservation, with_reserved_offerings
from nodesmith.core.scheduling import solve

if TYPE_CHECKING:
    from nodesmith.core.scheduling.types import NodeClaimPlan

NOW = 1_800_000_000.0
M5 = make_type("m5.large", 2, 8, pods=29, od_price=0.096)
C5 = make_type("c5.large", 2, 4, pods=29, od_price=0.085)
RESERVATION_ID = "karpenter.k8s.aws/capacity-reservation-id"
RESERVED_PRICE = 0.096 / 10_000_000


def capacity(*values: str) -> dict[str, Any]:
    return {"key": "karpenter.sh/capacity-type", "operator": "In", "values": list(values)}


def odcr(rid: str, *, count: int, zone: str = "us-west-2b", type_: str = "m5.large") -> CapacityReservation:
    return CapacityReservation(id=rid, instance_type=type_, zone=zone, owner_id="123456789012", available_count=count)


def requirement(plan: NodeClaimPlan, key: str) -> tuple[str, tuple[str, ...]] | None:
    found = [(r.operator, tuple(sorted(r.values))) for r in plan.requirements if r.key == key]
    return found[0] if found else None


@pytest.mark.parametrize("packing", ["karpenter", "nodesmith"])
def test_nodeclaims_beyond_the_reservations_count_fall_back_to_spot_and_on_demand(packing: str) -> None:
    types = with_reserved_offerings([C5, M5], [odcr("cr-0a", count=2)], zones=None, now=NOW)
    pool = make_nodepool(requirements=[capacity("reserved", "spot", "on-demand")])
    inp = make_input([make_pod(f"p{i}", cpu="1500m") for i in range(5)], nodepools=[pool], types=types)

    plans = solve(replace(inp, packing=packing)).nodeclaims

    reserved = [p for p in plans if p.capacity_types == frozenset({"reserved"})]
    others = [p for p in plans if p not in reserved]
    assert (len(reserved), len(others)) == (2, 3)
    for plan in reserved:
        assert requirement(plan, "karpenter.sh/capacity-type") == ("In", ("reserved",))
        assert requirement(plan, RESERVATION_ID) == ("In", ("cr-0a",))
        assert plan.price_per_hour == RESERVED_PRICE
    for plan in others:
        assert "reserved" not in plan.capacity_types
        assert requirement(plan, RESERVATION_ID) == ("NotIn", ("cr-0a",))
        assert plan.price_per_hour > 0.01  # priced on spot or on-demand, not on the reservation


def test_a_nodeclaim_holds_every_reservation_it_could_use_and_gives_back_those_its_pods_rule_out() -> None:
    reservations = [
        odcr("cr-0b", count=1, zone="us-west-2b"),
        odcr("cr-0c", count=1, zone="us-west-2a", type_="c5.large"),
    ]
    types = with_reserved_offerings([C5, M5], reservations, zones=None, now=NOW)
    pool = make_nodepool(requirements=[capacity("reserved", "spot", "on-demand")])
    # p1 opens a NodeClaim holding both reservations; p2 (zone a) joins it, so it keeps only cr-0c and gives cr-0b back;
    # p3 does not fit beside them and takes cr-0b.
    pods = [
        make_pod("p1", cpu="1200m"),
        make_pod("p2", cpu="500m", node_selector={"topology.kubernetes.io/zone": "us-west-2a"}),
        make_pod("p3", cpu="400m"),
    ]
    plans = solve(replace(make_input(pods, nodepools=[pool], types=types), packing="karpenter")).nodeclaims

    held = sorted((tuple(sorted(pod.key for pod in p.pods)), requirement(p, RESERVATION_ID)) for p in plans)
    assert held == [
        (("default/p1", "default/p2"), ("In", ("cr-0c",))),
        (("default/p3",), ("In", ("cr-0b",))),
    ]


def test_one_pod_holding_both_reservations_leaves_none_for_the_next() -> None:
    reservations = [
        odcr("cr-0b", count=1, zone="us-west-2b"),
        odcr("cr-0c", count=1, zone="us-west-2a", type_="c5.large"),
    ]
    types = with_reserved_offerings([C5, M5], reservations, zones=None, now=NOW)
    pool = make_nodepool(requirements=[capacity("reserved", "spot", "on-demand")])
    pods = [make_pod("p1", cpu="1500m"), make_pod("p2", cpu="1500m")]
    first, second = solve(replace(make_input(pods, nodepools=[pool], types=types), packing="karpenter")).nodeclaims

    assert requirement(first, RESERVATION_ID) == ("In", ("cr-0b", "cr-0c"))  # Karpenter holds them pessimistically
    assert requirement(second, RESERVATION_ID) == ("NotIn", ("cr-0b", "cr-0c"))


def test_a_reserved_only_nodepool_leaves_the_pods_beyond_the_count_unschedulable_and_says_why() -> None:
    types = with_reserved_offerings([C5, M5], [odcr("cr-0a", count=1)], zones=None, now=NOW)
    pool = make_nodepool(requirements=[capacity("reserved")])
    result = solve(
        make_input([make_pod("p1", cpu="1500m"), make_pod("p2", cpu="1500m")], nodepools=[pool], types=types)
    )

    [plan] = result.nodeclaims
    assert requirement(plan, RESERVATION_ID) == ("In", ("cr-0a",))
    [(pod, reason)] = result.unschedulable.items()
    assert pod in ("default/p1", "default/p2")
    assert "capacity reservations this pass has no slot left of" in reason
