"""An EC2NodeClass's resolved status fields read as Karpenter's AWS provider writes them: every selected subnet with
the most free addresses first, security groups by id, AMIs newest first with the requirements of their variant,
the instance profile; a part that resolved to nothing is removed, a part not told is kept, and an unchanged
resolution asks for no write."""

from __future__ import annotations

from typing import Any

import pytest

from nodesmith.core.api.ec2nodeclass import EC2NodeClass
from nodesmith.core.nodeclass_parts import Image, SecurityGroup, Subnet
from nodesmith.core.nodeclass_status import (
    Check,
    ResolvedParts,
    ami_requirements,
    nodeclass_status,
    status_changed,
)

T0 = 1_800_000_000.0
PARTS = ("SubnetsReady", "SecurityGroupsReady", "AMIsReady", "InstanceProfileReady")
ALL_OK = tuple(Check(type=t, ok=True) for t in PARTS)
ARCH = "kubernetes.io/arch"
GPU = "karpenter.k8s.aws/instance-gpu-count"
ACCELERATOR = "karpenter.k8s.aws/instance-accelerator-count"

SUBNETS = (
    Subnet(id="subnet-0c", zone="us-east-1a", zone_id="use1-az1", available_ips=100),
    Subnet(id="subnet-0a", zone="us-east-1b", zone_id="use1-az2", available_ips=4000),
    Subnet(id="subnet-0b", zone="us-east-1a", zone_id="use1-az1", available_ips=100),
)
GROUPS = (SecurityGroup(id="sg-0b", name="nodes"), SecurityGroup(id="sg-0a", name="cluster"))
IMAGES = (
    Image(id="ami-0old", arch="amd64", variant="standard", name="eks-old", creation_date="2026-01-01T00:00:00.000Z"),
    Image(id="ami-0gpu", arch="amd64", variant="nvidia", name="eks-gpu", creation_date="2026-03-01T00:00:00.000Z"),
    Image(id="ami-0arm", arch="arm64", variant="standard", name="eks-arm", creation_date="2026-03-01T00:00:00.000Z"),
)


def nodeclass(status: dict[str, Any] | None = None) -> EC2NodeClass:
    doc: dict[str, Any] = {
        "apiVersion": "karpenter.k8s.aws/v1",
        "kind": "EC2NodeClass",
        "metadata": {"name": "default", "generation": 1},
        "spec": {
            "role": "KarpenterNodeRole-demo",
            "amiSelectorTerms": [{"alias": "al2023@latest"}],
            "subnetSelectorTerms": [{"tags": {"karpenter.sh/discovery": "demo"}}],
            "securityGroupSelectorTerms": [{"tags": {"karpenter.sh/discovery": "demo"}}],
        },
    }
    if status is not None:
        doc["status"] = status
    return EC2NodeClass.model_validate(doc)


def resolved(**parts: Any) -> ResolvedParts:
    values: dict[str, Any] = {
        "checks": ALL_OK,
        "subnets": SUBNETS,
        "security_groups": GROUPS,
        "images": IMAGES,
        "instance_profile": "demo_profile",
    }
    values.update(parts)
    return ResolvedParts(**values)


def test_fields_come_in_karpenters_sort_orders() -> None:
    status = nodeclass_status(nodeclass=nodeclass(), resolution=resolved(), now=T0)
    assert status["subnets"] == [
        {"id": "subnet-0a", "zone": "us-east-1b", "zoneID": "use1-az2"},
        {"id": "subnet-0b", "zone": "us-east-1a", "zoneID": "use1-az1"},
        {"id": "subnet-0c", "zone": "us-east-1a", "zoneID": "use1-az1"},
    ]
    assert status["securityGroups"] == [{"id": "sg-0a", "name": "cluster"}, {"id": "sg-0b", "name": "nodes"}]
    assert [a["id"] for a in status["amis"]] == ["ami-0arm", "ami-0gpu", "ami-0old"]
    assert status["amis"][2]["name"] == "eks-old"
    assert status["instanceProfile"] == "demo_profile"
    assert [c["type"] for c in status["conditions"]] == [*PARTS, "Ready"]


def test_ami_requirements_follow_the_variant_sorted_by_key_length() -> None:
    assert ami_requirements(IMAGES[0]) == [
        {"key": ARCH, "operator": "In", "values": ["amd64"]},
        {"key": GPU, "operator": "DoesNotExist"},
        {"key": ACCELERATOR, "operator": "DoesNotExist"},
    ]
    assert ami_requirements(IMAGES[1]) == [
        {"key": ARCH, "operator": "In", "values": ["amd64"]},
        {"key": GPU, "operator": "Exists"},
    ]
    neuron = Image(id="ami-0n", arch="amd64", variant="neuron")
    assert ami_requirements(neuron)[1:] == [{"key": ACCELERATOR, "operator": "Exists"}]
    selected = Image(id="ami-0s", arch="arm64")
    assert ami_requirements(selected) == [{"key": ARCH, "operator": "In", "values": ["arm64"]}]
    with pytest.raises(ValueError, match="ami-0x: unknown variant 'windows'"):
        ami_requirements(Image(id="ami-0x", arch="amd64", variant="windows"))


def test_an_ami_without_a_creation_date_sorts_after_dated_ones_then_by_id() -> None:
    undated = (Image(id="ami-0b", arch="amd64"), Image(id="ami-0a", arch="arm64"), IMAGES[0])
    status = nodeclass_status(nodeclass=nodeclass(), resolution=resolved(images=undated), now=T0)
    assert [a["id"] for a in status["amis"]] == ["ami-0old", "ami-0a", "ami-0b"]
    assert "name" not in status["amis"][1]


def test_a_part_that_resolved_to_nothing_is_removed_and_one_not_told_is_kept() -> None:
    first = nodeclass_status(nodeclass=nodeclass(), resolution=resolved(), now=T0)
    before = nodeclass(first)
    checks = (Check(type="SubnetsReady", ok=False, reason="SubnetsNotFound", message="none"), *ALL_OK[1:])
    partial = resolved(checks=checks, subnets=(), images=None, instance_profile=None)
    status = nodeclass_status(nodeclass=before, resolution=partial, now=T0 + 60)
    assert status["subnets"] is None
    assert "amis" not in status
    assert "instanceProfile" not in status
    assert status["securityGroups"] == first["securityGroups"]
    assert status_changed(before, status)


def test_an_unchanged_resolution_needs_no_write_and_a_changed_one_does() -> None:
    first = nodeclass_status(nodeclass=nodeclass(), resolution=resolved(), now=T0)
    assert status_changed(nodeclass(), first)
    written = nodeclass(first)
    assert not status_changed(written, nodeclass_status(nodeclass=written, resolution=resolved(), now=T0 + 600))
    reordered = resolved(subnets=tuple(reversed(SUBNETS)), security_groups=tuple(reversed(GROUPS)))
    assert not status_changed(written, nodeclass_status(nodeclass=written, resolution=reordered, now=T0 + 600))
    new_ami = (
        *IMAGES[1:],
        Image(id="ami-0new", arch="amd64", variant="standard", creation_date="2026-04-01T00:00:00Z"),
    )
    assert status_changed(written, nodeclass_status(nodeclass=written, resolution=resolved(images=new_ami), now=T0))
    assert status_changed(
        written, nodeclass_status(nodeclass=written, resolution=resolved(instance_profile="other"), now=T0)
    )


def test_removing_a_field_that_is_not_there_is_no_change() -> None:
    first = nodeclass_status(nodeclass=nodeclass(), resolution=resolved(subnets=()), now=T0)
    written = nodeclass({k: v for k, v in first.items() if v is not None})
    assert not status_changed(written, nodeclass_status(nodeclass=written, resolution=resolved(subnets=()), now=T0))
