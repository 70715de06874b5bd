"""The three patch formats of the Kubernetes API.

* ``application/merge-patch+json``: RFC 7386 JSON merge patch (``null`` deletes, lists replace).
* ``application/strategic-merge-patch+json``: merge patch plus the list rules of the built-in
  types' ``patchStrategy``/``patchMergeKey`` tags (``k8s.io/api``): ``conditions`` merge by
  ``type``, ``containers``/``env``/``volumes`` by ``name``, ``ownerReferences`` by ``uid``,
  ``finalizers`` merge as a set; every other list (``taints``, ``tolerations``, ...) is replaced,
  as upstream. Directives ``$patch: replace|delete|merge``, ``$retainKeys``,
  ``$deleteFromPrimitiveList/<field>`` and ``$setElementOrder/<field>`` (ignored) are understood.
* ``application/json-patch+json``: RFC 6902 operations add, remove, replace, move, copy, test.

All functions return new objects and never mutate their inputs (unchanged subtrees are shared).
"""

from __future__ import annotations

import json
from typing import Any

from nodesmith.sim.kube.errors import bad_request, invalid, unsupported_media_type

__all__ = [
    "JSON_PATCH",
    "MERGE_PATCH",
    "STRATEGIC_MERGE_PATCH",
    "apply_patch",
    "json_patch",
    "merge_patch",
    "strategic_merge_patch",
]

MERGE_PATCH = "application/merge-patch+json"
STRATEGIC_MERGE_PATCH = "application/strategic-merge-patch+json"
JSON_PATCH = "application/json-patch+json"

_MERGE_KEYS = {
    "conditions": "type",
    "containers": "name",
    "initContainers": "name",
    "ephemeralContainers": "name",
    "env": "name",
    "volumes": "name",
    "volumeMounts": "mountPath",
    "volumeDevices": "devicePath",
    "ports": "containerPort",
    "ownerReferences": "uid",
    "addresses": "type",
    "imagePullSecrets": "name",
    "hostAliases": "ip",
    "topologySpreadConstraints": "topologyKey",
    "resourceClaims": "name",
}
_SET_LISTS = frozenset({"finalizers"})
_DELETE = object()


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386: apply ``patch`` to ``target``; ``None`` values delete keys, non-objects replace."""
    if not isinstance(patch, dict):
        return patch
    result = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


def _strip(value: Any) -> Any:
    """Remove ``$`` directives from a value being inserted as is."""
    if isinstance(value, dict):
        return {k: _strip(v) for k, v in value.items() if not k.startswith("$")}
    if isinstance(value, list):
        return [_strip(v) for v in value]
    return value


def _smp_value(result: dict[str, Any], key: str, value: Any) -> None:
    """Merge one patch entry into ``result`` (in place; ``result`` is already a copy)."""
    current = result.get(key)
    if value is None:
        result.pop(key, None)
    elif isinstance(value, dict):
        merged = _smp_map(current if isinstance(current, dict) else {}, value)
        if merged is _DELETE:
            result.pop(key, None)
        else:
            result[key] = merged
    elif isinstance(value, list):
        result[key] = _smp_list(key, current if isinstance(current, list) else [], value)
    else:
        result[key] = value


def _smp_map(orig: dict[str, Any], patch: dict[str, Any]) -> Any:
    directive = patch.get("$patch")
    if directive == "delete":
        return _DELETE
    if directive == "replace":
        return _strip(patch)
    result = dict(orig)
    for key, value in patch.items():
        if key in ("$patch", "$retainKeys") or key.startswith("$setElementOrder/"):
            continue
        if key.startswith("$deleteFromPrimitiveList/"):
            field = key.split("/", 1)[1]
            current = result.get(field)
            if isinstance(current, list):
                result[field] = [x for x in current if x not in (value or [])]
            continue
        _smp_value(result, key, value)
    retain = patch.get("$retainKeys")
    if isinstance(retain, list):
        result = {k: v for k, v in result.items() if k in retain}
    return result


def _smp_list(field: str, current: list[Any], patch: list[Any]) -> list[Any]:
    if any(isinstance(item, dict) and item.get("$patch") == "replace" for item in patch):
        return [_strip(i) for i in patch if not (isinstance(i, dict) and i.get("$patch") == "replace")]
    if field in _SET_LISTS:
        return list(current) + [x for x in patch if x not in current]
    key = _MERGE_KEYS.get(field)
    if key is None or not all(isinstance(item, dict) for item in patch):
        return [_strip(i) for i in patch]
    result = list(current)
    for item in patch:
        wanted = item.get(key)
        index = next((i for i, e in enumerate(result) if isinstance(e, dict) and e.get(key) == wanted), None)
        if item.get("$patch") == "delete":
            if index is not None:
                del result[index]
        elif index is None:
            result.append(_strip(item))
        else:
            result[index] = _smp_map(result[index], item)
    return result


def strategic_merge_patch(target: dict[str, Any], patch: dict[str, Any]) -> dict[str, Any]:
    """Strategic merge patch for the built-in types (see the module docstring for the list rules)."""
    merged = _smp_map(target, patch)
    if merged is _DELETE:
        raise bad_request("a strategic merge patch cannot delete the whole object")
    result: dict[str, Any] = merged
    return result


def _pointer(path: str) -> list[str]:
    if path == "":
        return []
    if not path.startswith("/"):
        raise bad_request(f"json patch: invalid pointer {path!r}")
    return [p.replace("~1", "/").replace("~0", "~") for p in path[1:].split("/")]


def _resolve(doc: Any, parts: list[str]) -> Any:
    cur = doc
    for part in parts:
        if isinstance(cur, dict) and part in cur:
            cur = cur[part]
        elif isinstance(cur, list) and part.isdigit() and int(part) < len(cur):
            cur = cur[int(part)]
        else:
            raise invalid("JSONPatch", "/" + "/".join(parts), "path does not exist")
    return cur


def _add(doc: Any, parts: list[str], value: Any) -> Any:
    if not parts:
        return value
    parent = _resolve(doc, parts[:-1])
    last = parts[-1]
    if isinstance(parent, dict):
        parent[last] = value
    elif isinstance(parent, list):
        if last == "-":
            parent.append(value)
        elif last.isdigit() and int(last) <= len(parent):
            parent.insert(int(last), value)
        else:
            raise invalid("JSONPatch", "/" + "/".join(parts), "index out of range")
    else:
        raise invalid("JSONPatch", "/" + "/".join(parts), "parent is not a container")
    return doc


def _remove(doc: Any, parts: list[str]) -> Any:
    if not parts:
        raise bad_request("json patch: cannot remove the whole document")
    parent = _resolve(doc, parts[:-1])
    last = parts[-1]
    if isinstance(parent, dict) and last in parent:
        return parent.pop(last)
    if isinstance(parent, list) and last.isdigit() and int(last) < len(parent):
        return parent.pop(int(last))
    raise invalid("JSONPatch", "/" + "/".join(parts), "path does not exist")


def json_patch(target: dict[str, Any], operations: list[Any]) -> dict[str, Any]:
    """RFC 6902: apply ``operations`` in order; a failed ``test`` or bad path raises 422."""
    doc: Any = json.loads(json.dumps(target))
    for op in operations:
        if not isinstance(op, dict) or "op" not in op or "path" not in op:
            raise bad_request(f"json patch: malformed operation {op!r}")
        kind, parts = op["op"], _pointer(op["path"])
        if kind == "add":
            doc = _add(doc, parts, op.get("value"))
        elif kind == "remove":
            _remove(doc, parts)
        elif kind == "replace":
            _resolve(doc, parts)
            if parts:
                _remove(doc, parts)
            doc = _add(doc, parts, op.get("value"))
        elif kind in ("move", "copy"):
            source = _pointer(op.get("from", ""))
            value = _remove(doc, source) if kind == "move" else json.loads(json.dumps(_resolve(doc, source)))
            doc = _add(doc, parts, value)
        elif kind == "test":
            if _resolve(doc, parts) != op.get("value"):
                raise invalid("JSONPatch", op["path"], "test operation failed")
        else:
            raise bad_request(f"json patch: unknown operation {kind!r}")
    if not isinstance(doc, dict):
        raise bad_request("json patch: result is not an object")
    return doc


def apply_patch(target: dict[str, Any], patch: Any, content_type: str, *, custom: bool) -> dict[str, Any]:
    """Apply ``patch`` of ``content_type`` to ``target``.

    ``custom`` resources (CRDs) refuse strategic merge patch with 415, as the API server does;
    an unknown content type is 415 too (server-side apply is :mod:`nodesmith.sim.kube.apply`, handled before).
    """
    ctype = content_type.split(";", 1)[0].strip().lower()
    accepted = [JSON_PATCH, MERGE_PATCH] if custom else [JSON_PATCH, MERGE_PATCH, STRATEGIC_MERGE_PATCH]
    if ctype not in accepted:
        raise unsupported_media_type(ctype, ", ".join(accepted))
    if ctype == JSON_PATCH:
        if not isinstance(patch, list):
            raise bad_request("json patch: body must be a list of operations")
        return json_patch(target, patch)
    if not isinstance(patch, dict):
        raise bad_request("patch body must be a JSON object")
    if ctype == MERGE_PATCH:
        result: dict[str, Any] = merge_patch(target, patch)
        return result
    return strategic_merge_patch(target, patch)
