"""The watch half of the emulator's HTTP handler: chunked ``watch=true`` streams, as Tables when asked.

A watch starts from a store subscription (all objects when ``resourceVersion`` is empty or ``0`` or
``sendInitialEvents=true``, else the changes after it; ``410 Gone`` as an ``ERROR`` event when too old, ``504``
"Too large resource version" when newer than the store's), filters by namespace and selectors (an object moving
into or out of the selection becomes ADDED / DELETED, as upstream), and ends at ``timeoutSeconds``, disconnect or
emulator stop. An ``Accept`` asking for ``meta.k8s.io/v1`` Tables (``kubectl get -w``) gets one-row Tables.

A watch with ``allowWatchBookmarks=true`` gets a ``BOOKMARK`` at the store's current version every
:data:`BOOKMARK_SECONDS` and :data:`PRE_TIMEOUT_BOOKMARK_SECONDS` before its timeout, once every event it was owed
has been sent, as the API server's watch cache does (``cacheWatcher.nextBookmarkTime`` in ``k8s.io/apiserver``'s
cacher: bookmarks roughly every minute and 2 s before the deadline; a watch whose timeout is 2 s or less gets none).
A client resuming from its last bookmark then stays inside the retained history however many writes of other kinds
went by, and a client that resumes with a short timeout learns from the bookmark that it has caught up.
"""

from __future__ import annotations

import contextlib
import json
import socket
import time
from http.server import BaseHTTPRequestHandler
from typing import TYPE_CHECKING, Any

from nodesmith.sim.kube import errors, tables
from nodesmith.sim.kube.errors import ApiError
from nodesmith.sim.kube.selectors import fields_match, parse_field_selector, parse_label_selector

if TYPE_CHECKING:
    from collections.abc import Callable

    from nodesmith.sim.kube.faults import Fault
    from nodesmith.sim.kube.registry import ResourceType
    from nodesmith.sim.kube.server import EmulatorServer
    from nodesmith.sim.kube.store import Subscription, WatchEvent

__all__ = ["BOOKMARK_SECONDS", "PRE_TIMEOUT_BOOKMARK_SECONDS", "WatchingHandler"]

BOOKMARK_SECONDS = 60.0
"""How often a watch that allows bookmarks gets one (the API server's ``bookmarkFrequency``, one minute)."""
PRE_TIMEOUT_BOOKMARK_SECONDS = 2.0
"""How long before its timeout a watch that allows bookmarks gets its last one (``cacheWatcher.nextBookmarkTime``)."""


class _Cut(Exception):
    """A ``cut`` fault: the watch stream is to end without its terminator."""


class WatchingHandler(BaseHTTPRequestHandler):
    """Base of the emulator's request handler: watch streaming and the Table negotiation."""

    server: EmulatorServer
    fault: Fault | None = None

    def _table_wanted(self) -> bool:
        return tables.wants_table(self.headers.get("Accept"))

    @staticmethod
    def _include(query: dict[str, str]) -> str:
        return query.get("includeObject") or "Metadata"

    def _bookmark(self, rt: ResourceType, meta: dict[str, Any]) -> None:
        self._chunk({"type": "BOOKMARK", "object": {"kind": rt.kind, "apiVersion": rt.api_version, "metadata": meta}})

    def _chunk(self, event: dict[str, Any]) -> None:
        data = json.dumps(event, separators=(",", ":")).encode() + b"\n"
        self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))

    def _subscribe(self, rt: ResourceType, query: dict[str, str]) -> Subscription | ApiError:
        """The store subscription a watch starts from, or the error to report as an ERROR event: 410 Gone for a
        version older than the history kept, 504 "Too large resource version" for one newer than the store's."""
        store = self.server.emulator.store
        rv = query.get("resourceVersion", "")
        if rv in ("", "0") or query.get("sendInitialEvents") == "true":
            return store.subscribe(resources=[rt.key], initial=True)
        if self.fault is not None and self.fault.kind == "expired":
            return errors.expired(f"too old resource version: {rv} ({store.resource_version})")
        try:
            since = int(rv)
        except ValueError:
            raise errors.bad_request(f"invalid resourceVersion {rv!r}") from None
        if since > store.resource_version:  # the watch cache never reached it (it waits 3 s first; this one is current)
            return errors.too_large_resource_version(since, store.resource_version)
        try:
            return store.subscribe(resources=[rt.key], since=since)
        except ApiError as exc:
            if exc.code != 410:
                raise
            return exc

    def _watch(self, rt: ResourceType, ns: str | None, query: dict[str, str]) -> None:
        """Stream watch events as chunked JSON lines until ``timeoutSeconds``, disconnect or stop."""
        labels_ok = parse_label_selector(query.get("labelSelector"))
        fields = parse_field_selector(query.get("fieldSelector"), rt.selectable_fields)
        opened = self._subscribe(rt, query)
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        if isinstance(opened, ApiError):
            self._chunk({"type": "ERROR", "object": opened.status()})
            self.wfile.write(b"0\r\n\r\n")
            return
        emulator = self.server.emulator
        emulator.track(opened)

        def plain(event: WatchEvent) -> dict[str, Any] | None:
            return self._translate(event, ns, labels_ok, fields)

        translate: Callable[[WatchEvent], dict[str, Any] | None] = plain
        if self._table_wanted():
            translate = tables.watch_tables(rt, plain, self._include(query))
        try:
            self._stream(rt, opened, query, translate)
        except _Cut:
            self.close_connection = True
            with contextlib.suppress(OSError):
                self.connection.shutdown(socket.SHUT_RDWR)
            return
        except OSError:  # the client went away
            self.close_connection = True
            return
        finally:
            emulator.untrack(opened)
            opened.close()
        with contextlib.suppress(OSError):
            self.wfile.write(b"0\r\n\r\n")

    def _stream(
        self,
        rt: ResourceType,
        sub: Subscription,
        query: dict[str, str],
        translate: Callable[[WatchEvent], dict[str, Any] | None],
    ) -> None:
        emulator = self.server.emulator
        timeout = float(query["timeoutSeconds"]) if query.get("timeoutSeconds") else None
        deadline = None if timeout is None else time.monotonic() + timeout
        bookmarks = query.get("allowWatchBookmarks") == "true"
        bookmark = query.get("sendInitialEvents") == "true" and bookmarks
        next_bookmark = _next_bookmark(time.monotonic(), deadline)
        initial_left = len(sub.queue)
        cut_after = self.fault.cut_after if self.fault is not None and self.fault.kind == "cut" else None
        while not emulator.stopping:
            if bookmark and initial_left == 0:
                bookmark = False
                ended = {"k8s.io/initial-events-end": "true"}
                self._bookmark(rt, {"resourceVersion": str(sub.since), "annotations": ended})
            now = time.monotonic()
            remaining = None if deadline is None else deadline - now
            if remaining is not None and remaining <= 0:
                return
            if bookmarks and not bookmark and next_bookmark is not None and now >= next_bookmark:
                version = sub.idle_version()
                if version is not None:
                    next_bookmark = _next_bookmark(now, deadline)
                    self._bookmark(rt, {"resourceVersion": str(version)})
            wait = 0.5 if remaining is None else min(remaining, 0.5)
            if bookmarks and next_bookmark is not None:
                wait = min(wait, max(next_bookmark - now, 0.01))
            event = sub.get(timeout=wait)
            if event is None:
                continue
            initial_left -= 1
            out = translate(event)
            if out is not None:
                self._chunk(out)
                if cut_after is not None:
                    cut_after -= 1
                    if cut_after <= 0:
                        raise _Cut

    @staticmethod
    def _translate(event: WatchEvent, ns: str | None, labels_ok: Any, fields: Any) -> dict[str, Any] | None:
        """Filter one store event for a watch; selector transitions become ADDED/DELETED as upstream."""

        def matches(obj: dict[str, Any] | None) -> bool:
            if obj is None:
                return False
            meta = obj.get("metadata") or {}
            if ns and meta.get("namespace") != ns:
                return False
            return bool(labels_ok(meta.get("labels") or {})) and (not fields or fields_match(obj, fields))

        now, before = matches(event.object), matches(event.old)
        if event.type == "ADDED":
            kind = "ADDED" if now else None
        elif event.type == "DELETED":
            kind = "DELETED" if before else None
        elif now and before:
            kind = "MODIFIED"
        elif now:
            kind = "ADDED"
        elif before:
            kind = "DELETED"
        else:
            kind = None
        return None if kind is None else {"type": kind, "object": event.object}


def _next_bookmark(now: float, deadline: float | None) -> float | None:
    """When (monotonic seconds) a watch's next bookmark is due: :data:`BOOKMARK_SECONDS` from ``now``, or
    :data:`PRE_TIMEOUT_BOOKMARK_SECONDS` before ``deadline`` when that comes first; None when that moment has
    passed (``cacheWatcher.nextBookmarkTime``)."""
    due = now + BOOKMARK_SECONDS
    if deadline is not None:
        due = min(due, deadline - PRE_TIMEOUT_BOOKMARK_SECONDS)
    return due if due > now else None
