"""Least-privilege IAM for the Nodesmith Lambdas: one policy per function, each holding what its code calls.

Modelled on Karpenter v1's scoped controller policy (``karpenter-provider-aws`` getting-started
CloudFormation, ``KarpenterControllerPolicy``), cut to what Nodesmith calls and split by function:

* reads (EC2 Describe*, Pricing) need ``Resource: "*"``: AWS offers no resource-level permission
  for them; EC2 reads are pinned to the stack's region with ``aws:RequestedRegion``;
* launching (``CreateFleet``, and ``RunInstances``, which an ``instant`` fleet is also authorized for;
  ``CreateLaunchTemplate``) may use any image, snapshot, subnet and security group, but may only use
  launch templates and create fleets, instances, volumes, network interfaces, launch templates and spot
  requests that carry the tag ``kubernetes.io/cluster/<cluster>=owned`` in the request: the EC2 adapter
  puts that tag in ``TagSpecifications`` for every resource type the call creates;
* ``CreateTags`` only while creating those resources (``ec2:CreateAction``); Nodesmith never tags an
  existing instance, so unlike Karpenter no statement allows it;
* capacity reservations (Karpenter's ``ReservedCapacity``): ``DescribeCapacityReservations`` (a read, ``*``), and
  ``CreateFleet``/``RunInstances`` may reference any capacity reservation of the region (a launch into an ODCR or a
  Capacity Block names it in its launch template; reservations may be shared from another account, so the ARN's
  account is ``*``, as in Karpenter's ``AllowScopedEC2InstanceAccessActions``);
* ``TerminateInstances`` only on instances tagged ``kubernetes.io/cluster/<cluster>=owned`` **and**
  carrying ``karpenter.sh/nodepool`` (Karpenter's ``AllowScopedDeletion``: a managed node group's
  instances are owned by the cluster too, but carry no NodePool tag); ``DeleteLaunchTemplate`` only on
  templates tagged owned **and** carrying ``karpenter.k8s.aws/ec2nodeclass`` (Nodesmith's launch
  templates are per EC2NodeClass, not per NodePool, and carry that tag:
  ``nodesmith.adapters.aws.tags.static_tags``);
* ``iam:PassRole`` only for the node role and only to EC2; ``eks:DescribeCluster`` only on this
  cluster; ``ssm:GetParameter`` only under EKS optimized AMI parameters;
* instance profiles for EC2NodeClasses that name ``spec.role``: the EC2 adapter creates them as
  ``nodesmith_<cluster>_<hash>`` tagged owned, so create/read/role changes are limited to that
  name prefix (and the tag).

Per function (``NodesmithPermissions`` attributes): the reconcile function launches, garbage-collects
and reads everything above; the interruption function only describes the instances its messages name;
the termination function describes and terminates. Queue, table and Lambda grants are added by the
stack (:mod:`infra.stack`). No statement has a wildcard action. The EKS bearer token is a presigned STS
``GetCallerIdentity`` URL, which needs no permission.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from aws_cdk import Aws
from aws_cdk import aws_iam as iam
from cdk_nag import NagPackSuppression, NagSuppressions
from constructs import Construct

if TYPE_CHECKING:
    from collections.abc import Sequence

__all__ = [
    "CLUSTER_TAG_VALUE",
    "DESCRIBE_ACTIONS",
    "NODECLASS_TAG",
    "NODEPOOL_TAG",
    "NodesmithPermissions",
    "cluster_tag_key",
    "instance_profile_prefix",
]

CLUSTER_TAG_VALUE = "owned"
NODEPOOL_TAG = "karpenter.sh/nodepool"
"""On every instance Nodesmith (or Karpenter) launches for a NodePool."""
NODECLASS_TAG = "karpenter.k8s.aws/ec2nodeclass"
"""On every instance and launch template Nodesmith launches for an EC2NodeClass."""

DESCRIBE_ACTIONS = (
    "ec2:DescribeAvailabilityZones",
    "ec2:DescribeCapacityReservations",
    "ec2:DescribeImages",
    "ec2:DescribeInstances",
    "ec2:DescribeInstanceTypeOfferings",
    "ec2:DescribeInstanceTypes",
    "ec2:DescribeLaunchTemplates",
    "ec2:DescribeSecurityGroups",
    "ec2:DescribeSpotPriceHistory",
    "ec2:DescribeSubnets",
)
"""EC2 reads of the catalogue, launch and instance lookups; none supports resource-level scoping."""

_LAUNCH_ACTIONS = ("ec2:CreateFleet", "ec2:RunInstances")
_CREATE_ACTIONS = (*_LAUNCH_ACTIONS, "ec2:CreateLaunchTemplate")
# Resource types a launch creates (and must tag owned), and existing ones it only references.
_CREATED_TYPES = ("fleet", "instance", "volume", "network-interface", "launch-template", "spot-instances-request")
_SHARED_REFERENCED = ("subnet", "security-group")  # may be RAM-shared from another account
_PUBLIC_REFERENCED = ("image", "snapshot")  # AMI and snapshot ARNs carry no account
_RESERVATION = "capacity-reservation"  # an ODCR or Capacity Block a launch targets; may be shared


def instance_profile_prefix(cluster_name: str) -> str:
    """Name prefix of the instance profiles the EC2 adapter creates (``adapters/aws/nodeclass.py``)."""
    return f"nodesmith_{cluster_name}_"


def cluster_tag_key(cluster_name: str) -> str:
    """The tag key Kubernetes and Karpenter use to mark a cluster's resources."""
    return f"kubernetes.io/cluster/{cluster_name}"


def _ec2_arn(resource_type: str, *, account: str) -> str:
    return f"arn:{Aws.PARTITION}:ec2:{Aws.REGION}:{account}:{resource_type}/*"


class NodesmithPermissions(Construct):
    """The EC2, IAM, EKS, SSM and Pricing policies of the three functions; the stack attaches each to its role.

    Props (keyword-only):

    ``cluster_name``
        Plain string (not a token): it becomes part of the tag condition keys.
    ``cluster_arn``
        The EKS cluster ARN (for ``eks:DescribeCluster``).
    ``node_role_arn``
        The role the launched nodes run as (the only role ``iam:PassRole`` allows).

    Attributes:

    ``reconcile_policy``
        Reads, launch (tag on create only), terminate owned NodePool instances (garbage collection and
        liveness), delete owned EC2NodeClass launch templates, pricing, AMI parameters, PassRole of the node
        role, Nodesmith's own instance profiles, DescribeCluster.
    ``interruption_policy``
        ``ec2:DescribeInstances`` (region-pinned): the function judges each message on what EC2 says of its
        instances, and acts on the cluster only.
    ``termination_policy``
        ``ec2:DescribeInstances`` and ``ec2:TerminateInstances`` on owned NodePool instances.
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        cluster_name: str,
        cluster_arn: str,
        node_role_arn: str,
    ) -> None:
        super().__init__(scope, construct_id)
        tag_key = cluster_tag_key(cluster_name)
        account = Aws.ACCOUNT_ID
        regional = {"StringEquals": {"aws:RequestedRegion": Aws.REGION}}

        read = iam.PolicyStatement(
            sid="RegionalEc2Reads", actions=list(DESCRIBE_ACTIONS), resources=["*"], conditions=regional
        )
        describe_instances = iam.PolicyStatement(
            sid="RegionalDescribeInstances", actions=["ec2:DescribeInstances"], resources=["*"], conditions=regional
        )
        describe_cluster = iam.PolicyStatement(
            sid="DescribeThisCluster",
            actions=["eks:DescribeCluster"],
            resources=[cluster_arn],
        )
        owned_resource = {"StringEquals": {f"aws:ResourceTag/{tag_key}": CLUSTER_TAG_VALUE}}
        owned_request = {"StringEquals": {f"aws:RequestTag/{tag_key}": CLUSTER_TAG_VALUE}}

        def on_owned(sid: str, actions: Sequence[str], kind: str, *, with_tag: str = "") -> iam.PolicyStatement:
            """``actions`` on this account's EC2 resources of ``kind`` tagged owned (and carrying ``with_tag``)."""
            conditions: dict[str, dict[str, str]] = {**owned_resource}
            if with_tag:
                conditions["StringLike"] = {f"aws:ResourceTag/{with_tag}": "*"}
            return iam.PolicyStatement(
                sid=sid, actions=list(actions), resources=[_ec2_arn(kind, account=account)], conditions=conditions
            )

        terminate_owned = on_owned(
            "TerminateOwnedNodePoolInstances", ["ec2:TerminateInstances"], "instance", with_tag=NODEPOOL_TAG
        )
        delete_owned_templates = on_owned(
            "DeleteOwnedNodeClassLaunchTemplates",
            ["ec2:DeleteLaunchTemplate"],
            "launch-template",
            with_tag=NODECLASS_TAG,
        )
        launch_with_owned_template = on_owned("LaunchWithOwnedLaunchTemplates", _LAUNCH_ACTIONS, "launch-template")

        launch_with_referenced = iam.PolicyStatement(
            sid="LaunchWithReferencedResources",
            actions=list(_LAUNCH_ACTIONS),
            resources=[
                *(_ec2_arn(kind, account="*") for kind in _SHARED_REFERENCED),
                *(_ec2_arn(kind, account="") for kind in _PUBLIC_REFERENCED),
            ],
        )
        launch_into_reservations = iam.PolicyStatement(
            sid="LaunchIntoCapacityReservations",
            actions=list(_LAUNCH_ACTIONS),
            resources=[_ec2_arn(_RESERVATION, account="*")],
        )
        create_owned = iam.PolicyStatement(
            sid="CreateOwnedResources",
            actions=list(_CREATE_ACTIONS),
            resources=[_ec2_arn(kind, account=account) for kind in _CREATED_TYPES],
            conditions=owned_request,
        )
        tag_on_create = iam.PolicyStatement(
            sid="TagOnCreate",
            actions=["ec2:CreateTags"],
            resources=[_ec2_arn(kind, account=account) for kind in _CREATED_TYPES],
            conditions={
                "StringEquals": {
                    f"aws:RequestTag/{tag_key}": CLUSTER_TAG_VALUE,
                    "ec2:CreateAction": [action.removeprefix("ec2:") for action in _CREATE_ACTIONS],
                }
            },
        )
        pass_node_role = iam.PolicyStatement(
            sid="PassNodeRoleToEc2",
            actions=["iam:PassRole"],
            resources=[node_role_arn],
            conditions={"StringEquals": {"iam:PassedToService": "ec2.amazonaws.com"}},
        )
        eks_ami_parameters = iam.PolicyStatement(
            sid="ReadEksOptimizedAmiParameters",
            actions=["ssm:GetParameter"],
            resources=[
                f"arn:{Aws.PARTITION}:ssm:{Aws.REGION}::parameter/aws/service/eks/optimized-ami/*",
                f"arn:{Aws.PARTITION}:ssm:{Aws.REGION}::parameter/aws/service/bottlerocket/*",
            ],
        )
        profiles = f"arn:{Aws.PARTITION}:iam::{account}:instance-profile/{instance_profile_prefix(cluster_name)}*"
        create_profiles = iam.PolicyStatement(
            sid="CreateOwnedInstanceProfiles",
            actions=["iam:CreateInstanceProfile", "iam:TagInstanceProfile"],
            resources=[profiles],
            conditions=owned_request,
        )
        read_profiles = iam.PolicyStatement(sid="ReadOwnInstanceProfiles", actions=["iam:GetInstanceProfile"],
                                            resources=[profiles])  # fmt: skip
        manage_profiles = iam.PolicyStatement(
            sid="SetRoleOfOwnedInstanceProfiles",
            actions=["iam:AddRoleToInstanceProfile", "iam:RemoveRoleFromInstanceProfile"],
            resources=[profiles],
            conditions=owned_resource,
        )
        pricing = iam.PolicyStatement(sid="ReadPrices", actions=["pricing:GetProducts"], resources=["*"])

        self.reconcile_policy = iam.Policy(
            self,
            "ReconcilePolicy",
            statements=[
                read,
                describe_cluster,
                launch_with_referenced,
                launch_with_owned_template,
                launch_into_reservations,
                create_owned,
                tag_on_create,
                terminate_owned,
                delete_owned_templates,
                pass_node_role,
                create_profiles,
                read_profiles,
                manage_profiles,
                eks_ami_parameters,
                pricing,
            ],
        )
        self.interruption_policy = iam.Policy(self, "InterruptionPolicy", statements=[describe_instances])
        self.termination_policy = iam.Policy(
            self, "TerminationPolicy", statements=[describe_instances, terminate_owned]
        )
        self._suppress_required_wildcards(cluster_name=cluster_name)

    def _suppress_required_wildcards(self, *, cluster_name: str) -> None:
        """Record, per wildcard resource left in the policies, why it cannot be narrowed further."""
        ec2 = "arn:<AWS::Partition>:ec2:<AWS::Region>"
        created = [f"Resource::{ec2}:<AWS::AccountId>:{kind}/*" for kind in _CREATED_TYPES]
        referenced = [
            *(f"Resource::{ec2}:*:{kind}/*" for kind in _SHARED_REFERENCED),
            *(f"Resource::{ec2}::{kind}/*" for kind in _PUBLIC_REFERENCED),
        ]
        suppressions = [
            (
                ["Resource::*"],
                "EC2 Describe* and pricing:GetProducts support no resource-level permissions (AWS service "
                "authorization reference), so Resource must be '*'; the EC2 reads are pinned to this region "
                "with aws:RequestedRegion.",
            ),
            (
                created,
                "Instance, fleet, volume, network-interface, launch-template and spot-request IDs do not exist "
                "before launch; every action on them is conditioned on the tag "
                "kubernetes.io/cluster/<cluster>=owned (aws:RequestTag when creating, aws:ResourceTag after), "
                "and the account is this one.",
            ),
            (
                referenced,
                "CreateFleet/RunInstances must reference the AMI, its snapshots, subnets and security groups "
                "that the EC2NodeClass selectors resolve at run time (subnets and security groups may be "
                "RAM-shared from another account); they are only referenced, never created or modified.",
            ),
            (
                [f"Resource::{ec2}:*:{_RESERVATION}/*"],
                "A launch into a capacity reservation (ODCR or Capacity Block) references the reservation the "
                "EC2NodeClass capacityReservationSelectorTerms resolve at run time, possibly shared from another "
                "account (Karpenter's scoped instance access); it is only referenced, never created or modified.",
            ),
            (
                [
                    "Resource::arn:<AWS::Partition>:ssm:<AWS::Region>::parameter/aws/service/eks/optimized-ami/*",
                    "Resource::arn:<AWS::Partition>:ssm:<AWS::Region>::parameter/aws/service/bottlerocket/*",
                ],
                "Read-only access to the public EKS optimized and Bottlerocket AMI parameters of this region, two "
                "path prefixes whose leaves vary by Kubernetes version, variant, architecture and release.",
            ),
            (
                [
                    "Resource::arn:<AWS::Partition>:iam::<AWS::AccountId>:instance-profile/"
                    f"{instance_profile_prefix(cluster_name)}*"
                ],
                "Instance profiles are created on demand per EC2NodeClass role with a hashed name; access is "
                "limited to Nodesmith's name prefix for this cluster, and creation and role changes also "
                "require the kubernetes.io/cluster/<cluster>=owned tag.",
            ),
        ]
        NagSuppressions.add_resource_suppressions(
            self,
            [
                NagPackSuppression(id="AwsSolutions-IAM5", reason=reason, applies_to=applies_to)
                for applies_to, reason in suppressions
            ],
            apply_to_children=True,
        )
