"""Schema validation of Karpenter's custom resources on API writes, as their CRDs make the API server do.

A NodePool, NodeClaim or EC2NodeClass written through the HTTP API (POST, PUT or PATCH of the main
resource) is checked against the core API models (:mod:`nodesmith.core.api`), which carry the
CRDs' structural schema and CEL rules; a failure is the API server's ``422 Invalid`` naming every
offending field (``spec.template.spec.requirments: Extra inputs are not permitted``) and nothing
is stored: a malformed manifest is rejected whole. Status writes and in-process writes are not
checked (controllers own them). Other kinds are not validated.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ValidationError

from nodesmith.core.api import EC2NodeClass, NodeClaim, NodePool
from nodesmith.core.api.common import format_loc
from nodesmith.sim.kube import errors

if TYPE_CHECKING:
    from nodesmith.sim.kube.registry import ResourceType

__all__ = ["check"]

_MODELS: dict[str, type[BaseModel]] = {
    "nodepools.karpenter.sh": NodePool,
    "nodeclaims.karpenter.sh": NodeClaim,
    "ec2nodeclasses.karpenter.k8s.aws": EC2NodeClass,
}


def check(rt: ResourceType, obj: Any) -> None:
    """Raise the 422 ``Invalid`` ApiError when ``obj`` is not a valid ``rt`` (Karpenter kinds only)."""
    model = _MODELS.get(rt.key)
    if model is None or not isinstance(obj, dict):
        return
    body = {k: v for k, v in obj.items() if k != "status"}
    try:
        model.model_validate(body)
    except ValidationError as exc:
        name = str((obj.get("metadata") or {}).get("name", ""))
        causes = [
            {"reason": "FieldValueInvalid", "message": str(e["msg"]), "field": format_loc(tuple(e["loc"])) or "<root>"}
            for e in exc.errors()
        ]
        kind = f"{rt.kind}.{rt.group}"
        error = errors.invalid(kind, name, "; ".join(f"{c['field']}: {c['message']}" for c in causes))
        # kubectl prints details.causes, one "field: message" each (StandardErrorMessage)
        error.details["causes"] = causes
        raise error from None
