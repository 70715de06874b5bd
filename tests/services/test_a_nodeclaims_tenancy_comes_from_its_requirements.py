"""The launch of a NodeClaim takes its tenancy from the NodeClaim's requirements, as Karpenter's ``getTenancyType``:
dedicated only when they rule default out."""

from __future__ import annotations

from typing import Any

import pytest

from nodesmith.core.api.ec2nodeclass import EC2NodeClass
from nodesmith.core.api.nodeclaim import NodeClaim
from nodesmith.core.model import InstanceType, Offering
from nodesmith.services.provisioning.nodeclaims import launch_request

M5 = InstanceType(
    name="m5.large", labels={}, capacity={"cpu": 2000}, overhead={},
    offerings=(Offering(zone="us-east-1a", capacity_type="on-demand", price=0.096),),
)  # fmt: skip
NODECLASS = EC2NodeClass.model_validate(
    {
        "apiVersion": "karpenter.k8s.aws/v1",
        "kind": "EC2NodeClass",
        "metadata": {"name": "default"},
        "spec": {
            "role": "KarpenterNodeRole-demo",
            "amiSelectorTerms": [{"alias": "al2023@latest"}],
            "subnetSelectorTerms": [{"tags": {"karpenter.sh/discovery": "demo"}}],
            "securityGroupSelectorTerms": [{"tags": {"karpenter.sh/discovery": "demo"}}],
        },
    }
)


def nodeclaim(*tenancies: str) -> NodeClaim:
    requirements: list[dict[str, Any]] = [
        {"key": "node.kubernetes.io/instance-type", "operator": "In", "values": ["m5.large"]},
        {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]},
    ]
    if tenancies:
        requirements.append({"key": "karpenter.k8s.aws/instance-tenancy", "operator": "In", "values": list(tenancies)})
    return NodeClaim.model_validate(
        {
            "apiVersion": "karpenter.sh/v1",
            "kind": "NodeClaim",
            "metadata": {"name": "default-x7k2p", "labels": {"karpenter.sh/nodepool": "default"}},
            "spec": {
                "requirements": requirements,
                "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
            },
        }
    )


@pytest.mark.parametrize(
    ("tenancies", "launched"),
    [((), "default"), (("default", "dedicated"), "default"), (("dedicated",), "dedicated")],
)
def test_tenancy_follows_the_requirements(tenancies: tuple[str, ...], launched: str) -> None:
    request = launch_request(
        nodeclaim=nodeclaim(*tenancies), nodeclass=NODECLASS, catalogue={"m5.large": M5}, cluster_name="demo"
    )
    assert request.tenancy == launched
