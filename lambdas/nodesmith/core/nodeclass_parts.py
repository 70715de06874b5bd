"""What an EC2NodeClass's selector terms resolve to in EC2 (pure data): subnets, security groups and AMIs.

The EC2 adapter (:mod:`nodesmith.adapters.aws.nodeclass`) builds these from DescribeSubnets, DescribeSecurityGroups,
DescribeImages and the EKS SSM parameters; launches, the catalogue and the EC2NodeClass status
(:mod:`nodesmith.core.nodeclass_status`) read them.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Image", "SecurityGroup", "Subnet"]


@dataclass(frozen=True, slots=True)
class Subnet:
    """A subnet the node class selected: id, zone (``us-east-1a``), zone id (``use1-az1``) and free IPv4
    addresses (``AvailableIpAddressCount``)."""

    id: str
    zone: str
    zone_id: str
    available_ips: int


@dataclass(frozen=True, slots=True)
class SecurityGroup:
    """A security group the node class selected: id and group name."""

    id: str
    name: str


@dataclass(frozen=True, slots=True)
class Image:
    """An AMI: ``arch`` is the Kubernetes name (amd64/arm64); ``variant`` is standard/nvidia/neuron for
    alias-resolved EKS AMIs and ``""`` for user-selected AMIs (usable by every type of that arch); ``name`` the
    AMI name and ``creation_date`` its RFC 3339 ``CreationDate`` (``""`` when unknown).
    """

    id: str
    arch: str
    variant: str = ""
    name: str = ""
    creation_date: str = ""
