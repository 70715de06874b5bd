"""Prices come from the Pricing API, else the configured table, else labelled estimates; spot likewise."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import boto3
import pytest
from botocore.stub import ANY, Stubber
from ec2_support import REGION, SHARED_PRICES

from nodesmith.adapters.aws.pricing import (
    PriceRefresh,
    PriceTableError,
    PricingProvider,
    estimate_on_demand,
    load_price_table,
)

if TYPE_CHECKING:
    from pathlib import Path

M5 = {
    "InstanceType": "m5.large",
    "VCpuInfo": {"DefaultVCpus": 2},
    "MemoryInfo": {"SizeInMiB": 8192},
    "ProcessorInfo": {"SupportedArchitectures": ["x86_64"]},
}


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def offline_client(service: str) -> Any:
    """A client that is never allowed to reach AWS (each test stubs what it expects)."""
    return boto3.client(service, region_name=REGION, aws_access_key_id="x", aws_secret_access_key="x")


def product(instance_type: str, usd: str) -> str:
    return json.dumps(
        {
            "product": {"attributes": {"instanceType": instance_type}},
            "terms": {"OnDemand": {"T1": {"priceDimensions": {"D1": {"pricePerUnit": {"USD": usd}}}}}},
        }
    )


def write_table(path: Path, body: dict[str, Any]) -> Path:
    path.write_text(json.dumps(body))
    return path


def test_pricing_api_prices_win_and_are_not_estimated(tmp_path: Path) -> None:
    pricing = offline_client("pricing")
    ec2 = offline_client("ec2")
    expected_filters = [
        {"Type": "TERM_MATCH", "Field": f, "Value": v}
        for f, v in (
            ("regionCode", REGION),
            ("serviceCode", "AmazonEC2"),
            ("operatingSystem", "Linux"),
            ("tenancy", "Shared"),
            ("preInstalledSw", "NA"),
            ("capacitystatus", "Used"),
            ("marketoption", "OnDemand"),
        )
    ]
    with Stubber(pricing) as stub:
        stub.add_response(
            "get_products",
            {"PriceList": [product("m5.large", "0.0960000000"), product("c5.large", "0.0850000000")]},
            {"ServiceCode": "AmazonEC2", "Filters": expected_filters, "MaxResults": 100},
        )
        table = write_table(tmp_path / "t.json", {"region": REGION, "prices": {"m5.large": 9.99, "r5.large": 0.126}})
        prices = PricingProvider(ec2=ec2, region=REGION, pricing=pricing, price_table_path=table)
        assert prices.on_demand(instance_type="m5.large").usd_per_hour == 0.096
        assert prices.on_demand(instance_type="m5.large").source == "pricing-api"
        assert not prices.on_demand(instance_type="m5.large").estimated
        # Not in the API answer: the table fills in.
        assert prices.on_demand(instance_type="r5.large").usd_per_hour == 0.126
        stub.assert_no_pending_responses()


def test_pricing_api_failure_falls_back_and_is_not_retried_at_once(tmp_path: Path) -> None:
    pricing = offline_client("pricing")
    calls: list[int] = []
    pricing.meta.events.register("provide-client-params.pricing.GetProducts", lambda **_: calls.append(1))
    clock = Clock()
    table = write_table(tmp_path / "t.json", {"region": REGION, "prices": {"m5.large": 0.096}})
    with Stubber(pricing) as stub:
        stub.add_client_error("get_products", service_error_code="InternalError", http_status_code=500)
        prices = PricingProvider(
            ec2=offline_client("ec2"), region=REGION, pricing=pricing, price_table_path=table, clock=clock
        )
        first = prices.on_demand(instance_type="m5.large")
        assert (first.usd_per_hour, first.estimated, first.source) == (0.096, False, "price-table")
        clock.now += 60
        prices.on_demand(instance_type="m5.large")  # within retry_after: no second GetProducts
        assert len(calls) == 1
        clock.now += 600
        stub.add_response("get_products", {"PriceList": [product("m5.large", "0.1")]}, None)
        assert prices.on_demand(instance_type="m5.large").usd_per_hour == 0.1
        assert len(calls) == 2


def test_without_table_or_api_prices_are_estimates_and_say_so() -> None:
    prices = PricingProvider(ec2=offline_client("ec2"), region=REGION, pricing=None)
    price = prices.on_demand(instance_type="m5.large", info=M5)
    assert price.estimated
    assert price.source == "estimate"
    assert price.usd_per_hour == estimate_on_demand(M5)
    assert 0.05 < price.usd_per_hour < 0.2  # same order as the 0.096 list price


def test_the_assumed_spot_discount_is_a_setting() -> None:
    refresh = PriceRefresh(spot_discount_estimate=0.5)
    prices = PricingProvider(ec2=offline_client("ec2"), region=REGION, pricing=None, refresh=refresh)
    spot = prices.spot(instance_type="m5.large", zone="us-east-1a", info=M5)
    assert (spot.estimated, spot.source) == (True, "estimate")
    assert spot.usd_per_hour == pytest.approx(estimate_on_demand(M5) * 0.5)


def test_a_table_for_another_region_prices_but_is_marked_estimated(tmp_path: Path) -> None:
    table = write_table(tmp_path / "t.json", {"region": "eu-west-1", "prices": {"m5.large": 0.107}})
    prices = PricingProvider(ec2=offline_client("ec2"), region=REGION, pricing=None, price_table_path=table)
    price = prices.on_demand(instance_type="m5.large")
    assert (price.usd_per_hour, price.estimated) == (0.107, True)


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (None, "file not found"),
        ("not json", "cannot read JSON"),
        ('{"currency": "USD"}', '"prices"'),
        ('{"prices": {"m5.large": "cheap"}}', "not a number"),
        ('{"prices": {}, "spot_ratio": 2}', "spot_ratio"),
    ],
)
def test_a_bad_price_table_names_the_file(tmp_path: Path, content: str | None, message: str) -> None:
    path = tmp_path / "prices.json"
    if content is not None:
        path.write_text(content)
    with pytest.raises(PriceTableError, match=message) as info:
        load_price_table(path)
    assert str(path) in str(info.value)


def test_the_shared_reference_table_loads() -> None:
    if not SHARED_PRICES.is_file():
        pytest.skip(f"reference data missing: {SHARED_PRICES}")
    table = load_price_table(SHARED_PRICES)
    assert table.region == REGION
    assert table.on_demand["m5.large"] == 0.096


def test_spot_history_latest_price_per_zone_is_used() -> None:
    ec2 = offline_client("ec2")
    old = datetime(2026, 1, 1, tzinfo=UTC)
    new = datetime(2026, 1, 2, tzinfo=UTC)
    history = [
        {"InstanceType": "m5.large", "AvailabilityZone": "us-east-1a", "SpotPrice": "0.040", "Timestamp": old},
        {"InstanceType": "m5.large", "AvailabilityZone": "us-east-1a", "SpotPrice": "0.035", "Timestamp": new},
        {"InstanceType": "m5.large", "AvailabilityZone": "us-east-1b", "SpotPrice": "0.037", "Timestamp": new},
    ]
    with Stubber(ec2) as stub:
        stub.add_response(
            "describe_spot_price_history",
            {"SpotPriceHistory": history},
            {"ProductDescriptions": ["Linux/UNIX", "Linux/UNIX (Amazon VPC)"], "StartTime": ANY, "MaxResults": 1000},
        )
        prices = PricingProvider(ec2=ec2, region=REGION, pricing=None)
        a = prices.spot(instance_type="m5.large", zone="us-east-1a", info=M5)
        assert (a.usd_per_hour, a.estimated, a.source) == (0.035, False, "spot-history")
        assert prices.spot(instance_type="m5.large", zone="us-east-1b", info=M5).usd_per_hour == 0.037
        # No history for the zone: on-demand x (1 - 65 %), labelled.
        c = prices.spot(instance_type="m5.large", zone="us-east-1c", info=M5)
        assert c.estimated
        assert c.usd_per_hour == pytest.approx(estimate_on_demand(M5) * 0.35)


def test_placeholder_spot_prices_are_ignored(tmp_path: Path) -> None:
    # moto answers 0.00001 for every type and zone; a price under 1 % of on-demand is not believed.
    ec2 = offline_client("ec2")
    table = write_table(tmp_path / "t.json", {"region": REGION, "prices": {"m5.large": 0.096}})
    placeholder = {"InstanceType": "m5.large", "AvailabilityZone": "us-east-1a", "SpotPrice": "0.00001"}
    with Stubber(ec2) as stub:
        stub.add_response("describe_spot_price_history", {"SpotPriceHistory": [placeholder]}, None)
        prices = PricingProvider(ec2=ec2, region=REGION, pricing=None, price_table_path=table)
        spot = prices.spot(instance_type="m5.large", zone="us-east-1a")
    assert spot.estimated
    assert spot.usd_per_hour == pytest.approx(0.096 * 0.35)


def test_spot_overrides_in_the_table_beat_history_and_need_no_api_call(tmp_path: Path) -> None:
    table = write_table(
        tmp_path / "t.json",
        {
            "region": REGION,
            "prices": {"m5.large": 0.096, "c5.large": 0.085},
            "spot": {"m5.large": {"us-east-1a": 0.031}, "c5.large": 0.03},
            "spot_ratio": 0.4,
        },
    )
    ec2 = offline_client("ec2")
    with Stubber(ec2) as stub:  # no response queued: any EC2 call would fail the test
        prices = PricingProvider(ec2=ec2, region=REGION, pricing=None, price_table_path=table)
        assert prices.spot(instance_type="m5.large", zone="us-east-1a").usd_per_hour == 0.031
        assert prices.spot(instance_type="c5.large", zone="us-east-1f").usd_per_hour == 0.03
        ratio = prices.spot(instance_type="m5.large", zone="us-east-1b")
        assert (ratio.usd_per_hour, ratio.source, ratio.estimated) == (pytest.approx(0.0384), "spot-override", False)
        stub.assert_no_pending_responses()
