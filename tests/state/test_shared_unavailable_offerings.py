"""The unavailable-offerings cache is shared through the state table: capacity errors that CreateFleet
answers in one Lambda container (stubbed with botocore's Stubber: moto never returns them) steer the
catalogue of another container for three minutes, and a broken state table never breaks a launch."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import boto3
import pytest
from botocore.stub import Stubber

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "adapters" / "aws"))

from ec2_support import ec2_provider

from nodesmith.adapters.aws.config import Clocks
from nodesmith.adapters.aws.nodeclass import Image, ResolvedNodeClass, SecurityGroup, Subnet
from nodesmith.adapters.aws.state import DynamoStateStore
from nodesmith.core.errors import InsufficientCapacityError
from nodesmith.core.model import InstanceType, Offering
from nodesmith.core.ports import LaunchRequest

if TYPE_CHECKING:
    from nodesmith.adapters.aws.provider import Ec2CloudProvider

SUBNETS = {"us-east-1a": "subnet-aaa", "us-east-1b": "subnet-bbb"}
RESOLVED = ResolvedNodeClass(
    name="default",
    subnets={
        z: Subnet(id=s, zone=z, zone_id=f"use1-az{i}", available_ips=100) for i, (z, s) in enumerate(SUBNETS.items())
    },
    security_groups=(SecurityGroup(id="sg-111", name="nodes"),),
    images=(Image(id="ami-amd", arch="amd64", variant="standard"),),
    instance_profile="NodeProfile",
    spec={},
)
C5 = InstanceType(
    name="c5.large",
    labels={"kubernetes.io/arch": "amd64"},
    capacity={"cpu": 2000, "memory": 4 * 2**30, "pods": 29},
    overhead={},
    offerings=tuple(
        Offering(zone=z, capacity_type=ct, price=p) for z in SUBNETS for ct, p in (("spot", 0.03), ("on-demand", 0.085))
    ),
)


class Wall:
    def __init__(self, t: float) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


def provider(*, ec2: Any, state: Any, wall: Wall, mono: list[float]) -> Ec2CloudProvider:
    return ec2_provider(ec2=ec2, state=state, clocks=Clocks(monotonic=lambda: mono[0], wall=wall), resolved=RESOLVED)


def ice(zone: str) -> dict[str, Any]:
    return {
        "LaunchTemplateAndOverrides": {
            "Overrides": {"InstanceType": "c5.large", "SubnetId": SUBNETS[zone], "AvailabilityZone": zone}
        },
        "Lifecycle": "spot",
        "ErrorCode": "InsufficientInstanceCapacity",
        "ErrorMessage": "There is no Spot capacity available that matches your request.",
    }


def request() -> LaunchRequest:
    return LaunchRequest(
        nodeclaim_name="default-x7k2p",
        nodepool_name="default",
        nodeclass=object(),  # type: ignore[arg-type]  # resolution is fixed above
        instance_types=(C5,),
        capacity_types=frozenset({"spot"}),
        zones=frozenset(SUBNETS),
        client_token="default-x7k2p",
    )


def spot_availability(cloud: Ec2CloudProvider) -> dict[str, bool]:
    c5 = next(it for it in cloud.instance_types() if it.name == "c5.large")
    return {o.zone: o.available for o in c5.offerings if o.capacity_type == "spot" and o.zone in SUBNETS}


def test_capacity_errors_in_one_container_steer_the_catalogue_of_another(table: str) -> None:
    wall = Wall(1_795_327_200.0)
    store = DynamoStateStore(table_name=table, region="us-east-1")
    stubbed = boto3.client("ec2", region_name="us-east-1")
    launcher = provider(ec2=stubbed, state=store, wall=wall, mono=[0.0])
    with Stubber(stubbed) as stub:
        stub.add_response("create_fleet", {"FleetId": "fleet-1", "Instances": [], "Errors": [ice("us-east-1a")]}, None)
        with pytest.raises(InsufficientCapacityError):
            launcher.create(request=request())
    assert [(m.instance_type, m.zone, m.capacity_type, m.reason) for m in store.list_unavailable(now=wall())] == [
        ("c5.large", "us-east-1a", "spot", "InsufficientInstanceCapacity")
    ]

    # Another container (fresh in-memory cache, its own monotonic clock) reads the catalogue from EC2 (moto).
    mono = [5_000.0]
    other = provider(ec2=boto3.client("ec2", region_name="us-east-1"), state=store, wall=wall, mono=mono)
    assert spot_availability(other) == {"us-east-1a": False, "us-east-1b": True}
    assert other.unavailable.is_unavailable("c5.large", "us-east-1a", "spot")  # create() avoids it too

    # Three minutes later the mark is gone everywhere (the in-memory copy expires with it).
    wall.t += 181
    mono[0] += 181
    assert spot_availability(other) == {"us-east-1a": True, "us-east-1b": True}
    assert spot_availability(provider(ec2=other._ec2, state=store, wall=wall, mono=[0.0])) == {
        "us-east-1a": True,
        "us-east-1b": True,
    }


def test_a_spot_interruption_mark_is_shared_with_its_remaining_lifetime(table: str) -> None:
    wall = Wall(1_795_327_200.0)
    store = DynamoStateStore(table_name=table, region="us-east-1")
    store.mark_unavailable(
        instance_type="c5.large",
        zone="us-east-1b",
        capacity_type="spot",
        expires_at=wall() + 60,
        reason="SpotInterruption",
    )
    mono = [0.0]
    cloud = provider(ec2=boto3.client("ec2", region_name="us-east-1"), state=store, wall=wall, mono=mono)
    assert spot_availability(cloud) == {"us-east-1a": True, "us-east-1b": False}
    mono[0] += 61  # the local copy keeps only the 60 s left, not a fresh 3 minutes
    assert not cloud.unavailable.is_unavailable("c5.large", "us-east-1b", "spot")


class BrokenStore:
    def mark_unavailable(self, **_: Any) -> None:
        raise RuntimeError("ProvisionedThroughputExceededException")

    def list_unavailable(self, **_: Any) -> list[Any]:
        raise RuntimeError("ProvisionedThroughputExceededException")


def test_a_failing_state_table_leaves_the_in_memory_cache_working(aws: None) -> None:
    stubbed = boto3.client("ec2", region_name="us-east-1")
    cloud = provider(ec2=stubbed, state=BrokenStore(), wall=Wall(0.0), mono=[0.0])
    with Stubber(stubbed) as stub:
        stub.add_response("create_fleet", {"FleetId": "fleet-1", "Instances": [], "Errors": [ice("us-east-1b")]}, None)
        with pytest.raises(InsufficientCapacityError):
            cloud.create(request=request())
    assert cloud.unavailable.is_unavailable("c5.large", "us-east-1b", "spot")
    assert cloud.sync_unavailable() == 0


class CountingStore:
    """A state store that records each shared write (wall seconds it expires at)."""

    def __init__(self) -> None:
        self.writes: list[tuple[str, str, str, float]] = []

    def mark_unavailable(self, *, instance_type: str, zone: str, capacity_type: str, expires_at: float,
                         reason: str = "") -> None:  # fmt: skip
        self.writes.append((instance_type, zone, capacity_type, expires_at))

    def list_unavailable(self, **_: Any) -> list[Any]:
        return []


def test_a_burst_of_interruptions_of_one_offering_writes_its_shared_mark_once_per_refresh(aws: None) -> None:
    from nodesmith.core.errors import UnavailableOffering

    wall, store = Wall(1_795_327_200.0), CountingStore()
    cloud = provider(ec2=boto3.client("ec2", region_name="us-east-1"), state=store, wall=wall, mono=[0.0])
    spot_b = UnavailableOffering("c5.large", "us-east-1b", "spot", "SpotInterruption")
    spot_a = UnavailableOffering("c5.large", "us-east-1a", "spot", "SpotInterruption")

    for _ in range(50):  # one mark per interruption batch, all within a second
        cloud.mark_unavailable(offerings=[spot_b])
    wall.t += 1
    cloud.mark_unavailable(offerings=[spot_b, spot_a])  # a new offering is written at once
    assert [(w[1], w[3] - 1_795_327_200.0) for w in store.writes] == [("us-east-1b", 180.0), ("us-east-1a", 181.0)]

    wall.t += 17  # 18 s after the first write: a tenth of the 180 s TTL, so the mark is refreshed
    cloud.mark_unavailable(offerings=[spot_b, spot_a])
    assert [(w[1], w[3] - 1_795_327_200.0) for w in store.writes[2:]] == [("us-east-1b", 198.0)]
    assert cloud.unavailable.is_unavailable("c5.large", "us-east-1b", "spot")


def test_a_shared_write_that_failed_is_tried_again_by_the_next_mark(aws: None) -> None:
    from nodesmith.core.errors import UnavailableOffering

    wall = Wall(1_795_327_200.0)
    failing, counting = BrokenStore(), CountingStore()
    cloud = provider(ec2=boto3.client("ec2", region_name="us-east-1"), state=failing, wall=wall, mono=[0.0])
    spot_b = UnavailableOffering("c5.large", "us-east-1b", "spot", "SpotInterruption")
    cloud.mark_unavailable(offerings=[spot_b])
    cloud.state = counting  # type: ignore[assignment]  # the table answers again
    cloud.mark_unavailable(offerings=[spot_b])
    assert [w[1] for w in counting.writes] == ["us-east-1b"]
