"""Selecting and paging the objects of one resource for list calls and the HTTP list answer."""

from __future__ import annotations

import base64
import bisect
import json
from typing import TYPE_CHECKING, Any

from nodesmith.sim.kube import errors
from nodesmith.sim.kube.selectors import fields_match, parse_field_selector, parse_label_selector

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

    from nodesmith.sim.kube.registry import ResourceType

__all__ = ["from_watch_cache", "select"]


def _decode(token: str) -> tuple[str, str]:
    try:
        namespace, name = json.loads(base64.urlsafe_b64decode(token.encode()))["start"]
    except (ValueError, KeyError, TypeError):
        raise errors.ApiError(410, "Expired", "the provided continue parameter is not valid") from None
    return str(namespace), str(name)


def _encode(key: tuple[str, str]) -> str:
    return base64.urlsafe_b64encode(json.dumps({"start": list(key)}).encode()).decode()


def select(
    objects: Mapping[tuple[str, str], Any],
    keys: Sequence[tuple[str, str]],
    rt: ResourceType,
    *,
    namespace: str | None = None,
    label_selector: str | None = None,
    field_selector: str | None = None,
    limit: int | None = None,
    continue_token: str | None = None,
) -> tuple[list[Any], str]:
    """Entries of ``objects`` (keyed ``(namespace, name)``, values with ``.obj``) matching the query.

    ``keys`` are the keys of ``objects``, sorted; results follow that order (namespace, then
    name). With ``limit``, at most that many are returned with a continue token (opaque: the
    last key returned) when more remain. Raises 400 for a bad selector or a field label ``rt``
    does not support, 410 for an unreadable continue token.
    """
    labels_ok = parse_label_selector(label_selector)
    fields = parse_field_selector(field_selector, rt.selectable_fields)
    index = bisect.bisect_left(keys, (namespace, "")) if namespace else 0
    if continue_token:
        index = max(index, bisect.bisect_right(keys, _decode(continue_token)))
    out: list[Any] = []
    for position in range(index, len(keys)):
        key = keys[position]
        if namespace and key[0] != namespace:
            break
        entry = objects[key]
        meta = entry.obj.get("metadata") or {}
        if not labels_ok(meta.get("labels") or {}) or (fields and not fields_match(entry.obj, fields)):
            continue
        if limit and len(out) == limit:
            return out, _encode(_last_key(out))
        out.append(entry)
    return out, ""


def _last_key(entries: list[Any]) -> tuple[str, str]:
    meta = entries[-1].obj["metadata"]
    return meta.get("namespace", ""), meta["name"]


def from_watch_cache(query: Mapping[str, str], *, current: int) -> bool:
    """Whether a list with ``query`` is served from the API server's watch cache (the emulator's cache is its
    store, always current), after refusing what the API server refuses (Kubernetes API concepts, "Resource
    versions" and "Retrieving large results sets in chunks"): a version given with ``continue`` (400: the token
    carries it), one that is not a version (400), one newer than ``current`` (504 "Too large resource version":
    the cache never caught up) and an ``Exact`` match of a version other than ``current`` (410: the emulator keeps
    no older states). The cache serves ``resourceVersion=0`` (any version), and a version not newer than
    ``current`` without a ``limit`` (not older than it); a list without a version, or with one and a ``limit``, is
    read from etcd, as Kubernetes 1.32 and earlier do (their cacher's ``shouldDelegateList``): served as the latest
    (False)."""
    rv = query.get("resourceVersion", "")
    if not rv:
        return False
    if query.get("continue"):
        raise errors.bad_request("specifying resource version is not allowed when using continue")
    if rv == "0":
        return True
    try:
        wanted = int(rv)
    except ValueError:
        raise errors.bad_request(f"invalid resourceVersion {rv!r}") from None
    if wanted > current:
        raise errors.too_large_resource_version(wanted, current)
    if query.get("resourceVersionMatch") == "Exact":
        if wanted != current:
            raise errors.expired(f"too old resource version: {wanted} ({current})")
        return False
    return not query.get("limit")
