"""Parameter objects for the EC2 adapter: the cluster nodes join, boto3 clients, clocks, catalogue and launch settings.

:class:`~nodesmith.adapters.aws.provider.Ec2CloudProvider` and
:class:`~nodesmith.adapters.aws.nodeclass.NodeClassResolver` take these, one object per concern, rather
than one keyword per setting. All are frozen: a provider's configuration does not change after it is built.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Callable, Collection

__all__ = [
    "DEFAULT_CATALOG",
    "DEFAULT_LAUNCH",
    "NO_CLIENTS",
    "SYSTEM_CLOCKS",
    "AwsClients",
    "CatalogSettings",
    "Clocks",
    "ClusterConfig",
    "NodeLaunchSettings",
]


@dataclass(frozen=True, kw_only=True)
class ClusterConfig:
    """The EKS cluster nodes join, as written into node user data (nodeadm ``NodeConfig``).

    ``name`` is the EKS cluster name; ``endpoint`` its API server URL; ``ca`` the base64 PEM of its
    certificate authority (EKS ``certificateAuthority.data``). ``kubernetes_version`` (``"1.31"``) selects
    alias AMIs and ``service_cidr`` (``"172.20.0.0/16"``) is the service IPv4 (or IPv6) CIDR; either, when
    None, is read from EKS DescribeCluster on first use.
    """

    name: str
    endpoint: str
    ca: str
    kubernetes_version: str | None = None
    service_cidr: str | None = None


@dataclass(frozen=True, kw_only=True)
class AwsClients:
    """boto3 clients to use instead of creating them (tests inject stubbed or moto-backed ones).

    Each None is created from :mod:`nodesmith.adapters.aws.clients` for the provider's region: ``ec2`` at
    once, ``ssm``, ``iam`` and ``eks`` on first use, ``pricing`` (in the Pricing API's region) at once unless
    :attr:`CatalogSettings.use_pricing_api` is off.
    """

    ec2: Any | None = None
    ssm: Any | None = None
    iam: Any | None = None
    eks: Any | None = None
    pricing: Any | None = None


@dataclass(frozen=True, kw_only=True)
class Clocks:
    """Where time comes from: ``monotonic`` seconds for cache lifetimes, ``wall`` epoch seconds for expiries shared
    with other containers (the unavailable-offerings cache in the state store, capacity reservation end dates)."""

    monotonic: Callable[[], float] = field(default=time.monotonic)
    wall: Callable[[], float] = field(default=time.time)


@dataclass(frozen=True, kw_only=True)
class CatalogSettings:
    """How the instance type catalogue and its prices are read.

    ``price_table`` is the path of a JSON on-demand price table (``{"prices": {type: USD per hour}}``, see
    :mod:`nodesmith.adapters.aws.pricing`); ``use_pricing_api`` asks the AWS Pricing API for what the table
    lacks. ``instance_type_names`` restricts the catalogue (None: every type EC2 offers in the region).
    ``ttl_seconds`` is how long a DescribeInstanceTypes / DescribeInstanceTypeOfferings answer is reused.
    """

    price_table: str | None = None
    use_pricing_api: bool = True
    instance_type_names: Collection[str] | None = None
    ttl_seconds: float = 300.0


@dataclass(frozen=True, kw_only=True)
class NodeLaunchSettings:
    """The node identity and feature gate launches use.

    ``instance_profile`` is the instance profile for EC2NodeClasses whose ``role`` is ``node_role`` (name or
    ARN; when ``node_role`` is None, for any role); other roles get a profile created through IAM, as
    Karpenter's ``instanceprofile`` provider does. ``reserved_capacity`` is Karpenter's ``ReservedCapacity``
    feature gate (on by default): node classes' ``capacityReservationSelectorTerms`` are resolved and used, and
    other launches opt out of open ODCRs (``CapacityReservationPreference: none``).
    """

    instance_profile: str | None = None
    node_role: str | None = None
    reserved_capacity: bool = True


SYSTEM_CLOCKS = Clocks()
"""The process's own clocks (``time.monotonic``, ``time.time``)."""

NO_CLIENTS = AwsClients()
"""No injected client: every one is created for the region."""

DEFAULT_CATALOG = CatalogSettings()
"""No price table, the Pricing API, every instance type, answers reused for 5 minutes."""

DEFAULT_LAUNCH = NodeLaunchSettings()
"""No configured instance profile or node role; the ``ReservedCapacity`` gate on."""
