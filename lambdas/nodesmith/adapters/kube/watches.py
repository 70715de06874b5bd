"""Pod watches through ``kubernetes.watch.Watch``, resumed and relisted as client-go's reflector does.

A watch stream can end early: the connection is lost or cut, or the API server no longer holds the
version to resume from and answers 410 Gone (an ``ERROR`` event with a Status of reason ``Expired``:
Kubernetes API concepts, "Efficient detection of changes"). :class:`PodWatches` resumes a lost stream
from the last ``resourceVersion`` it saw (events or bookmarks) and answers a 410 for a version it reached
itself by listing again, so the caller sees every change once, or a fresh ``SYNCED`` state.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from nodesmith.adapters.kube.calls import JSON, error_for, path
from nodesmith.adapters.kube.karpenter_objects import KarpenterObjects
from nodesmith.adapters.kube.retry import retry_after_seconds, retryable
from nodesmith.core.errors import KubernetesError
from nodesmith.core.objects import pod_from_dict

if TYPE_CHECKING:
    from collections.abc import Iterator

    from nodesmith.core.ports import PodEvent

__all__ = ["PodWatches"]

_READ_MARGIN_SECONDS = 10.0
"""A watch's read timeout is its ``timeoutSeconds`` plus this, so the server ends it first."""


@dataclass(slots=True)
class _Cursor:
    """Where a watch resumes: the last ``resourceVersion`` seen, whether this call reached it itself, and the
    ``Retry-After`` (seconds) of the last refused watch request."""

    version: str
    own: bool
    retry_after: float | None = None


class PodWatches(KarpenterObjects):
    """:meth:`watch_pods` of :class:`~nodesmith.adapters.kube.cluster.KubeCluster` (``rest`` as set there)."""

    def watch_pods(
        self, *, resource_version: str = "", unscheduled_only: bool = True, timeout_seconds: int = 60
    ) -> Iterator[PodEvent]:
        """Pod changes through ``kubernetes.watch.Watch`` (see :meth:`nodesmith.core.ports.Cluster.watch_pods`).

        ``unscheduled_only`` selects ``spec.nodeName=`` (list and watch), so a pod that gets bound
        arrives as DELETED. Without ``resource_version`` a list comes first (``SYNCED``). The stream ends
        after about ``timeout_seconds`` (the server is asked to end it then; each read times out 10 s later).
        BOOKMARK events only move the resume point. Within that time a stream that breaks (connection lost,
        429 or 5xx) is resumed from the last version seen, and a 410 (version too old) for a version this
        call listed or reached is answered by listing again: a new ``SYNCED`` event, then changes from it.
        Failures in a row without an event are bounded by ``RetryPolicy.attempts``, with its backoff (at least
        the ``Retry-After`` of a refused watch request, capped). A 410
        for the caller's own ``resource_version`` raises ``KubernetesError`` with status 410 (list again);
        any other failure, or one that keeps repeating, raises ``KubernetesError``.
        """
        selector = "spec.nodeName=" if unscheduled_only else None
        url = path("api", "v1", "pods")
        policy = self.rest.retry
        deadline = time.monotonic() + timeout_seconds
        cursor = _Cursor(version=resource_version, own=False)
        failures = 0
        while True:
            if not cursor.version:
                synced = self._list_pods_event(url, selector)
                yield synced
                cursor = _Cursor(version=synced.resource_version, own=True)
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return
            try:
                for event in self._pod_stream(url, selector, cursor, math.ceil(remaining)):
                    failures = 0
                    yield event
                return  # the server ended the stream at its timeout
            except KubernetesError as exc:
                failures += 1
                relist = exc.status == 410 and cursor.own
                if failures >= policy.attempts or not (relist or retryable(exc.status, None, repeatable=True)):
                    raise
                if relist:
                    cursor.version = ""  # too old: list again
            pause = policy.wait(failures, cursor.retry_after)
            cursor.retry_after = None
            policy.sleep(min(pause, max(deadline - time.monotonic(), 0.0)))

    def _list_pods_event(self, url: str, selector: str | None) -> PodEvent:
        """One list of the pods as a ``SYNCED`` event at the list's ``resourceVersion``."""
        from nodesmith.core.ports import PodEvent

        doc = self.rest.request("GET", url, what="list pods", query={"fieldSelector": selector}) or {}
        pods = tuple(self._parse(pod_from_dict, i, "pod") for i in doc.get("items") or [])
        version = str((doc.get("metadata") or {}).get("resourceVersion") or "")
        return PodEvent(type="SYNCED", pods=pods, resource_version=version)

    def _open_watch(self, url: str, selector: str | None, cursor: _Cursor, timeout_seconds: int) -> Any:
        """GET ``url?watch=true`` from ``cursor``: the raw urllib3 response ``Watch.stream`` reads lines from."""
        rest = self.rest
        query: list[tuple[str, Any]] = [("watch", "true"), ("allowWatchBookmarks", "true")]
        query += [("resourceVersion", cursor.version), ("timeoutSeconds", timeout_seconds)]
        if selector:
            query.append(("fieldSelector", selector))
        _, full, headers, _, _ = rest.api_client.param_serialize(
            "GET", url, query_params=query, header_params={"Accept": JSON}, auth_settings=["BearerToken"]
        )
        timeout = (rest.timeout[0], float(timeout_seconds) + _READ_MARGIN_SECONDS)
        response = rest.api_client.call_api("GET", full, header_params=headers, _request_timeout=timeout).response
        if not 200 <= response.status <= 299:
            data = response.read()
            response.release_conn()
            cursor.retry_after = retry_after_seconds(response.headers.get("Retry-After"))
            raise error_for(response.status, data, "watch pods", str(response.reason or ""))
        return response

    def _pod_stream(self, url: str, selector: str | None, cursor: _Cursor, timeout_seconds: int) -> Iterator[PodEvent]:
        """One watch request from ``cursor``, moving it with every event (bookmarks included). Raises
        ``KubernetesError``: the status of an ``ERROR`` event or a refused request, 0 for a lost connection."""
        from kubernetes.client.exceptions import ApiException
        from kubernetes.watch import Watch
        from urllib3.exceptions import HTTPError

        from nodesmith.core.ports import PodEvent

        def open_watch(**_: Any) -> Any:
            return self._open_watch(url, selector, cursor, timeout_seconds)

        watcher = Watch()  # type: ignore[no-untyped-call]
        try:
            stream = watcher.stream(open_watch, timeout_seconds=timeout_seconds)  # type: ignore[no-untyped-call]
            for event in stream:
                kind, obj = event.get("type"), event.get("raw_object") or {}
                version = str((obj.get("metadata") or {}).get("resourceVersion") or cursor.version)
                if kind in ("ADDED", "MODIFIED", "DELETED"):
                    pod = self._parse(pod_from_dict, obj, "pod")
                    cursor.version, cursor.own = version, True
                    yield PodEvent(type=kind, pods=(pod,), resource_version=version)
                elif version != cursor.version:
                    cursor.version, cursor.own = version, True
        except ApiException as exc:  # an ERROR event (410 Gone when the version is too old)
            raise KubernetesError(f"watch pods: HTTP {exc.status}: {exc.reason}", status=int(exc.status or 0)) from exc
        except (HTTPError, OSError) as exc:
            raise KubernetesError(f"watch pods: connection lost: {exc}", status=0) from exc
        finally:
            watcher.stop()  # type: ignore[no-untyped-call]
