"""Well-known Kubernetes and Karpenter label keys, and the normalisation of deprecated aliases.

The ``LABEL_*`` constants, the well-known set Karpenter knows values for without a NodePool naming
them (:data:`WELL_KNOWN_LABELS`, core ``v1.WellKnownLabels`` plus the AWS provider's
:data:`AWS_WELL_KNOWN_LABELS`), the labels a NodePool may not set (:data:`RESTRICTED_LABELS`) and the
deprecated aliases with their stable keys (:data:`NORMALIZED_LABELS`, :func:`normalize_key`), after
``kubernetes-sigs/karpenter`` and ``aws/karpenter-provider-aws`` ``pkg/apis/v1/labels.go``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

if TYPE_CHECKING:
    from collections.abc import Mapping

__all__ = [
    "AWS_WELL_KNOWN_LABELS",
    "LABEL_ARCH",
    "LABEL_CAPACITY_TYPE",
    "LABEL_HOSTNAME",
    "LABEL_INITIALIZED",
    "LABEL_INSTANCE_TYPE",
    "LABEL_NODEPOOL",
    "LABEL_OS",
    "LABEL_REGION",
    "LABEL_REGISTERED",
    "LABEL_WINDOWS_BUILD",
    "LABEL_ZONE",
    "LABEL_ZONE_ID",
    "NORMALIZED_LABELS",
    "RESTRICTED_LABELS",
    "WELL_KNOWN_LABELS",
    "normalize_key",
]

LABEL_ZONE: Final = "topology.kubernetes.io/zone"
LABEL_REGION: Final = "topology.kubernetes.io/region"
LABEL_INSTANCE_TYPE: Final = "node.kubernetes.io/instance-type"
LABEL_ARCH: Final = "kubernetes.io/arch"
LABEL_OS: Final = "kubernetes.io/os"
LABEL_HOSTNAME: Final = "kubernetes.io/hostname"
LABEL_WINDOWS_BUILD: Final = "node.kubernetes.io/windows-build"
LABEL_CAPACITY_TYPE: Final = "karpenter.sh/capacity-type"
LABEL_NODEPOOL: Final = "karpenter.sh/nodepool"
LABEL_REGISTERED: Final = "karpenter.sh/registered"
LABEL_INITIALIZED: Final = "karpenter.sh/initialized"
LABEL_ZONE_ID: Final = "topology.k8s.aws/zone-id"
_AWS = "karpenter.k8s.aws/"

AWS_WELL_KNOWN_LABELS: Final = frozenset(
    {
        LABEL_ZONE_ID,
        *(
            _AWS + suffix
            for suffix in (
                "capacity-reservation-id",
                "capacity-reservation-type",
                "capacity-reservation-interruptible",
                "instance-hypervisor",
                "instance-encryption-in-transit-supported",
                "nitro-sandbox",
                "instance-category",
                "instance-capability-flex",
                "instance-family",
                "instance-generation",
                "instance-size",
                "instance-local-nvme",
                "instance-cpu",
                "instance-cpu-manufacturer",
                "instance-cpu-sustained-clock-speed-mhz",
                "instance-memory",
                "instance-ebs-bandwidth",
                "instance-network-bandwidth",
                "instance-gpu-name",
                "instance-gpu-manufacturer",
                "instance-gpu-count",
                "instance-gpu-memory",
                "instance-accelerator-name",
                "instance-accelerator-manufacturer",
                "instance-accelerator-count",
                "instance-tenancy",
                "placement-group-id",
                "placement-group-partition",
            )
        ),
    }
)
"""Labels the AWS provider adds to the well-known set (``[aws]:pkg/apis/v1/labels.go`` ``init``)."""

WELL_KNOWN_LABELS: Final = frozenset(
    {
        LABEL_NODEPOOL,
        LABEL_ZONE,
        LABEL_REGION,
        LABEL_INSTANCE_TYPE,
        LABEL_ARCH,
        LABEL_OS,
        LABEL_CAPACITY_TYPE,
        LABEL_WINDOWS_BUILD,
        *AWS_WELL_KNOWN_LABELS,
    }
)
"""Labels Karpenter knows values for even when a NodePool does not mention them: core
``v1.WellKnownLabels`` plus the AWS provider's instance labels (:data:`AWS_WELL_KNOWN_LABELS`).
"""

RESTRICTED_LABELS: Final = frozenset({LABEL_HOSTNAME})
"""Labels a NodePool may not set (``v1.RestrictedLabels``)."""

NORMALIZED_LABELS: Final[Mapping[str, str]] = {
    "failure-domain.beta.kubernetes.io/zone": LABEL_ZONE,
    "failure-domain.beta.kubernetes.io/region": LABEL_REGION,
    "beta.kubernetes.io/arch": LABEL_ARCH,
    "beta.kubernetes.io/os": LABEL_OS,
    "beta.kubernetes.io/instance-type": LABEL_INSTANCE_TYPE,
}
"""Deprecated aliases and the stable key they mean (``v1.NormalizedLabels``)."""


def normalize_key(key: str) -> str:
    """Map a deprecated label alias to its stable key; other keys are returned unchanged."""
    return NORMALIZED_LABELS.get(key, key)
