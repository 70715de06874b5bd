"""Build the ports a handler needs, once per Lambda container.

Adapters are imported inside the functions so importing a handler never imports ``kubernetes`` or
creates boto3 clients (cold start). Tests call :func:`set_ports` to substitute fakes and
:func:`reset` to forget them.

The state table (``NODESMITH_STATE_TABLE``) backs the shared state store (leases, drain progress,
unavailable offerings) and the interruption Lambda's idempotency records; without it (the
embedded default, unit tests) both are absent and the handlers work without them.
"""

from __future__ import annotations

import gc
import os
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from nodesmith.handlers.settings import Settings, load_settings

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping, Sequence

    from nodesmith.core.ports import CloudProvider, Cluster, StateStore
    from nodesmith.handlers.idempotency import IdempotentRunner
    from nodesmith.services.interrupt_batch_run import RecentMarks

__all__ = [
    "KUBE_POOL_MAXSIZE",
    "build_cloud",
    "build_cluster",
    "build_idempotency",
    "build_requeue",
    "build_requeue_batch",
    "build_state",
    "build_visibility",
    "build_waker",
    "freeze_warm_heap",
    "get_settings",
    "recent_marks",
    "reset",
    "set_ports",
]

KUBE_POOL_MAXSIZE = 96
"""Connections the Kubernetes client may keep open: the interruption Lambda cordons with 16 threads and
drains 16 nodes with 4 evictions each in flight (``services/interrupt_batch.py``), and one
``ApiClient`` (urllib3 pool) is shared by all of them."""

_UNSET: Any = object()


@dataclass(slots=True)
class _Cache:
    settings: Settings | None = None
    cluster: Cluster | None = None
    cloud: CloudProvider | None = None
    state: StateStore | None = _UNSET
    idempotency: IdempotentRunner | None = _UNSET
    requeue: Callable[[Mapping[str, Any], int], Any] | None = _UNSET
    visibility: Callable[[Sequence[str], int], int] | None = _UNSET
    waker: Callable[[float], None] | None = _UNSET
    marks: RecentMarks | None = None
    heap_frozen: bool = False


_CACHE = _Cache()


def get_settings() -> Settings:
    """The container's :class:`Settings`, read from the environment on first use (``SettingsError`` if invalid)."""
    if _CACHE.settings is None:
        _CACHE.settings = load_settings()
    return _CACHE.settings


def recent_marks() -> RecentMarks:
    """The offerings this container's interruption batches marked unavailable lately (one per container), so
    a burst's batches do not all write the same marks (:class:`~nodesmith.services.interrupt_batch_run.RecentMarks`)."""
    if _CACHE.marks is None:
        from nodesmith.services.interrupt_batch_run import RecentMarks

        _CACHE.marks = RecentMarks()
    return _CACHE.marks


def build_cluster(settings: Settings) -> Cluster:
    """The :class:`~nodesmith.core.ports.Cluster` for ``settings`` (``KubeCluster``), cached per container."""
    if _CACHE.cluster is None:
        from nodesmith.adapters.kube.client import build_api_client
        from nodesmith.adapters.kube.cluster import KubeCluster

        api_client = build_api_client(
            cluster_endpoint=settings.cluster_endpoint,
            kube_auth=settings.kube_auth,
            cluster_name=settings.cluster_name,
            cluster_ca_data=settings.cluster_ca_data,
            kube_token=settings.kube_token,
            pool_maxsize=KUBE_POOL_MAXSIZE,
        )
        _CACHE.cluster = KubeCluster(api_client=api_client)
    return _CACHE.cluster


def build_cloud(settings: Settings) -> CloudProvider:
    """The :class:`~nodesmith.core.ports.CloudProvider` (``Ec2CloudProvider``), cached per container.

    The region is the Lambda's own (``AWS_REGION``). Its unavailable-offerings cache is shared
    through :func:`build_state` when a state table is configured.
    """
    if _CACHE.cloud is None:
        from nodesmith.adapters.aws.provider import Ec2CloudProvider

        _CACHE.cloud = Ec2CloudProvider(
            cluster_name=settings.cluster_name,
            cluster_endpoint=settings.cluster_endpoint,
            cluster_ca=settings.cluster_ca_data,
            region=os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION") or "us-east-1",
            price_table=settings.price_table or None,
            node_role=settings.node_role_arn or None,
            state=build_state(settings),
        )
    return _CACHE.cloud


def _region() -> str:
    return os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION") or "us-east-1"


def build_state(settings: Settings) -> StateStore | None:
    """The shared :class:`~nodesmith.core.ports.StateStore` (``DynamoStateStore``), or None without a state table."""
    if _CACHE.state is _UNSET:
        if not settings.state_table:
            _CACHE.state = None
        else:
            from nodesmith.adapters.aws.state import DynamoStateStore

            _CACHE.state = DynamoStateStore(table_name=settings.state_table, region=_region())
    return _CACHE.state


def build_idempotency(settings: Settings) -> IdempotentRunner | None:
    """Powertools idempotency on the state table (built lazily: no I/O, no boto3 import), or None without one."""
    if _CACHE.idempotency is _UNSET:
        if not settings.state_table:
            _CACHE.idempotency = None
        else:
            from nodesmith.handlers.idempotency import IdempotentRunner

            _CACHE.idempotency = IdempotentRunner(table_name=settings.state_table)
    return _CACHE.idempotency


def build_requeue(settings: Settings) -> Callable[[Mapping[str, Any], int], Any] | None:
    """``send(body, delay_seconds)`` to the interruption queue, or None when no queue URL is configured."""
    if _CACHE.requeue is _UNSET:
        if not settings.interruption_queue_url:
            _CACHE.requeue = None
        else:
            from nodesmith.adapters.aws.queue import InterruptionQueue

            _CACHE.requeue = InterruptionQueue(queue_url=settings.interruption_queue_url, region=_region()).send
    return _CACHE.requeue


def build_requeue_batch(
    settings: Settings,
) -> Callable[[Sequence[tuple[Mapping[str, Any], int]]], list[str | None]] | None:
    """``send_batch([(body, delay_seconds), ...])`` (``SendMessageBatch``) of the queue behind
    :func:`build_requeue`, or None when there is none or the requeue was injected (then each message
    is sent through the injected one)."""
    requeue = build_requeue(settings)
    send_batch = getattr(getattr(requeue, "__self__", None), "send_batch", None)
    return send_batch if callable(send_batch) else None


def build_visibility(settings: Settings) -> Callable[[Sequence[str], int], int] | None:
    """``change(receipt_handles, timeout_seconds)`` on the interruption queue, or None without a queue URL."""
    if _CACHE.visibility is _UNSET:
        if not settings.interruption_queue_url:
            _CACHE.visibility = None
        else:
            from nodesmith.adapters.aws.queue import InterruptionQueue

            queue = InterruptionQueue(queue_url=settings.interruption_queue_url, region=_region())
            _CACHE.visibility = queue.change_visibility
    return _CACHE.visibility


def build_waker(settings: Settings) -> Callable[[float], None] | None:
    """``wake(after)``: an asynchronous invoke of the reconcile function for a provisioning pass
    (:class:`~nodesmith.adapters.aws.wake.ReconcileWaker`), or None when no function is configured."""
    if _CACHE.waker is _UNSET:
        if not settings.reconcile_function:
            _CACHE.waker = None
        else:
            from nodesmith.adapters.aws.wake import ReconcileWaker

            _CACHE.waker = ReconcileWaker(function_name=settings.reconcile_function, region=_region()).wake
    return _CACHE.waker


def set_ports(
    *,
    cluster: Cluster | None = None,
    cloud: CloudProvider | None = None,
    settings: Settings | None = None,
    state: StateStore | None = None,
    requeue: Callable[[Mapping[str, Any], int], Any] | None = None,
    waker: Callable[[float], None] | None = None,
) -> None:
    """Use these ports (and settings) instead of building adapters (tests, the embedded default)."""
    if cluster is not None:
        _CACHE.cluster = cluster
    if cloud is not None:
        _CACHE.cloud = cloud
    if settings is not None:
        _CACHE.settings = settings
    if state is not None:
        _CACHE.state = state
    if requeue is not None:
        _CACHE.requeue = requeue
    if waker is not None:
        _CACHE.waker = waker


def freeze_warm_heap() -> bool:
    """After a Lambda container's first invocation, move everything the garbage collector tracks -- the imported
    modules, botocore's service models, the Kubernetes client, the cached instance-type catalogue -- to its
    permanent generation (:func:`gc.freeze`), once; True when it froze now.

    A full (generation 2) collection walks every tracked object with the invocation's threads stopped. With the warm
    heap in it, each took 0.2-0.65 s in ``bench/interruptions.py`` at 1,000 nodes, and came every few seconds of the
    burst; after the freeze it walks only what later invocations allocate. Frozen objects that become unreachable are
    still freed by reference counting; only reference cycles among them are never collected, a bounded loss since
    the warm heap lives as long as the container. Only in Lambda (``AWS_LAMBDA_FUNCTION_NAME`` set): tests and the
    CLI keep the collector as it is, and :func:`reset` undoes it.
    """
    if _CACHE.heap_frozen or not os.environ.get("AWS_LAMBDA_FUNCTION_NAME"):
        return False
    gc.freeze()
    _CACHE.heap_frozen = True
    return True


def reset() -> None:
    """Forget cached ports and settings; a frozen heap (:func:`freeze_warm_heap`) goes back to the collector."""
    if _CACHE.heap_frozen:
        gc.unfreeze()
        _CACHE.heap_frozen = False
    _CACHE.settings = None
    _CACHE.cluster = None
    _CACHE.cloud = None
    _CACHE.state = _UNSET
    _CACHE.idempotency = _UNSET
    _CACHE.requeue = _UNSET
    _CACHE.visibility = _UNSET
    _CACHE.waker = _UNSET
    _CACHE.marks = None
