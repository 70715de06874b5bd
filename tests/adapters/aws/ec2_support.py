"""Shared helpers of the EC2 adapter tests: the seeded EC2NodeClass and the ``Ec2CloudProvider`` set-up.

Imported by name: pytest puts this directory on ``sys.path`` for the tests in it; tests elsewhere (``tests/state``)
insert it themselves."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import boto3

from nodesmith.adapters.aws.config import (
    DEFAULT_LAUNCH,
    NO_CLIENTS,
    SYSTEM_CLOCKS,
    AwsClients,
    CatalogSettings,
    Clocks,
    ClusterConfig,
    NodeLaunchSettings,
)
from nodesmith.adapters.aws.nodeclass import NodeClassResolver
from nodesmith.adapters.aws.provider import Ec2CloudProvider
from nodesmith.core.api.ec2nodeclass import EC2NodeClass

if TYPE_CHECKING:
    from collections.abc import Collection

    from nodesmith.adapters.aws.launch_template import LaunchTemplateSpec
    from nodesmith.adapters.aws.nodeclass import ResolvedNodeClass
    from nodesmith.core.ports import StateStore
    from nodesmith.sim.aws import SeededAws

CLUSTER = "test-cluster"
REGION = "us-east-1"
SHARED_PRICES = Path(__file__).resolve().parents[3].parent / "shared" / "data" / "ec2-ondemand-prices-us-east-1.json"
"""The reference on-demand price table (``../shared/data``); tests needing it skip when it is absent."""


STUBBED_CLUSTER = ClusterConfig(
    name=CLUSTER,
    endpoint="https://example.eks.amazonaws.com",
    ca="Y2E=",
    kubernetes_version="1.31",
    service_cidr="172.20.0.0/16",
)
"""A cluster whose Kubernetes version and service CIDR are given, so no EKS DescribeCluster is made."""

NO_PRICING_API = CatalogSettings(use_pricing_api=False)
"""Every instance type EC2 answers, no price table and no Pricing API client."""


class FixedNodeClasses:
    """Stands in for the provider's EC2NodeClass resolver: every class resolves to ``resolved``."""

    def __init__(self, resolved: ResolvedNodeClass) -> None:
        self.resolved = resolved

    def resolve(self, *, nodeclass: Any) -> ResolvedNodeClass:
        return self.resolved


class RecordingTemplates:
    """Stands in for the provider's launch templates: records each spec and names its template
    ``nodesmith/<cluster>/<image id>`` without calling EC2."""

    def __init__(self) -> None:
        self.specs: list[LaunchTemplateSpec] = []

    def ensure(self, *, spec: LaunchTemplateSpec) -> str:
        self.specs.append(spec)
        return f"nodesmith/{CLUSTER}/{spec.image_id}"

    def forget(self, *, names: Any = ()) -> None:
        pass


def ec2_provider(
    *,
    ec2: Any | None = None,
    cluster: ClusterConfig = STUBBED_CLUSTER,
    launch: NodeLaunchSettings = DEFAULT_LAUNCH,
    catalog: CatalogSettings = NO_PRICING_API,
    clocks: Clocks = SYSTEM_CLOCKS,
    state: StateStore | None = None,
    resolved: ResolvedNodeClass | None = None,
) -> Ec2CloudProvider:
    """An :class:`Ec2CloudProvider` in :data:`REGION` for ``cluster``.

    ``ec2`` is the EC2 client to use (a stubbed or moto-backed one); SSM and IAM are then plain objects, so a
    test that reaches them fails. Without ``ec2`` every client is created for the region (moto when the test
    runs under ``mock_aws`` or the embedded AWS). ``resolved`` fixes EC2NodeClass resolution to that answer and
    replaces launch templates by a :class:`RecordingTemplates` (``cloud.launch_templates.specs``), so only the
    fleet and describe calls reach ``ec2``.
    """
    clients = NO_CLIENTS if ec2 is None else AwsClients(ec2=ec2, ssm=object(), iam=object())
    cloud = Ec2CloudProvider(
        region=REGION, cluster=cluster, launch=launch, catalog=catalog, clients=clients, clocks=clocks, state=state
    )
    if resolved is not None:
        cloud.nodeclasses = FixedNodeClasses(resolved)  # type: ignore[assignment]
        cloud.launch_templates = RecordingTemplates()  # type: ignore[assignment]
    return cloud


def resolver(*, instance_profile: str | None = None, role_for_profile: str | None = None) -> NodeClassResolver:
    """A :class:`NodeClassResolver` for the seeded cluster (Kubernetes 1.31) on boto3 clients of the embedded AWS;
    ``instance_profile`` and ``role_for_profile`` are the launch settings of those names."""
    return NodeClassResolver(
        cluster_name=CLUSTER,
        kubernetes_version="1.31",
        clients=AwsClients(
            ec2=boto3.client("ec2", region_name=REGION),
            ssm=boto3.client("ssm", region_name=REGION),
            iam=boto3.client("iam", region_name=REGION),
        ),
        launch=NodeLaunchSettings(instance_profile=instance_profile, node_role=role_for_profile),
    )


def seeded_provider(
    seeded: SeededAws,
    *,
    types: Collection[str],
    price_table: Path | None = None,
    reserved_capacity: bool = True,
    cluster_name: str = CLUSTER,
) -> Ec2CloudProvider:
    """An :class:`Ec2CloudProvider` on the seeded cluster (its CA, node role and instance profile), its
    catalogue restricted to ``types`` and priced from ``price_table`` (a JSON on-demand table) without the
    Pricing API; ``reserved_capacity`` is Karpenter's ``ReservedCapacity`` feature gate."""
    return ec2_provider(
        cluster=ClusterConfig(
            name=cluster_name, endpoint="https://ABC.gr7.us-east-1.eks.amazonaws.com", ca=seeded.cluster_ca
        ),
        launch=NodeLaunchSettings(
            node_role=seeded.node_role_arn,
            instance_profile=seeded.instance_profile,
            reserved_capacity=reserved_capacity,
        ),
        catalog=CatalogSettings(
            price_table=str(price_table) if price_table else None, use_pricing_api=False, instance_type_names=types
        ),
    )


def nodeclass(
    *,
    name: str = "default",
    subnet_terms: list[dict[str, Any]] | None = None,
    sg_terms: list[dict[str, Any]] | None = None,
    ami_terms: list[dict[str, Any]] | None = None,
    **spec: Any,
) -> EC2NodeClass:
    """An EC2NodeClass selecting the seeded resources by the discovery tag unless told otherwise."""
    discovery = [{"tags": {"karpenter.sh/discovery": CLUSTER}}]
    body: dict[str, Any] = {
        "subnetSelectorTerms": subnet_terms if subnet_terms is not None else discovery,
        "securityGroupSelectorTerms": sg_terms if sg_terms is not None else discovery,
        "amiSelectorTerms": ami_terms if ami_terms is not None else [{"alias": "al2023@latest"}],
    }
    if "role" not in spec and "instanceProfile" not in spec:
        body["role"] = f"KarpenterNodeRole-{CLUSTER}"
    body.update(spec)
    return EC2NodeClass.model_validate(
        {"apiVersion": "karpenter.k8s.aws/v1", "kind": "EC2NodeClass", "metadata": {"name": name}, "spec": body}
    )
