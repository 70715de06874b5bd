"""Karpenter API documents as ``kubectl apply`` would send them, for the model tests: a NodePool and an
EC2NodeClass with the usual fields, and the pydantic errors of a rejected one as ``(path, message)`` pairs."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from nodesmith.core.api.common import format_loc

if TYPE_CHECKING:
    import pytest
    from pydantic import ValidationError


def nodepool_doc(**spec_overrides: Any) -> dict[str, Any]:
    """A ``karpenter.sh/v1`` NodePool ``default`` (c/m/r, spot or on-demand); ``spec_overrides`` replace spec keys."""
    doc: dict[str, Any] = {
        "apiVersion": "karpenter.sh/v1",
        "kind": "NodePool",
        "metadata": {"name": "default"},
        "spec": {
            "template": {
                "spec": {
                    "requirements": [
                        {"key": "karpenter.k8s.aws/instance-category", "operator": "In", "values": ["c", "m", "r"]},
                        {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["spot", "on-demand"]},
                    ],
                    "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
                }
            }
        },
    }
    doc["spec"].update(spec_overrides)
    return doc


def errors(exc: pytest.ExceptionInfo[ValidationError]) -> list[tuple[str, str]]:
    """The ``(path, message)`` of every error of the rejected document (paths as ``spec.template.spec...``)."""
    return [(format_loc(tuple(e["loc"])), e["msg"]) for e in exc.value.errors()]


def nodeclass_doc(**spec: Any) -> dict[str, Any]:
    """A ``karpenter.k8s.aws/v1`` EC2NodeClass ``default`` (AL2023, discovery tag ``demo``); ``spec`` adds or
    replaces spec keys."""
    doc: dict[str, Any] = {
        "apiVersion": "karpenter.k8s.aws/v1",
        "kind": "EC2NodeClass",
        "metadata": {"name": "default"},
        "spec": {
            "role": "KarpenterNodeRole-demo",
            "amiSelectorTerms": [{"alias": "al2023@latest"}],
            "subnetSelectorTerms": [{"tags": {"karpenter.sh/discovery": "demo"}}],
            "securityGroupSelectorTerms": [{"tags": {"karpenter.sh/discovery": "demo"}}],
        },
    }
    doc["spec"].update(spec)
    return doc
