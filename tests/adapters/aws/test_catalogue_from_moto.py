"""The catalogue turns moto's real DescribeInstanceTypes data into labelled, priced instance types."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pytest
from ec2_support import REGION

from nodesmith.adapters.aws.catalog import InstanceTypeCatalog
from nodesmith.adapters.aws.pricing import PricingProvider
from nodesmith.core.instancetypes import build_instance_type

if TYPE_CHECKING:
    from pathlib import Path

MIB = 2**20
FEW = ("m5.large", "c5.xlarge", "t3.medium", "m7g.large", "g4dn.xlarge", "a1.large")
SAMPLE = (
    *FEW,
    *("c7g.4xlarge", "r6i.2xlarge", "m6id.8xlarge", "x2iedn.xlarge", "i4i.metal", "c5n.18xlarge", "t4g.nano"),
    *("p4d.24xlarge", "g5.12xlarge", "inf2.xlarge", "trn1.32xlarge", "u-6tb1.112xlarge", "hpc7g.16xlarge"),
)


class Clock:
    """A settable monotonic clock."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def count_calls(client: Any, operation: str) -> list[int]:
    calls: list[int] = []
    client.meta.events.register(f"before-call.ec2.{operation}", lambda **_: calls.append(1))
    return calls


def catalogue(
    ec2: Any, tmp_path: Path, *, names: tuple[str, ...] | None = FEW, clock: Clock | None = None
) -> InstanceTypeCatalog:
    """A catalogue priced by estimates; spot = 35 % of on-demand (no spot price history: moto's is a placeholder)."""
    table = tmp_path / "ratio-only.json"
    table.write_text('{"region": "us-east-1", "prices": {}, "spot_ratio": 0.35}')
    pricing = PricingProvider(ec2=ec2, region=REGION, pricing=None, price_table_path=table)
    return InstanceTypeCatalog(
        ec2=ec2, pricing=pricing, region=REGION, instance_type_names=names, clock=clock or Clock()
    )


def test_every_real_instance_type_builds_with_positive_allocatable() -> None:
    # moto ships EC2's real DescribeInstanceTypes data (~1,400 types); no type may break the formulas.
    from moto.ec2.models.instance_types import INSTANCE_TYPES

    assert len(INSTANCE_TYPES) > 1000
    for name, info in INSTANCE_TYPES.items():
        it = build_instance_type(info=info, offerings=())
        assert it.name == name
        assert it.capacity["pods"] > 0, name
        assert it.allocatable["cpu"] > 0, name
        assert it.allocatable["memory"] > 0, name
        assert it.labels["kubernetes.io/os"] == "linux"


def test_catalogue_from_the_ec2_api_has_real_types_with_labels_and_allocatable(ec2: Any, tmp_path: Path) -> None:
    types = {it.name: it for it in catalogue(ec2, tmp_path, names=SAMPLE).instance_types()}
    assert set(types) == set(SAMPLE)
    m5 = types["m5.large"]
    assert m5.labels["karpenter.k8s.aws/instance-family"] == "m5"
    assert m5.labels["karpenter.k8s.aws/instance-memory"] == "8192"
    assert m5.labels["topology.kubernetes.io/region"] == REGION
    assert m5.capacity["pods"] == 29
    assert m5.allocatable["cpu"] == 1930
    assert m5.allocatable["memory"] == (7577 - 574 - 100) * MIB
    g4 = types["g4dn.xlarge"]
    assert g4.capacity["nvidia.com/gpu"] == 1
    assert g4.labels["karpenter.k8s.aws/instance-gpu-name"] == "t4"
    assert types["m7g.large"].labels["kubernetes.io/arch"] == "arm64"
    assert types["inf2.xlarge"].capacity["aws.amazon.com/neuron"] == 1
    assert types["p4d.24xlarge"].capacity["pods"] == 737
    # Every type has offerings, each with a zone id.
    assert all(it.offerings for it in types.values())
    assert all(o.zone_id.startswith("use1-az") for o in m5.offerings)


def test_offerings_cover_region_zones_and_follow_availability(ec2: Any, tmp_path: Path) -> None:
    zones = sorted(z["ZoneName"] for z in ec2.describe_availability_zones()["AvailabilityZones"])
    offered = {
        o["Location"]
        for o in ec2.describe_instance_type_offerings(
            LocationType="availability-zone", Filters=[{"Name": "instance-type", "Values": ["m5.large"]}]
        )["InstanceTypeOfferings"]
    }
    cat = catalogue(ec2, tmp_path)
    m5 = next(it for it in cat.instance_types() if it.name == "m5.large")
    assert {(o.zone, o.capacity_type) for o in m5.offerings} == {(z, ct) for z in zones for ct in ("spot", "on-demand")}
    assert {o.zone for o in m5.offerings if o.available} == offered

    restricted = next(it for it in cat.instance_types(zones={"us-east-1a"}) if it.name == "m5.large")
    assert {o.zone for o in restricted.offerings if o.available} == {"us-east-1a"}


def test_unavailable_offerings_and_incompatible_types_are_marked_not_dropped(ec2: Any, tmp_path: Path) -> None:
    cat = catalogue(ec2, tmp_path)
    types = {it.name: it for it in cat.instance_types(unavailable={("m5.large", "us-east-1a", "spot")})}
    m5 = {(o.zone, o.capacity_type): o for o in types["m5.large"].offerings}
    assert not m5[("us-east-1a", "spot")].available
    assert m5[("us-east-1a", "on-demand")].available
    # AL2023 cannot run on a1 (Karpenter compatibility.go): kept, every offering unavailable.
    assert types["a1.large"].offerings
    assert not any(o.available for o in types["a1.large"].offerings)
    # A launchability predicate (no arm64 AMI) marks arm64 types unavailable.
    no_arm = cat.instance_types(launchable=NotArm())
    assert not any(o.available for it in no_arm if it.name == "m7g.large" for o in it.offerings)
    assert any(o.available for it in no_arm if it.name == "m5.large" for o in it.offerings)


def test_a_new_unavailable_set_is_laid_over_the_build_and_equals_building_afresh(
    ec2: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import nodesmith.adapters.aws.catalog as catalog_module

    builds: list[str] = []
    real = catalog_module.build_instance_type
    monkeypatch.setattr(catalog_module, "build_instance_type", lambda **kw: builds.append(kw["info"]) or real(**kw))
    cat = catalogue(ec2, tmp_path)
    first = cat.instance_types(unavailable={("m5.large", "us-east-1a", "spot")})
    built_once = len(builds)
    blocked = {("m5.large", "us-east-1b", "spot"), ("c5.xlarge", "us-east-1a", "on-demand")}
    second = cat.instance_types(unavailable=blocked)

    assert len(builds) == built_once  # the catalogue is not rebuilt for a new set of marks
    fresh = catalogue(ec2, tmp_path).instance_types(unavailable=blocked)
    assert second == fresh
    by_name = {it.name: it for it in second}
    unmarked = {it.name: it for it in cat.instance_types()}

    def off(it: Any) -> set[tuple[str, str]]:
        return {(o.zone, o.capacity_type) for o in it.offerings if not o.available}

    assert off(by_name["m5.large"]) - off(unmarked["m5.large"]) == {("us-east-1b", "spot")}
    c5 = {(o.zone, o.capacity_type): o.available for o in by_name["c5.xlarge"].offerings}
    assert c5[("us-east-1a", "on-demand")] is False
    untouched = [(a, b) for a, b in zip(first, second, strict=True) if a.name not in {"m5.large", "c5.xlarge"}]
    assert untouched and all(a is b for a, b in untouched)  # types no mark names are shared, not copied


class NotArm:
    """Hashable launchability predicate: no arm64 AMI."""

    def __call__(self, it: Any) -> bool:
        return bool(it.labels["kubernetes.io/arch"] != "arm64")

    def __hash__(self) -> int:
        return 1

    def __eq__(self, other: object) -> bool:
        return isinstance(other, NotArm)


def test_ec2_is_described_once_per_ttl(ec2: Any, tmp_path: Path) -> None:
    clock = Clock()
    calls = count_calls(ec2, "DescribeInstanceTypes")
    cat = catalogue(ec2, tmp_path, clock=clock)
    first = cat.instance_types()
    assert cat.instance_types() is first  # same inputs within the TTL: built once
    clock.now += 299
    cat.instance_types(zones={"us-east-1b"})
    assert len(calls) == 1
    clock.now += 2  # past 5 minutes
    cat.instance_types()
    assert len(calls) == 2


def test_estimated_prices_are_labelled_and_table_prices_are_not(ec2: Any, tmp_path: Path) -> None:
    estimated = {it.name: it for it in catalogue(ec2, tmp_path).instance_types()}["m5.large"]
    assert all(o.price_estimated for o in estimated.offerings)
    assert all(o.price > 0 for o in estimated.offerings)

    table = tmp_path / "prices.json"
    table.write_text('{"currency": "USD", "region": "us-east-1", "prices": {"m5.large": 0.096}, "spot_ratio": 0.3}')
    pricing = PricingProvider(ec2=ec2, region=REGION, pricing=None, price_table_path=table)
    cat = InstanceTypeCatalog(ec2=ec2, pricing=pricing, region=REGION, instance_type_names=FEW, clock=Clock())
    m5 = {it.name: it for it in cat.instance_types()}["m5.large"]
    on_demand = [o for o in m5.offerings if o.capacity_type == "on-demand"]
    spot = [o for o in m5.offerings if o.capacity_type == "spot"]
    assert {o.price for o in on_demand} == {0.096}
    assert [o.price for o in spot] == pytest.approx([0.0288] * len(spot))
    assert not any(o.price_estimated for o in m5.offerings)
