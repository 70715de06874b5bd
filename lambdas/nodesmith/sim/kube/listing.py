"""Selecting and paging the objects of one resource for list calls and the HTTP list answer."""

from __future__ import annotations

import base64
import json
from typing import TYPE_CHECKING, Any

from nodesmith.sim.kube import errors
from nodesmith.sim.kube.selectors import fields_match, parse_field_selector, parse_label_selector

if TYPE_CHECKING:
    from collections.abc import Mapping

    from nodesmith.sim.kube.registry import ResourceType

__all__ = ["select"]


def _decode(token: str) -> str:
    try:
        start = json.loads(base64.urlsafe_b64decode(token.encode()))["start"]
    except (ValueError, KeyError, TypeError):
        raise errors.ApiError(410, "Expired", "the provided continue parameter is not valid") from None
    return str(start)


def select(
    objects: Mapping[tuple[str, str], Any],
    rt: ResourceType,
    *,
    namespace: str | None = None,
    label_selector: str | None = None,
    field_selector: str | None = None,
    limit: int | None = None,
    continue_token: str | None = None,
) -> tuple[list[Any], str]:
    """Entries of ``objects`` (keyed ``(namespace, name)``, values with ``.obj``) matching the query.

    Results are ordered by namespace then name. With ``limit``, at most that many are returned
    with a continue token (opaque, the last key returned) when more remain. Raises 400 for a bad
    selector or a field label ``rt`` does not support, 410 for an unreadable continue token.
    """
    labels_ok = parse_label_selector(label_selector)
    fields = parse_field_selector(field_selector, rt.selectable_fields)
    start = _decode(continue_token) if continue_token else ""
    out: list[Any] = []
    last = ""
    for key in sorted(objects):
        position = "/".join(key)
        if (namespace and key[0] != namespace) or (start and position <= start):
            continue
        entry = objects[key]
        meta = entry.obj.get("metadata") or {}
        if not labels_ok(meta.get("labels") or {}) or (fields and not fields_match(entry.obj, fields)):
            continue
        if limit and len(out) == limit:
            return out, base64.urlsafe_b64encode(json.dumps({"start": last}).encode()).decode()
        out.append(entry)
        last = position
    return out, ""
