"""Seeding the embedded AWS like an EKS cluster's account for Karpenter, and the price table it is priced with.

:func:`seed` creates what an EC2NodeClass with ``karpenter.sh/discovery: <cluster>`` selectors and
``alias: al2023@latest`` resolves against: a VPC with one subnet per zone (us-east-1a/b/c), a
security group, AL2023 EKS AMIs for amd64/arm64 (standard, nvidia, neuron) published under the
EKS SSM parameter names (moto has none; they are written into moto's SSM store directly because
the public API refuses ``/aws/`` names), a node role + instance profile, and an EKS cluster record
(version, service CIDR) for DescribeCluster.

Spot prices cannot be written into moto (its DescribeSpotPriceHistory answers a 0.00001 placeholder
for everything), so :func:`write_price_table` writes a price table with per-zone ``spot`` overrides
that the pricing adapter prefers (``NODESMITH_PRICE_TABLE``).
"""

from __future__ import annotations

import json
import logging
import os
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

__all__ = [
    "ACCOUNT_ID",
    "DEFAULT_PRICE_TABLE",
    "DEFAULT_SEED_CLUSTER",
    "DEFAULT_ZONES",
    "SeedCluster",
    "SeededAws",
    "register_ami",
    "seed",
    "write_price_table",
]

LOG = logging.getLogger(__name__)

ACCOUNT_ID = "123456789012"  # moto's default account
DEFAULT_ZONES = ("us-east-1a", "us-east-1b", "us-east-1c")
DEFAULT_PRICE_TABLE = (
    Path(__file__).resolve().parents[3].parent / "shared" / "data" / "ec2-ondemand-prices-us-east-1.json"
)
"""The reference on-demand table next to the project (``../shared/data``); absent on a user's machine."""


@dataclass(frozen=True)
class SeededAws:
    """What :func:`seed` created (ids by zone / (arch, variant))."""

    cluster_name: str
    region: str
    vpc_id: str
    subnets: Mapping[str, str]
    security_group_id: str
    images: Mapping[tuple[str, str], str]
    kubernetes_version: str
    cluster_cidr: str
    cluster_endpoint: str
    cluster_ca: str
    node_role_arn: str
    instance_profile: str
    bottlerocket_images: Mapping[tuple[str, str], str] = field(default_factory=dict)
    """The Bottlerocket AMIs by (arch, ``standard`` | ``nvidia``), published for ``bottlerocket@latest`` and
    ``bottlerocket@<SeedCluster.bottlerocket_version>``."""


def _put_public_parameter(*, region: str, name: str, value: str) -> None:
    """Write an ``/aws/service/...`` SSM parameter into moto's store (its API rejects the prefix)."""
    from moto.ssm.models import Parameter, ssm_backends

    store = ssm_backends[ACCOUNT_ID][region]._parameters
    store[name].append(
        Parameter(  # type: ignore[abstract]  # moto's CloudFormation hooks are unused here
            account_id=ACCOUNT_ID,
            name=name,
            value=value,
            parameter_type="String",
            description=None,
            allowed_pattern=None,
            keyid=None,
            last_modified_date=datetime.now(UTC),
            version=len(store[name]) + 1,
            data_type="aws:ec2:image",
        )
    )


def _register_image(*, region: str, name: str, arch: str, description: str = "EKS AL2023 node") -> str:
    from moto.ec2.models import ec2_backends

    ami = ec2_backends[ACCOUNT_ID][region].register_image(name=name, description=f"{description} ({arch})")
    ami.architecture = arch
    ami.owner_alias = "amazon"
    return str(ami.id)


def register_ami(*, name: str, arch: str = "x86_64", region: str = "us-east-1") -> str:
    """Register one more EKS-style AMI (available, owner ``amazon``) in the embedded EC2; returns its id.

    The demo points its EC2NodeClass at it to show AMI drift.
    """
    return _register_image(region=region, name=name, arch=arch)


@dataclass(frozen=True, kw_only=True)
class SeedCluster:
    """The EKS cluster :func:`seed` creates and the AMIs it publishes for it.

    ``kubernetes_version`` is a minor version (``"1.31"``); ``ami_version`` the EKS AMI release
    (``"v20260101"``); ``cluster_cidr`` the service IPv4 CIDR; ``cluster_endpoint`` the API server URL and
    ``cluster_ca`` its base64 PEM certificate authority, both only recorded in :class:`SeededAws`.
    """

    kubernetes_version: str = "1.31"
    ami_version: str = "v20260101"
    bottlerocket_version: str = "v1.46.0"
    cluster_cidr: str = "172.20.0.0/16"
    cluster_endpoint: str = "https://127.0.0.1:6443"
    cluster_ca: str = ""


DEFAULT_SEED_CLUSTER = SeedCluster()
"""Kubernetes 1.31, AMI release v20260101, service CIDR 172.20.0.0/16, API server at https://127.0.0.1:6443."""


def seed(
    *,
    cluster_name: str,
    region: str = "us-east-1",
    zones: Sequence[str] = DEFAULT_ZONES,
    cluster: SeedCluster = DEFAULT_SEED_CLUSTER,
    endpoint_url: str | None = None,
) -> SeededAws:
    """Create the VPC, one subnet per zone of ``zones``, security group, AMIs + SSM parameters, IAM role/profile
    and the EKS cluster ``cluster`` describes.

    Resources are tagged ``karpenter.sh/discovery=<cluster_name>``. The AMIs are published under
    both ``.../recommended/image_id`` (alias ``al2023@latest``) and the pinned
    ``amazon-eks-node-al2023-<arch>-<variant>-<k8s>-<ami_version>`` name. ``endpoint_url`` defaults
    to ``AWS_ENDPOINT_URL``.
    """
    kubernetes_version, ami_version = cluster.kubernetes_version, cluster.ami_version
    import boto3

    from nodesmith.adapters.aws.nodeclass import ssm_alias_parameter

    def aws(service: str) -> Any:
        return boto3.client(
            service, region_name=region, endpoint_url=endpoint_url or os.environ.get("AWS_ENDPOINT_URL")
        )

    ec2, iam, eks = aws("ec2"), aws("iam"), aws("eks")
    discovery = [{"Key": "karpenter.sh/discovery", "Value": cluster_name}]
    vpc_id = ec2.create_vpc(CidrBlock="10.0.0.0/16")["Vpc"]["VpcId"]
    ec2.create_tags(Resources=[vpc_id], Tags=[*discovery, {"Key": "Name", "Value": f"{cluster_name}-vpc"}])
    subnets: dict[str, str] = {}
    for index, zone in enumerate(zones):
        subnet = ec2.create_subnet(VpcId=vpc_id, CidrBlock=f"10.0.{index * 64}.0/18", AvailabilityZone=zone)["Subnet"]
        subnets[zone] = subnet["SubnetId"]
        ec2.create_tags(
            Resources=[subnet["SubnetId"]], Tags=[*discovery, {"Key": "Name", "Value": f"{cluster_name}-{zone}"}]
        )
    sg_id = ec2.create_security_group(GroupName=f"{cluster_name}-node", Description="Nodesmith nodes", VpcId=vpc_id)[
        "GroupId"
    ]
    ec2.create_tags(Resources=[sg_id], Tags=discovery)
    images: dict[tuple[str, str], str] = {}
    for arch, variants in (("x86_64", ("standard", "nvidia", "neuron")), ("arm64", ("standard", "nvidia"))):
        for variant in variants:
            name = f"amazon-eks-node-al2023-{arch}-{variant}-{kubernetes_version}-{ami_version}"
            image_id = _register_image(region=region, name=name, arch=arch)
            images[(arch, variant)] = image_id
            for version in ("latest", ami_version):
                parameter = ssm_alias_parameter(
                    k8s_version=kubernetes_version, arch=arch, variant=variant, version=version
                )
                _put_public_parameter(region=region, name=parameter, value=image_id)
    bottlerocket = _seed_bottlerocket(region=region, cluster=cluster)
    role_name = f"KarpenterNodeRole-{cluster_name}"
    trust = {
        "Version": "2012-10-17",
        "Statement": [{"Effect": "Allow", "Principal": {"Service": "ec2.amazonaws.com"}, "Action": "sts:AssumeRole"}],
    }
    role_arn = iam.create_role(RoleName=role_name, AssumeRolePolicyDocument=json.dumps(trust))["Role"]["Arn"]
    iam.create_instance_profile(InstanceProfileName=role_name)
    iam.add_role_to_instance_profile(InstanceProfileName=role_name, RoleName=role_name)
    cluster_role = iam.create_role(RoleName=f"{cluster_name}-cluster", AssumeRolePolicyDocument=json.dumps(trust))[
        "Role"
    ]["Arn"]
    eks.create_cluster(
        name=cluster_name,
        version=kubernetes_version,
        roleArn=cluster_role,
        resourcesVpcConfig={"subnetIds": list(subnets.values()), "securityGroupIds": [sg_id]},
        kubernetesNetworkConfig={"serviceIpv4Cidr": cluster.cluster_cidr},
    )
    return SeededAws(
        cluster_name=cluster_name,
        region=region,
        vpc_id=vpc_id,
        subnets=subnets,
        security_group_id=sg_id,
        images=images,
        kubernetes_version=kubernetes_version,
        cluster_cidr=cluster.cluster_cidr,
        cluster_endpoint=cluster.cluster_endpoint,
        cluster_ca=cluster.cluster_ca,
        node_role_arn=role_arn,
        instance_profile=role_name,
        bottlerocket_images=bottlerocket,
    )


def _seed_bottlerocket(*, region: str, cluster: SeedCluster) -> dict[tuple[str, str], str]:
    """Register the Bottlerocket AMIs of ``cluster``'s Kubernetes version (standard and NVIDIA, per architecture)
    and publish them where ``bottlerocket@latest`` and ``bottlerocket@<bottlerocket_version>`` resolve
    (``/aws/service/bottlerocket/aws-k8s-<minor>[-nvidia]/<arch>/<release>/image_id``); returns their ids."""
    from nodesmith.adapters.aws.amis import bottlerocket_alias_parameters

    k8s, release = cluster.kubernetes_version, cluster.bottlerocket_version
    images: dict[tuple[str, str], str] = {}
    for version in ("latest", release):
        for parameter, boots in bottlerocket_alias_parameters(k8s_version=k8s, version=version).items():
            arch, variant = boots[0]
            if (arch, variant) not in images:
                flavour = "aws-k8s-" + k8s + ("-nvidia" if variant == "nvidia" else "")
                images[(arch, variant)] = _register_image(
                    region=region,
                    name=f"bottlerocket-{flavour}-{arch}-{release}-5f2ea9c1",
                    arch=arch,
                    description="Bottlerocket",
                )
            _put_public_parameter(region=region, name=parameter, value=images[(arch, variant)])
    return images


def write_price_table(
    *,
    path: str | Path,
    source: str | Path | None = DEFAULT_PRICE_TABLE,
    region: str = "us-east-1",
    zones: Sequence[str] = DEFAULT_ZONES,
    spot_ratio: float = 0.35,
) -> Path:
    """Write a price table with on-demand prices from ``source`` and per-zone spot overrides.

    Spot = on-demand x ``spot_ratio`` x a fixed per-zone factor (1.00, 1.04, 0.97, ...) so zones
    differ deterministically; types without an on-demand price get spot = on-demand estimate x
    ``spot_ratio`` (the table's ``spot_ratio``). When ``source`` is missing the table has no prices
    (a warning says so): the adapter then estimates them, labelled as estimates.
    """
    prices: dict[str, float] = {}
    if source is not None and Path(source).is_file():
        prices = {str(k): float(v) for k, v in json.loads(Path(source).read_text(encoding="utf-8"))["prices"].items()}
    else:
        LOG.warning(
            "price table %s not found: on-demand and spot prices will be estimates (set NODESMITH_PRICE_TABLE)", source
        )
    factors = (1.0, 1.04, 0.97, 1.02, 0.99, 1.05)
    spot = {
        name: {zone: round(price * spot_ratio * factors[i % len(factors)], 6) for i, zone in enumerate(zones)}
        for name, price in prices.items()
    }
    out = Path(path)
    out.write_text(
        json.dumps(
            {"currency": "USD", "region": region, "prices": prices, "spot": spot, "spot_ratio": spot_ratio},
            indent=1,
            sort_keys=True,
        ),
        encoding="utf-8",
    )
    return out
