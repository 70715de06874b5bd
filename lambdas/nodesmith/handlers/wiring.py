"""Build the ports a handler needs, once per Lambda container.

Adapters are imported inside the functions so importing a handler never imports ``kubernetes`` or
creates boto3 clients (cold start). Tests call :func:`set_ports` to substitute fakes and
:func:`reset` to forget them.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import TYPE_CHECKING

from nodesmith.handlers.settings import Settings, load_settings

if TYPE_CHECKING:
    from nodesmith.core.ports import CloudProvider, Cluster

__all__ = ["build_cloud", "build_cluster", "get_settings", "reset", "set_ports"]


@dataclass(slots=True)
class _Cache:
    settings: Settings | None = None
    cluster: Cluster | None = None
    cloud: CloudProvider | None = None


_CACHE = _Cache()


def get_settings() -> Settings:
    """The container's :class:`Settings`, read from the environment on first use (``SettingsError`` if invalid)."""
    if _CACHE.settings is None:
        _CACHE.settings = load_settings()
    return _CACHE.settings


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
        )
        _CACHE.cluster = KubeCluster(api_client=api_client)
    return _CACHE.cluster


def build_cloud(settings: Settings) -> CloudProvider:
    """The :class:`~nodesmith.core.ports.CloudProvider` (``Ec2CloudProvider``), cached per container.

    The region is the Lambda's own (``AWS_REGION``).
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
        )
    return _CACHE.cloud


def set_ports(
    *, cluster: Cluster | None = None, cloud: CloudProvider | None = None, settings: Settings | None = None
) -> None:
    """Use these ports (and settings) instead of building adapters (tests, the embedded default)."""
    if cluster is not None:
        _CACHE.cluster = cluster
    if cloud is not None:
        _CACHE.cloud = cloud
    if settings is not None:
        _CACHE.settings = settings


def reset() -> None:
    """Forget cached ports and settings."""
    _CACHE.settings = None
    _CACHE.cluster = None
    _CACHE.cloud = None
