"""A list-then-watch cache of one kind of object, as client-go's reflector and informer keep one.

:class:`Informer` lists a collection once (from the API server's watch cache, ``resourceVersion=0``, in pages),
then follows a watch from the list's ``resourceVersion`` in a background thread, applying ``ADDED``, ``MODIFIED``
and ``DELETED`` events and moving its version with every event and ``BOOKMARK``. A stream the server ends at its
timeout is resumed from that version; a 410 Gone (the version is older than the server still holds: Kubernetes
API concepts, "Efficient detection of changes") is answered by listing again; other failures are retried with a
growing pause, and a watch the server refuses (a 4xx other than 410 and 429: RBAC without ``watch``, say) stops the
informer serving until a resumed watch's bookmark shows it caught up, so a cache that cannot follow is never read.
:meth:`KubeCluster.follow <nodesmith.adapters.kube.cluster.KubeCluster.follow>` keeps one per kind watch mode reads
every pass (pods, Nodes, NodeClaims, NodePools): while it follows them, its lists read memory.

Without a thread, :meth:`Informer.catch_up` brings the objects to the present on demand, for a process that is
frozen between uses (a Lambda container between scheduled invocations): a watch from the kept version, short enough
that the API server's watch cache ends it with a ``BOOKMARK`` (sent 2 s before a watch's deadline, once every change
owed has been sent: ``cacheWatcher.nextBookmarkTime`` in ``k8s.io/apiserver``), whose arrival proves every change up
to its version applied. A change is then read once, not the whole collection every pass.
"""

from __future__ import annotations

import contextlib
import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from nodesmith.adapters.kube.calls import JSON
from nodesmith.core.errors import KubernetesError

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator, Mapping

    from nodesmith.adapters.kube.calls import KubeRest

__all__ = ["CATCH_UP_WATCH_SECONDS", "Informer", "Listing"]

T = TypeVar("T")

CATCH_UP_WATCH_SECONDS = 3
"""The ``timeoutSeconds`` of :meth:`Informer.catch_up`'s watch: the shortest for which the API server's watch cache
sends the bookmark it ends on (2 s before the deadline; a watch of 2 s or less gets none), so the catch-up waits about
a second for it."""
_READ_MARGIN_SECONDS = 10.0
"""A watch's read timeout is its ``timeoutSeconds`` plus this, so the server ends it first."""
_MAX_PAUSE_SECONDS = 5.0
_STOP_WAIT_SECONDS = 5.0
"""How long :meth:`Informer.stop` waits for its thread to end."""


def _key(obj: Mapping[str, Any]) -> str:
    meta = obj.get("metadata") or {}
    return f"{meta.get('namespace') or ''}/{meta.get('name') or ''}"


def _too_new(exc: KubernetesError) -> bool:
    """Whether the API server refused a version as newer than any it has (504 "Too large resource version")."""
    return exc.status == 504 and "too large resource version" in str(exc).lower()


def _newer(version: str, than: str) -> bool:
    """Whether ``version`` comes after ``than`` (numeric versions compared as numbers; etcd's are)."""
    try:
        return int(version) > int(than)
    except ValueError:
        return version != than


@dataclass(frozen=True)
class Listing:
    """How an :class:`Informer` lists its collection.

    ``page_size`` objects a page of the first list. The first list is read at ``resourceVersion=0`` (the API
    server's watch cache, which may trail the latest writes), or at the latest when ``cache_first`` is False (a kind
    the caller writes and must read back); every later one not older than the newest version the informer held
    (``resourceVersionMatch=NotOlderThan``), unpaged so that the watch cache serves it, not etcd, and a relist that
    a lagging API server answers never goes back in time (client-go's reflector relists so). While the informer
    holds fewer than ``relist_below`` objects, a catch-up lists again instead of watching: one small list costs the
    API server little and saves waiting about a second for the watch's bookmark.
    """

    page_size: int = 500
    cache_first: bool = True
    relist_below: int = 0


_DEFAULT_LISTING = Listing()


class Informer(Generic[T]):
    """The objects at ``url_path`` (a collection), kept current by a watch (see the module docstring).

    ``parse`` turns a raw object into ``T`` (it raises ``KubernetesError`` for an unreadable one: the informer
    then stops serving, :meth:`items` is None, until a later list reads everything). ``listing`` says how it lists
    (:class:`Listing`). ``watch_seconds`` is each watch request's ``timeoutSeconds``; ``on_change`` is called after
    every applied change. :attr:`relists` counts the lists after the first (410 Gone, a broken parse, a catch-up of
    a small kind).
    """

    def __init__(
        self,
        *,
        rest: KubeRest,
        url_path: str,
        what: str,
        parse: Callable[[Mapping[str, Any]], T],
        listing: Listing = _DEFAULT_LISTING,
        watch_seconds: int = 60,
        on_change: Callable[[], None] | None = None,
    ) -> None:
        self.rest, self.url_path, self.what, self.parse = rest, url_path, what, parse
        self.listing, self.watch_seconds, self.on_change = listing, watch_seconds, on_change
        self._seen = ""  # the newest version held, kept when :attr:`version` is dropped (410 Gone, a broken stream)
        self._latest = False  # the next list reads the latest version (the one held was refused as too new)
        self.version = ""
        self.relists = 0
        self.failure = ""
        self._objects: dict[str, tuple[str, T]] = {}
        self._lock = threading.Lock()
        self._synced = threading.Event()
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None
        self._response: Any = None
        self._response_lock = threading.Lock()
        self._lists = 0

    # -- use ----------------------------------------------------------------------------------------

    def start(self, *, wait_seconds: float) -> bool:
        """Start following in a daemon thread; True when the objects are current within ``wait_seconds``: listed,
        or, when this informer holds a version from before (a :meth:`stop`, or :meth:`catch_up`), caught up from it
        as :meth:`catch_up` does, before the thread follows on from there."""
        if self._thread is None:
            self._synced.clear()  # served again once this thread has listed or caught up
            self._stopping = stopping = threading.Event()
            self._thread = threading.Thread(
                target=self._run, args=(stopping,), name=f"informer-{self.what}", daemon=True
            )
            self._thread.start()
        return self._synced.wait(wait_seconds)

    def catch_up(self) -> str:
        """Bring the objects to the API server's present without a thread (for a caller that does not :meth:`start`):
        with no version yet, or fewer than :attr:`Listing.relist_below` objects held, a list (which parses again
        only the objects whose version changed); else one watch from :attr:`version` of
        :data:`CATCH_UP_WATCH_SECONDS`, its changes applied until the ``BOOKMARK`` that marks them all sent, then
        closed. A watch that ends without a bookmark or fails, or is answered 410 Gone (the version is older than
        the server's history), is followed by a list (:attr:`failure` says why). Returns ``"caught up"`` or
        ``"listed"``; :meth:`items` serves from then until :meth:`hold`. Raises ``KubernetesError`` when the list
        fails (after the client's retries), and ``RuntimeError`` when a thread follows this informer."""
        if self._thread is not None:
            raise RuntimeError(f"informer {self.what} is followed by a thread")
        self._synced.clear()
        return self._resume(None)

    def hold(self) -> None:
        """Stop serving :meth:`items` (None) until the next :meth:`catch_up`; the objects and version are kept."""
        self._synced.clear()

    def stop(self) -> None:
        """Stop following: the open watch is shut down and the thread waited for (at most
        :data:`_STOP_WAIT_SECONDS`; one that has not ended by then applies nothing more). :meth:`items` is None
        until the next :meth:`start` or :meth:`catch_up`, which resume from the objects and version kept."""
        with self._response_lock:  # a watch opened from now on sees the stop; one opened before is shut down
            self._stopping.set()
            response = self._response
        self._synced.clear()
        thread, self._thread = self._thread, None
        if response is not None:
            with contextlib.suppress(Exception):  # unblocks the thread's read; the stream is abandoned anyway
                response.shutdown()
        if thread is not None and thread is not threading.current_thread():
            thread.join(_STOP_WAIT_SECONDS)

    def items(self) -> list[T] | None:
        """The objects now (by namespace and name), or None while not synced (not started, stopped, broken)."""
        if not self._synced.is_set():
            return None
        with self._lock:
            return [self._objects[k][1] for k in sorted(self._objects)]

    def observe(self, raw: Mapping[str, Any]) -> None:
        """Take in an object this process just wrote (the API server's answer), so a read right after sees it
        before its watch event arrives; an older version than the one held is ignored."""
        version = str((raw.get("metadata") or {}).get("resourceVersion") or "")
        if not version:
            return
        key = _key(raw)
        value = self.parse(raw)
        with self._lock:
            held = self._objects.get(key)
            if held is None or _newer(version, held[0]):
                self._objects[key] = (version, value)

    # -- the thread ---------------------------------------------------------------------------------

    def _run(self, stopping: threading.Event) -> None:
        """The thread: until ``stopping`` is set, list when there is no version, then follow the watch."""
        failures = 0
        if self.version:  # started again: catch up from what is kept
            try:
                self._resume(stopping)
            except KubernetesError as exc:
                self.failure, self.version = str(exc), ""  # listed in the loop, with its pauses
        while not stopping.is_set():
            try:
                if not self.version:
                    self._list(stopping)
                for kind in self._watch(stopping=stopping):
                    failures = 0
                    if kind == "BOOKMARK":  # every change up to it applied: serve again after a refused watch
                        self._serve(stopping)
                failures = 0  # the server ended the stream at its timeout: resume from the version
            except KubernetesError as exc:
                if stopping.is_set():  # the watch was shut down by stop()
                    return
                failures += 1
                if self._failed(exc, first=failures == 1):
                    stopping.wait(min(_MAX_PAUSE_SECONDS, 0.1 * 2**failures))
            except Exception as exc:  # a broken stream must not end the thread silently
                if stopping.is_set():
                    return
                self.failure = f"{self.what}: {exc!r}"
                self.version = ""
                self._synced.clear()
                failures += 1
                stopping.wait(min(_MAX_PAUSE_SECONDS, 0.1 * 2**failures))

    def _serve(self, stopping: threading.Event | None) -> None:
        """Serve :meth:`items` from now on, unless ``stopping`` (the thread's) was set: a stopped thread that ends
        late must not make a later start serve before it has caught up."""
        with self._response_lock:
            if stopping is None or not stopping.is_set():
                self._synced.set()

    def _failed(self, exc: KubernetesError, *, first: bool) -> bool:
        """Take in a failed list or watch; True when the thread should pause before trying again. A 410 Gone (the
        version too old) lists again, at once the first time, and so does a version refused as too new, then at the
        latest version (see :meth:`_list`); a refused watch (a 4xx other than 410 and 429: RBAC, say) is no passing
        failure, so nothing stale is served (lists read the API) until a bookmark."""
        self.failure = str(exc)
        if _too_new(exc):
            self._forget()
            return not first
        if exc.status == 410:
            self.version = ""
            return not first
        if 400 <= exc.status < 500 and exc.status != 429:
            self._synced.clear()
        return True

    def _forget(self) -> None:
        """Forget the version held, which the server refused as too new: the next list reads the latest version."""
        self.version = self._seen = ""
        self._latest = True

    def _resume(self, stopping: threading.Event | None) -> str:
        """Catch up from :attr:`version` (see :meth:`catch_up`), or list when there is none or few objects are held
        (:attr:`Listing.relist_below`); ``stopping`` ends the watch early (None: nothing does). Returns ``"caught
        up"`` or ``"listed"``; raises ``KubernetesError`` when the list fails."""
        self.failure = ""
        if self.version and len(self._objects) >= self.listing.relist_below:
            try:
                for kind in self._watch(seconds=CATCH_UP_WATCH_SECONDS, stopping=stopping):
                    if kind == "BOOKMARK":
                        self._serve(stopping)
                        return "caught up"
                self.failure = f"{self.what}: the catch-up watch ended without a bookmark"
            except KubernetesError as exc:
                self.failure = str(exc)
        self._list(stopping)
        return "listed"

    def _list(self, stopping: threading.Event | None = None) -> None:
        """List the collection and hold what it lists (unless ``stopping`` was set meanwhile). A list not older than
        the version held that the server refuses as newer than any it has (504 "Too large resource version": it has
        not caught up, or its store went back, restored from a backup) is raised, and the version forgotten: the
        next list reads the latest version (a consistent read), as client-go's reflector does after that error."""
        floor = self.version or self._seen
        try:
            items, version = self.rest.list_versioned(
                self.url_path,
                what=self.what,
                page_size=self.listing.page_size,
                cached=self.listing.cache_first and not floor and not self._latest,
                not_older_than=floor,
            )
        except KubernetesError as exc:
            if floor and _too_new(exc):
                self._forget()
            raise
        self._latest = False
        if stopping is not None and stopping.is_set():
            return
        held = self._objects  # an object listed again at the version held is not parsed again
        parsed: dict[str, tuple[str, T]] = {}
        for item in items:
            key, at = _key(item), str((item.get("metadata") or {}).get("resourceVersion") or "")
            kept = held.get(key)
            parsed[key] = kept if kept is not None and at and kept[0] == at else (at, self.parse(item))
        with self._lock:
            self._objects = parsed
            self.version = self._seen = version
            if self._lists:
                self.relists += 1
            self._lists += 1
        self._serve(stopping)
        if self.on_change is not None:
            self.on_change()

    def _apply(self, kind: str, obj: Mapping[str, Any]) -> None:
        """Apply one watch event. An object already held at the event's version (this process's own write, taken
        in by :meth:`observe`) is kept as it is, not parsed again."""
        key, version = _key(obj), str((obj.get("metadata") or {}).get("resourceVersion") or "")
        held = self._objects.get(key)
        if kind != "DELETED" and held is not None and version and held[0] == version:
            return
        value = None if kind == "DELETED" else self.parse(obj)
        with self._lock:
            if value is None:
                self._objects.pop(key, None)
            else:
                self._objects[key] = (version, value)
        if self.on_change is not None:
            self.on_change()

    def _watch(self, seconds: int | None = None, stopping: threading.Event | None = None) -> Iterator[str]:
        """One watch request from :attr:`version` of ``seconds`` (:attr:`watch_seconds` when None), applying its
        events until ``stopping`` is set; yields each event's type. Raises ``KubernetesError``: the status of an
        ``ERROR`` event or a refused request, 0 for a lost connection."""
        from kubernetes.client.exceptions import ApiException
        from kubernetes.watch import Watch
        from urllib3.exceptions import HTTPError

        seconds = self.watch_seconds if seconds is None else seconds

        def open_watch(**_: Any) -> Any:
            return self._open(seconds, stopping)

        watcher = Watch()  # type: ignore[no-untyped-call]
        stream = None
        try:
            stream = watcher.stream(open_watch, timeout_seconds=seconds)  # type: ignore[no-untyped-call]
            for event in stream:
                if stopping is not None and stopping.is_set():
                    return
                kind, obj = str(event.get("type")), event.get("raw_object") or {}
                version = str((obj.get("metadata") or {}).get("resourceVersion") or "")
                if kind in ("ADDED", "MODIFIED", "DELETED"):
                    self._apply(kind, obj)
                if version:
                    self.version = self._seen = version
                yield kind
        except ApiException as exc:  # an ERROR event (410 Gone when the version is too old)
            raise KubernetesError(
                f"watch {self.what}: HTTP {exc.status}: {exc.reason}", status=int(exc.status or 0)
            ) from exc
        except (HTTPError, OSError) as exc:
            raise KubernetesError(f"watch {self.what}: connection lost: {exc}", status=0) from exc
        finally:
            watcher.stop()  # type: ignore[no-untyped-call]
            if stream is not None:  # a caller that stops reading early (a catch-up at its bookmark) closes the stream
                stream.close()

    def _open(self, seconds: int, stopping: threading.Event | None = None) -> Any:
        """GET ``url_path?watch=true`` from :attr:`version`, ending after ``seconds``: the raw urllib3 response the
        watch reads lines from. Raises ``KubernetesError`` (status 0) when ``stopping`` was set meanwhile."""
        from nodesmith.adapters.kube.calls import error_for

        api = self.rest.api_client
        query: list[tuple[str, Any]] = [("watch", "true"), ("allowWatchBookmarks", "true")]
        query += [("resourceVersion", self.version), ("timeoutSeconds", seconds)]
        serialized = api.param_serialize(
            "GET", self.url_path, query_params=query, header_params={"Accept": JSON}, auth_settings=["BearerToken"]
        )
        url, headers = serialized[1], serialized[2]
        timeout = (self.rest.timeout[0], float(seconds) + _READ_MARGIN_SECONDS)
        response = api.call_api("GET", url, header_params=headers, _request_timeout=timeout).response
        with self._response_lock:
            self._response = response
            stopped = stopping is not None and stopping.is_set()
        if stopped:  # closed, not handed back to the pool with a stream still coming
            response.close()
            response.release_conn()
            raise KubernetesError(f"watch {self.what}: stopped", status=0)
        if not 200 <= response.status <= 299:
            data = response.read()
            response.release_conn()
            raise error_for(response.status, data, f"watch {self.what}", str(response.reason or ""))
        return response
