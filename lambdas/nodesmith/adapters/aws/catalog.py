"""The EC2 instance-type catalogue: DescribeInstanceTypes + offerings per zone + prices -> core InstanceTypes.

Raw EC2 data (types, which zones offer each type, zone ids) is cached per process for
``ttl_seconds`` (5 min, Karpenter's instance-type cache). Built :class:`InstanceType` lists are
cached per (kubelet settings, root volume, zones, unavailable set) so a reconcile loop that asks
every pass pays only once per TTL.

Offerings follow Karpenter ``pkg/providers/instancetype/offering/base_resolver.go``: one offering
per (zone of the region) x (``SupportedUsageClasses`` in spot / on-demand); an offering is
available when EC2 offers the type in that zone, the zone is one the EC2NodeClass has a subnet in,
the type is compatible with the node class (``a1.*`` cannot run AL2023), and the
(type, zone, capacity type) is not in the unavailable-offerings set (capacity errors).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from nodesmith.core.instancetypes import (
    DEFAULT_ROOT_VOLUME_BYTES,
    DEFAULT_VM_MEMORY_OVERHEAD_PERCENT,
    InstanceTypeInfoError,
    KubeletSettings,
    build_instance_type,
)
from nodesmith.core.model import CAPACITY_TYPE_ON_DEMAND, CAPACITY_TYPE_SPOT, InstanceType, Offering

if TYPE_CHECKING:
    from nodesmith.adapters.aws.pricing import PricingProvider

__all__ = [
    "CatalogData",
    "InstanceTypeCatalog",
    "UnavailableFn",
]

LOG = logging.getLogger(__name__)

UnavailableFn = Callable[[str, str, str], bool]
"""``(instance_type, zone, capacity_type) -> True`` when a recent capacity error marked it unavailable."""

_CAPACITY_TYPES = (CAPACITY_TYPE_SPOT, CAPACITY_TYPE_ON_DEMAND)


@dataclass(frozen=True, slots=True)
class CatalogData:
    """Raw EC2 catalogue data for one region.

    ``infos`` are DescribeInstanceTypes items by type name; ``zones_by_type`` the zones whose
    DescribeInstanceTypeOfferings (location type availability-zone) list the type; ``zone_ids``
    maps every available zone of the region to its zone id (``us-east-1a`` -> ``use1-az6``).
    """

    infos: Mapping[str, Mapping[str, Any]]
    zones_by_type: Mapping[str, frozenset[str]]
    zone_ids: Mapping[str, str]


def _incompatible_with_al2023(name: str) -> bool:
    # Karpenter compatibility.go: a1 instances are not supported by AL2023, the family assumed without a node class.
    return name.startswith("a1.")


class InstanceTypeCatalog:
    """Cached EC2 catalogue for one region.

    ``ec2`` is a boto3 EC2 client; ``pricing`` prices offerings. ``instance_type_names`` restricts
    DescribeInstanceTypes to those types (None: every type the region has). ``clock`` returns
    monotonic seconds.
    """

    def __init__(
        self,
        *,
        ec2: Any,
        pricing: PricingProvider,
        region: str,
        ttl_seconds: float = 300.0,
        instance_type_names: Collection[str] | None = None,
        vm_memory_overhead_percent: float = DEFAULT_VM_MEMORY_OVERHEAD_PERCENT,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._ec2 = ec2
        self._pricing = pricing
        self._region = region
        self._ttl = ttl_seconds
        self._names = sorted(instance_type_names) if instance_type_names is not None else None
        self._vm_overhead = vm_memory_overhead_percent
        self._clock = clock
        self._lock = threading.Lock()
        self._data: CatalogData | None = None
        self._data_expires = float("-inf")
        self._built: dict[Any, list[InstanceType]] = {}
        self._base: dict[Any, list[InstanceType]] = {}  # built with nothing blocked, per node-class shape

    def data(self, *, fresh_for: float = 0.0) -> CatalogData:
        """The raw catalogue, refreshed when older than the TTL (raises botocore errors on failure).

        ``fresh_for`` (seconds) also refreshes it when it would expire within that long, so a caller
        with time to spare (watch mode between batches) pays for the refresh instead of the next pass.
        """
        if self._data is not None and self._clock() + fresh_for < self._data_expires:
            return self._data
        with self._lock:
            if self._data is None or self._clock() + fresh_for >= self._data_expires:
                self._data = self._fetch()
                self._data_expires = self._clock() + self._ttl
                self._built.clear()
                self._base.clear()
            return self._data

    def _fetch(self) -> CatalogData:
        infos: dict[str, Mapping[str, Any]] = {}
        kwargs: dict[str, Any] = {
            "Filters": [
                {"Name": "processor-info.supported-architecture", "Values": ["x86_64", "arm64"]},
                {"Name": "supported-virtualization-type", "Values": ["hvm"]},
            ]
        }
        if self._names is not None:
            kwargs["InstanceTypes"] = self._names
        for page in self._ec2.get_paginator("describe_instance_types").paginate(**kwargs):
            for item in page.get("InstanceTypes", []):
                infos[str(item["InstanceType"])] = item
        zones_by_type: dict[str, set[str]] = {}
        offerings_kwargs: dict[str, Any] = {"LocationType": "availability-zone"}
        if self._names is not None:
            offerings_kwargs["Filters"] = [{"Name": "instance-type", "Values": self._names}]
        for page in self._ec2.get_paginator("describe_instance_type_offerings").paginate(**offerings_kwargs):
            for item in page.get("InstanceTypeOfferings", []):
                zones_by_type.setdefault(str(item["InstanceType"]), set()).add(str(item["Location"]))
        zones = self._ec2.describe_availability_zones(
            Filters=[{"Name": "zone-type", "Values": ["availability-zone"]}, {"Name": "state", "Values": ["available"]}]
        )
        zone_ids = {str(z["ZoneName"]): str(z.get("ZoneId", "")) for z in zones.get("AvailabilityZones", [])}
        LOG.debug("catalogue: %d instance types, %d zones", len(infos), len(zone_ids))
        return CatalogData(
            infos=infos,
            zones_by_type={k: frozenset(v) for k, v in zones_by_type.items()},
            zone_ids=zone_ids,
        )

    def instance_types(
        self,
        *,
        zones: Collection[str] | None = None,
        kubelet: KubeletSettings | None = None,
        root_volume_bytes: int = DEFAULT_ROOT_VOLUME_BYTES,
        instance_store_policy: str | None = None,
        unavailable: Collection[tuple[str, str, str]] = (),
        launchable: Callable[[InstanceType], bool] | None = None,
    ) -> list[InstanceType]:
        """Every instance type of the region with priced offerings, sorted by name.

        ``zones``: zones the node class can launch into (None: every zone of the region).
        ``unavailable``: (type, zone, capacity type) keys recently marked unavailable.
        ``launchable``: the node class's compatibility (an AMI of its family boots the type, e.g.
        :class:`~nodesmith.adapters.aws.amis.AmiCompatibility`); a type failing it keeps its offerings, all
        unavailable. Without one, AL2023's rule applies (no ``a1`` types).

        Built once per node-class shape and catalogue TTL with nothing blocked; each set of ``unavailable``
        keys is then laid over that build, copying only the types it names. In a burst of spot interruptions
        every pass sees a new set (each interrupted offering is marked for 3 minutes), and rebuilding all
        ~1,400 types for each took seconds of the replacement pass.
        """
        data = self.data()
        allowed = frozenset(zones) if zones is not None else None
        blocked = frozenset(unavailable)
        shape = (kubelet, root_volume_bytes, instance_store_policy, allowed, launchable)
        key = (shape, blocked)
        cached = self._built.get(key)
        if cached is not None:
            return cached
        base = self._base.get(shape)
        if base is None:
            base = self._build(
                data,
                kubelet=kubelet,
                root_volume_bytes=root_volume_bytes,
                instance_store_policy=instance_store_policy,
                allowed=allowed,
                launchable=launchable,
            )
            if len(self._base) > 16:  # bounded: node-class shapes seen within one TTL
                self._base.clear()
            self._base[shape] = base
        out = _blocking(base, blocked)
        if len(self._built) > 64:  # bounded: node classes x unavailable sets seen within one TTL
            self._built.clear()
        self._built[key] = out
        return out

    def _build(
        self,
        data: CatalogData,
        *,
        kubelet: KubeletSettings | None,
        root_volume_bytes: int,
        instance_store_policy: str | None,
        allowed: frozenset[str] | None,
        launchable: Callable[[InstanceType], bool] | None,
    ) -> list[InstanceType]:
        """Every instance type of ``data`` with its offerings, none of them blocked (see :meth:`instance_types`)."""
        out: list[InstanceType] = []
        for name in sorted(data.infos):
            info = data.infos[name]
            try:
                it = build_instance_type(
                    info=info,
                    offerings=(),
                    kubelet=kubelet,
                    root_volume_bytes=root_volume_bytes,
                    instance_store_policy=instance_store_policy,
                    region=self._region,
                    vm_memory_overhead_percent=self._vm_overhead,
                )
            except InstanceTypeInfoError as exc:
                LOG.warning("skipping instance type: %s", exc)
                continue
            compatible = launchable(it) if launchable is not None else not _incompatible_with_al2023(name)
            offerings = self._offerings(name, info, data=data, allowed=allowed, compatible=compatible)
            out.append(
                InstanceType(
                    name=it.name,
                    labels=it.labels,
                    capacity=it.capacity,
                    overhead=it.overhead,
                    offerings=offerings,
                    processor_features=it.processor_features,
                )
            )
        return out

    def _offerings(
        self,
        name: str,
        info: Mapping[str, Any],
        *,
        data: CatalogData,
        allowed: frozenset[str] | None,
        compatible: bool,
    ) -> tuple[Offering, ...]:
        offered = data.zones_by_type.get(name, frozenset())
        usage = [ct for ct in _CAPACITY_TYPES if ct in (info.get("SupportedUsageClasses") or ())]
        on_demand = self._pricing.on_demand(instance_type=name, info=info)
        offerings: list[Offering] = []
        for zone in sorted(data.zone_ids):
            in_scope = zone in offered and (allowed is None or zone in allowed) and compatible
            for capacity_type in usage:
                if capacity_type == CAPACITY_TYPE_ON_DEMAND:
                    price = on_demand
                else:
                    price = self._pricing.spot(instance_type=name, zone=zone, info=info)
                offerings.append(
                    Offering(
                        zone=zone,
                        capacity_type=capacity_type,
                        price=price.usd_per_hour,
                        available=in_scope,
                        zone_id=data.zone_ids.get(zone, ""),
                        price_estimated=price.estimated,
                    )
                )
        return tuple(offerings)


def offerings_by_key(instance_types: Sequence[InstanceType]) -> dict[tuple[str, str, str], Offering]:
    """Index offerings by (type, zone, capacity type)."""
    return {(it.name, o.zone, o.capacity_type): o for it in instance_types for o in it.offerings}


def _blocking(types: list[InstanceType], blocked: frozenset[tuple[str, str, str]]) -> list[InstanceType]:
    """``types`` with the offerings keyed (type, zone, capacity type) in ``blocked`` made unavailable; the types
    ``blocked`` does not name are the same objects."""
    if not blocked:
        return types
    named = {name for name, _, _ in blocked}
    out: list[InstanceType] = []
    for it in types:
        if it.name not in named:
            out.append(it)
            continue
        offerings = tuple(
            replace(o, available=False) if o.available and (it.name, o.zone, o.capacity_type) in blocked else o
            for o in it.offerings
        )
        out.append(replace(it, offerings=offerings))
    return out
