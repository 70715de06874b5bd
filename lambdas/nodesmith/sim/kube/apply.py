"""Server-side apply (``kubectl apply --server-side``) for one field manager at a time.

``PATCH`` with ``Content-Type: application/apply-patch+yaml`` and ``?fieldManager=<name>`` sends the
manager's whole intended configuration. As the API server does, the object is created when absent;
otherwise the configuration is merged in (maps merge, lists and scalars are replaced as atomic
values) and the fields this manager applied last time but no longer sends are removed. What each
manager owns is kept in ``metadata.managedFields`` (operation ``Apply``, ``FieldsV1`` keys ``f:<name>``),
whose entries for other managers are left as they are.

Not modelled: conflicts between managers (every apply acts as ``--force-conflicts``), per-element
ownership inside lists (lists are atomic here, as ``x-kubernetes-list-type: atomic``), and field
ownership of updates made by other verbs.
"""

from __future__ import annotations

import copy
import json
from typing import Any

import yaml

from nodesmith.sim.kube.errors import bad_request, invalid

__all__ = ["APPLY_PATCH", "parse_config", "server_side_apply"]

APPLY_PATCH = "application/apply-patch+yaml"

Path = tuple[str, ...]
_IDENTITY = {("apiVersion",), ("kind",), ("metadata", "name"), ("metadata", "namespace")}


def parse_config(raw: bytes | Any) -> dict[str, Any]:
    """The applied configuration: a JSON or YAML object; 400 naming the problem otherwise."""
    if isinstance(raw, dict):
        return raw
    try:
        doc = json.loads(raw) if isinstance(raw, bytes | str) else raw
    except ValueError:
        try:
            doc = yaml.safe_load(raw)
        except yaml.YAMLError as exc:
            raise bad_request(f"apply: the body is neither JSON nor YAML: {exc}") from None
    if not isinstance(doc, dict):
        raise bad_request("apply: the body must be an object with apiVersion, kind and metadata.name")
    return doc


def _leaves(config: dict[str, Any], prefix: Path = ()) -> set[Path]:
    out: set[Path] = set()
    for key, value in config.items():
        path = (*prefix, key)
        if path in (("metadata", "managedFields"), ("status",)):
            continue
        if isinstance(value, dict) and value:
            out |= _leaves(value, path)
        else:
            out.add(path)
    return out - _IDENTITY


def _fields_v1(paths: set[Path]) -> dict[str, Any]:
    root: dict[str, Any] = {}
    for path in sorted(paths):
        node = root
        for key in path:
            node = node.setdefault(f"f:{key}", {})
    return root


def _paths_of(fields: dict[str, Any], prefix: Path = ()) -> set[Path]:
    out: set[Path] = set()
    for key, value in fields.items():
        if not key.startswith("f:"):
            continue
        path = (*prefix, key[2:])
        if isinstance(value, dict) and value:
            out |= _paths_of(value, path)
        else:
            out.add(path)
    return out


def _merge(base: dict[str, Any], config: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in config.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = _merge(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


def _remove(obj: dict[str, Any], path: Path) -> None:
    node: Any = obj
    for key in path[:-1]:
        node = node.get(key) if isinstance(node, dict) else None
        if node is None:
            return
    if isinstance(node, dict):
        node.pop(path[-1], None)


def server_side_apply(
    current: dict[str, Any] | None, config: dict[str, Any], *, manager: str, now: str
) -> dict[str, Any]:
    """The object after ``manager`` applies ``config`` to ``current`` (None: it does not exist yet).

    ``now`` is the RFC 3339 time written in the manager's ``managedFields`` entry. Raises the 422
    ``Invalid`` ApiError when ``manager`` is empty, as the API server does.
    """
    if not manager:
        raise invalid("Apply", str((config.get("metadata") or {}).get("name", "")), "fieldManager is required")
    result = copy.deepcopy(current) if current is not None else {}
    meta = (current or {}).get("metadata") or {}
    entries = [e for e in meta.get("managedFields") or [] if isinstance(e, dict)]
    mine = next((e for e in entries if e.get("manager") == manager and e.get("operation") == "Apply"), None)
    applied = _leaves(config)
    if mine is not None:
        for gone in _paths_of(mine.get("fieldsV1") or {}) - applied:
            if not any(path[: len(gone)] == gone for path in applied):
                _remove(result, gone)
    clean = {k: v for k, v in config.items() if k != "status"}
    clean_meta = {k: v for k, v in (clean.get("metadata") or {}).items() if k != "managedFields"}
    result = _merge(result, {**clean, "metadata": clean_meta})
    entry = {
        "manager": manager,
        "operation": "Apply",
        "apiVersion": config.get("apiVersion", ""),
        "time": now,
        "fieldsType": "FieldsV1",
        "fieldsV1": _fields_v1(applied),
    }
    others = [e for e in entries if e is not mine]
    result.setdefault("metadata", {})["managedFields"] = [*others, entry]
    return result
