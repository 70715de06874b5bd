"""Reserved offerings as Karpenter's AWS provider makes them: one per (type, reservation), priced at the on-demand price
/ 1e7, available while the reservation has room and is not an expiring Capacity Block; chosen before spot and
on-demand when the NodePool allows ``reserved``; narrowed by the capacity-reservation labels; and the launch
filters (one partition, one capacity block, one reservation per zone)."""

from __future__ import annotations

from scheduling_support import make_input, make_nodepool, make_pod, make_type

from nodesmith.core.capacityreservations import (
    CAPACITY_BLOCK_EXPIRATION_SECONDS,
    CapacityReservation,
    expiring_reservation_ids,
    reservation_labels,
    reserved_offerings,
    select_reserved_for_launch,
    with_reserved_offerings,
)
from nodesmith.core.model import Offering
from nodesmith.core.scheduling import solve

NOW = 1_800_000_000.0
M5 = make_type("m5.large", 2, 8, pods=29, od_price=0.096)
C5 = make_type("c5.large", 2, 4, pods=29, od_price=0.085)
ALL_TYPES = {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["reserved", "spot", "on-demand"]}


def odcr(
    rid: str = "cr-0a", *, count: int = 2, zone: str = "us-west-2b", type_: str = "m5.large"
) -> CapacityReservation:
    return CapacityReservation(id=rid, instance_type=type_, zone=zone, owner_id="123456789012", available_count=count)


def block(rid: str, *, end: float, count: int = 1) -> CapacityReservation:
    return CapacityReservation(
        id=rid, instance_type="m5.large", zone="us-west-2a", available_count=count, reservation_type="capacity-block",
        end_time=end,
    )  # fmt: skip


def test_one_offering_per_reservation_at_the_on_demand_price_over_ten_million() -> None:
    (offering,) = reserved_offerings(M5, [odcr(), odcr("cr-0c", type_="c5.large")], zones=None, now=NOW)
    assert offering.capacity_type == "reserved"
    assert offering.zone == "us-west-2b" and offering.reservation_id == "cr-0a"
    assert offering.price == 0.096 / 10_000_000
    assert offering.available and offering.reservation_capacity == 2
    assert offering.reservation_type == "default"


def test_a_full_reservation_a_zone_the_nodeclass_lacks_and_an_expiring_block_are_unavailable() -> None:
    (full,) = reserved_offerings(M5, [odcr(count=0)], zones=None, now=NOW)
    (elsewhere,) = reserved_offerings(M5, [odcr()], zones={"us-west-2a"}, now=NOW)
    end = NOW + CAPACITY_BLOCK_EXPIRATION_SECONDS
    (expiring,) = reserved_offerings(M5, [block("cr-0b", end=end)], zones=None, now=NOW)
    (early,) = reserved_offerings(M5, [block("cr-0b", end=end + 1)], zones=None, now=NOW)
    assert not full.available and not elsewhere.available and not expiring.available
    assert early.available and early.reservation_type == "capacity-block"
    assert expiring_reservation_ids([block("cr-0b", end=end), block("cr-0d", end=end + 1), odcr()], now=NOW) == {
        "cr-0b"
    }


def test_reserved_is_chosen_first_when_the_nodepool_allows_it() -> None:
    types = with_reserved_offerings([C5, M5], [odcr()], zones=None, now=NOW)
    pool = make_nodepool(requirements=[ALL_TYPES])
    (nc,) = solve(make_input([make_pod(cpu="1")], nodepools=[pool], types=types)).nodeclaims
    assert nc.instance_types[0].name == "m5.large"  # dearer on demand than c5.large, but reserved
    assert nc.price_per_hour == 0.096 / 10_000_000
    assert "reserved" in nc.capacity_types


def test_a_nodepool_without_reserved_ignores_reservations() -> None:
    types = with_reserved_offerings([C5, M5], [odcr()], zones=None, now=NOW)
    pool = make_nodepool(requirements=[{"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["spot"]}])
    (nc,) = solve(make_input([make_pod(cpu="1")], nodepools=[pool], types=types)).nodeclaims
    assert nc.instance_types[0].name == "c5.large"
    assert nc.capacity_types == frozenset({"spot"})


def test_a_reservation_id_requirement_keeps_only_that_reservations_offerings() -> None:
    types = with_reserved_offerings([C5, M5], [odcr()], zones=None, now=NOW)
    wants_it = {"key": "karpenter.k8s.aws/capacity-reservation-id", "operator": "In", "values": ["cr-0a"]}
    pool = make_nodepool(requirements=[ALL_TYPES, wants_it])
    (nc,) = solve(make_input([make_pod(cpu="1")], nodepools=[pool], types=types)).nodeclaims
    assert [t.name for t in nc.instance_types] == ["m5.large"]
    assert nc.capacity_types == frozenset({"reserved"}) and nc.zones == frozenset({"us-west-2b"})

    shuns = {"key": "karpenter.k8s.aws/capacity-reservation-id", "operator": "DoesNotExist"}
    (other,) = solve(
        make_input([make_pod(cpu="1")], nodepools=[make_nodepool(requirements=[ALL_TYPES, shuns])], types=types)
    ).nodeclaims
    assert "reserved" not in other.capacity_types


def test_labels_of_a_reserved_offering_only() -> None:
    (offering,) = reserved_offerings(M5, [block("cr-0b", end=NOW + 7200)], zones=None, now=NOW)
    assert reservation_labels(
        reservation_id=offering.reservation_id,
        reservation_type=offering.reservation_type,
        interruptible=offering.reservation_interruptible,
    ) == {
        "karpenter.k8s.aws/capacity-reservation-id": "cr-0b",
        "karpenter.k8s.aws/capacity-reservation-type": "capacity-block",
        "karpenter.k8s.aws/capacity-reservation-interruptible": "false",
    }
    assert reservation_labels(reservation_id="", reservation_type="", interruptible=False) == {}


def test_an_interruptible_odcr_is_offered_and_labelled_as_one() -> None:
    shared = CapacityReservation(
        id="cr-0i", instance_type="m5.large", zone="us-west-2b", owner_id="123456789012", available_count=1,
        interruptible=True,
    )  # fmt: skip
    (offering,) = reserved_offerings(M5, [shared], zones=None, now=NOW)
    labels = reservation_labels(
        reservation_id=offering.reservation_id, reservation_type=offering.reservation_type, interruptible=True
    )
    assert offering.reservation_interruptible and offering.available
    assert labels["karpenter.k8s.aws/capacity-reservation-interruptible"] == "true"


def test_an_interruptible_requirement_narrows_to_the_reservations_that_match_it() -> None:
    """On-demand and spot offerings have no capacity-reservation labels (Karpenter's base offerings require them
    not to exist): requiring ``-interruptible`` keeps only reserved offerings whose value matches."""
    firm = odcr("cr-0a")
    shared = CapacityReservation(
        id="cr-0i", instance_type="c5.large", zone="us-west-2a", owner_id="123456789012", available_count=1,
        interruptible=True,
    )  # fmt: skip
    types = with_reserved_offerings([C5, M5], [firm, shared], zones=None, now=NOW)

    def solved(values: list[str], operator: str = "In") -> list[tuple[str, frozenset[str]]]:
        wants = {"key": "karpenter.k8s.aws/capacity-reservation-interruptible", "operator": operator, "values": values}
        pool = make_nodepool(requirements=[ALL_TYPES, wants])
        out = solve(make_input([make_pod(cpu="1")], nodepools=[pool], types=types))
        return [(nc.instance_types[0].name, nc.capacity_types) for nc in out.nodeclaims]

    assert solved(["false"]) == [("m5.large", frozenset({"reserved"}))]
    assert solved(["true"]) == [("c5.large", frozenset({"reserved"}))]
    ((name, kinds),) = solved(["true"], operator="NotIn")  # the firm reservation, or capacity outside any
    assert "reserved" in kinds and name == "m5.large"


def _reserved(rid: str, *, zone: str, price: float, capacity: int, kind: str = "default") -> Offering:
    return Offering(
        zone=zone, capacity_type="reserved", price=price, reservation_id=rid, reservation_type=kind,
        reservation_capacity=capacity,
    )  # fmt: skip


def test_launch_keeps_one_partition_one_block_and_one_reservation_per_zone() -> None:
    small = _reserved("cr-1", zone="a", price=1e-8, capacity=1)
    large = _reserved("cr-2", zone="a", price=2e-8, capacity=5)
    other_zone = _reserved("cr-3", zone="b", price=3e-8, capacity=1)
    dear_block = _reserved("cr-4", zone="c", price=9e-8, capacity=9, kind="capacity-block")
    picked = select_reserved_for_launch([("m5.large", small), ("m5.xlarge", large), ("m5.large", other_zone),
                                         ("p5.48xlarge", dear_block), ("m5.large", M5.offerings[0])])  # fmt: skip
    assert [o.reservation_id for _, o in picked] == ["cr-2", "cr-3"]  # default partition; most capacity in zone a

    cheap_block = _reserved("cr-5", zone="c", price=1e-9, capacity=1, kind="capacity-block")
    block_b = _reserved("cr-6", zone="b", price=2e-9, capacity=1, kind="capacity-block")
    picked = select_reserved_for_launch([("m5.large", small), ("p5", cheap_block), ("p5", block_b)])
    assert [o.reservation_id for _, o in picked] == ["cr-5"]  # cheapest partition; one block only
