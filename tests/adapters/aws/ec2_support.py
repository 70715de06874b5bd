"""Shared helpers of the EC2 adapter tests (imported by name: pytest puts this directory on sys.path)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from nodesmith.core.api.ec2nodeclass import EC2NodeClass

CLUSTER = "test-cluster"
REGION = "us-east-1"
SHARED_PRICES = Path(__file__).resolve().parents[3].parent / "shared" / "data" / "ec2-ondemand-prices-us-east-1.json"
"""The reference on-demand price table (``../shared/data``); tests needing it skip when it is absent."""


def nodeclass(
    *,
    name: str = "default",
    subnet_terms: list[dict[str, Any]] | None = None,
    sg_terms: list[dict[str, Any]] | None = None,
    ami_terms: list[dict[str, Any]] | None = None,
    **spec: Any,
) -> EC2NodeClass:
    """An EC2NodeClass selecting the seeded resources by the discovery tag unless told otherwise."""
    discovery = [{"tags": {"karpenter.sh/discovery": CLUSTER}}]
    body: dict[str, Any] = {
        "subnetSelectorTerms": subnet_terms if subnet_terms is not None else discovery,
        "securityGroupSelectorTerms": sg_terms if sg_terms is not None else discovery,
        "amiSelectorTerms": ami_terms if ami_terms is not None else [{"alias": "al2023@latest"}],
    }
    if "role" not in spec and "instanceProfile" not in spec:
        body["role"] = f"KarpenterNodeRole-{CLUSTER}"
    body.update(spec)
    return EC2NodeClass.model_validate(
        {"apiVersion": "karpenter.k8s.aws/v1", "kind": "EC2NodeClass", "metadata": {"name": name}, "spec": body}
    )
