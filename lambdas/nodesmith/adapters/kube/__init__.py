"""Kubernetes adapter: the official client, an EKS token minter and the ``Cluster`` port.

Importing this package does not import ``kubernetes`` (cold start); the client is loaded when
:func:`build_api_client` or :class:`KubeCluster` is first used.
"""

from nodesmith.adapters.kube.client import (
    EksTokenSource,
    KubeConnection,
    KubeCredentials,
    build_api_client,
    eks_token,
)
from nodesmith.adapters.kube.cluster import KubeCluster

__all__ = ["EksTokenSource", "KubeCluster", "KubeConnection", "KubeCredentials", "build_api_client", "eks_token"]
