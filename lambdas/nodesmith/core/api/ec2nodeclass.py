"""``karpenter.k8s.aws/v1`` EC2NodeClass: how to launch instances (subnets, security groups, AMIs, ...).

Source: ``[aws]:pkg/apis/v1/ec2nodeclass.go``, ``ec2nodeclass_status.go``,
``kubeletconfiguration_validation.go``, ``[aws]:pkg/providers/amifamily/*.go`` (default block
devices) and the CEL rules of ``[aws]:pkg/apis/crds/karpenter.k8s.aws_ec2nodeclasses.yaml`` (v1.14.1).
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Final, Literal

from pydantic import AfterValidator, Field, StringConstraints, field_validator, model_validator

from nodesmith.core.api.common import (
    Condition,
    NamedObject,
    ObjectMeta,
    SpecModel,
    StatusModel,
    omit_empty,
)
from nodesmith.core.api.kubelet import KubeletConfiguration
from nodesmith.core.resources import parse_quantity

__all__ = [
    "AMI_FAMILIES",
    "AMISelectorTerm",
    "BlockDevice",
    "BlockDeviceMapping",
    "CPUOptions",
    "CapacityReservationSelectorTerm",
    "CapacityReservationStatus",
    "ConnectionTracking",
    "EC2NodeClass",
    "EC2NodeClassSpec",
    "EC2NodeClassStatus",
    "KubeletConfiguration",
    "MetadataOptions",
    "SecurityGroupSelectorTerm",
    "SubnetSelectorTerm",
    "default_block_device_mappings",
]

API_VERSION: Final = "karpenter.k8s.aws/v1"
KIND: Final = "EC2NodeClass"

AMIFamily = Literal["AL2", "AL2023", "Bottlerocket", "Custom", "Windows2019", "Windows2022", "Windows2025"]
AMI_FAMILIES: Final = {
    "al2": "AL2",
    "al2023": "AL2023",
    "bottlerocket": "Bottlerocket",
    "windows2019": "Windows2019",
    "windows2022": "Windows2022",
    "windows2025": "Windows2025",
}
"""Alias family (``al2023@latest``) to ``amiFamily``."""

_RESTRICTED_TAGS = (
    "eks:eks-cluster-name",
    "karpenter.sh/nodepool",
    "karpenter.sh/nodeclaim",
    "karpenter.k8s.aws/ec2nodeclass",
)


def _check_tag_map(tags: dict[str, str]) -> dict[str, str]:
    for key, value in tags.items():
        if not key or not value:
            raise ValueError("empty tag keys or values aren't supported")
    return tags


SelectorTags = Annotated[dict[str, str], AfterValidator(_check_tag_map)]
"""Selector tags: non-empty keys and values; value ``"*"`` matches any value."""


class SubnetSelectorTerm(SpecModel):
    """A subnet selector term: ``tags`` (value ``"*"`` matches any) or ``id`` (exclusive)."""

    tags: SelectorTags | None = None
    id: Annotated[str, StringConstraints(pattern=r"subnet-[0-9a-z]+")] | None = None

    @model_validator(mode="after")
    def _one_of(self) -> SubnetSelectorTerm:
        if self.tags is None and self.id is None:
            raise ValueError("expected at least one, got none, ['tags', 'id']")
        if self.id is not None and self.tags is not None:
            raise ValueError("'id' is mutually exclusive, cannot be set with a combination of other fields")
        return self


class SecurityGroupSelectorTerm(SpecModel):
    """A security group selector term: ``tags``, ``id`` (exclusive) or ``name`` (exclusive)."""

    tags: SelectorTags | None = None
    id: Annotated[str, StringConstraints(pattern=r"sg-[0-9a-z]+")] | None = None
    name: str | None = None

    @model_validator(mode="after")
    def _one_of(self) -> SecurityGroupSelectorTerm:
        set_fields = [f for f in ("tags", "id", "name") if getattr(self, f) is not None]
        if not set_fields:
            raise ValueError("expected at least one, got none, ['tags', 'id', 'name']")
        if len(set_fields) > 1 and ("id" in set_fields or "name" in set_fields):
            raise ValueError(f"{set_fields} are mutually exclusive in a security group selector term")
        return self


class CapacityReservationSelectorTerm(SpecModel):
    """A capacity reservation selector term (``[aws]:pkg/apis/v1/ec2nodeclass.go``): ``tags`` (at most 20; value
    ``"*"`` matches any), ``id`` (``cr-...``, alone), ``ownerID`` (a 12-digit account) and ``instanceMatchCriteria``
    (``open`` | ``targeted``). One of ``tags``, ``id`` or ``instanceMatchCriteria`` is required; terms are ORed.
    """

    tags: Annotated[SelectorTags, Field(max_length=20)] | None = None
    id: Annotated[str, StringConstraints(pattern=r"^cr-[0-9a-z]+$")] | None = None
    owner_id: Annotated[str, StringConstraints(pattern=r"^[0-9]{12}$")] | None = Field(default=None, alias="ownerID")
    instance_match_criteria: Literal["open", "targeted"] | None = None

    @model_validator(mode="after")
    def _one_of(self) -> CapacityReservationSelectorTerm:
        set_fields = [f for f in ("tags", "id", "owner_id", "instance_match_criteria") if getattr(self, f) is not None]
        if not {"tags", "id", "instance_match_criteria"} & set(set_fields):
            raise ValueError("expected at least one, got none, ['tags', 'id', 'instanceMatchCriteria']")
        if self.id is not None and len(set_fields) > 1:
            raise ValueError("'id' is mutually exclusive, cannot be set with a combination of other fields")
        return self


class AMISelectorTerm(SpecModel):
    """An AMI selector term: ``alias`` (``family@version``, alone), ``id`` (alone), or ``tags``/``name``/
    ``owner``/``ssmParameter``.

    Alias families: al2, al2023, bottlerocket, windows2019/2022/2025; Windows only ``@latest``.
    """

    alias: Annotated[str, StringConstraints(max_length=30, pattern=r"^[a-zA-Z0-9]+@.+$")] | None = None
    tags: SelectorTags | None = None
    id: Annotated[str, StringConstraints(pattern=r"ami-[0-9a-z]+")] | None = None
    name: str | None = None
    owner: str | None = None
    ssm_parameter: str | None = None

    @field_validator("alias")
    @classmethod
    def _alias_family(cls, alias: str | None) -> str | None:
        if alias is None:
            return alias
        family, _, version = alias.partition("@")
        if family not in AMI_FAMILIES:
            raise ValueError(f"family {family!r} is not supported, must be one of {', '.join(AMI_FAMILIES)}")
        if family.startswith("windows") and version != "latest":
            raise ValueError("windows families may only specify version 'latest'")
        return alias

    @model_validator(mode="after")
    def _one_of(self) -> AMISelectorTerm:
        set_fields = [
            f for f in ("alias", "tags", "id", "name", "owner", "ssm_parameter") if getattr(self, f) is not None
        ]
        if not {"tags", "id", "name", "alias", "ssm_parameter"} & set(set_fields):
            raise ValueError("expected at least one, got none, ['tags', 'id', 'name', 'alias', 'ssmParameter']")
        for exclusive in ("id", "alias"):
            if exclusive in set_fields and set(set_fields) & {"alias", "id", "tags", "name", "owner"} - {exclusive}:
                raise ValueError(
                    f"'{exclusive}' is mutually exclusive, cannot be set with a combination of other fields"
                )
        return self

    @property
    def alias_family(self) -> str | None:
        """``amiFamily`` implied by the alias (``al2023@latest`` -> ``AL2023``), or None."""
        return AMI_FAMILIES[self.alias.partition("@")[0]] if self.alias else None

    @property
    def alias_version(self) -> str | None:
        """Version part of the alias (``latest`` or ``v20240625``), or None."""
        return self.alias.partition("@")[2] if self.alias else None


_VOLUME_SIZE = r"^((?:[1-9][0-9]{0,3}|[1-4][0-9]{4}|[5][0-8][0-9]{3}|59000)Gi|(?:[1-9][0-9]{0,3}|[1-5][0-9]{4}|[6][0-3][0-9]{3}|64000)G|([1-9]||[1-5][0-7]|58)Ti|([1-9]||[1-5][0-9]|6[0-3]|64)T)$"  # noqa: E501


class BlockDevice(SpecModel):
    """An EBS volume: ``volumeSize`` (``"20Gi"``) or ``snapshotID`` required; ``volumeType`` gp3, gp2, io1, ..."""

    delete_on_termination: bool | None = None
    encrypted: bool | None = None
    iops: int | None = None
    kms_key_id: str | None = Field(default=None, alias="kmsKeyID")
    snapshot_id: str | None = Field(default=None, alias="snapshotID")
    throughput: int | None = None
    volume_initialization_rate: int | None = Field(default=None, ge=100, le=300)
    volume_size: Annotated[str, StringConstraints(pattern=_VOLUME_SIZE)] | None = None
    volume_type: Literal["standard", "io1", "io2", "gp2", "sc1", "st1", "gp3"] | None = None

    @model_validator(mode="after")
    def _size_or_snapshot(self) -> BlockDevice:
        if self.snapshot_id is None and self.volume_size is None:
            raise ValueError("snapshotID or volumeSize must be defined")
        if self.volume_initialization_rate is not None and not self.snapshot_id:
            raise ValueError("snapshotID must be set when volumeInitializationRate is set")
        return self

    def volume_size_bytes(self) -> int | None:
        """``volumeSize`` in bytes (``"20Gi"`` -> 21474836480), None when unset."""
        return parse_quantity(self.volume_size) if self.volume_size else None


class BlockDeviceMapping(SpecModel):
    """A block device mapping (``deviceName`` like ``/dev/xvda``); ``rootVolume`` marks the kubelet root."""

    device_name: str | None = None
    ebs: BlockDevice | None = None
    root_volume: bool | None = None


def default_block_device_mappings(ami_family: str) -> list[BlockDeviceMapping]:
    """Karpenter's block devices when an EC2NodeClass gives none (``DefaultBlockDeviceMappings``).

    AL2/AL2023: ``/dev/xvda`` 20Gi gp3 encrypted; Bottlerocket: ``/dev/xvda`` 4Gi + ``/dev/xvdb``
    20Gi (gp3, encrypted); Windows: ``/dev/sda1`` 50Gi; Custom: none (the AMI's own mappings).
    """

    def gp3(device: str, size: str) -> BlockDeviceMapping:
        return BlockDeviceMapping(
            device_name=device, ebs=BlockDevice(encrypted=True, volume_type="gp3", volume_size=size)
        )

    if ami_family in ("AL2", "AL2023"):
        return [gp3("/dev/xvda", "20Gi")]
    if ami_family == "Bottlerocket":
        return [gp3("/dev/xvda", "4Gi"), gp3("/dev/xvdb", "20Gi")]
    if ami_family.startswith("Windows"):
        return [gp3("/dev/sda1", "50Gi")]
    return []


class MetadataOptions(SpecModel):
    """Instance metadata service options; Karpenter's defaults: IMDSv2 required, hop limit 1."""

    http_endpoint: Literal["enabled", "disabled"] = "enabled"
    http_protocol_ipv6: Literal["enabled", "disabled"] = Field(default="disabled", alias="httpProtocolIPv6")
    http_put_response_hop_limit: int = Field(default=1, ge=1, le=64)
    http_tokens: Literal["required", "optional"] = "required"


class ConnectionTracking(SpecModel):
    """Idle connection tracking timeouts (seconds) of the ENIs the launch template configures (Karpenter
    ``ConnectionTracking``; EC2 ``ConnectionTrackingSpecificationRequest``, Nitro instances only): established TCP
    60-432000, UDP streams 60-180, other UDP flows 30-60; at least one must be set."""

    tcp_established_timeout: int | None = Field(default=None, ge=60, le=432_000)
    udp_stream_timeout: int | None = Field(default=None, ge=60, le=180)
    udp_timeout: int | None = Field(default=None, ge=30, le=60)

    @model_validator(mode="after")
    def _one_set(self) -> ConnectionTracking:
        if self.tcp_established_timeout is None and self.udp_stream_timeout is None and self.udp_timeout is None:
            raise ValueError("at least one of tcpEstablishedTimeout, udpStreamTimeout, or udpTimeout must be set")
        return self


class CPUOptions(SpecModel):
    """CPU options of the launched instances (Karpenter ``CPUOptions``): ``nestedVirtualization`` ``enabled`` also
    limits the instance types to those whose processor supports it."""

    nested_virtualization: Literal["enabled", "disabled"] | None = None


class EC2NodeClassSpec(SpecModel):
    """``EC2NodeClass.spec``. Exactly one of ``role``/``instance_profile``; ``ami_family`` is
    required unless an alias is used and must match the alias (or be ``Custom``)."""

    subnet_selector_terms: list[SubnetSelectorTerm] = Field(min_length=1, max_length=30)
    security_group_selector_terms: list[SecurityGroupSelectorTerm] = Field(min_length=1, max_length=30)
    ami_selector_terms: list[AMISelectorTerm] = Field(min_length=1, max_length=30)
    ami_family: AMIFamily | None = None
    role: Annotated[str, StringConstraints(min_length=1)] | None = None
    instance_profile: Annotated[str, StringConstraints(min_length=1)] | None = None
    user_data: str | None = None
    tags: dict[str, str] = Field(default_factory=dict, exclude_if=omit_empty)
    kubelet: KubeletConfiguration | None = None
    block_device_mappings: list[BlockDeviceMapping] = Field(default_factory=list, max_length=50, exclude_if=omit_empty)
    metadata_options: MetadataOptions = Field(default_factory=MetadataOptions)
    associate_public_ip_address: bool | None = Field(default=None, alias="associatePublicIPAddress")
    detailed_monitoring: bool | None = None
    instance_store_policy: Literal["RAID0"] | None = None
    context: str | None = None
    ip_prefix_count: int | None = Field(default=None, ge=0)
    capacity_reservation_selector_terms: list[CapacityReservationSelectorTerm] = Field(
        default_factory=list, max_length=30, exclude_if=omit_empty
    )
    placement_group_selector: dict[str, str] | None = None
    network_interfaces: list[dict[str, Any]] = Field(default_factory=list, max_length=150, exclude_if=omit_empty)
    cpu_options: CPUOptions | None = None
    connection_tracking: ConnectionTracking | None = None

    @field_validator("tags")
    @classmethod
    def _tags(cls, tags: dict[str, str]) -> dict[str, str]:
        for key in tags:
            if not key:
                raise ValueError("empty tag keys aren't supported")
            if key in _RESTRICTED_TAGS or key.startswith("kubernetes.io/cluster"):
                raise ValueError(f"tag contains a restricted tag matching {key}")
        return tags

    @model_validator(mode="after")
    def _cross_field(self) -> EC2NodeClassSpec:
        if (self.role is None) == (self.instance_profile is None):
            raise ValueError("must specify exactly one of ['role', 'instanceProfile']")
        aliases = [t for t in self.ami_selector_terms if t.alias]
        if aliases and len(self.ami_selector_terms) != 1:
            raise ValueError(
                "amiSelectorTerms: 'alias' is mutually exclusive, cannot be set with other amiSelectorTerms"
            )
        if aliases:
            implied = aliases[0].alias_family
            if self.ami_family is not None and self.ami_family not in (implied, "Custom"):
                raise ValueError(f"if set, amiFamily must be '{implied}' or 'Custom' when using an {implied} alias")
        elif self.ami_family is None:
            raise ValueError("must specify amiFamily if amiSelectorTerms does not contain an alias")
        roots = [m for m in self.block_device_mappings if m.root_volume]
        if len(roots) > 1:
            raise ValueError("blockDeviceMappings: must have only one blockDeviceMappings with rootVolume")
        return self


class SubnetStatus(StatusModel):
    """A resolved subnet in ``status.subnets``: id, zone and zone id (``[aws]:pkg/apis/v1/ec2nodeclass_status.go``)."""

    id: str = Field(description="The subnet's id.")
    zone: str = Field(default="", description="The availability zone of the subnet.")
    zone_id: str | None = Field(default=None, alias="zoneID", description="The availability zone id of the subnet.")


class SecurityGroupStatus(StatusModel):
    """A resolved security group in ``status.securityGroups``: id and name."""

    id: str = Field(description="The security group's id.")
    name: str | None = Field(default=None, description="The security group's name.")


_NODE_SELECTOR_REQUIREMENT_SCHEMA: Final[dict[str, Any]] = {
    "type": "object",
    "description": "A node selector requirement (corev1.NodeSelectorRequirement).",
    "required": ["key", "operator"],
    "properties": {
        "key": {"type": "string", "description": "The label key the requirement applies to."},
        "operator": {"type": "string", "description": "In, NotIn, Exists, DoesNotExist, Gt or Lt."},
        "values": {"type": "array", "items": {"type": "string"}, "description": "The values of In/NotIn/Gt/Lt."},
    },
}


class AMIStatus(StatusModel):
    """A resolved AMI in ``status.amis`` with the requirements (arch, GPU/accelerator ...) an instance type must meet
    to boot it, as ``corev1.NodeSelectorRequirement`` JSON (``{key, operator, values}``)."""

    id: str = Field(description="The AMI's id.")
    name: str | None = Field(default=None, description="The AMI's name.")
    deprecated: bool | None = Field(default=None, description="Whether the AMI is deprecated.")
    requirements: list[dict[str, Any]] = Field(
        default_factory=list,
        exclude_if=omit_empty,
        description="What an instance type must meet to be launched with this AMI.",
        json_schema_extra={"items": _NODE_SELECTOR_REQUIREMENT_SCHEMA},
    )


class CapacityReservationStatus(StatusModel):
    """A selected capacity reservation in ``status.capacityReservations``
    (``[aws]:pkg/apis/v1/ec2nodeclass_status.go``).

    ``reservationType`` is ``default`` (an ODCR) or ``capacity-block``; ``state`` is ``expiring`` for a Capacity Block
    within 40 minutes of its ``endTime`` (RFC 3339), else ``active``.
    """

    availability_zone: str
    id: Annotated[str, StringConstraints(pattern=r"^cr-[0-9a-z]+$")]
    instance_type: str
    owner_id: Annotated[str, StringConstraints(pattern=r"^[0-9]{12}$")] = Field(alias="ownerID")
    instance_match_criteria: Literal["open", "targeted"] = "targeted"
    reservation_type: Literal["default", "capacity-block"] = "default"
    interruptible: bool = False
    state: Literal["active", "expiring"] = "active"
    end_time: str | None = None


class EC2NodeClassStatus(StatusModel):
    """``EC2NodeClass.status``: what the selector terms resolved to, plus conditions."""

    subnets: list[SubnetStatus] = Field(
        default_factory=list,
        exclude_if=omit_empty,
        description="Every subnet the subnetSelectorTerms select, most available IPv4 addresses first.",
    )
    security_groups: list[SecurityGroupStatus] = Field(
        default_factory=list,
        exclude_if=omit_empty,
        description="Every security group the securityGroupSelectorTerms select, by id.",
    )
    amis: list[AMIStatus] = Field(
        default_factory=list,
        exclude_if=omit_empty,
        description="The AMIs the amiSelectorTerms resolve to, newest first, each with the requirements it serves.",
    )
    capacity_reservations: list[CapacityReservationStatus] = Field(default_factory=list, exclude_if=omit_empty)
    instance_profile: str | None = Field(
        default=None,
        description="The instance profile nodes launch with: spec.instanceProfile or the one for spec.role.",
    )
    conditions: list[Condition] = Field(default_factory=list, exclude_if=omit_empty)


_ALIAS_RE = re.compile(r"^([a-zA-Z0-9]+)@(.+)$")


class EC2NodeClass(NamedObject):
    """A ``karpenter.k8s.aws/v1`` EC2NodeClass with Karpenter's validation and defaults."""

    api_version: Literal["karpenter.k8s.aws/v1"] = API_VERSION
    kind: Literal["EC2NodeClass"] = KIND
    metadata: ObjectMeta
    spec: EC2NodeClassSpec
    status: EC2NodeClassStatus | None = None

    @property
    def ami_family(self) -> str:
        """The effective AMI family: ``spec.amiFamily`` or the one implied by the alias."""
        if self.spec.ami_family is not None:
            return self.spec.ami_family
        for term in self.spec.ami_selector_terms:
            if term.alias_family:
                return term.alias_family
        return "Custom"

    @property
    def alias(self) -> tuple[str, str] | None:
        """``(family, version)`` of the alias term (``("al2023", "latest")``), or None."""
        for term in self.spec.ami_selector_terms:
            match = _ALIAS_RE.match(term.alias or "")
            if match:
                return match.group(1), match.group(2)
        return None

    def effective_block_device_mappings(self) -> list[BlockDeviceMapping]:
        """``spec.blockDeviceMappings``, or Karpenter's family default when none are given."""
        return list(self.spec.block_device_mappings) or default_block_device_mappings(self.ami_family)
