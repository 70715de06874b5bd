"""The OpenAPI v3 documents ``kubectl apply`` and ``kubectl explain`` read (``/openapi/v3``).

``/openapi/v3`` lists one document per group-version (``{"paths": {"apis/apps/v1":
{"serverRelativeURL": ...}}}``, as ``kube-openapi``'s ``handler3`` serves it). Each document has a
path per resource type whose PATCH operation carries ``x-kubernetes-group-version-kind`` and the
``fieldValidation`` query parameter: ``kubectl`` then leaves validation to the server
(``cli-runtime`` ``queryParamVerifierV3``) and sends ``fieldValidation=Strict``. The PATCH request
body does not offer ``application/strategic-merge-patch+json``, so ``kubectl apply`` builds its
strategic merge patch from its compiled-in types for built-in kinds and a JSON merge patch for CRDs
(``kubectl`` ``pkg/cmd/apply/patcher.go``), never from these schemas.

Schemas: the Karpenter kinds get the JSON schema of the core API models (so ``kubectl explain
nodepool.spec`` describes the fields Nodesmith accepts); other kinds an open object schema.
"""

from __future__ import annotations

import copy
import functools
import hashlib
import json
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from nodesmith.sim.kube.registry import Registry, ResourceType

__all__ = ["gv_document", "index", "schema_name"]

_PATCH_TYPES = ("application/json-patch+json", "application/merge-patch+json", "application/apply-patch+yaml")


def _gv_path(group: str, version: str) -> str:
    return f"apis/{group}/{version}" if group else f"api/{version}"


def schema_name(rt: ResourceType) -> str:
    """The component name of a kind's schema, reverse-DNS like upstream (``sh.karpenter.v1.NodePool``)."""
    if not rt.group:
        return f"io.k8s.api.core.{rt.version}.{rt.kind}"
    prefix = ".".join(reversed(rt.group.split(".")))
    return f"{prefix}.{rt.version}.{rt.kind}"


def _model_schemas(rt: ResourceType) -> dict[str, Any] | None:
    """Component schemas of a Karpenter kind from its core API model, refs rewritten; None for others."""
    if rt.group not in ("karpenter.sh", "karpenter.k8s.aws") or rt.kind not in (
        "NodePool",
        "NodeClaim",
        "EC2NodeClass",
    ):
        return None
    return copy.deepcopy(_karpenter_schemas(rt.kind, schema_name(rt)))


@functools.cache
def _karpenter_schemas(kind: str, name: str) -> dict[str, Any]:
    from nodesmith.core.api.ec2nodeclass import EC2NodeClass
    from nodesmith.core.api.nodeclaim import NodeClaim
    from nodesmith.core.api.nodepool import NodePool

    model = {"NodePool": NodePool, "NodeClaim": NodeClaim, "EC2NodeClass": EC2NodeClass}[kind]
    raw = model.model_json_schema(by_alias=True, ref_template="#/components/schemas/" + name + ".{model}")
    defs = raw.pop("$defs", {})
    out = {f"{name}.{sub}": _openapi3(schema) for sub, schema in defs.items()}
    out[name] = _openapi3(raw)
    return out


def _openapi3(schema: Any) -> Any:
    """JSON Schema (pydantic) to OpenAPI 3.0: ``anyOf [X, null]`` becomes X, ``const`` an enum of one."""
    if isinstance(schema, list):
        return [_openapi3(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    options = schema.get("anyOf")
    if isinstance(options, list):
        kept = [o for o in options if o != {"type": "null"}]
        if len(kept) == 1:
            merged = {k: v for k, v in schema.items() if k != "anyOf"}
            merged.update(kept[0])
            return _openapi3(merged)
    out = {k: _openapi3(v) for k, v in schema.items() if k != "title"}
    if "const" in out:
        out["enum"] = [out.pop("const")]
    return out


def _gvk(rt: ResourceType) -> dict[str, str]:
    return {"group": rt.group, "version": rt.version, "kind": rt.kind}


def _paths(rt: ResourceType) -> dict[str, Any]:
    base = f"/{_gv_path(rt.group, rt.version)}"
    scope = f"{base}/namespaces/{{namespace}}" if rt.namespaced else base
    ref = {"$ref": f"#/components/schemas/{schema_name(rt)}"}
    answer = {"200": {"description": "OK", "content": {"application/json": {"schema": ref}}}}
    params = [
        {"name": "fieldValidation", "in": "query", "schema": {"type": "string", "uniqueItems": True}},
        {"name": "dryRun", "in": "query", "schema": {"type": "string", "uniqueItems": True}},
        {"name": "fieldManager", "in": "query", "schema": {"type": "string", "uniqueItems": True}},
    ]

    def operation(action: str, *, body: tuple[str, ...] = ()) -> dict[str, Any]:
        op: dict[str, Any] = {
            "operationId": f"{action}{rt.kind}",
            "x-kubernetes-action": action,
            "x-kubernetes-group-version-kind": _gvk(rt),
            "responses": answer,
        }
        if body:
            op["parameters"] = params
            op["requestBody"] = {"content": {t: {"schema": ref} for t in body}}
        return op

    return {
        f"{scope}/{rt.plural}": {"get": operation("list"), "post": operation("post", body=("*/*",))},
        f"{scope}/{rt.plural}/{{name}}": {
            "get": operation("get"),
            "put": operation("put", body=("*/*",)),
            "patch": operation("patch", body=_PATCH_TYPES),
            "delete": operation("delete"),
        },
    }


def gv_document(registry: Registry, group: str, version: str) -> dict[str, Any] | None:
    """The OpenAPI v3 document of one group-version, or None when the registry serves none of it."""
    types = [rt for rt in registry if rt.group == group and rt.version == version]
    if not types:
        return None
    paths: dict[str, Any] = {}
    schemas: dict[str, Any] = {}
    for rt in types:
        paths.update(_paths(rt))
        kind_schemas = _model_schemas(rt) or {
            schema_name(rt): {
                "type": "object",
                "description": f"{rt.kind} ({rt.api_version}), served by the Nodesmith Kubernetes emulator.",
                "x-kubernetes-preserve-unknown-fields": True,
            }
        }
        kind_schemas[schema_name(rt)]["x-kubernetes-group-version-kind"] = [_gvk(rt)]
        schemas.update(kind_schemas)
    return {
        "openapi": "3.0.0",
        "info": {"title": "Kubernetes", "version": "unversioned"},
        "paths": paths,
        "components": {"schemas": schemas},
    }


def index(registry: Registry) -> dict[str, Any]:
    """``/openapi/v3``: each group-version's document URL, with a content hash as upstream."""
    out: dict[str, Any] = {}
    for group, versions in registry.groups().items():
        for version in versions:
            doc = gv_document(registry, group, version)
            digest = hashlib.sha256(json.dumps(doc, sort_keys=True).encode()).hexdigest()[:32].upper()
            path = _gv_path(group, version)
            out[path] = {"serverRelativeURL": f"/openapi/v3/{path}?hash={digest}"}
    return {"paths": out}
