"""Factories for the conversion tests: legacy Provisioners, AWSNodeTemplates, v1beta1 NodePools and
EC2NodeClasses as users wrote them, and lookups into the converted documents and notes."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from nodesmith.core.convert import Note

LEGACY = Path(__file__).resolve().parents[2] / "manifests" / "legacy"


def provisioner(name: str = "default", **spec: Any) -> dict[str, Any]:
    spec.setdefault("providerRef", {"name": "default"})
    return {"apiVersion": "karpenter.sh/v1alpha5", "kind": "Provisioner", "metadata": {"name": name}, "spec": spec}


def template(name: str = "default", **spec: Any) -> dict[str, Any]:
    spec.setdefault("subnetSelector", {"karpenter.sh/discovery": "prod"})
    spec.setdefault("securityGroupSelector", {"karpenter.sh/discovery": "prod"})
    spec.setdefault("instanceProfile", "KarpenterNodeInstanceProfile-prod")
    return {
        "apiVersion": "karpenter.k8s.aws/v1alpha1",
        "kind": "AWSNodeTemplate",
        "metadata": {"name": name},
        "spec": spec,
    }


def beta_pool(name: str = "default", *, disruption: dict[str, Any] | None = None, **tspec: Any) -> dict[str, Any]:
    tspec.setdefault(
        "nodeClassRef", {"apiVersion": "karpenter.k8s.aws/v1beta1", "kind": "EC2NodeClass", "name": "default"}
    )
    tspec.setdefault("requirements", [{"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64"]}])
    spec: dict[str, Any] = {"template": {"spec": tspec}}
    if disruption is not None:
        spec["disruption"] = disruption
    return {"apiVersion": "karpenter.sh/v1beta1", "kind": "NodePool", "metadata": {"name": name}, "spec": spec}


def beta_class(name: str = "default", **spec: Any) -> dict[str, Any]:
    spec.setdefault("amiFamily", "AL2023")
    spec.setdefault("role", "KarpenterNodeRole-prod")
    spec.setdefault("subnetSelectorTerms", [{"tags": {"karpenter.sh/discovery": "prod"}}])
    spec.setdefault("securityGroupSelectorTerms", [{"tags": {"karpenter.sh/discovery": "prod"}}])
    return {"apiVersion": "karpenter.k8s.aws/v1beta1", "kind": "EC2NodeClass", "metadata": {"name": name}, "spec": spec}


def by_name(docs: list[dict[str, Any]], kind: str, name: str) -> dict[str, Any]:
    matches = [d for d in docs if d["kind"] == kind and d["metadata"]["name"] == name]
    assert len(matches) == 1, f"{kind}/{name}: {len(matches)} documents"
    return matches[0]


def pool_of(docs: list[dict[str, Any]], name: str = "default") -> dict[str, Any]:
    return by_name(docs, "NodePool", name)


def class_of(docs: list[dict[str, Any]], name: str = "default") -> dict[str, Any]:
    return by_name(docs, "EC2NodeClass", name)


def notes_at(notes: list[Note], path: str) -> list[Note]:
    return [n for n in notes if n.path == path]
