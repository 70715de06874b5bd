"""The emulator's non-resource GET paths: health, ``/version``, discovery and OpenAPI v3.

Discovery is the unaggregated form (``/api``, ``/api/v1``, ``/apis``, ``/apis/<g>``,
``/apis/<g>/<v>``): ``kubectl`` asks for the aggregated ``apidiscovery.k8s.io/v2`` list first and
falls back to it when the answer is a plain ``APIVersions`` / ``APIGroupList``. OpenAPI v3 comes
from :mod:`nodesmith.sim.kube.openapi`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from nodesmith.sim.kube import openapi
from nodesmith.sim.kube.errors import ApiError

if TYPE_CHECKING:
    from collections.abc import Callable

    from nodesmith.sim.kube.emulator import KubeEmulator
    from nodesmith.sim.kube.registry import Registry

__all__ = ["document"]

_HEALTH = ("/healthz", "/readyz", "/livez")


def document(emulator: KubeEmulator, path: str) -> dict[str, Any] | str | None:
    """What GET ``path`` answers: a JSON document, ``"ok"`` for a health path, or None when ``path``
    is a resource path (or unknown) for the resource router. ApiError 404 for an unknown group."""
    registry = emulator.store.registry
    if path in _HEALTH:
        return "ok"
    fixed: dict[str, Callable[[], dict[str, Any]]] = {
        "/version": lambda: dict(emulator.version_info()),
        "/api": registry.api_versions,
        "/apis": registry.api_group_list,
        "/openapi/v3": lambda: openapi.index(registry),
    }
    if path in fixed:
        return fixed[path]()
    segs = path.strip("/").split("/")
    if segs[0] not in ("api", "apis", "openapi") or not _is_document_path(segs):
        return None
    doc = _group_document(registry, segs)
    if doc is None:
        raise ApiError(404, "NotFound", "the server could not find the requested resource")
    return doc


def _is_document_path(segs: list[str]) -> bool:
    """True for ``/api/<v>``, ``/apis/<g>[/<v>]`` and every ``/openapi/...`` path."""
    return segs[0] == "openapi" or (segs[0] == "api" and len(segs) == 2) or (segs[0] == "apis" and len(segs) <= 3)


def _group_document(registry: Registry, segs: list[str]) -> dict[str, Any] | None:
    if segs[:3] == ["openapi", "v3", "api"] and len(segs) == 4:
        return openapi.gv_document(registry, "", segs[3])
    if segs[:3] == ["openapi", "v3", "apis"] and len(segs) == 5:
        return openapi.gv_document(registry, segs[3], segs[4])
    if segs[0] == "api":
        return registry.resource_list("", segs[1])
    if segs[0] == "apis" and len(segs) == 2:
        return registry.api_group(segs[1])
    if segs[0] == "apis":
        return registry.resource_list(segs[1], segs[2])
    return None
