"""The AMI a launch picks for an instance type is the one Karpenter's AMI requirements (written to
``status.amis``, read by drift) give it: standard for plain types, nvidia for any GPU type (an AMD GPU included,
as Karpenter maps it), neuron for Inferentia/Trainium. Otherwise a node launched from one AMI would be found
drifted against the status at once."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from nodesmith.adapters.aws.amis import AmiCompatibility, required_variant
from nodesmith.core.model import InstanceType, NodeSelectorRequirement
from nodesmith.core.nodeclass_parts import Image
from nodesmith.core.nodeclass_status import ami_requirements
from nodesmith.core.requirements import Requirements

K = "karpenter.k8s.aws/"
IMAGES = (
    Image(id="ami-std", arch="amd64", variant="standard"),
    Image(id="ami-gpu", arch="amd64", variant="nvidia"),
    Image(id="ami-neuron", arch="amd64", variant="neuron"),
    Image(id="ami-arm", arch="arm64", variant="standard"),
)


def instance_type(name: str, *, arch: str = "amd64", **labels: str) -> InstanceType:
    return InstanceType(
        name=name,
        labels={"kubernetes.io/arch": arch, **{K + k.replace("_", "-"): v for k, v in labels.items()}},
        capacity={"cpu": 4000},
        overhead={},
        offerings=(),
    )


def status_choice(it: InstanceType) -> list[str]:
    """The AMIs whose status requirements the type's labels meet (drift's reading of ``status.amis``)."""
    labels = Requirements.from_labels(it.labels)
    out = []
    for image in IMAGES:
        reqs: list[Any] = [
            NodeSelectorRequirement(key=r["key"], operator=r["operator"], values=tuple(r.get("values", ())))
            for r in ami_requirements(image)
        ]
        if labels.compatible(Requirements.from_node_selector_requirements(reqs)) is None:
            out.append(image.id)
    return out


@pytest.mark.parametrize(
    ("it", "variant", "ami"),
    [
        (instance_type("m5.large"), "standard", "ami-std"),
        (instance_type("m7g.large", arch="arm64"), "standard", "ami-arm"),
        (instance_type("g5.xlarge", instance_gpu_count="1", instance_gpu_manufacturer="nvidia"), "nvidia", "ami-gpu"),
        (instance_type("g4ad.xlarge", instance_gpu_count="1", instance_gpu_manufacturer="amd"), "nvidia", "ami-gpu"),
        (instance_type("inf2.xlarge", instance_accelerator_count="1"), "neuron", "ami-neuron"),
    ],
)
def test_launch_and_status_agree_on_the_ami(it: InstanceType, variant: str, ami: str) -> None:
    assert required_variant(it) == variant
    chosen = AmiCompatibility(IMAGES).image_for(it)
    assert chosen is not None
    assert chosen.id == ami
    assert status_choice(it) == [ami]


def test_a1_instances_boot_bottlerocket_and_custom_images_but_not_al2023() -> None:
    # Karpenter compatibility.go: AL2023 does not run on a1 (Graviton 1); Bottlerocket and Custom AMIs may.
    a1 = instance_type("a1.large", arch="arm64")
    assert AmiCompatibility(IMAGES, "AL2023").image_for(a1) is None
    assert AmiCompatibility(IMAGES, "Bottlerocket").image_for(a1) == IMAGES[3]
    assert AmiCompatibility(IMAGES, "Custom")(a1)
    assert AmiCompatibility(IMAGES, "AL2023")(instance_type("m6g.large", arch="arm64"))


def test_connection_tracking_needs_nitro_and_nested_virtualization_a_processor_that_has_it() -> None:
    # Karpenter compatibility.go: connectionTrackingCheck and nestedVirtualizationCheck.
    nitro = instance_type("m5.large", instance_hypervisor="nitro")
    xen = instance_type("m4.large", instance_hypervisor="xen")
    assert AmiCompatibility(IMAGES)(xen)
    tracking = AmiCompatibility(IMAGES, nitro_only=True)
    assert tracking(nitro) and not tracking(xen)

    nested = AmiCompatibility(IMAGES, nested_virtualization=True)
    capable = replace(instance_type("c8i.large"), processor_features=frozenset({"nested-virtualization"}))
    assert nested(capable) and not nested(instance_type("c7i.large"))
