"""REST calls through the official client's ``ApiClient``, without its generated API classes.

Why not ``CoreV1Api`` and friends: in kubernetes 37 every generated method is a pydantic
``validate_call`` over the client's models, and importing the generated API modules takes seconds, which
a Lambda cold start cannot afford. :class:`KubeRest` uses the same ``ApiClient`` (``param_serialize``
for auth, including the EKS token refresh hook, and ``call_api`` for the pooled urllib3 connection with
TLS and retries) and reads JSON itself with pydantic-core's parser (``from_json``), which is also much
faster than the client's model deserialisation. Lists page with ``limit``/``continue``.

Failures become :mod:`nodesmith.core.errors`: 404 -> :class:`NotFoundError`, 409 ->
:class:`ConflictError`, any other status -> :class:`KubernetesError` with that status; a
connection failure -> :class:`KubernetesError` with status 0, and a success whose body is not JSON
-> :class:`KubernetesError` with that status. Messages carry the ``Status.message`` the API server sent.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

from pydantic_core import from_json

from nodesmith.core.errors import ConflictError, KubernetesError, NotFoundError

if TYPE_CHECKING:
    from kubernetes.client import ApiClient

__all__ = ["JSON", "MERGE_PATCH", "STRATEGIC_MERGE_PATCH", "KubeRest", "error_for", "path"]

JSON = "application/json"
MERGE_PATCH = "application/merge-patch+json"
STRATEGIC_MERGE_PATCH = "application/strategic-merge-patch+json"
"""For built-in kinds only (Nodes): lists merge by their ``patchStrategy`` (finalizers as a set)."""


def path(*parts: str) -> str:
    """A URL path from literal segments and names, each name percent-encoded (``path("api", "v1", ...)``)."""
    return "/" + "/".join(quote(p, safe="") for p in parts)


def _status_message(body: bytes | str | None, fallback: str) -> str:
    if not body:
        return fallback
    try:
        doc = json.loads(body)
    except (TypeError, ValueError):
        return str(body)[:300]
    if isinstance(doc, dict) and doc.get("message"):
        return str(doc["message"])
    return fallback


def error_for(status: int, body: bytes | str | None, what: str, reason: str = "") -> KubernetesError:
    """The core error for an HTTP ``status`` answered to the call described by ``what``."""
    message = f"{what}: HTTP {status}: {_status_message(body, reason)}"
    if status == 404:
        return NotFoundError(message, status=status)
    if status == 409:
        return ConflictError(message, status=status)
    return KubernetesError(message, status=status)


class KubeRest:
    """JSON-in, JSON-out calls to the API server through ``api_client`` (see the module docstring).

    ``timeout`` is the (connect, read) timeout in seconds of every call.
    """

    def __init__(self, api_client: ApiClient, *, timeout: tuple[float, float] = (5.0, 30.0)) -> None:
        self.api_client = api_client
        self.timeout = timeout

    def request(
        self,
        method: str,
        url_path: str,
        *,
        what: str,
        query: dict[str, Any] | None = None,
        body: Any = None,
        content_type: str = JSON,
    ) -> Any:
        """Send one request; the parsed JSON answer (None when empty). Raises core errors."""
        from urllib3.exceptions import HTTPError

        headers = {"Accept": JSON}
        if body is not None:
            headers["Content-Type"] = content_type
        params = [(k, v) for k, v in (query or {}).items() if v is not None]
        try:
            _, url, headers, body, _ = self.api_client.param_serialize(
                method, url_path, query_params=params, header_params=headers, body=body, auth_settings=["BearerToken"]
            )
            response = self.api_client.call_api(
                method, url, header_params=headers, body=body, _request_timeout=self.timeout
            )
            data = response.read()  # type: ignore[no-untyped-call]
        except (HTTPError, OSError) as exc:
            raise KubernetesError(f"{what}: cannot reach the API server: {exc}", status=0) from exc
        if not 200 <= response.status <= 299:
            raise error_for(response.status, data, what, str(response.reason or ""))
        if not data:
            return None
        try:
            return from_json(data)
        except ValueError as exc:
            message = f"{what}: the API server's answer is not JSON: {exc}"
            raise KubernetesError(message, status=response.status) from exc

    def list(self, url_path: str, *, what: str, page_size: int = 500, **query: Any) -> list[dict[str, Any]]:
        """Every item of a collection, paging with ``limit``/``continue``, as raw dicts."""
        items: list[dict[str, Any]] = []
        token: str | None = None
        while True:
            doc = self.request("GET", url_path, what=what, query={**query, "limit": page_size, "continue": token}) or {}
            items.extend(doc.get("items") or [])
            token = (doc.get("metadata") or {}).get("continue") or None
            if not token:
                return items
