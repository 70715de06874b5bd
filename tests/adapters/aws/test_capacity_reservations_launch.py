"""The EC2 provider and capacity reservations (moto with the embedded AWS's reservations): selector terms resolve
through DescribeCapacityReservations, reserved offerings appear on the reservation's type, a launch targets the
reservation through its own launch template and is labelled with it, a full reservation answers a capacity error
that zeroes its count (not the 3-minute cache), and other launches opt out of open ODCRs."""

from __future__ import annotations

import base64
from typing import TYPE_CHECKING, Any

import pytest
from ec2_support import nodeclass, seeded_provider

from nodesmith.adapters.aws.capacity_reservations import describe_capacity_reservations
from nodesmith.core.errors import InsufficientCapacityError
from nodesmith.core.ports import LaunchRequest
from nodesmith.sim.aws import SeededAws, write_price_table
from nodesmith.sim.aws_capacity_reservations import serve_capacity_reservations, set_interruptible

if TYPE_CHECKING:
    from collections.abc import Callable
    from pathlib import Path

    from nodesmith.adapters.aws.provider import Ec2CloudProvider
    from nodesmith.core.api.ec2nodeclass import EC2NodeClass
    from nodesmith.core.ports import LaunchResult

TYPES = ("m5.large", "c5.large", "t3.medium")
TERMS = [{"tags": {"team": "ml"}}]


@pytest.fixture(autouse=True)
def reservations_served() -> None:
    serve_capacity_reservations()


def reserve(ec2: Any, *, count: int, team: str = "ml", zone: str = "us-east-1b") -> str:
    answer = ec2.create_capacity_reservation(
        InstanceType="m5.large", InstancePlatform="Linux/UNIX", AvailabilityZone=zone, InstanceCount=count,
        InstanceMatchCriteria="targeted",
        TagSpecifications=[{"ResourceType": "capacity-reservation", "Tags": [{"Key": "team", "Value": team}]}],
    )  # fmt: skip
    return str(answer["CapacityReservation"]["CapacityReservationId"])


def provider(seeded: SeededAws, tmp_path: Path, *, gate: bool = True) -> Ec2CloudProvider:
    table = write_price_table(path=tmp_path / "prices.json", source=None)
    return seeded_provider(seeded, types=TYPES, price_table=table, reserved_capacity=gate)


def request(cloud: Ec2CloudProvider, nc: EC2NodeClass, name: str, capacity_types: set[str]) -> LaunchRequest:
    types = sorted(cloud.instance_types(nodeclass=nc), key=lambda it: it.cheapest_price() or 0.0)
    return LaunchRequest(
        nodeclaim_name=name, nodepool_name="default", nodeclass=nc, instance_types=tuple(types),
        capacity_types=frozenset(capacity_types), zones=frozenset({"us-east-1a", "us-east-1b", "us-east-1c"}),
        client_token=name,
    )  # fmt: skip


def template_data(ec2: Any, name: str) -> dict[str, Any]:
    versions = ec2.describe_launch_template_versions(LaunchTemplateName=name)["LaunchTemplateVersions"]
    return dict(versions[0]["LaunchTemplateData"])


def test_terms_select_by_tag_id_and_owner_and_skip_ended_reservations(seeded: SeededAws, ec2: Any) -> None:
    ml, web = reserve(ec2, count=2), reserve(ec2, count=1, team="web")
    found = describe_capacity_reservations(ec2=ec2, terms=TERMS, now=0.0)
    assert [(r.id, r.instance_type, r.zone, r.available_count) for r in found] == [(ml, "m5.large", "us-east-1b", 2)]
    both = describe_capacity_reservations(ec2=ec2, terms=[{"id": web}, {"tags": {"team": "*"}}], now=0.0)
    assert sorted(r.id for r in both) == sorted([ml, web])
    assert (
        describe_capacity_reservations(ec2=ec2, terms=[{"tags": {"team": "ml"}, "ownerID": "000000000000"}], now=0.0)
        == []
    )


def test_a_launch_goes_into_the_reservation_with_its_labels_and_template(
    seeded: SeededAws, ec2: Any, tmp_path: Path
) -> None:
    reservation = reserve(ec2, count=1)
    cloud = provider(seeded, tmp_path)
    nc = nodeclass(capacityReservationSelectorTerms=TERMS)
    m5 = next(it for it in cloud.instance_types(nodeclass=nc) if it.name == "m5.large")
    (offering,) = [o for o in m5.offerings if o.capacity_type == "reserved"]
    assert offering.available and offering.zone == "us-east-1b" and offering.reservation_id == reservation

    result = cloud.create(request=request(cloud, nc, "default-rsv01", {"reserved", "spot", "on-demand"}))
    assert (result.capacity_type, result.instance_type, result.zone) == ("reserved", "m5.large", "us-east-1b")
    assert (result.reservation_id, result.reservation_type) == (reservation, "default")
    data = template_data(ec2, result.launch_template_name)
    assert data["CapacityReservationSpecification"] == {
        "CapacityReservationPreference": "capacity-reservations-only",
        "CapacityReservationTarget": {"CapacityReservationId": reservation},
    }
    user_data = base64.b64decode(data["UserData"]).decode()
    assert "karpenter.sh/capacity-type=reserved" in user_data
    assert f"karpenter.k8s.aws/capacity-reservation-id={reservation}" in user_data
    assert "karpenter.k8s.aws/capacity-reservation-type=default" in user_data

    instance = cloud.get_instance(instance_id=result.instance_id)
    assert instance is not None
    assert (instance.capacity_type, instance.reservation_id, instance.reservation_type) == (
        "reserved",
        reservation,
        "default",
    )

    # the launch took the reservation's one slot: the offering is unavailable without describing again
    (after,) = [o for it in cloud.instance_types(nodeclass=nc) for o in it.offerings if o.capacity_type == "reserved"]
    assert not after.available and after.reservation_capacity == 0

    other = cloud.create(request=request(cloud, nc, "default-od001", {"reserved", "on-demand"}))
    assert other.capacity_type == "on-demand" and other.reservation_id == ""
    assert template_data(ec2, other.launch_template_name)["CapacityReservationSpecification"] == {
        "CapacityReservationPreference": "none"
    }


def test_a_launch_into_an_interruptible_odcr_is_labelled_interruptible(
    seeded: SeededAws, ec2: Any, tmp_path: Path
) -> None:
    reservation = reserve(ec2, count=1)
    set_interruptible(reservation)
    cloud = provider(seeded, tmp_path)
    nc = nodeclass(capacityReservationSelectorTerms=TERMS)

    result = cloud.create(request=request(cloud, nc, "default-rsv02", {"reserved", "on-demand"}))

    assert (result.capacity_type, result.reservation_id) == ("reserved", reservation)
    assert result.reservation_interruptible
    user_data = base64.b64decode(template_data(ec2, result.launch_template_name)["UserData"]).decode()
    assert "karpenter.k8s.aws/capacity-reservation-interruptible=true" in user_data


def test_a_full_reservation_is_a_capacity_error_that_zeroes_its_count(
    seeded: SeededAws, ec2: Any, tmp_path: Path
) -> None:
    reserve(ec2, count=1)
    nc = nodeclass(capacityReservationSelectorTerms=TERMS)
    elsewhere = provider(seeded, tmp_path)  # another container fills the reservation meanwhile
    cloud = provider(seeded, tmp_path)
    stale = request(cloud, nc, "default-rsv02", {"reserved", "on-demand"})
    assert elsewhere.create(request=request(elsewhere, nc, "default-rsv03", {"reserved"})).capacity_type == "reserved"

    with pytest.raises(InsufficientCapacityError) as failed:
        cloud.create(request=stale)
    assert [(o.instance_type, o.zone, o.capacity_type, o.code) for o in failed.value.offerings] == [
        ("m5.large", "us-east-1b", "reserved", "ReservationCapacityExceeded")
    ]
    assert not cloud.unavailable.keys()  # reserved launches stay out of the 3-minute cache
    (reserved,) = [
        o for it in cloud.instance_types(nodeclass=nc) for o in it.offerings if o.capacity_type == "reserved"
    ]
    assert not reserved.available


def test_with_the_gate_off_reservations_are_ignored_and_open_odcrs_allowed(
    seeded: SeededAws, ec2: Any, tmp_path: Path
) -> None:
    reserve(ec2, count=1)
    cloud = provider(seeded, tmp_path, gate=False)
    nc = nodeclass(capacityReservationSelectorTerms=TERMS)
    assert not [o for it in cloud.instance_types(nodeclass=nc) for o in it.offerings if o.capacity_type == "reserved"]
    result = cloud.create(request=request(cloud, nc, "default-od002", {"reserved", "on-demand"}))
    assert result.capacity_type == "on-demand"
    assert "CapacityReservationSpecification" not in template_data(ec2, result.launch_template_name)


class _LaunchMeanwhile:
    """The EC2 client, with another launch of the same container made while the first CreateFleet is on its way."""

    def __init__(self, ec2: Any, meanwhile: Callable[[], LaunchResult]) -> None:
        self._ec2, self._meanwhile = ec2, meanwhile
        self.during: list[LaunchResult] = []
        self._started = False

    def __getattr__(self, name: str) -> Any:
        return getattr(self._ec2, name)

    def create_fleet(self, **kwargs: Any) -> Any:
        if not self._started:
            self._started = True
            self.during.append(self._meanwhile())
        return self._ec2.create_fleet(**kwargs)


def test_launches_at_once_never_ask_a_reservation_for_more_than_it_has(
    seeded: SeededAws, ec2: Any, tmp_path: Path
) -> None:
    reservation = reserve(ec2, count=1)
    cloud = provider(seeded, tmp_path)
    nc = nodeclass(capacityReservationSelectorTerms=TERMS)
    first = request(cloud, nc, "default-rsv04", {"reserved", "on-demand"})
    second = request(cloud, nc, "default-rsv05", {"reserved", "on-demand"})
    client = _LaunchMeanwhile(cloud._ec2, lambda: cloud.create(request=second))
    cloud._ec2 = client

    result = cloud.create(request=first)

    (meanwhile,) = client.during
    assert (result.capacity_type, result.reservation_id) == ("reserved", reservation)
    assert meanwhile.capacity_type == "on-demand"  # the slot was held: no ReservationCapacityExceeded for either
