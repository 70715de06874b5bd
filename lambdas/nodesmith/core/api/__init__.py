"""Pydantic v2 models of Karpenter's v1 custom resources, with Karpenter's defaults and validation.

* :mod:`.nodepool` — ``karpenter.sh/v1`` NodePool
* :mod:`.nodeclaim` — ``karpenter.sh/v1`` NodeClaim
* :mod:`.nodeoverlay` — ``karpenter.sh/v1alpha1`` NodeOverlay (feature gate ``NodeOverlay``)
* :mod:`.ec2nodeclass` — ``karpenter.k8s.aws/v1`` EC2NodeClass (kubelet settings in :mod:`.kubelet`)
* :mod:`.common` — ObjectMeta, Taint, requirements, conditions, :func:`~.common.parse_duration`

Attributes are snake_case; ``model_validate`` takes the Kubernetes JSON/YAML (camelCase) and
``model_dump(by_alias=True, exclude_none=True)`` gives it back.
"""

from nodesmith.core.api.common import parse_duration
from nodesmith.core.api.ec2nodeclass import EC2NodeClass
from nodesmith.core.api.nodeclaim import NodeClaim
from nodesmith.core.api.nodeoverlay import NodeOverlay
from nodesmith.core.api.nodepool import NodePool

__all__ = ["EC2NodeClass", "NodeClaim", "NodeOverlay", "NodePool", "parse_duration"]
