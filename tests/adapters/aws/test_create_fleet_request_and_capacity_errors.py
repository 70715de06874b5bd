"""The CreateFleet request has Karpenter's exact shape, and capacity errors become InsufficientCapacityError.

moto never answers capacity errors, so CreateFleet is stubbed with botocore's Stubber; the node class
and the launch templates are fixed so only the fleet call reaches the (stubbed) EC2 client.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

import boto3
import pytest
from botocore.stub import ANY, Stubber
from ec2_support import CLUSTER, ec2_provider

from nodesmith.adapters.aws.config import Clocks
from nodesmith.adapters.aws.fleet import (
    FleetChoice,
    Override,
    build_create_fleet_request,
    choose_offerings,
    client_token,
)
from nodesmith.adapters.aws.nodeclass import Image, ResolvedNodeClass, SecurityGroup, Subnet
from nodesmith.core.errors import InsufficientCapacityError, LaunchError, UnavailableOffering
from nodesmith.core.model import InstanceType, Offering, Taint
from nodesmith.core.ports import LaunchRequest

if TYPE_CHECKING:
    from nodesmith.adapters.aws.provider import Ec2CloudProvider

ZONES = ("us-east-1a", "us-east-1b", "us-east-1c")
SUBNETS = {"us-east-1a": "subnet-aaa", "us-east-1b": "subnet-bbb", "us-east-1c": "subnet-ccc"}


def instance_type(
    name: str, *, spot: dict[str, float], on_demand: float, arch: str = "amd64", **capacity: int
) -> InstanceType:
    offerings = [
        Offering(zone=z, capacity_type="spot", price=p, zone_id=f"use1-az{i}") for i, (z, p) in enumerate(spot.items())
    ]
    offerings += [Offering(zone=z, capacity_type="on-demand", price=on_demand) for z in ZONES]
    return InstanceType(
        name=name,
        labels={"kubernetes.io/arch": arch, "karpenter.k8s.aws/instance-size": name.split(".")[1]},
        capacity={"cpu": 2000, "memory": 8 * 2**30, "pods": 29, **capacity},
        overhead={},
        offerings=tuple(offerings),
    )


C5 = instance_type("c5.large", spot={"us-east-1a": 0.030, "us-east-1b": 0.032, "us-east-1c": 0.029}, on_demand=0.085)
M5 = instance_type("m5.large", spot={"us-east-1a": 0.036, "us-east-1b": 0.034}, on_demand=0.096)
R5 = instance_type("r5.large", spot={"us-east-1a": 0.200}, on_demand=0.126)  # spot pricier than on-demand: dropped
G4 = instance_type("g4dn.xlarge", spot={"us-east-1a": 0.020}, on_demand=0.526, **{"nvidia.com/gpu": 1})  # exotic
M7G = instance_type("m7g.large", spot={"us-east-1a": 0.031}, on_demand=0.0816, arch="arm64")

RESOLVED = ResolvedNodeClass(
    name="default",
    subnets={
        z: Subnet(id=s, zone=z, zone_id=f"use1-az{i}", available_ips=100) for i, (z, s) in enumerate(SUBNETS.items())
    },
    security_groups=(SecurityGroup(id="sg-111", name="nodes"),),
    images=(
        Image(id="ami-amd", arch="amd64", variant="standard"),
        Image(id="ami-gpu", arch="amd64", variant="nvidia"),
        Image(id="ami-arm", arch="arm64", variant="standard"),
    ),
    instance_profile="NodeProfile",
    spec={"amiFamily": "AL2023", "tags": {"team": "payments"}},
)


class Token:
    """Matches a ClientToken derived from ``base`` (base + 16 hex digest, at most 64 characters)."""

    def __init__(self, base: str) -> None:
        self.pattern = re.compile(re.escape(base) + r"-[0-9a-f]{16}")
        self.seen: list[str] = []

    def __eq__(self, other: object) -> bool:
        self.seen.append(str(other))
        return isinstance(other, str) and len(other) <= 64 and bool(self.pattern.fullmatch(other))

    def __hash__(self) -> int:
        return 0


@pytest.fixture
def ec2() -> Any:
    return boto3.client("ec2", region_name="us-east-1", aws_access_key_id="x", aws_secret_access_key="x")


@pytest.fixture
def provider(ec2: Any) -> Ec2CloudProvider:
    return ec2_provider(ec2=ec2, clocks=Clocks(monotonic=lambda: 0.0), resolved=RESOLVED)


def launch_request(*types: InstanceType, capacity_types: tuple[str, ...] = ("spot", "on-demand")) -> LaunchRequest:
    return LaunchRequest(
        nodeclaim_name="default-x7k2p",
        nodepool_name="default",
        nodeclass=object(),  # resolution is fixed above
        instance_types=types,
        capacity_types=frozenset(capacity_types),
        zones=frozenset({"us-east-1a", "us-east-1b"}),
        labels={"team": "payments"},
        taints=(Taint(key="dedicated", value="payments", effect="NoSchedule"),),
        client_token="default-x7k2p",
    )


TAGS = [
    {"Key": "Name", "Value": "default-x7k2p"},
    {"Key": "eks:eks-cluster-name", "Value": CLUSTER},
    {"Key": "karpenter.k8s.aws/ec2nodeclass", "Value": "default"},
    {"Key": "karpenter.sh/nodeclaim", "Value": "default-x7k2p"},
    {"Key": "karpenter.sh/nodepool", "Value": "default"},
    {"Key": f"kubernetes.io/cluster/{CLUSTER}", "Value": "owned"},
    {"Key": "team", "Value": "payments"},
]


def override(instance_type: str, zone: str, price: float, image: str = "ami-amd") -> dict[str, Any]:
    return {
        "InstanceType": instance_type,
        "SubnetId": SUBNETS[zone],
        "ImageId": image,
        "AvailabilityZone": zone,
        "Priority": price,
    }


def launched(instance_type: str, zone: str, lifecycle: str = "spot", image: str = "ami-amd") -> dict[str, Any]:
    return {
        "FleetId": "fleet-1",
        "Errors": [],
        "Instances": [
            {
                "InstanceIds": ["i-0abc"],
                "InstanceType": instance_type,
                "Lifecycle": lifecycle,
                "LaunchTemplateAndOverrides": {
                    "LaunchTemplateSpecification": {
                        "LaunchTemplateName": f"nodesmith/{CLUSTER}/{image}",
                        "Version": "1",
                    },
                    "Overrides": {
                        "InstanceType": instance_type,
                        "SubnetId": SUBNETS[zone],
                        "AvailabilityZone": zone,
                        "ImageId": image,
                    },
                },
            }
        ],
    }


def capacity_error(instance_type: str, zone: str, code: str, lifecycle: str = "spot") -> dict[str, Any]:
    return {
        "LaunchTemplateAndOverrides": {
            "Overrides": {"InstanceType": instance_type, "SubnetId": SUBNETS[zone], "AvailabilityZone": zone}
        },
        "Lifecycle": lifecycle,
        "ErrorCode": code,
        "ErrorMessage": "There is no Spot capacity available that matches your request.",
    }


def test_spot_request_shape_is_exact(provider: Ec2CloudProvider, ec2: Any) -> None:
    expected = {
        "Type": "instant",
        "ClientToken": Token("default-x7k2p"),
        "TargetCapacitySpecification": {"TotalTargetCapacity": 1, "DefaultTargetCapacityType": "spot"},
        "SpotOptions": {"AllocationStrategy": "price-capacity-optimized"},
        "LaunchTemplateConfigs": [
            {
                "LaunchTemplateSpecification": {
                    "LaunchTemplateName": f"nodesmith/{CLUSTER}/ami-amd",
                    "Version": "$Latest",
                },
                # cheapest type first, one subnet per requested zone, Priority = USD/hour
                "Overrides": [
                    override("c5.large", "us-east-1a", 0.030),
                    override("c5.large", "us-east-1b", 0.032),
                    override("m5.large", "us-east-1b", 0.034),
                    override("m5.large", "us-east-1a", 0.036),
                ],
            }
        ],
        "TagSpecifications": [{"ResourceType": r, "Tags": TAGS} for r in ("instance", "volume", "fleet")],
    }
    with Stubber(ec2) as stub:
        stub.add_response("create_fleet", launched("c5.large", "us-east-1a"), expected)
        result = provider.create(request=launch_request(M5, R5, G4, C5))
        stub.assert_no_pending_responses()
    assert (result.instance_id, result.instance_type, result.zone, result.capacity_type) == (
        "i-0abc",
        "c5.large",
        "us-east-1a",
        "spot",
    )
    assert result.price == 0.030
    assert result.image_id == "ami-amd"
    assert result.provider_id == "aws:///us-east-1a/i-0abc"
    # The launch template was rendered for spot with the NodeClaim's labels and taints.
    spec = provider.launch_templates.specs[0]  # type: ignore[attr-defined]
    assert spec.capacity_type == "spot"
    assert "karpenter.sh/capacity-type=spot" in spec.user_data
    assert "team=payments" in spec.user_data
    assert "key: dedicated" in spec.user_data


def test_on_demand_uses_lowest_price_and_one_template_per_ami(provider: Ec2CloudProvider, ec2: Any) -> None:
    expected = {
        "Type": "instant",
        "ClientToken": Token("default-x7k2p"),
        "TargetCapacitySpecification": {"TotalTargetCapacity": 1, "DefaultTargetCapacityType": "on-demand"},
        "OnDemandOptions": {"AllocationStrategy": "lowest-price"},
        "LaunchTemplateConfigs": [
            {
                "LaunchTemplateSpecification": {
                    "LaunchTemplateName": f"nodesmith/{CLUSTER}/ami-arm",
                    "Version": "$Latest",
                },
                "Overrides": [
                    override("m7g.large", "us-east-1a", 0.0816, "ami-arm"),
                    override("m7g.large", "us-east-1b", 0.0816, "ami-arm"),
                ],
            },
            {
                "LaunchTemplateSpecification": {
                    "LaunchTemplateName": f"nodesmith/{CLUSTER}/ami-amd",
                    "Version": "$Latest",
                },
                "Overrides": [override("c5.large", "us-east-1a", 0.085), override("c5.large", "us-east-1b", 0.085)],
            },
        ],
        "TagSpecifications": [{"ResourceType": r, "Tags": TAGS} for r in ("instance", "volume", "fleet")],
    }
    with Stubber(ec2) as stub:
        stub.add_response("create_fleet", launched("m7g.large", "us-east-1b", "on-demand", "ami-arm"), expected)
        result = provider.create(request=launch_request(C5, M7G, capacity_types=("on-demand",)))
    assert (result.capacity_type, result.price, result.image_id) == ("on-demand", 0.0816, "ami-arm")


def test_capacity_errors_raise_insufficient_capacity_and_steer_the_next_launch(
    provider: Ec2CloudProvider, ec2: Any
) -> None:
    errors = {
        "FleetId": "fleet-1",
        "Instances": [],
        "Errors": [
            capacity_error("c5.large", "us-east-1a", "InsufficientInstanceCapacity"),
            capacity_error("c5.large", "us-east-1b", "UnfulfillableCapacity"),
            capacity_error("m5.large", "us-east-1b", "MaxSpotInstanceCountExceeded"),
            capacity_error("m5.large", "us-east-1a", "InsufficientInstanceCapacity"),
        ],
    }
    with Stubber(ec2) as stub:
        stub.add_response("create_fleet", errors, None)
        with pytest.raises(InsufficientCapacityError) as info:
            provider.create(request=launch_request(C5, M5))
        assert set(info.value.offerings) == {
            UnavailableOffering("c5.large", "us-east-1a", "spot", "InsufficientInstanceCapacity"),
            UnavailableOffering("c5.large", "us-east-1b", "spot", "UnfulfillableCapacity"),
            UnavailableOffering("m5.large", "us-east-1b", "spot", "MaxSpotInstanceCountExceeded"),
            UnavailableOffering("m5.large", "us-east-1a", "spot", "InsufficientInstanceCapacity"),
        }
        # Every spot offering is now unavailable for 3 minutes: the retry asks for on-demand.
        on_demand_retry = {
            "Type": "instant",
            "ClientToken": ANY,
            "TargetCapacitySpecification": {"TotalTargetCapacity": 1, "DefaultTargetCapacityType": "on-demand"},
            "OnDemandOptions": {"AllocationStrategy": "lowest-price"},
            "LaunchTemplateConfigs": ANY,
            "TagSpecifications": ANY,
        }
        stub.add_response("create_fleet", launched("c5.large", "us-east-1a", "on-demand"), on_demand_retry)
        result = provider.create(request=launch_request(C5, M5))
        stub.assert_no_pending_responses()
    assert result.capacity_type == "on-demand"
    assert provider.unavailable.keys() == {
        ("c5.large", "us-east-1a", "spot"),
        ("c5.large", "us-east-1b", "spot"),
        ("m5.large", "us-east-1a", "spot"),
        ("m5.large", "us-east-1b", "spot"),
    }


def test_unavailable_offerings_expire_after_three_minutes(ec2: Any) -> None:
    now = [0.0]
    cloud = ec2_provider(ec2=ec2, clocks=Clocks(monotonic=lambda: now[0]))
    cloud.mark_unavailable(
        offerings=[UnavailableOffering("c5.large", "us-east-1a", "spot", "InsufficientInstanceCapacity")]
    )
    assert cloud.unavailable.is_unavailable("c5.large", "us-east-1a", "spot")
    assert not cloud.unavailable.is_unavailable("c5.large", "us-east-1a", "on-demand")
    now[0] += 179
    assert cloud.unavailable.keys() == frozenset({("c5.large", "us-east-1a", "spot")})
    now[0] += 2
    assert not cloud.unavailable.is_unavailable("c5.large", "us-east-1a", "spot")
    assert cloud.unavailable.keys() == frozenset()


def test_other_fleet_errors_are_launch_errors_but_capacity_ones_are_still_remembered(
    provider: Ec2CloudProvider, ec2: Any
) -> None:
    mixed = {
        "Instances": [],
        "Errors": [
            capacity_error("c5.large", "us-east-1a", "InsufficientInstanceCapacity"),
            {**capacity_error("c5.large", "us-east-1b", "InvalidParameterValue"), "ErrorMessage": "bad AMI"},
        ],
    }
    with Stubber(ec2) as stub:
        stub.add_response("create_fleet", mixed, None)
        with pytest.raises(LaunchError) as info:
            provider.create(request=launch_request(C5))
        assert info.value.code == "InvalidParameterValue"
        assert "bad AMI" in str(info.value)
        assert provider.unavailable.is_unavailable("c5.large", "us-east-1a", "spot")
        stub.add_client_error("create_fleet", service_error_code="UnauthorizedOperation", http_status_code=403)
        with pytest.raises(LaunchError) as denied:
            provider.create(request=launch_request(C5))
        assert denied.value.code == "UnauthorizedOperation"


def test_nothing_launchable_raises_without_calling_ec2(provider: Ec2CloudProvider, ec2: Any) -> None:
    far_away = instance_type("c5.large", spot={"us-east-1c": 0.03}, on_demand=0.085)
    with Stubber(ec2) as stub:  # no response queued: a CreateFleet call would fail differently
        with pytest.raises(InsufficientCapacityError, match="no available offering"):
            provider.create(request=launch_request(far_away, capacity_types=("spot",)))
        stub.assert_no_pending_responses()


def test_at_most_sixty_cheapest_types_go_into_one_fleet() -> None:
    types = [instance_type(f"t{i}.large", spot={"us-east-1a": 1.0 + i / 100}, on_demand=5.0) for i in range(80)]
    choice = choose_offerings(
        instance_types=list(reversed(types)),
        capacity_types=frozenset({"spot"}),
        zones=frozenset({"us-east-1a"}),
        subnets=SUBNETS,
        image_for=lambda _it: "ami-amd",
    )
    assert choice is not None
    assert [o.instance_type for o in choice.overrides] == [f"t{i}.large" for i in range(60)]


def test_gpu_types_are_used_when_nothing_else_fits_and_get_the_nvidia_ami() -> None:
    choice = choose_offerings(
        instance_types=[G4],
        capacity_types=frozenset({"spot", "on-demand"}),
        zones=frozenset({"us-east-1a"}),
        subnets=SUBNETS,
        image_for=lambda it: img.id if (img := RESOLVED.compatibility.image_for(it)) else None,
    )
    assert choice == FleetChoice(
        capacity_type="spot", overrides=(Override("g4dn.xlarge", "us-east-1a", "subnet-aaa", "ami-gpu", 0.020),)
    )


def test_client_token_is_stable_for_the_same_request_and_fresh_for_a_different_one() -> None:
    a = FleetChoice("spot", (Override("c5.large", "us-east-1a", "subnet-aaa", "ami-amd", 0.03),))
    b = FleetChoice("on-demand", (Override("c5.large", "us-east-1a", "subnet-aaa", "ami-amd", 0.085),))
    assert client_token(base="nc-1", choice=a) == client_token(base="nc-1", choice=a)
    assert client_token(base="nc-1", choice=a) != client_token(base="nc-1", choice=b)
    assert len(client_token(base="x" * 200, choice=a)) <= 64


def test_spot_left_only_above_the_cheapest_on_demand_launches_on_demand() -> None:
    # c5.large's spot offerings hit capacity errors; the spot left (r5.large, 0.200) costs more than on-demand
    # c5.large (0.085): Karpenter filters such spot out before it picks the capacity type, so it launches on-demand
    choice = choose_offerings(
        instance_types=[C5, R5],
        capacity_types=frozenset({"spot", "on-demand"}),
        zones=frozenset(ZONES),
        subnets=SUBNETS,
        image_for=lambda _it: "ami-amd",
        unavailable=lambda t, _z, c: t == "c5.large" and c == "spot",
    )
    assert choice is not None and choice.capacity_type == "on-demand"
    assert choice.overrides[0] == Override("c5.large", "us-east-1a", "subnet-aaa", "ami-amd", 0.085)


def _with_reserved(it: InstanceType, *offerings: Offering) -> InstanceType:
    return InstanceType(it.name, it.labels, it.capacity, it.overhead, it.offerings + offerings)


def test_a_capacity_block_launch_asks_for_capacity_block_through_the_cheapest_block_only() -> None:
    def block(rid: str, zone: str, price: float) -> Offering:
        return Offering(zone=zone, capacity_type="reserved", price=price, reservation_id=rid,
                        reservation_type="capacity-block", reservation_capacity=4)  # fmt: skip

    gpu = _with_reserved(G4, block("cr-0b1", "us-east-1a", 5e-8), block("cr-0b2", "us-east-1b", 6e-8))
    choice = choose_offerings(
        instance_types=[C5, gpu], capacity_types=frozenset({"reserved", "spot", "on-demand"}), zones=frozenset(ZONES),
        subnets=SUBNETS, image_for=lambda _it: "ami-amd",
    )  # fmt: skip
    assert choice is not None and choice.capacity_type == "reserved"
    assert [(o.instance_type, o.zone, o.reservation_id) for o in choice.overrides] == [
        ("g4dn.xlarge", "us-east-1a", "cr-0b1")  # reserved before the cheaper non-GPU spot; one block only
    ]
    request = build_create_fleet_request(
        choice=choice, launch_templates={("ami-amd", "cr-0b1"): "nodesmith/test/block"}, tags={}, token="t"
    )
    assert request["TargetCapacitySpecification"]["DefaultTargetCapacityType"] == "capacity-block"
    assert "OnDemandOptions" not in request and "SpotOptions" not in request

    odcr = Offering(zone="us-east-1c", capacity_type="reserved", price=1e-8, reservation_id="cr-0d",
                    reservation_type="default", reservation_capacity=1)  # fmt: skip
    choice = choose_offerings(
        instance_types=[_with_reserved(M5, odcr)], capacity_types=frozenset({"reserved", "spot"}),
        zones=frozenset(ZONES), subnets=SUBNETS, image_for=lambda _it: "ami-amd",
        unavailable=lambda t, z, c: (t, z, c) == ("m5.large", "us-east-1c", "reserved"),
    )  # fmt: skip
    assert choice is not None and choice.capacity_type == "spot"  # the reservation failed in this pass: spot
