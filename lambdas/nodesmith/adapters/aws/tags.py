"""The EC2 tags Nodesmith puts on what it launches, and the tags an EC2NodeClass may not set.

The cluster ownership tag, the EKS cluster name and the ``karpenter.sh/nodepool`` /
``karpenter.sh/nodeclaim`` / ``karpenter.k8s.aws/ec2nodeclass`` tags are Karpenter's own (Karpenter
``RestrictedTagPatterns``): node class or request tags with those keys are dropped, and Karpenter's
static tags win over any other tag.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from nodesmith.adapters.aws.instances import NODECLASS_TAG, NODEPOOL_TAG
from nodesmith.adapters.aws.nodeclass import field_value

if TYPE_CHECKING:
    from collections.abc import Mapping

    from nodesmith.adapters.aws.nodeclass import ResolvedNodeClass
    from nodesmith.core.ports import LaunchRequest

__all__ = [
    "EKS_CLUSTER_TAG",
    "NODECLAIM_TAG",
    "launch_tags",
    "restricted_tag",
    "static_tags",
]

LOG = logging.getLogger(__name__)

NODECLAIM_TAG = "karpenter.sh/nodeclaim"
EKS_CLUSTER_TAG = "eks:eks-cluster-name"


def restricted_tag(key: str) -> bool:
    """Tags an EC2NodeClass may not set (Karpenter ``RestrictedTagPatterns``)."""
    return key.startswith("kubernetes.io/cluster/") or key in (
        EKS_CLUSTER_TAG,
        NODEPOOL_TAG,
        NODECLAIM_TAG,
        NODECLASS_TAG,
    )


def static_tags(*, cluster_name: str, nodeclass_name: str, extra: Mapping[str, str]) -> dict[str, str]:
    """``extra`` (the node class's tags, values as strings) without restricted keys, then the static tags.

    The static tags (cluster ownership ``owned``, EKS cluster name, node class name) win. Dropped
    restricted keys are logged as a warning naming the EC2NodeClass.
    """
    static = {
        f"kubernetes.io/cluster/{cluster_name}": "owned",
        EKS_CLUSTER_TAG: cluster_name,
        NODECLASS_TAG: nodeclass_name,
    }
    tags = {k: str(v) for k, v in extra.items() if not restricted_tag(k)}
    dropped = sorted(set(extra) - set(tags))
    if dropped:
        LOG.warning("EC2NodeClass %s: ignoring restricted tags %s", nodeclass_name, dropped)
    return {**tags, **static}


def launch_tags(*, cluster_name: str, request: LaunchRequest, resolved: ResolvedNodeClass) -> dict[str, str]:
    """Instance/volume/fleet tags: node class tags, request tags, then Karpenter's static tags (win).

    Beyond :func:`static_tags`: the NodePool and NodeClaim tags and ``Name`` = the NodeClaim name.
    """
    tags = static_tags(
        cluster_name=cluster_name, nodeclass_name=resolved.name, extra=field_value(resolved.spec, "tags") or {}
    )
    extra = {k: v for k, v in request.tags.items() if not restricted_tag(k)}
    return {
        **extra,
        **tags,
        NODEPOOL_TAG: request.nodepool_name,
        NODECLAIM_TAG: request.nodeclaim_name,
        "Name": request.nodeclaim_name,
    }
