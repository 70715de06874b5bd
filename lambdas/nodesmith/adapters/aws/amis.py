"""EKS-optimised AMIs as Nodesmith sees them: :class:`Image` (defined in :mod:`nodesmith.core.nodeclass_parts`),
which variant an instance type needs (:func:`required_variant`), the per-type AMI predicate
(:class:`AmiCompatibility`) and the SSM parameter naming of AL2023 aliases (:func:`ssm_alias_parameter`, Karpenter
``al2023.go``).

The EC2/SSM lookups themselves are in :class:`~nodesmith.adapters.aws.nodeclass.NodeClassResolver`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from nodesmith.core.instancetypes import NEURON
from nodesmith.core.nodeclass_parts import Image
from nodesmith.core.resources import GPU_NVIDIA

if TYPE_CHECKING:
    from nodesmith.core.model import InstanceType

__all__ = [
    "AmiCompatibility",
    "Image",
    "required_variant",
    "ssm_alias_parameter",
]

_ARCH_TO_EC2 = {"amd64": "x86_64", "arm64": "arm64"}
_EC2_TO_ARCH = {v: k for k, v in _ARCH_TO_EC2.items()}
_ALIAS_VARIANTS = {"x86_64": ("standard", "nvidia", "neuron"), "arm64": ("standard", "nvidia")}


def required_variant(instance_type: InstanceType) -> str:
    """EKS AMI variant an instance type needs: ``nvidia`` with NVIDIA GPUs, ``neuron`` with Neuron devices."""
    if instance_type.capacity.get(GPU_NVIDIA, 0) > 0:
        return "nvidia"
    if instance_type.capacity.get(NEURON, 0) > 0:
        return "neuron"
    return "standard"


@dataclass(frozen=True, slots=True)
class AmiCompatibility:
    """Hashable predicate: does the node class have an AMI for this instance type (arch and variant)?"""

    images: tuple[Image, ...]

    def image_for(self, instance_type: InstanceType) -> Image | None:
        """The AMI to launch ``instance_type`` with, or None (Karpenter drops such types from a launch)."""
        arch = instance_type.labels.get("kubernetes.io/arch", "")
        variant = required_variant(instance_type)
        for image in self.images:
            if image.arch == arch and image.variant in ("", variant):
                return image
        return None

    def __call__(self, instance_type: InstanceType) -> bool:
        return self.image_for(instance_type) is not None


def ssm_alias_parameter(*, k8s_version: str, arch: str, variant: str, version: str) -> str:
    """SSM parameter of an EKS AL2023 AMI (Karpenter ``AL2023.resolvePath``); ``arch`` is x86_64/arm64."""
    leaf = "recommended" if version == "latest" else f"amazon-eks-node-al2023-{arch}-{variant}-{k8s_version}-{version}"
    return f"/aws/service/eks/optimized-ami/{k8s_version}/amazon-linux-2023/{arch}/{variant}/{leaf}/image_id"
