"""Build the ports a handler needs, once per Lambda container.

Adapters are imported inside the functions so importing a handler never imports ``kubernetes`` or
creates boto3 clients (cold start). Tests call :func:`set_ports` to substitute fakes and
:func:`reset` to forget them.

The state table (``NODESMITH_STATE_TABLE``) backs the reconcile lease and the shared
unavailable-offerings cache; the termination queue (``NODESMITH_TERMINATION_QUEUE_URL``) takes
termination requests. Without them (unit tests) the handlers work without a lease or requests.
"""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

from nodesmith.handlers.settings import Settings, load_settings

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    from nodesmith.core.ports import (
        CapacityReservations,
        CloudProvider,
        Cluster,
        NodeOverlays,
        StateStore,
        TerminationQueue,
    )
    from nodesmith.services.ports import Ports
    from nodesmith.services.reconciler.container import PassSettings
    from nodesmith.services.termination.service import TerminationSettings

__all__ = [
    "KUBE_POOL_MAXSIZE",
    "build_cloud",
    "build_cluster",
    "build_retry_after",
    "build_state",
    "build_termination_queue",
    "build_waker",
    "get_settings",
    "pass_settings",
    "ports",
    "region",
    "reset",
    "set_ports",
    "termination_settings",
]

KUBE_POOL_MAXSIZE = 100
"""Connections the Kubernetes client may keep open: the records of a batch (up to ten) run at once, each
drain round's evictions up to ``eviction_workers`` (8) at a time, all sharing one ``ApiClient`` (urllib3
pool)."""

_UNSET: Any = object()


@dataclass(slots=True)
class _Cache:
    """The container's ports, each ``_UNSET`` until built (None is a port that is not configured)."""

    settings: Settings | None = None
    cluster: Cluster = _UNSET
    cloud: CloudProvider = _UNSET
    state: StateStore | None = _UNSET
    queue: TerminationQueue | None = _UNSET
    retry_after: Callable[[Sequence[tuple[str, int]]], int] | None = _UNSET
    waker: Callable[[float], None] | None = _UNSET


_CACHE = _Cache()
_BUILDING = threading.RLock()
"""Held while a port is built, so threads that ask at once (a pass and its catalogue warm-up) share one."""


def _once(slot: str, build: Callable[[], Any]) -> Any:
    """The port kept in ``_CACHE.<slot>``, made by ``build()`` the first time any thread asks for it (under
    :data:`_BUILDING`, so threads asking at once get the same one)."""
    with _BUILDING:
        if getattr(_CACHE, slot) is _UNSET:
            setattr(_CACHE, slot, build())
        return getattr(_CACHE, slot)


def get_settings() -> Settings:
    """The container's :class:`Settings`, read from the environment on first use (``SettingsError`` if invalid)."""
    if _CACHE.settings is None:
        _CACHE.settings = load_settings()
    return _CACHE.settings


def region() -> str:
    """The Lambda's AWS region (``AWS_REGION``, set by Lambda; ``AWS_DEFAULT_REGION``; else us-east-1)."""
    return os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION") or "us-east-1"


def build_cluster(settings: Settings) -> Cluster:
    """The :class:`~nodesmith.core.ports.Cluster` for ``settings`` (``KubeCluster``), cached per container."""

    def build() -> Cluster:
        from nodesmith.adapters.kube.client import KubeConnection, KubeCredentials, build_api_client
        from nodesmith.adapters.kube.cluster import KubeCluster

        api_client = build_api_client(
            cluster_endpoint=settings.cluster_endpoint,
            kube_auth=settings.kube_auth,
            cluster_ca_data=settings.cluster_ca_data,
            credentials=KubeCredentials(cluster_name=settings.cluster_name, kube_token=settings.kube_token),
            connection=KubeConnection(pool_maxsize=KUBE_POOL_MAXSIZE),
        )
        return KubeCluster(api_client=api_client)

    return cast("Cluster", _once("cluster", build))


def build_cloud(settings: Settings) -> CloudProvider:
    """The :class:`~nodesmith.core.ports.CloudProvider` (``Ec2CloudProvider``), cached per container.

    The region is the Lambda's own. Its unavailable-offerings cache is shared through
    :func:`build_state` when a state table is configured.
    """

    def build() -> CloudProvider:
        from nodesmith.adapters.aws.config import CatalogSettings, ClusterConfig, NodeLaunchSettings
        from nodesmith.adapters.aws.provider import Ec2CloudProvider

        return Ec2CloudProvider(
            cluster=ClusterConfig(
                name=settings.cluster_name, endpoint=settings.cluster_endpoint, ca=settings.cluster_ca_data
            ),
            region=region(),
            launch=NodeLaunchSettings(
                node_role=settings.node_role_arn or None, reserved_capacity=settings.reserved_capacity
            ),
            catalog=CatalogSettings(price_table=settings.price_table or None),
            state=build_state(settings),
        )

    return cast("CloudProvider", _once("cloud", build))


def build_reservations(settings: Settings, cloud: CloudProvider) -> CapacityReservations | None:
    """EC2's capacity reservations (the EC2 provider) when the ``ReservedCapacity`` gate is on, else None."""
    from nodesmith.adapters.aws.provider import Ec2CloudProvider

    return cloud if settings.reserved_capacity and isinstance(cloud, Ec2CloudProvider) else None


def build_state(settings: Settings) -> StateStore | None:
    """The shared :class:`~nodesmith.core.ports.StateStore` (``DynamoStateStore``), or None without a state table."""

    def build() -> StateStore | None:
        if not settings.state_table:
            return None
        from nodesmith.adapters.aws.state import DynamoStateStore

        return DynamoStateStore(table_name=settings.state_table, region=region())

    return cast("StateStore | None", _once("state", build))


def build_termination_queue(settings: Settings) -> TerminationQueue | None:
    """The termination queue (``SqsTerminationQueue``), or None when no queue URL is configured."""

    def build() -> TerminationQueue | None:
        if not settings.termination_queue_url:
            return None
        from nodesmith.adapters.aws.queue import SqsTerminationQueue

        return SqsTerminationQueue(queue_url=settings.termination_queue_url, region=region())

    return cast("TerminationQueue | None", _once("queue", build))


def build_retry_after(settings: Settings) -> Callable[[Sequence[tuple[str, int]]], int] | None:
    """``retry_after([(receipt_handle, seconds), ...])`` on the termination queue (the termination handler's
    backoff between drain rounds, :meth:`~nodesmith.adapters.aws.queue.SqsTerminationQueue.retry_after`),
    or None without a queue URL."""

    def build() -> Callable[[Sequence[tuple[str, int]]], int] | None:
        if not settings.termination_queue_url:
            return None
        from nodesmith.adapters.aws.queue import SqsTerminationQueue

        return SqsTerminationQueue(queue_url=settings.termination_queue_url, region=region()).retry_after

    return cast("Callable[[Sequence[tuple[str, int]]], int] | None", _once("retry_after", build))


def build_waker(settings: Settings) -> Callable[[float], None] | None:
    """``wake(after)``: an asynchronous invoke of the reconcile function for a provisioning pass
    (:class:`~nodesmith.adapters.aws.wake.ReconcileWaker`), or None when no function is configured."""

    def build() -> Callable[[float], None] | None:
        if not settings.reconcile_function:
            return None
        from nodesmith.adapters.aws.wake import ReconcileWaker

        return ReconcileWaker(function_name=settings.reconcile_function, region=region()).wake

    return cast("Callable[[float], None] | None", _once("waker", build))


def ports(settings: Settings) -> Ports:
    """The container's :class:`~nodesmith.services.ports.Ports`: cluster, EC2, termination queue, waker, and the
    cluster as the NodeOverlay source when the ``NodeOverlay`` feature gate is on."""
    from nodesmith.core.ports import LaunchTemplateCleanup, NodeClassFinalizers, NodeClassReadiness
    from nodesmith.services.ports import Ports

    cluster = build_cluster(settings)
    cloud = build_cloud(settings)
    return Ports(
        cluster=cluster,
        cloud=cloud,
        cluster_name=settings.cluster_name,
        queue=build_termination_queue(settings),
        wake=build_waker(settings),
        overlays=overlay_source(settings, cluster),
        reservations=build_reservations(settings, cloud),
        finalizers=cluster if isinstance(cluster, NodeClassFinalizers) else None,
        templates=cloud if isinstance(cloud, LaunchTemplateCleanup) else None,
        readiness=cloud if isinstance(cloud, NodeClassReadiness) else None,
    )


def overlay_source(settings: Settings, cluster: Cluster) -> NodeOverlays | None:
    """The NodeOverlay reader of a pass: ``cluster`` (the Kubernetes adapter lists and writes NodeOverlays) when
    the ``NodeOverlay`` feature gate is on and it can, else None (no overlay is read, none applies)."""
    if not settings.node_overlay or not hasattr(cluster, "list_nodeoverlays"):
        return None
    return cast("NodeOverlays", cluster)


def termination_settings(settings: Settings) -> TerminationSettings:
    """The termination rounds' tuning from ``settings``."""
    from nodesmith.services.termination.service import TerminationSettings

    return TerminationSettings(
        eviction_workers=settings.eviction_workers,
        retry_initial_seconds=settings.termination_retry_seconds,
        retry_max_seconds=settings.termination_retry_max_seconds,
    )


def pass_settings(settings: Settings) -> PassSettings:
    """The reconcile passes' configuration from ``settings`` (disruption None when ``NODESMITH_DISRUPTION`` is off)."""
    from nodesmith.core.disruption import DisruptionSettings
    from nodesmith.services.reconciler.container import PassSettings

    return PassSettings(
        request_stale_seconds=settings.termination_request_stale_seconds,
        static_capacity=settings.static_capacity,
        registration_ttl_seconds=settings.registration_ttl_seconds,
        disruption=DisruptionSettings(
            min_savings_per_hour=settings.disruption_min_savings_usd_per_hour,
            policy=settings.disruption_policy,
            node_repair=settings.node_repair,
        )
        if settings.disruption
        else None,
        validation_delay_seconds=settings.disruption_validation_delay_seconds,
    )


def set_ports(
    *,
    cluster: Cluster | None = None,
    cloud: CloudProvider | None = None,
    settings: Settings | None = None,
    state: StateStore | None = None,
    queue: TerminationQueue | None = None,
    retry_after: Callable[[Sequence[tuple[str, int]]], int] | None = None,
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
    if queue is not None:
        _CACHE.queue = queue
    if retry_after is not None:
        _CACHE.retry_after = retry_after
    if waker is not None:
        _CACHE.waker = waker


def reset() -> None:
    """Forget cached ports and settings."""
    _CACHE.settings = None
    _CACHE.cluster = _UNSET
    _CACHE.cloud = _UNSET
    _CACHE.state = _UNSET
    _CACHE.queue = _UNSET
    _CACHE.retry_after = _UNSET
    _CACHE.waker = _UNSET
