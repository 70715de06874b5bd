"""The embedded AWS's capacity reservations: DescribeCapacityReservations with Karpenter's filters, CreateFleet into
a targeted reservation until it is full (then ReservationCapacityExceeded, launching nothing), a terminated
instance giving its slot back, and Capacity Blocks."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from botocore.exceptions import ClientError

from nodesmith.sim import aws as embedded_aws
from nodesmith.sim.aws_capacity_reservations import add_capacity_block


def _odcr(ec2: Any, *, count: int, tags: dict[str, str] | None = None, zone: str = "us-east-1a") -> str:
    specs = [
        {"ResourceType": "capacity-reservation", "Tags": [{"Key": k, "Value": v} for k, v in (tags or {}).items()]}
    ]
    answer = ec2.create_capacity_reservation(
        InstanceType="m5.large",
        InstancePlatform="Linux/UNIX",
        AvailabilityZone=zone,
        InstanceCount=count,
        InstanceMatchCriteria="targeted",
        TagSpecifications=specs if tags else [],
    )
    return str(answer["CapacityReservation"]["CapacityReservationId"])


def _template(ec2: Any, name: str, reservation: str) -> str:
    image = embedded_aws.register_ami(name="amazon-eks-node-al2023-x86_64-standard-1.31-v20260101")
    data = {
        "ImageId": image,
        "CapacityReservationSpecification": {
            "CapacityReservationPreference": "capacity-reservations-only",
            "CapacityReservationTarget": {"CapacityReservationId": reservation},
        },
    }
    ec2.create_launch_template(LaunchTemplateName=name, LaunchTemplateData=data)
    return name


def _fleet(ec2: Any, template: str, *, kind: str = "on-demand", zone: str = "us-east-1a") -> dict[str, Any]:
    override = {"InstanceType": "m5.large", "AvailabilityZone": zone}
    answer: dict[str, Any] = ec2.create_fleet(
        Type="instant",
        TargetCapacitySpecification={"TotalTargetCapacity": 1, "DefaultTargetCapacityType": kind},
        LaunchTemplateConfigs=[
            {
                "LaunchTemplateSpecification": {"LaunchTemplateName": template, "Version": "$Latest"},
                "Overrides": [override],
            }
        ],
    )
    return answer


def _launched(answer: dict[str, Any]) -> list[str]:
    return [i for group in answer.get("Instances") or [] for i in group["InstanceIds"]]


def test_describe_filters_as_karpenter_sends_them(ec2: Any) -> None:
    team = _odcr(ec2, count=2, tags={"team": "ml"})
    other = _odcr(ec2, count=1, tags={"team": "web"})

    def ids(**kwargs: Any) -> list[str]:
        return [
            r["CapacityReservationId"] for r in ec2.describe_capacity_reservations(**kwargs)["CapacityReservations"]
        ]

    active = {"Name": "state", "Values": ["active"]}
    assert ids(Filters=[active, {"Name": "tag:team", "Values": ["ml"]}]) == [team]
    assert sorted(ids(Filters=[active, {"Name": "tag-key", "Values": ["team"]}])) == sorted([team, other])
    assert ids(CapacityReservationIds=[other]) == [other]
    assert ids(Filters=[{"Name": "owner-id", "Values": ["000000000000"]}]) == []
    found = ec2.describe_capacity_reservations(CapacityReservationIds=[team])["CapacityReservations"][0]
    assert (found["AvailableInstanceCount"], found["TotalInstanceCount"], found["ReservationType"]) == (2, 2, "default")
    with pytest.raises(ClientError, match="cr-0000000000000ffff"):
        ec2.describe_capacity_reservations(CapacityReservationIds=["cr-0000000000000ffff"])


def test_a_targeted_launch_fills_the_reservation_then_is_refused_until_an_instance_goes(ec2: Any) -> None:
    reservation = _odcr(ec2, count=1)
    template = _template(ec2, "reserved", reservation)

    first = _fleet(ec2, template)
    assert len(_launched(first)) == 1
    described = ec2.describe_instances(InstanceIds=_launched(first))["Reservations"][0]["Instances"][0]
    assert described["CapacityReservationId"] == reservation
    full = ec2.describe_capacity_reservations(CapacityReservationIds=[reservation])["CapacityReservations"][0]
    assert full["AvailableInstanceCount"] == 0

    refused = _fleet(ec2, template)
    assert _launched(refused) == []
    assert [e["ErrorCode"] for e in refused["Errors"]] == ["ReservationCapacityExceeded"]

    ec2.terminate_instances(InstanceIds=_launched(first))
    assert len(_launched(_fleet(ec2, template))) == 1


def test_a_launch_into_another_zone_than_the_reservation_is_refused(ec2: Any) -> None:
    template = _template(ec2, "reserved-b", _odcr(ec2, count=3, zone="us-east-1a"))
    refused = _fleet(ec2, template, zone="us-east-1b")
    assert _launched(refused) == [] and refused["Errors"][0]["ErrorCode"] == "ReservationCapacityExceeded"


def test_a_capacity_block_launches_with_its_own_capacity_type(ec2: Any) -> None:
    block = add_capacity_block(
        instance_type="m5.large", zone="us-east-1a", count=1, end=datetime.now(UTC) + timedelta(hours=2)
    )
    described = ec2.describe_capacity_reservations(
        Filters=[{"Name": "state", "Values": ["active"]}, {"Name": "reservation-type", "Values": ["capacity-block"]}]
    )["CapacityReservations"]
    assert [r["CapacityReservationId"] for r in described] == [block]
    assert described[0]["EndDate"] > datetime.now(UTC)
    launched = _launched(_fleet(ec2, _template(ec2, "block", block), kind="capacity-block"))
    assert len(launched) == 1
    described = ec2.describe_instances(InstanceIds=launched)["Reservations"][0]["Instances"][0]
    assert (described["CapacityReservationId"], described["InstanceLifecycle"]) == (block, "capacity-block")
