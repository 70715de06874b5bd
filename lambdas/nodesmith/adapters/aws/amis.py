"""EKS-optimised AMIs as Nodesmith sees them: :class:`Image` (defined in :mod:`nodesmith.core.nodeclass_parts`),
which variant an instance type needs (:func:`required_variant`), the per-type AMI predicate
(:class:`AmiCompatibility`) and the SSM parameter naming of AL2023 and Bottlerocket aliases
(:func:`ssm_alias_parameter`, :func:`bottlerocket_alias_parameters`; Karpenter ``al2023.go``, ``bottlerocket.go``).

:class:`AmiLookup` does the EC2/SSM lookups for :class:`~nodesmith.adapters.aws.nodeclass.NodeClassResolver`.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from nodesmith.adapters.aws.nodeclass_spec import error_code, field_value, tag_filters
from nodesmith.core.errors import NodeClassNotReadyError
from nodesmith.core.instancetypes import NEURON
from nodesmith.core.nodeclass_parts import Image
from nodesmith.core.nodeclass_status import AMIS_READY, LABEL_INSTANCE_ACCELERATOR_COUNT, LABEL_INSTANCE_GPU_COUNT
from nodesmith.core.resources import GPU_NVIDIA

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping, Sequence

    from nodesmith.core.model import InstanceType

__all__ = [
    "AmiCompatibility",
    "AmiLookup",
    "Image",
    "bottlerocket_alias_parameters",
    "required_variant",
    "ssm_alias_parameter",
]

_ARCH_TO_EC2 = {"amd64": "x86_64", "arm64": "arm64"}
LABEL_INSTANCE_HYPERVISOR = "karpenter.k8s.aws/instance-hypervisor"
NESTED_VIRTUALIZATION = "nested-virtualization"
"""EC2's ``ProcessorInfo.SupportedFeatures`` value of types that can run nested virtualization."""
_EC2_TO_ARCH = {v: k for k, v in _ARCH_TO_EC2.items()}
_ALIAS_VARIANTS = {"x86_64": ("standard", "nvidia", "neuron"), "arm64": ("standard", "nvidia")}

LOG = logging.getLogger(__name__)


def required_variant(instance_type: InstanceType) -> str:
    """EKS AMI variant an instance type boots with, as Karpenter maps AMIs to instance types by the variants'
    requirements (:func:`nodesmith.core.nodeclass_status.ami_requirements`, ``[aws]:pkg/providers/amifamily``):
    ``nvidia`` when it has the ``karpenter.k8s.aws/instance-gpu-count`` label (any GPU maker), ``neuron`` when it
    has ``karpenter.k8s.aws/instance-accelerator-count``, else ``standard``. Falls back to the NVIDIA / Neuron
    capacity for a type without those labels."""
    labels = instance_type.labels
    if LABEL_INSTANCE_GPU_COUNT in labels or instance_type.capacity.get(GPU_NVIDIA, 0) > 0:
        return "nvidia"
    if LABEL_INSTANCE_ACCELERATOR_COUNT in labels or instance_type.capacity.get(NEURON, 0) > 0:
        return "neuron"
    return "standard"


@dataclass(frozen=True, slots=True)
class AmiCompatibility:
    """Hashable predicate: can the node class launch this instance type, and with which AMI (arch and variant)?

    As Karpenter's ``IsCompatibleWithNodeClass`` (``[aws]:pkg/providers/instancetype/compatibility/compatibility.go``):
    ``ami_family`` is the node class's effective AMI family (AL2023 does not run on ``a1`` instances; Bottlerocket
    and Custom AMIs may); ``nitro_only`` (``connectionTracking`` set: its timeouts need the Nitro System) keeps the
    types whose ``karpenter.k8s.aws/instance-hypervisor`` is ``nitro``; ``nested_virtualization``
    (``cpuOptions.nestedVirtualization: enabled``) those whose processor supports it.
    """

    images: tuple[Image, ...]
    ami_family: str = "AL2023"
    nitro_only: bool = False
    nested_virtualization: bool = False

    def image_for(self, instance_type: InstanceType) -> Image | None:
        """The AMI to launch ``instance_type`` with, or None when the node class cannot launch it (Karpenter drops
        such types from a launch)."""
        if self.ami_family == "AL2023" and instance_type.name.startswith("a1."):
            return None
        if self.nitro_only and instance_type.labels.get(LABEL_INSTANCE_HYPERVISOR) != "nitro":
            return None
        if self.nested_virtualization and NESTED_VIRTUALIZATION not in instance_type.processor_features:
            return None
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


def bottlerocket_alias_parameters(*, k8s_version: str, version: str) -> dict[str, tuple[tuple[str, str], ...]]:
    """The SSM parameters of a ``bottlerocket@<version>`` alias, each with the (architecture, variant) pairs its
    image boots (Karpenter ``Bottlerocket.DescribeImageQuery``): ``aws-k8s-<minor>`` serves the standard variant
    (and Neuron on x86_64), ``aws-k8s-<minor>-nvidia`` the NVIDIA one. ``version`` is ``latest`` or a Bottlerocket
    release, with or without its leading ``v`` (``v1.46.0`` and ``1.46.0`` name the same parameter)."""
    release = version.lstrip("v")
    base = f"/aws/service/bottlerocket/aws-k8s-{k8s_version}"
    return {
        f"{base}/x86_64/{release}/image_id": (("x86_64", "standard"), ("x86_64", "neuron")),
        f"{base}/arm64/{release}/image_id": (("arm64", "standard"),),
        f"{base}-nvidia/x86_64/{release}/image_id": (("x86_64", "nvidia"),),
        f"{base}-nvidia/arm64/{release}/image_id": (("arm64", "nvidia"),),
    }


def _alias_parameters(*, family: str, k8s_version: str, version: str) -> dict[str, tuple[tuple[str, str], ...]]:
    """SSM parameter -> the (architecture, variant) pairs its image boots, for an ``al2023`` or ``bottlerocket``
    alias."""
    if family == "bottlerocket":
        return bottlerocket_alias_parameters(k8s_version=k8s_version, version=version)
    return {
        ssm_alias_parameter(k8s_version=k8s_version, arch=arch, variant=variant, version=version): ((arch, variant),)
        for arch, variants in _ALIAS_VARIANTS.items()
        for variant in variants
    }


class AmiLookup:
    """The AMIs an EC2NodeClass's ``amiSelectorTerms`` select, with boto3 ``ec2`` and ``ssm`` clients;
    ``kubernetes_version`` returns the cluster's minor version (``"1.31"``) for alias parameters."""

    def __init__(self, *, ec2: Any, ssm: Any, kubernetes_version: Callable[[], str]) -> None:
        self._ec2 = ec2
        self._ssm = ssm
        self._kubernetes_version = kubernetes_version

    def images(self, terms: Sequence[Mapping[str, Any]]) -> list[Image]:
        """AMIs for the selector ``terms`` (Karpenter JSON): an ``alias`` term reads the EKS SSM parameters of each
        architecture and variant and describes those ids (see the resolver's module docstring); other terms go
        through DescribeImages / GetParameter and the newest image per architecture wins. Raises
        ``NodeClassNotReadyError`` for an unsupported alias (reason ``UnsupportedAlias``) or an alias with no SSM
        parameter; EC2 errors other than an unknown AMI id propagate."""
        aliases = [field_value(t, "alias") for t in terms if field_value(t, "alias")]
        if aliases:
            return self._alias_images(str(aliases[0]))
        candidates: dict[str, Image] = {}
        for term in terms:
            for image in self._term_images(term):
                candidates[image.id] = image
        newest: dict[str, Image] = {}
        for image in sorted(candidates.values(), key=lambda i: (i.creation_date, i.id), reverse=True):
            newest.setdefault(image.arch, image)
        return [newest[a] for a in sorted(newest)]

    def _alias_images(self, alias: str) -> list[Image]:
        family, _, version = alias.partition("@")
        family = family.lower()
        if family not in ("al2023", "bottlerocket") or not version:
            message = (
                f"amiSelectorTerms alias {alias!r}: only al2023@latest, al2023@vYYYYMMDD, bottlerocket@latest "
                "or bottlerocket@vX.Y.Z"
            )
            raise NodeClassNotReadyError(message, problems={AMIS_READY: ("UnsupportedAlias", message)})
        k8s = self._kubernetes_version()
        images: list[Image] = []
        tried: list[str] = []
        for parameter, boots in _alias_parameters(family=family, k8s_version=k8s, version=version).items():
            tried.append(parameter)
            try:
                image_id = self._ssm.get_parameter(Name=parameter)["Parameter"]["Value"]
            except Exception as exc:  # ParameterNotFound for variants the publisher does not publish
                if error_code(exc) not in ("ParameterNotFound", "ParameterVersionNotFound"):
                    LOG.warning("SSM %s: %s", parameter, exc)
                continue
            images += [Image(id=str(image_id), arch=_EC2_TO_ARCH[arch], variant=variant) for arch, variant in boots]
        if not images:
            raise NodeClassNotReadyError(
                f"amiSelectorTerms alias {alias!r}: no SSM parameter for Kubernetes {k8s} "
                f"(tried {tried[0]} and {len(tried) - 1} more)"
            )
        # As Karpenter's alias query: DescribeImages by the parameters' ids gives each AMI's name and creation date,
        # and an id EC2 does not list as available is left out.
        ids = sorted({i.id for i in images})
        described = {i.id: i for i in self._describe_images(Filters=[{"Name": "image-id", "Values": ids}])}
        return [
            replace(i, name=described[i.id].name, creation_date=described[i.id].creation_date)
            for i in images
            if i.id in described
        ]

    def _term_images(self, term: Mapping[str, Any]) -> list[Image]:
        if parameter := field_value(term, "ssmParameter"):
            try:
                image_id = self._ssm.get_parameter(Name=parameter)["Parameter"]["Value"]
            except Exception as exc:
                LOG.warning("SSM parameter %s: %s", parameter, exc)
                return []
            return self._describe_images(ImageIds=[str(image_id)])
        kwargs: dict[str, Any] = {}
        filters: list[dict[str, Any]] = []
        if term_id := field_value(term, "id"):
            filters.append({"Name": "image-id", "Values": [term_id]})
        if term_name := field_value(term, "name"):
            filters.append({"Name": "name", "Values": [term_name]})
            if not field_value(term, "owner"):
                kwargs["Owners"] = ["self", "amazon"]  # Karpenter's default owners for name terms
        if owner := field_value(term, "owner"):
            kwargs["Owners"] = [owner]
        filters += tag_filters(field_value(term, "tags") or {})
        if not filters and not kwargs:
            return []
        return self._describe_images(Filters=filters, **kwargs)

    def _describe_images(self, **kwargs: Any) -> list[Image]:
        try:
            response = self._ec2.describe_images(**kwargs)
        except Exception as exc:
            if error_code(exc).startswith("InvalidAMIID"):
                return []
            raise
        out = []
        for image in response.get("Images", []):
            if image.get("State", "available") != "available":
                continue
            arch = _EC2_TO_ARCH.get(str(image.get("Architecture", "")))
            if arch is None:
                continue
            out.append(
                Image(
                    id=image["ImageId"],
                    arch=arch,
                    name=image.get("Name", ""),
                    creation_date=str(image.get("CreationDate", "")),
                )
            )
        return out
