"""EC2 prices in USD per instance-hour: on-demand and spot, each with where it came from.

On-demand, first that knows the type wins:

1. the AWS Pricing API ``GetProducts`` (service AmazonEC2; filters as Karpenter
   ``pkg/providers/pricing/pricing.go``: regionCode, operatingSystem Linux, tenancy Shared,
   preInstalledSw NA, capacitystatus Used, marketoption OnDemand);
2. a price table JSON file from configuration (``NODESMITH_PRICE_TABLE``), shaped like
   ``{"currency": "USD", "region": "us-east-1", "prices": {"m5.large": 0.096, ...}}``; a table for
   another region still prices, but is marked estimated;
3. an estimate from vCPUs, memory and accelerators (:func:`estimate_on_demand`), marked estimated.

Spot, first that knows the (type, zone) wins:

1. ``spot`` overrides in the price table: ``{"spot": {"m5.large": {"us-east-1a": 0.035}}}`` or
   ``{"spot": {"m5.large": 0.035}}`` (every zone), and ``"spot_ratio": 0.35`` (spot = on-demand x
   ratio for types without an entry; DescribeSpotPriceHistory is then never called) - the embedded
   AWS cannot be given spot prices, so the simulator writes them here;
2. ``DescribeSpotPriceHistory`` (Linux/UNIX, latest price per type x zone), ignoring prices under
   1 % of on-demand (the embedded AWS answers a 0.00001 placeholder for everything);
3. on-demand x ``(1 - PriceRefresh.spot_discount_estimate)``, marked estimated.

Failures of either API are logged and fall back (the embedded AWS has no Pricing API at all); a
failed API is not asked again for ``PriceRefresh.retry_after_seconds``.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Mapping

__all__ = [
    "DEFAULT_SPOT_DISCOUNT_ESTIMATE",
    "Price",
    "PriceRefresh",
    "PriceTable",
    "PriceTableError",
    "PricingProvider",
    "estimate_on_demand",
    "load_price_table",
]

LOG = logging.getLogger(__name__)

DEFAULT_SPOT_DISCOUNT_ESTIMATE = 0.65
"""Assumed spot discount when no spot price is known (spot = on-demand x 0.35), labelled estimated."""

MIN_SPOT_FRACTION = 0.01
"""Spot history prices below this fraction of on-demand are treated as placeholders and ignored."""

# Estimate coefficients (USD/hour), picked against the us-east-1 on-demand list (median error ~20 %):
# per vCPU, per GiB of memory, per GiB of GPU memory, per Neuron device; Graviton (arm64) x 0.8.
_PER_VCPU = 0.034
_PER_GIB = 0.0045
_PER_GPU_GIB = 0.06
_PER_NEURON_DEVICE = 0.5
_ARM64_FACTOR = 0.8

_SPOT_DESCRIPTIONS = ["Linux/UNIX", "Linux/UNIX (Amazon VPC)"]


@dataclass(frozen=True, slots=True)
class Price:
    """A price in USD per hour; ``estimated`` is True unless it came from AWS or a same-region table."""

    usd_per_hour: float
    estimated: bool
    source: str  # pricing-api | price-table | spot-history | spot-override | estimate


class PriceTableError(ValueError):
    """The configured price table file is missing or malformed (the message names the file)."""


@dataclass(frozen=True, slots=True)
class PriceTable:
    """A parsed price table: on-demand prices by type, optional spot overrides, its region and currency.

    ``spot`` maps a type to ``{zone: price}``; the zone ``"*"`` applies to every zone.
    ``spot_ratio`` (0..1) prices spot as on-demand x ratio for types without a ``spot`` entry.
    """

    path: str
    region: str
    currency: str
    on_demand: Mapping[str, float]
    spot: Mapping[str, Mapping[str, float]] = field(default_factory=dict)
    spot_ratio: float | None = None


def load_price_table(path: str | Path) -> PriceTable:
    """Read a price table JSON file (format in the module docstring).

    Raises ``PriceTableError`` naming the file when it is absent, not JSON, lacks ``prices`` or
    has a non-numeric price.
    """
    file = Path(path)
    try:
        raw = json.loads(file.read_text(encoding="utf-8"))
    except FileNotFoundError as exc:
        raise PriceTableError(f"price table {file}: file not found") from exc
    except (OSError, ValueError) as exc:
        raise PriceTableError(f"price table {file}: cannot read JSON: {exc}") from exc
    if not isinstance(raw, dict) or not isinstance(raw.get("prices"), dict):
        raise PriceTableError(f'price table {file}: expected an object with "prices": {{instance type: USD/hour}}')
    try:
        on_demand = {str(k): float(v) for k, v in raw["prices"].items()}
        spot: dict[str, dict[str, float]] = {}
        for name, value in (raw.get("spot") or {}).items():
            if isinstance(value, dict):
                spot[str(name)] = {str(z): float(p) for z, p in value.items()}
            else:
                spot[str(name)] = {"*": float(value)}
        ratio = raw.get("spot_ratio")
        spot_ratio = None if ratio is None else float(ratio)
    except (TypeError, ValueError) as exc:
        raise PriceTableError(f"price table {file}: a price is not a number: {exc}") from exc
    if spot_ratio is not None and not 0 < spot_ratio <= 1:
        raise PriceTableError(f"price table {file}: spot_ratio must be in (0, 1], got {spot_ratio}")
    return PriceTable(
        path=str(file),
        region=str(raw.get("region", "")),
        currency=str(raw.get("currency", "USD")),
        on_demand=on_demand,
        spot=spot,
        spot_ratio=spot_ratio,
    )


def estimate_on_demand(info: Mapping[str, Any]) -> float:
    """Rough on-demand USD/hour of a type from its DescribeInstanceTypes item (always an estimate).

    ``0.034 x vCPU + 0.0045 x memory GiB`` (x 0.8 on Graviton) ``+ 0.06 x GPU memory GiB +
    0.5 x Neuron devices``.
    """
    vcpus = float((info.get("VCpuInfo") or {}).get("DefaultVCpus", 0))
    gib = float((info.get("MemoryInfo") or {}).get("SizeInMiB", 0)) / 1024
    archs = (info.get("ProcessorInfo") or {}).get("SupportedArchitectures") or []
    base = _PER_VCPU * vcpus + _PER_GIB * gib
    if archs and archs[0] == "arm64":
        base *= _ARM64_FACTOR
    gpu_gib = float((info.get("GpuInfo") or {}).get("TotalGpuMemoryInMiB", 0)) / 1024
    neuron = sum(int(d.get("Count", 0)) for d in (info.get("NeuronInfo") or {}).get("NeuronDevices") or [])
    return round(base + _PER_GPU_GIB * gpu_gib + _PER_NEURON_DEVICE * neuron, 6)


@dataclass(frozen=True, slots=True)
class PriceRefresh:
    """How long :class:`PricingProvider` keeps prices and what it assumes without a spot price.

    ``on_demand_ttl_seconds``: the Pricing API's on-demand prices are kept this long (12 h, as Karpenter's
    pricing controller refreshes them). ``spot_ttl_seconds``: spot price history is kept this long (5 min).
    ``retry_after_seconds``: after a failed Pricing API or spot history call, wait this long before asking
    again (spot: at most ``spot_ttl_seconds``). ``spot_discount_estimate``: the fraction off on-demand assumed
    for a spot offering with no known price (0.65: spot = on-demand x 0.35), labelled estimated.
    """

    spot_discount_estimate: float = DEFAULT_SPOT_DISCOUNT_ESTIMATE
    on_demand_ttl_seconds: float = 12 * 3600.0
    spot_ttl_seconds: float = 300.0
    retry_after_seconds: float = 600.0


class PricingProvider:
    """On-demand and spot prices for one region, cached per process.

    ``ec2`` is a boto3 EC2 client (spot history); ``pricing`` a Pricing API client or None to skip
    the API; ``price_table_path`` the configured table (None: none). ``refresh`` says how long prices are
    cached and the spot discount assumed without a spot price (:class:`PriceRefresh`); ``clock``
    returns seconds (monotonic).

    Raises ``PriceTableError`` at construction when a configured table cannot be read.
    """

    def __init__(
        self,
        *,
        ec2: Any,
        region: str,
        pricing: Any | None = None,
        price_table_path: str | Path | None = None,
        refresh: PriceRefresh | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._ec2 = ec2
        self._pricing = pricing
        self._region = region
        self._table = load_price_table(price_table_path) if price_table_path else None
        if self._table and self._table.region and self._table.region != region:
            LOG.warning(
                "price table %s is for %s, not %s: its prices are used but marked estimated",
                self._table.path,
                self._table.region,
                region,
            )
        refresh = refresh or PriceRefresh()
        self._spot_ratio = 1.0 - refresh.spot_discount_estimate
        self._on_demand_ttl = refresh.on_demand_ttl_seconds
        self._spot_ttl = refresh.spot_ttl_seconds
        self._retry_after = refresh.retry_after_seconds
        self._clock = clock
        self._lock = threading.Lock()
        self._api_prices: dict[str, float] = {}
        self._api_next: float = float("-inf")
        self._spot_prices: dict[tuple[str, str], float] = {}
        self._spot_next: float = float("-inf")

    @property
    def table(self) -> PriceTable | None:
        """The configured price table, if any."""
        return self._table

    # -- on-demand -------------------------------------------------------------------------------

    def on_demand(self, *, instance_type: str, info: Mapping[str, Any] | None = None) -> Price:
        """On-demand price of ``instance_type``; ``info`` (its DescribeInstanceTypes item) enables estimates.

        Without ``info`` and without a known price, returns an estimate of 0.0 (still labelled).
        """
        self._refresh_on_demand()
        if instance_type in self._api_prices:
            return Price(self._api_prices[instance_type], estimated=False, source="pricing-api")
        table = self._table
        if table and instance_type in table.on_demand:
            foreign = bool(table.region) and table.region != self._region
            return Price(table.on_demand[instance_type], estimated=foreign, source="price-table")
        return Price(estimate_on_demand(info) if info else 0.0, estimated=True, source="estimate")

    def _refresh_on_demand(self) -> None:
        if self._pricing is None or self._clock() < self._api_next:
            return
        with self._lock:
            if self._clock() < self._api_next:
                return
            try:
                prices = self._fetch_on_demand()
            except Exception as exc:  # botocore errors, endpoint errors, malformed pages: fall back
                LOG.warning("AWS Pricing API unavailable (%s); using the price table or estimates", exc)
                self._api_next = self._clock() + self._retry_after
                return
            if prices:
                self._api_prices = prices
                self._api_next = self._clock() + self._on_demand_ttl
            else:
                LOG.warning("AWS Pricing API returned no EC2 prices for %s", self._region)
                self._api_next = self._clock() + self._retry_after

    def _fetch_on_demand(self) -> dict[str, float]:
        assert self._pricing is not None
        filters = [
            {"Type": "TERM_MATCH", "Field": field_, "Value": value}
            for field_, value in (
                ("regionCode", self._region),
                ("serviceCode", "AmazonEC2"),
                ("operatingSystem", "Linux"),
                ("tenancy", "Shared"),
                ("preInstalledSw", "NA"),
                ("capacitystatus", "Used"),
                ("marketoption", "OnDemand"),
            )
        ]
        currency = "CNY" if self._region.startswith("cn-") else "USD"
        prices: dict[str, float] = {}
        paginator = self._pricing.get_paginator("get_products")
        for page in paginator.paginate(ServiceCode="AmazonEC2", Filters=filters, PaginationConfig={"PageSize": 100}):
            prices.update(_parse_price_list(page.get("PriceList", []), currency=currency))
        return prices

    # -- spot ------------------------------------------------------------------------------------

    def spot(self, *, instance_type: str, zone: str, info: Mapping[str, Any] | None = None) -> Price:
        """Spot price of ``instance_type`` in ``zone`` (override, history, else estimate from on-demand)."""
        table = self._table
        if table and instance_type in table.spot:
            zones = table.spot[instance_type]
            if zone in zones or "*" in zones:
                return Price(zones.get(zone, zones.get("*", 0.0)), estimated=False, source="spot-override")
        on_demand = self.on_demand(instance_type=instance_type, info=info)
        if table and table.spot_ratio is not None:
            price = round(on_demand.usd_per_hour * table.spot_ratio, 6)
            return Price(price, estimated=on_demand.estimated, source="spot-override")
        self._refresh_spot()
        history = self._spot_prices.get((instance_type, zone))
        if history is not None and (
            on_demand.usd_per_hour == 0 or history >= on_demand.usd_per_hour * MIN_SPOT_FRACTION
        ):
            return Price(history, estimated=False, source="spot-history")
        return Price(round(on_demand.usd_per_hour * self._spot_ratio, 6), estimated=True, source="estimate")

    def _refresh_spot(self) -> None:
        if self._clock() < self._spot_next:
            return
        with self._lock:
            if self._clock() < self._spot_next:
                return
            try:
                self._spot_prices = self._fetch_spot()
                self._spot_next = self._clock() + self._spot_ttl
            except Exception as exc:  # botocore errors: keep the last prices, estimate the rest
                LOG.warning("DescribeSpotPriceHistory failed (%s); spot prices are estimated", exc)
                self._spot_next = self._clock() + min(self._retry_after, self._spot_ttl)

    def _fetch_spot(self) -> dict[tuple[str, str], float]:
        latest: dict[tuple[str, str], tuple[Any, float]] = {}
        paginator = self._ec2.get_paginator("describe_spot_price_history")
        pages = paginator.paginate(
            ProductDescriptions=_SPOT_DESCRIPTIONS,
            StartTime=datetime.now(UTC),  # "now": EC2 returns the price in effect per type x zone
            PaginationConfig={"PageSize": 1000},
        )
        for page in pages:
            for item in page.get("SpotPriceHistory", []):
                try:
                    key = (str(item["InstanceType"]), str(item["AvailabilityZone"]))
                    price = float(item["SpotPrice"])
                except (KeyError, TypeError, ValueError):
                    continue
                stamp = item.get("Timestamp")
                seen = latest.get(key)
                if seen is None or (stamp is not None and seen[0] is not None and stamp > seen[0]):
                    latest[key] = (stamp, price)
        return {key: price for key, (_, price) in latest.items()}


def _parse_price_list(items: Iterable[str | Mapping[str, Any]], *, currency: str) -> dict[str, float]:
    """Instance type -> on-demand price from Pricing API ``PriceList`` entries (JSON strings)."""
    prices: dict[str, float] = {}
    for raw in items:
        try:
            item = json.loads(raw) if isinstance(raw, str) else raw
            name = item["product"]["attributes"].get("instanceType", "")
            terms = item.get("terms", {}).get("OnDemand", {})
        except (ValueError, KeyError, TypeError, AttributeError):
            LOG.debug("skipping a malformed Pricing API entry")
            continue
        if not name:
            continue
        for term in terms.values():
            for dimension in term.get("priceDimensions", {}).values():
                try:
                    price = float(dimension["pricePerUnit"][currency])
                except (KeyError, TypeError, ValueError):
                    continue
                if price > 0:
                    prices[name] = price
    return prices
