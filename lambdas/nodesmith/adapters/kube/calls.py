"""REST calls through the official client's ``ApiClient``, without its generated API classes.

Why not ``CoreV1Api`` and friends: in kubernetes 37 every generated method is a pydantic
``validate_call`` over the client's models, and importing the generated API modules takes seconds, which
a Lambda cold start cannot afford. :class:`KubeRest` uses the same ``ApiClient`` (``param_serialize``
for auth, including the EKS token refresh hook, and ``call_api`` for the pooled urllib3 connection with
TLS and retries) and reads JSON itself with pydantic-core's parser (``from_json``), which is also much
faster than the client's model deserialisation. Lists page with ``limit``/``continue``.

Requests the API server refused for now (429, 5xx, no answer) are tried again as
:mod:`nodesmith.adapters.kube.retry` says, within a :class:`~nodesmith.adapters.kube.retry.RetryPolicy`; the
failure that remains is raised. Failures become :mod:`nodesmith.core.errors`: 404 -> :class:`NotFoundError`, 409 ->
:class:`ConflictError`, any other status -> :class:`KubernetesError` with that status; a
connection failure -> :class:`KubernetesError` with status 0, and a success whose body is not JSON
-> :class:`KubernetesError` with that status. Messages carry the ``Status.message`` the API server sent.
"""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

from pydantic_core import from_json

from nodesmith.adapters.kube.retry import RetryPolicy, retry_after_seconds, retryable
from nodesmith.core.errors import ConflictError, KubernetesError, NotFoundError

if TYPE_CHECKING:
    import builtins
    from collections.abc import Callable

    from kubernetes.client import ApiClient

__all__ = [
    "JSON",
    "JSON_PATCH",
    "MERGE_PATCH",
    "STRATEGIC_MERGE_PATCH",
    "Call",
    "KubeRest",
    "error_for",
    "may_have_applied",
    "path",
]

JSON = "application/json"
MERGE_PATCH = "application/merge-patch+json"
STRATEGIC_MERGE_PATCH = "application/strategic-merge-patch+json"
"""For built-in kinds only (Nodes): lists merge by their ``patchStrategy`` (finalizers as a set)."""
JSON_PATCH = "application/json-patch+json"


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


def may_have_applied(exc: KubernetesError) -> bool:
    """Whether a failed write may still have been applied: no answer (status 0) or a server error (5xx)."""
    return _doubtful(exc.status)


def _doubtful(status: int) -> bool:
    """Whether an answer with HTTP ``status`` (0: none came) leaves open that the write was applied."""
    return status == 0 or status >= 500


def _repeatable(method: str, body: Any, content_type: str) -> bool:
    """Whether sending the request again after a failure that may have applied it gives the same result:
    reads and deletes, and updates and merge patches without a ``metadata.resourceVersion`` precondition (a
    guarded write that landed would answer its repeat 409, which its caller would take for another writer's
    change). Never a POST or a JSON patch."""
    if method in ("GET", "HEAD", "DELETE"):
        return True
    if method == "POST" or content_type == JSON_PATCH:
        return False
    meta = body.get("metadata") if isinstance(body, dict) else None
    return not (isinstance(meta, dict) and meta.get("resourceVersion"))


@dataclass(slots=True)
class Call:
    """One request as :meth:`KubeRest.call` sends it (the parameters of :meth:`KubeRest.request`), and the
    statuses of its failed tries (``failures``; 0 for no answer), filled in as it goes."""

    method: str
    url_path: str
    what: str
    query: dict[str, Any] | None = None
    body: Any = None
    content_type: str = JSON
    repeatable: bool | None = None
    failures: list[int] = field(default_factory=list)


class KubeRest:
    """JSON-in, JSON-out calls to the API server through ``api_client`` (see the module docstring).

    ``timeout`` is the (connect, read) timeout in seconds of every try; ``retry`` bounds the retries
    (:class:`~nodesmith.adapters.kube.retry.RetryPolicy`). :attr:`retries` counts the tries sent again.
    """

    def __init__(
        self, api_client: ApiClient, *, timeout: tuple[float, float] = (5.0, 30.0), retry: RetryPolicy | None = None
    ) -> None:
        self.api_client = api_client
        self.timeout = timeout
        self.retry = retry if retry is not None else RetryPolicy()
        self.retries = 0
        self._lock = threading.Lock()

    def request(
        self,
        method: str,
        url_path: str,
        *,
        what: str,
        query: dict[str, Any] | None = None,
        body: Any = None,
        content_type: str = JSON,
        repeatable: bool | None = None,
    ) -> Any:
        """Send one request, retried as the module docstring says; the parsed JSON answer (None when empty).

        ``repeatable`` says whether the request may be sent again after a failure that may have applied it
        (no answer, 5xx); None infers it from the method and body (reads, deletes and unguarded merge patches
        and updates are, POSTs and guarded writes are not). Raises core errors.
        """
        call = Call(method, url_path, what, query, body, content_type, repeatable)
        return self.call(call)

    def call(self, call: Call) -> Any:
        """Send ``call`` as :meth:`request` does, recording its failed tries in ``call.failures``."""
        policy = self.retry
        repeatable = call.repeatable
        if repeatable is None:
            repeatable = _repeatable(call.method, call.body, call.content_type)
        waited = 0.0
        for attempt in range(1, max(policy.attempts, 1) + 1):
            status, data, reason, retry_after = self._send(call)
            if 200 <= status <= 299:
                return self._parse(status, data, call.what)
            error = (
                KubernetesError(f"{call.what}: cannot reach the API server: {reason}", status=0)
                if status == 0
                else error_for(status, data, call.what, reason)
            )
            call.failures.append(status)
            if attempt >= policy.attempts or not retryable(status, data, repeatable=repeatable):
                raise error
            pause = policy.wait(attempt, retry_after_seconds(retry_after))
            if waited + pause > policy.budget_seconds:
                raise error
            waited += pause
            with self._lock:
                self.retries += 1
            policy.sleep(pause)
        raise AssertionError("unreachable")  # pragma: no cover

    def _send(self, call: Call) -> tuple[int, bytes, str, str | None]:
        """One try: (status, body, reason, Retry-After); status 0 and the error as reason when nothing answered."""
        from urllib3.exceptions import HTTPError

        headers = {"Accept": JSON}
        if call.body is not None:
            headers["Content-Type"] = call.content_type
        params = [(k, v) for k, v in (call.query or {}).items() if v is not None]
        try:
            _, url, headers, body, _ = self.api_client.param_serialize(
                call.method,
                call.url_path,
                query_params=params,
                header_params=headers,
                body=call.body,
                auth_settings=["BearerToken"],
            )
            response = self.api_client.call_api(
                call.method, url, header_params=headers, body=body, _request_timeout=self.timeout
            )
            data = response.read()  # type: ignore[no-untyped-call]
        except (HTTPError, OSError) as exc:
            return 0, b"", str(exc), None
        return response.status, data or b"", str(response.reason or ""), response.headers.get("Retry-After")

    @staticmethod
    def _parse(status: int, data: bytes, what: str) -> Any:
        if not data:
            return None
        try:
            return from_json(data)
        except ValueError as exc:
            raise KubernetesError(f"{what}: the API server's answer is not JSON: {exc}", status=status) from exc

    def create(
        self,
        url_path: str,
        *,
        body: dict[str, Any],
        what: str,
        same: Callable[[dict[str, Any], dict[str, Any]], bool] | None,
    ) -> Any:
        """POST ``body`` (an object with ``metadata.name``) to the collection ``url_path``; the created object.

        Unlike :meth:`request`, a POST that got no answer or a 5xx is sent again: if the first try did create
        the object, the retry is answered 409 AlreadyExists. Then the object is read back (a ``get``) and
        returned when ``same(body, found)`` says it is the one sent; with ``same`` None the name is this call's
        alone (a random suffix), so the object is taken as created without reading it, and None is returned. A
        409 with no earlier doubtful try, or for an object that is not the one sent, raises ``ConflictError``
        (someone else's object has the name).
        """
        call = Call("POST", url_path, what, body=body, repeatable=True)
        try:
            return self.call(call)
        except ConflictError:
            if not any(_doubtful(s) for s in call.failures):
                raise
            if same is None:
                return None
            name = str((body.get("metadata") or {}).get("name") or "")
            found = self.request("GET", f"{url_path}/{quote(name, safe='')}", what=f"{what} (read back)")
            if isinstance(found, dict) and same(body, found):
                return found
            raise

    def list(
        self, url_path: str, *, what: str, page_size: int = 500, cached: bool = False, **query: Any
    ) -> list[dict[str, Any]]:
        """Every item of a collection, paging with ``limit``/``continue``, as raw dicts.

        ``cached`` asks for the first page at ``resourceVersion=0``: any version the API server holds, served
        from its watch cache instead of a quorum read of etcd (Kubernetes API concepts, "Resource versions"; what
        client-go's informers list with). The data may trail the latest writes by the cache's delay. Later pages
        carry only the ``continue`` token, which holds the version (a version beside it is refused).
        """
        return self.list_versioned(url_path, what=what, page_size=page_size, cached=cached, **query)[0]

    def list_versioned(
        self,
        url_path: str,
        *,
        what: str,
        page_size: int = 500,
        cached: bool = False,
        not_older_than: str = "",
        **query: Any,
    ) -> tuple[builtins.list[dict[str, Any]], str]:
        """:meth:`list`, and the list's ``metadata.resourceVersion`` (where a watch of it starts).

        ``not_older_than`` (a version this caller already saw) asks for the list at that version with
        ``resourceVersionMatch=NotOlderThan`` and no ``limit``: every API server version serves it from its watch
        cache once the cache holds that version (with a limit, Kubernetes 1.32 and earlier read the list from etcd,
        later versions its pages after the first), so the list never goes back in time behind what the caller read,
        from whichever API server answers, and etcd is not read. client-go's reflector relists so, turning paging
        off for the same reason. It takes precedence over ``cached``."""
        items: builtins.list[dict[str, Any]] = []
        token: str | None = None
        first: dict[str, str] = {"resourceVersion": "0"} if cached else {}
        limit: int | None = page_size
        if not_older_than:
            first = {"resourceVersion": not_older_than, "resourceVersionMatch": "NotOlderThan"}
            limit = None
        version = ""
        while True:
            page = {**query, **(first if token is None else {}), "limit": limit, "continue": token}
            doc = self.request("GET", url_path, what=what, query=page) or {}
            items.extend(doc.get("items") or [])
            meta = doc.get("metadata") or {}
            version = version or str(meta.get("resourceVersion") or "")
            token = meta.get("continue") or None
            if not token:
                return items, version
