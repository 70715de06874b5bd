"""The instance catalogue behind ``nodesmith simulate``: embedded (moto) or real EC2, priced.

Embedded (default): moto's copy of the real EC2 catalogue, answered in-process under
``moto.mock_aws`` with throwaway credentials; the user's ``AWS_*`` environment and AWS config files
are hidden meanwhile, so nothing can reach the network or trip over a missing profile, and nothing
of moto stays active afterwards. Every zone of the region is offered (the simulation does not
resolve EC2NodeClass subnets or AMIs). The embedded AWS has no spot prices (moto answers a
placeholder that pricing ignores), so its ``DescribeSpotPriceHistory`` is answered empty and spot
prices are labelled estimates.

Disk cache: moto takes several seconds to answer ``DescribeInstanceTypes``, so its answers (and
those of ``DescribeInstanceTypeOfferings`` and ``DescribeAvailabilityZones``) are cached per moto
version and region in ``${XDG_CACHE_HOME:-~/.cache}/nodesmith/ec2-catalogue-moto-<version>-<region>.json``
(never in the repository). The file holds moto's static responses only (~4 MB); delete it at
will, the next run rebuilds it. Real AWS (``use_aws=True``) never uses it.

Prices: :class:`nodesmith.adapters.aws.pricing.PricingProvider` (price table, Pricing API with real
AWS, else labelled estimates).
"""

from __future__ import annotations

import contextlib
import copy
import json
import logging
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from nodesmith.cli.exits import BadInput

if TYPE_CHECKING:
    from collections.abc import Iterator, Mapping, Sequence

    from nodesmith.core.api.ec2nodeclass import EC2NodeClass
    from nodesmith.core.model import InstanceType

__all__ = [
    "CACHED_OPERATIONS",
    "PRICE_TABLE_ENV",
    "CatalogueSource",
    "catalogue_cache_path",
    "load_catalogue",
]

LOG = logging.getLogger(__name__)

PRICE_TABLE_ENV = "NODESMITH_PRICE_TABLE"
"""Environment variable naming the price table used when ``--price-table`` is not given."""

CACHED_OPERATIONS = frozenset({"DescribeInstanceTypes", "DescribeInstanceTypeOfferings", "DescribeAvailabilityZones"})
"""Embedded-AWS (moto) operations whose answers are static per moto version and region, hence cached on disk."""

_CACHE_FORMAT = 1


@dataclass(frozen=True, slots=True)
class CatalogueSource:
    """Where ``nodesmith simulate`` (and ``simulate --disrupt``) read the priced instance catalogue from.

    ``region``: the AWS region of the catalogue. ``price_table``: a JSON price table (on-demand USD per hour
    per instance type; None: ``$NODESMITH_PRICE_TABLE``, else the Pricing API with real AWS or labelled
    estimates). ``use_aws``: read the catalogue from real AWS, not the embedded one. ``instance_types``: a
    catalogue already built, used as is instead of loading one (tests share one across many runs).
    """

    region: str = "us-east-1"
    price_table: Path | None = None
    use_aws: bool = False
    instance_types: Sequence[InstanceType] | None = None


def load_catalogue(
    *, region: str, price_table: Path | None, use_aws: bool, nodeclass: EC2NodeClass | None = None
) -> list[InstanceType]:
    """Every instance type of ``region`` with priced offerings in every zone of the region.

    Embedded (``use_aws=False``): moto in-process under ``mock_aws`` with throwaway credentials;
    moto's static answers are cached on disk (see the module docstring); nothing of moto stays
    active afterwards. ``use_aws=True``: boto3's default credentials, the Pricing API for
    on-demand prices, ``DescribeSpotPriceHistory`` for spot. ``nodeclass``: its ``kubelet``
    (maxPods, podsPerCore, reserved, eviction), root volume size and ``instanceStorePolicy`` shape
    the types' capacity and overhead as Karpenter computes them; None means Karpenter's defaults.

    Raises ``BadInput`` for a malformed price table or node class, and botocore/moto errors for
    AWS failures.
    """
    from nodesmith.adapters.aws.catalog import InstanceTypeCatalog
    from nodesmith.adapters.aws.pricing import PriceTableError, PricingProvider

    settings = _nodeclass_settings(nodeclass)
    if use_aws:
        from nodesmith.adapters.aws.clients import client, pricing_region

        ec2 = client("ec2", region=region)
        try:
            pricing = PricingProvider(
                ec2=ec2,
                region=region,
                pricing=client("pricing", region=pricing_region(region)),
                price_table_path=price_table,
            )
        except PriceTableError as exc:
            raise BadInput(str(exc)) from exc
        return InstanceTypeCatalog(ec2=ec2, pricing=pricing, region=region).instance_types(**settings)

    with _embedded_ec2(region) as ec2:
        try:
            pricing = PricingProvider(ec2=ec2, region=region, pricing=None, price_table_path=price_table)
        except PriceTableError as exc:
            raise BadInput(str(exc)) from exc
        if price_table is None:
            LOG.warning("no price table (--price-table or $%s): on-demand prices are estimates", PRICE_TABLE_ENV)
        return InstanceTypeCatalog(ec2=ec2, pricing=pricing, region=region).instance_types(**settings)


def _nodeclass_settings(nodeclass: EC2NodeClass | None) -> dict[str, Any]:
    """Keyword arguments of ``InstanceTypeCatalog.instance_types`` taken from ``nodeclass``."""
    if nodeclass is None:
        return {}
    from nodesmith.adapters.aws.nodeclass import root_volume_bytes
    from nodesmith.core.instancetypes import KubeletSettings
    from nodesmith.core.resources import QuantityError

    spec = nodeclass.spec.model_dump(by_alias=True, exclude_none=True, mode="json")
    try:
        return {
            "kubelet": KubeletSettings.from_kubelet(nodeclass.spec.kubelet, ami_family=nodeclass.ami_family),
            "root_volume_bytes": root_volume_bytes(spec),
            "instance_store_policy": nodeclass.spec.instance_store_policy,
        }
    except (QuantityError, ValueError) as exc:
        raise BadInput(f"EC2NodeClass {nodeclass.name}: {exc}") from exc


@contextlib.contextmanager
def _embedded_ec2(region: str) -> Iterator[Any]:
    """An EC2 client answered in-process by moto, with the on-disk response cache attached.

    The user's AWS environment (``AWS_*`` variables: profile, endpoint overrides, credentials) and
    AWS config files are hidden for the duration, so nothing can route a call past moto to the
    network or fail on a missing profile; everything is restored on exit.
    """
    from unittest import mock

    import boto3
    import moto
    from moto import mock_aws

    cache = _ResponseCache(catalogue_cache_path(moto_version=moto.__version__, region=region))
    isolated = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    isolated.update(AWS_CONFIG_FILE=os.devnull, AWS_SHARED_CREDENTIALS_FILE=os.devnull)
    with mock.patch.dict(os.environ, isolated, clear=True), mock_aws():
        session = boto3.session.Session(
            aws_access_key_id="nodesmith-simulate", aws_secret_access_key="nodesmith-simulate", region_name=region
        )
        ec2 = session.client("ec2", region_name=region)
        cache.attach(ec2)
        ec2.meta.events.register("before-call.ec2.DescribeSpotPriceHistory", _no_spot_history)
        yield ec2
    cache.save()


def catalogue_cache_path(*, moto_version: str, region: str) -> Path:
    """``${XDG_CACHE_HOME:-~/.cache}/nodesmith/ec2-catalogue-moto-<version>-<region>.json``."""
    base = os.environ.get("XDG_CACHE_HOME", "").strip()
    root = Path(base) if base else Path.home() / ".cache"
    return root / "nodesmith" / f"ec2-catalogue-moto-{moto_version}-{region}.json"


def _fake_response(parsed: Mapping[str, Any]) -> tuple[Any, dict[str, Any]]:
    from botocore.awsrequest import AWSResponse

    body = dict(parsed)
    body["ResponseMetadata"] = {"HTTPStatusCode": 200, "HTTPHeaders": {}, "RetryAttempts": 0}
    return AWSResponse("https://ec2.embedded.invalid/", 200, {}, None), body


def _no_spot_history(**_: Any) -> tuple[Any, dict[str, Any]]:
    """``before-call`` hook: the embedded AWS has no spot prices (moto's placeholder is ignored anyway)."""
    return _fake_response({"SpotPriceHistory": []})


class _ResponseCache:
    """Disk cache of moto's answers to :data:`CACHED_OPERATIONS`, keyed by the serialized request.

    Attached to a client through botocore's ``before-call`` (answer from the cache) and
    ``after-call`` (remember moto's answer) events, so it works whatever the catalogue adapter
    asks and in what order. A missing, stale-format or unreadable file is ignored and rewritten.
    """

    def __init__(self, path: Path) -> None:
        self._path = path
        self._responses: dict[str, Any] = self._read()
        self._dirty = False

    def _read(self) -> dict[str, Any]:
        try:
            raw = json.loads(self._path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return {}
        if (
            not isinstance(raw, dict)
            or raw.get("format") != _CACHE_FORMAT
            or not isinstance(raw.get("responses"), dict)
        ):
            return {}
        return dict(raw["responses"])

    @staticmethod
    def _key(model: Any, params: Mapping[str, Any]) -> str | None:
        if model.name not in CACHED_OPERATIONS:
            return None
        return f"{model.name} {json.dumps(params.get('body'), sort_keys=True, default=str)}"

    def attach(self, client: Any) -> None:
        """Register the cache's hooks on ``client`` (a botocore/boto3 EC2 client)."""
        client.meta.events.register("before-call.ec2", self._before_call)
        client.meta.events.register("after-call.ec2", self._after_call)

    def _before_call(self, *, model: Any, params: Mapping[str, Any], context: dict[str, Any], **_: Any) -> Any:
        key = self._key(model, params)
        if key is None:
            return None
        if key not in self._responses:
            context["nodesmith_cache_key"] = key  # moto answers; after-call remembers it
            return None
        return _fake_response(copy.deepcopy(self._responses[key]))

    def _after_call(
        self, *, http_response: Any, parsed: Mapping[str, Any], context: Mapping[str, Any], **_: Any
    ) -> None:
        key = context.get("nodesmith_cache_key")
        if key is None or getattr(http_response, "status_code", 0) != 200:
            return
        body = {k: v for k, v in parsed.items() if k != "ResponseMetadata"}
        try:
            self._responses[key] = json.loads(json.dumps(body))
        except (TypeError, ValueError):  # not JSON-able (timestamps): simply not cached
            return
        self._dirty = True

    def save(self) -> None:
        """Write the cache atomically if anything new was learnt; failures are logged, never raised."""
        if not self._dirty:
            return
        payload = {"format": _CACHE_FORMAT, "responses": self._responses}
        tmp: Path | None = None
        try:
            self._path.parent.mkdir(parents=True, exist_ok=True)
            fd, name = tempfile.mkstemp(prefix=".catalogue-", suffix=".tmp", dir=self._path.parent)
            tmp = Path(name)
            with os.fdopen(fd, "w", encoding="utf-8") as fh:
                json.dump(payload, fh, separators=(",", ":"))
            tmp.replace(self._path)  # atomic: concurrent runs never read a half-written file
        except OSError as exc:
            LOG.warning("could not write the catalogue cache %s: %s", self._path, exc)
            if tmp is not None:
                with contextlib.suppress(OSError):
                    tmp.unlink()
            return
        self._dirty = False
        LOG.info("cached the embedded EC2 catalogue in %s", self._path)
