"""``KubeEmulator``: start and stop the Kubernetes API emulator (see :mod:`nodesmith.sim.kube.server`).

Usage::

    with KubeEmulator() as kube:            # binds 127.0.0.1 on a free port in milliseconds
        api = build_api_client(cluster_endpoint=kube.endpoint, kube_auth="none")
        kube.store.create("nodes", {...})    # the same objects, in-process
"""

from __future__ import annotations

import contextlib
import socket
import threading
from collections import Counter
from typing import TYPE_CHECKING

from nodesmith.sim.kube.server import EmulatorServer
from nodesmith.sim.kube.store import Store, Subscription

if TYPE_CHECKING:
    from nodesmith.sim.kube.faults import KubeFaults

__all__ = ["KubeEmulator"]


class KubeEmulator:
    """A Kubernetes API server emulator on ``127.0.0.1`` (ephemeral port by default).

    ``store`` holds the objects (a fresh :class:`Store` unless given; reach it as
    ``emulator.store`` for in-process controllers). ``token``: require ``Authorization: Bearer
    <token>`` (401 otherwise); None accepts any request. ``faults``: injected failures
    (:class:`~nodesmith.sim.kube.faults.KubeFaults`; None, the default, serves every request); the
    attribute can be set or cleared while the emulator runs and applies from the next request.
    ``operations`` counts the requests served by operation (``"list pods"``, ``"update nodeclaims/status"``, as
    :func:`~nodesmith.sim.kube.faults.request_of` names them; each page of a list is one); ``cache_lists`` counts
    the lists the API server serves from its watch cache (:func:`~nodesmith.sim.kube.listing.from_watch_cache`:
    at ``resourceVersion=0``, or not older than a version and without a limit) by resource plural.
    ``start()`` returns the endpoint (``http://127.0.0.1:<port>``) in a few milliseconds; ``stop()``
    ends watches and closes connections. Usable as a context manager (starts on enter).
    """

    def __init__(
        self,
        *,
        store: Store | None = None,
        host: str = "127.0.0.1",
        port: int = 0,
        token: str | None = None,
        version: str = "v1.33.0",
        faults: KubeFaults | None = None,
    ) -> None:
        self.store = store if store is not None else Store()
        self.host, self.port = host, port
        self.token = token
        self.version = version
        self.faults = faults
        self.requests = 0
        self.operations: Counter[str] = Counter()
        self.cache_lists: Counter[str] = Counter()
        self.last_authorization: str | None = None
        self.stopping = False
        self._server: EmulatorServer | None = None
        self._thread: threading.Thread | None = None
        self._watches: set[Subscription] = set()
        self._lock = threading.Lock()

    @property
    def endpoint(self) -> str:
        """``http://host:port`` of the running emulator; RuntimeError before ``start()``."""
        if self._server is None:
            raise RuntimeError("KubeEmulator is not started")
        return f"http://{self.host}:{self._server.server_address[1]}"

    def count(self, operation: str) -> None:
        """Count one request of ``operation`` in :attr:`operations` (thread-safe)."""
        with self._lock:
            self.operations[operation] += 1

    def count_cache_list(self, plural: str) -> None:
        """Count one list of ``plural`` at ``resourceVersion=0`` in :attr:`cache_lists` (thread-safe)."""
        with self._lock:
            self.cache_lists[plural] += 1

    def version_info(self) -> dict[str, str]:
        """The ``/version`` document."""
        major, minor, *_ = self.version.lstrip("v").split(".")
        return {
            "major": major,
            "minor": minor,
            "gitVersion": f"{self.version}-nodesmith-emulator",
            "gitCommit": "",
            "gitTreeState": "clean",
            "buildDate": "",
            "goVersion": "",
            "compiler": "none",
            "platform": "linux/amd64",
        }

    def start(self) -> str:
        """Bind and serve in a daemon thread; returns the endpoint. Idempotent."""
        if self._server is None:
            self.stopping = False
            self._server = EmulatorServer((self.host, self.port), self)
            self._thread = threading.Thread(
                target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, name="kube-emulator", daemon=True
            )
            self._thread.start()
        return self.endpoint

    def stop(self) -> None:
        """Stop serving: end watch streams, close open connections, release the port. Idempotent."""
        server = self._server
        if server is None:
            return
        self.stopping = True
        with self._lock:
            watches = list(self._watches)
        for sub in watches:
            sub.close()
        server.shutdown()
        server.server_close()
        with server.connections_lock:
            open_connections = list(server.connections)
        for conn in open_connections:
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)
        if self._thread is not None:
            self._thread.join(timeout=5)
        self._server = None
        self._thread = None

    def track(self, sub: Subscription) -> None:
        """Remember a watch's subscription so :meth:`stop` can end it."""
        with self._lock:
            self._watches.add(sub)

    def untrack(self, sub: Subscription) -> None:
        """Forget a finished watch."""
        with self._lock:
            self._watches.discard(sub)

    def __enter__(self) -> KubeEmulator:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
