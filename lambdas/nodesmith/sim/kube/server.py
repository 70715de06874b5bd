"""The Kubernetes API emulator over HTTP: what the official ``kubernetes`` client talks to, unchanged.

Built on :class:`http.server.ThreadingHTTPServer` (one thread per connection, HTTP/1.1 keep-alive,
chunked watch streams) over a :class:`~nodesmith.sim.kube.store.Store`. Routes:

* discovery and OpenAPI v3 (:mod:`nodesmith.sim.kube.discovery`): ``/version``, ``/healthz``,
  ``/readyz``, ``/livez``, ``/api``, ``/api/v1``, ``/apis``, ``/apis/<group>``,
  ``/apis/<group>/<version>``, ``/openapi/v3`` and ``/openapi/v3/<api|apis/group>/<version>``;
* ``/api/v1/...`` and ``/apis/<group>/<version>/...`` for every registered resource, cluster-wide
  (``/pods``) or per namespace (``/namespaces/<ns>/pods``), with ``/<name>``, ``/<name>/status``,
  ``pods/<name>/eviction`` and ``pods/<name>/binding``;
* verbs GET (one, list, ``watch=true``; as ``meta.k8s.io/v1`` Tables when the ``Accept`` header asks,
  :mod:`nodesmith.sim.kube.tables`), POST, PUT, PATCH (merge, strategic merge, JSON patch, server-side
  apply: :mod:`nodesmith.sim.kube.apply`), DELETE (one or collection). Writes of Karpenter's kinds are
  validated (:mod:`nodesmith.sim.kube.validation`).

Errors are ``meta/v1 Status`` bodies (a 429 with ``details.retryAfterSeconds`` also has the ``Retry-After``
header). With ``emulator.faults`` set, each resource request first meets the fault it draws
(:mod:`nodesmith.sim.kube.faults`). Start it with :class:`KubeEmulator`::

    with KubeEmulator() as kube:
        api = build_api_client(cluster_endpoint=kube.endpoint, kube_auth="none")
"""

from __future__ import annotations

import contextlib
import copy
import io
import json
import socket
import sys
import threading
import time
from http.server import ThreadingHTTPServer
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qs, urlsplit

from nodesmith.sim.kube import discovery, errors, scale, tables, validation
from nodesmith.sim.kube.apply import APPLY_PATCH, parse_config, server_side_apply
from nodesmith.sim.kube.errors import ApiError, status_body
from nodesmith.sim.kube.faults import request_of
from nodesmith.sim.kube.listing import from_watch_cache
from nodesmith.sim.kube.patching import apply_patch
from nodesmith.sim.kube.timefmt import rfc3339
from nodesmith.sim.kube.watching import WatchingHandler

if TYPE_CHECKING:
    from nodesmith.sim.kube.emulator import KubeEmulator
    from nodesmith.sim.kube.registry import ResourceType

__all__ = ["EmulatorServer"]

_SUBRESOURCE_VERBS = {
    "status": ("GET", "PUT", "PATCH"),
    "scale": ("GET", "PUT", "PATCH"),
    "eviction": ("POST",),
    "binding": ("POST",),
}


class EmulatorServer(ThreadingHTTPServer):
    """A threading HTTP server bound to one :class:`~nodesmith.sim.kube.emulator.KubeEmulator`."""

    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, address: tuple[str, int], emulator: KubeEmulator) -> None:
        self.emulator = emulator
        self.connections: set[socket.socket] = set()
        self.connections_lock = threading.Lock()
        super().__init__(address, _Handler)

    def handle_error(self, request: Any, client_address: Any) -> None:
        """Ignore connections the client (or :meth:`KubeEmulator.stop`) closed; report anything else."""
        if isinstance(sys.exc_info()[1], OSError):
            return
        super().handle_error(request, client_address)


class _Route:
    __slots__ = ("name", "namespace", "rt", "sub")

    def __init__(self, rt: ResourceType, namespace: str | None, name: str | None, sub: str | None) -> None:
        self.rt, self.namespace, self.name, self.sub = rt, namespace, name, sub


class _Handler(WatchingHandler):
    protocol_version = "HTTP/1.1"

    # -------------------------------------------------------------- plumbing
    def setup(self) -> None:
        super().setup()
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        with self.server.connections_lock:
            self.server.connections.add(self.connection)

    def finish(self) -> None:
        with self.server.connections_lock:
            self.server.connections.discard(self.connection)
        with contextlib.suppress(OSError):
            super().finish()

    def log_message(self, format: str, *args: Any) -> None:
        """Silence per-request logging."""

    def _send(
        self, code: int, body: bytes, content_type: str = "application/json", headers: dict[str, str] | None = None
    ) -> None:
        self.send_response(code)
        for key, value in (headers or {}).items():
            self.send_header(key, value)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Audit-Id", "nodesmith-emulator")
        self.end_headers()
        self.wfile.write(body)

    def _json(self, code: int, obj: Any, headers: dict[str, str] | None = None) -> None:
        self._send(code, json.dumps(obj, separators=(",", ":")).encode(), headers=headers)

    def _body(self) -> Any:
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        if not raw:
            return None
        try:
            return json.loads(raw)
        except ValueError:
            if (self.headers.get("Content-Type") or "").startswith(APPLY_PATCH):
                return parse_config(raw)
            raise errors.bad_request("the request body is not valid JSON") from None

    def do_GET(self) -> None:
        """Serve GET."""
        self._dispatch("GET")

    def do_POST(self) -> None:
        """Serve POST."""
        self._dispatch("POST")

    def do_PUT(self) -> None:
        """Serve PUT."""
        self._dispatch("PUT")

    def do_PATCH(self) -> None:
        """Serve PATCH."""
        self._dispatch("PATCH")

    def do_DELETE(self) -> None:
        """Serve DELETE."""
        self._dispatch("DELETE")

    # -------------------------------------------------------------- dispatch
    def _dispatch(self, method: str) -> None:
        emulator = self.server.emulator
        emulator.requests += 1
        try:
            body = self._body()
            if emulator.token is not None and self.headers.get("Authorization") != f"Bearer {emulator.token}":
                raise ApiError(401, "Unauthorized", "Unauthorized")
            emulator.last_authorization = self.headers.get("Authorization")
            url = urlsplit(self.path)
            query = {k: v[-1] for k, v in parse_qs(url.query, keep_blank_values=True).items()}
            path = url.path.rstrip("/") or "/"
            if method == "GET" and self._discovery(path):
                return
            route = self._route(path)
            emulator.count(
                request_of(
                    method, plural=route.rt.plural, name=route.name, sub=route.sub, query=query, body=body
                ).operation
            )
            self.fault = None
            if emulator.faults is not None:
                self._meet_fault(method, route, query, body)
                if self.fault is not None and self.fault.kind == "lost":
                    self._serve_unanswered(method, route, query, body)
                    return
            self._serve(method, route, query, body)
        except ApiError as exc:
            retry_after = exc.details.get("retryAfterSeconds")
            self._json(exc.code, exc.status(), {"Retry-After": str(retry_after)} if retry_after else None)
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True
        except Exception as exc:  # an emulator bug must answer 500, not hang the client
            self._json(500, status_body(code=500, reason="InternalError", message=f"emulator error: {exc!r}"))

    def _meet_fault(self, method: str, route: _Route, query: dict[str, str], body: Any) -> None:
        """Draw this request's fault: raise the refusals, wait out a slow answer, keep a watch's for the stream."""
        faults = self.server.emulator.faults
        if faults is None:
            return
        request = request_of(method, plural=route.rt.plural, name=route.name, sub=route.sub, query=query, body=body)
        fault = faults.draw(request)
        if fault is None:
            return
        if fault.kind == "throttle":
            raise errors.too_many_requests(
                "Too many requests, please try again later.", retry_after_seconds=fault.retry_after
            )
        if fault.kind == "error":
            raise errors.internal_error(f"injected fault: {request.operation} failed")
        if fault.kind == "conflict":
            raise errors.conflict(route.rt.plural, route.name or "", route.rt.group)
        if fault.kind == "slow":
            time.sleep(fault.delay)
        self.fault = fault

    def _serve_unanswered(self, method: str, route: _Route, query: dict[str, str], body: Any) -> None:
        """A ``lost`` fault: serve the request, write its answer nowhere and close the connection."""
        wire, self.wfile = self.wfile, io.BytesIO()
        try:
            with contextlib.suppress(ApiError):
                self._serve(method, route, query, body)
        finally:
            self.wfile = wire
            self.close_connection = True
            with contextlib.suppress(OSError):
                self.connection.shutdown(socket.SHUT_RDWR)

    def _discovery(self, path: str) -> bool:
        doc = discovery.document(self.server.emulator, path)
        if doc is None:
            return False
        if isinstance(doc, str):
            self._send(200, doc.encode(), "text/plain")
        else:
            self._json(200, doc)
        return True

    def _route(self, path: str) -> _Route:
        segs = path.strip("/").split("/")
        not_found = ApiError(404, "NotFound", "the server could not find the requested resource")
        if segs[0] == "api" and len(segs) >= 3:
            group, version, rest = "", segs[1], segs[2:]
        elif segs[0] == "apis" and len(segs) >= 4:
            group, version, rest = segs[1], segs[2], segs[3:]
        else:
            raise not_found
        namespace = None
        if len(rest) >= 3 and rest[0] == "namespaces" and not (len(rest) == 3 and rest[2] in ("status", "finalize")):
            namespace, rest = rest[1], rest[2:]
        if len(rest) > 3:
            raise not_found
        rt = self.server.emulator.store.registry.by_rest(group, version, rest[0])
        if rt is None:
            raise not_found
        name = rest[1] if len(rest) > 1 else None
        sub = rest[2] if len(rest) > 2 else None
        if (not rt.namespaced and namespace is not None) or (rt.namespaced and name is not None and namespace is None):
            raise not_found
        if sub is not None and sub not in rt.subresources:
            raise not_found
        return _Route(rt, namespace, name, sub)

    def _serve(self, method: str, route: _Route, query: dict[str, str], body: Any) -> None:
        store = self.server.emulator.store
        rt, ns, name, sub = route.rt, route.namespace, route.name, route.sub
        if sub is not None and method not in _SUBRESOURCE_VERBS.get(sub, ()):
            raise ApiError(405, "MethodNotAllowed", f"{method} is not supported on {rt.plural}/{sub}")
        if name is None:
            self._collection(method, rt, ns, query, body)
        elif sub == "scale":
            self._scale(method, rt, name, ns, body)
        elif method == "GET":
            self._get_one(rt, name, ns, query)
        elif method == "POST" and sub == "eviction":
            options = (body or {}).get("deleteOptions") or {}
            store.evict(
                name,
                namespace=ns or "",
                grace_period_seconds=options.get("gracePeriodSeconds"),
                preconditions=options.get("preconditions"),
            )
            self._json(201, status_body(code=201, success=True))
        elif method == "POST" and sub == "binding":
            target = (body or {}).get("target") or {}
            store.bind(name, namespace=ns or "", node_name=str(target.get("name", "")))
            # The API server answers a Status here, which the Python client cannot read as the
            # V1Binding it expects (kubernetes-client/python#825); echo the Binding instead.
            self._json(
                201,
                {"apiVersion": "v1", "kind": "Binding", "metadata": {"name": name, "namespace": ns}, "target": target},
            )
        elif method == "PUT":
            self._put(rt, name, ns, sub, body)
        elif method == "PATCH" and sub is None and self._content_type().startswith(APPLY_PATCH):
            self._apply(rt, name, ns, query, body)
        elif method == "PATCH":
            self._patch(rt, name, ns, sub, body)
        elif method == "DELETE":
            options = body if isinstance(body, dict) else {}
            grace = options.get("gracePeriodSeconds")
            if "gracePeriodSeconds" in query:
                grace = int(query["gracePeriodSeconds"])
            self._json(
                200,
                store.delete(
                    rt.key, name, namespace=ns, grace_period_seconds=grace, preconditions=options.get("preconditions")
                ),
            )
        else:
            raise ApiError(405, "MethodNotAllowed", f"{method} is not supported on {rt.plural}/{name}")

    def _get_one(self, rt: ResourceType, name: str, ns: str | None, query: dict[str, str]) -> None:
        obj = self.server.emulator.store.get(rt.key, name, namespace=ns)
        if self._table_wanted():
            rv = str((obj.get("metadata") or {}).get("resourceVersion", ""))
            obj = tables.table(rt, [obj], now=time.time(), resource_version=rv, include_object=self._include(query))
        self._json(200, obj)

    def _put(self, rt: ResourceType, name: str, ns: str | None, sub: str | None, body: Any) -> None:
        """PUT; a Karpenter kind's main resource is validated before it is stored."""
        obj = self._object(body)
        if obj.setdefault("metadata", {}).get("name", name) != name:
            raise errors.bad_request(
                f"the name of the object ({obj['metadata']['name']}) does not match the name on the URL ({name})"
            )
        obj["metadata"]["name"] = name
        if sub is None:
            validation.check(rt, obj)
        self._json(200, self.server.emulator.store.replace(rt.key, obj, namespace=ns, subresource=sub))

    def _content_type(self) -> str:
        return (self.headers.get("Content-Type") or "").split(";", 1)[0].strip().lower()

    def _apply(self, rt: ResourceType, name: str, ns: str | None, query: dict[str, str], body: Any) -> None:
        """Server-side apply (:mod:`nodesmith.sim.kube.apply`): create when absent, else merge and prune."""
        store = self.server.emulator.store
        config = parse_config(body)
        if str((config.get("metadata") or {}).get("name", name)) != name:
            raise errors.bad_request(f"the name of the object does not match the name on the URL ({name})")
        current = store.find(rt.key, name, namespace=ns)
        result = server_side_apply(current, config, manager=query.get("fieldManager", ""), now=rfc3339(time.time()))
        validation.check(rt, result)
        if current is None:
            self._json(201, store.create(rt.key, result, namespace=ns))
        else:
            self._json(200, store.replace(rt.key, result, namespace=ns))

    def _patch(self, rt: ResourceType, name: str, ns: str | None, sub: str | None, body: Any) -> None:
        """PATCH; a Karpenter kind's main resource is validated as patched before anything is stored."""
        store = self.server.emulator.store
        ctype = self.headers.get("Content-Type") or "application/merge-patch+json"
        if sub is None and rt.custom:
            current = store.get(rt.key, name, namespace=ns)
            validation.check(rt, apply_patch(current, copy.deepcopy(body), ctype, custom=True))
        self._json(200, store.patch(rt.key, name, body, namespace=ns, content_type=ctype, subresource=sub))

    def _scale(self, method: str, rt: ResourceType, name: str, ns: str | None, body: Any) -> None:
        store = self.server.emulator.store
        if method == "GET":
            self._json(200, scale.read_scale(store, rt.key, name, namespace=ns))
        elif method == "PUT":
            self._json(200, scale.write_scale(store, rt.key, name, namespace=ns, scale=body))
        else:
            ctype = self.headers.get("Content-Type") or "application/merge-patch+json"
            self._json(200, scale.patch_scale(store, rt.key, name, namespace=ns, body=body, content_type=ctype))

    @staticmethod
    def _object(body: Any) -> dict[str, Any]:
        if not isinstance(body, dict):
            raise errors.bad_request("the request body must be a JSON object")
        return body

    def _collection(self, method: str, rt: ResourceType, ns: str | None, query: dict[str, str], body: Any) -> None:
        store = self.server.emulator.store
        selectors = {"label_selector": query.get("labelSelector"), "field_selector": query.get("fieldSelector")}
        if method == "GET" and query.get("watch") in ("true", "1"):
            self._watch(rt, ns, query)
        elif method == "GET" and self._table_wanted():
            limit = int(query["limit"]) if query.get("limit") else None
            found = store.list(rt.key, namespace=ns, limit=limit, continue_token=query.get("continue"), **selectors)
            rv, token = str(found.resource_version), found.continue_token
            self._json(
                200,
                tables.table(
                    rt,
                    found.items,
                    now=time.time(),
                    resource_version=rv,
                    continue_token=token,
                    include_object=self._include(query),
                ),
            )
        elif method == "GET":
            limit = int(query["limit"]) if query.get("limit") else None
            if from_watch_cache(query, current=store.resource_version):
                self.server.emulator.count_cache_list(rt.plural)
            self._send(
                200,
                store.list_json(rt.key, namespace=ns, limit=limit, continue_token=query.get("continue"), **selectors),
            )
        elif method == "POST":
            if rt.namespaced and ns is None:
                raise ApiError(405, "MethodNotAllowed", f"POST on all-namespaces {rt.plural} is not allowed")
            validation.check(rt, body)
            self._json(201, store.create(rt.key, self._object(body), namespace=ns))
        elif method == "DELETE":
            deleted = store.delete_collection(rt.key, namespace=ns, **selectors)
            self._json(
                200,
                {
                    "kind": f"{rt.kind}List",
                    "apiVersion": rt.api_version,
                    "metadata": {"resourceVersion": str(store.resource_version)},
                    "items": deleted,
                },
            )
        else:
            raise ApiError(405, "MethodNotAllowed", f"{method} is not supported on the {rt.plural} collection")
