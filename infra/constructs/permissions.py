"""Least-privilege IAM for the Nodesmith Lambdas: two policies, attached to the roles by the stack.

Modelled on Karpenter v1's scoped controller policy (``karpenter-provider-aws`` getting-started
CloudFormation), cut to what Nodesmith calls:

* reads (EC2 Describe*, Pricing) need ``Resource: "*"``: AWS offers no resource-level permission
  for them; EC2 reads are pinned to the stack's region with ``aws:RequestedRegion``;
* launching (``CreateFleet``, ``RunInstances``, ``CreateLaunchTemplate``) may use any image,
  snapshot, subnet and security group, but may only use launch templates and create fleets,
  instances, volumes, network interfaces, launch templates and spot requests that carry the tag
  ``kubernetes.io/cluster/<cluster>=owned`` in the request: the EC2 adapter must put that tag in
  ``TagSpecifications`` for every resource type the call creates;
* ``CreateTags`` is allowed while creating those resources, or afterwards on instances already
  tagged owned; ``TerminateInstances`` and ``DeleteLaunchTemplate`` only on owned resources;
* ``iam:PassRole`` only for the node role and only to EC2; ``eks:DescribeCluster`` only on this
  cluster; ``ssm:GetParameter`` only under EKS optimized AMI parameters;
* instance profiles for EC2NodeClasses that name ``spec.role``: the EC2 adapter creates them as
  ``nodesmith_<cluster>_<hash>`` tagged owned, so create/read/role changes are limited to that
  name prefix (and the tag).

No statement has a wildcard action. The EKS bearer token is a presigned STS
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
    "NodesmithPermissions",
    "cluster_tag_key",
    "instance_profile_prefix",
]

CLUSTER_TAG_VALUE = "owned"

DESCRIBE_ACTIONS = (
    "ec2:DescribeAvailabilityZones",
    "ec2:DescribeImages",
    "ec2:DescribeInstances",
    "ec2:DescribeInstanceTypeOfferings",
    "ec2:DescribeInstanceTypes",
    "ec2:DescribeLaunchTemplates",
    "ec2:DescribeSecurityGroups",
    "ec2:DescribeSpotPriceHistory",
    "ec2:DescribeSubnets",
)
"""EC2 reads used by catalogue, launch and interruption lookups; none supports resource-level scoping."""

_LAUNCH_ACTIONS = ("ec2:CreateFleet", "ec2:RunInstances")
_CREATE_ACTIONS = (*_LAUNCH_ACTIONS, "ec2:CreateLaunchTemplate")
# Resource types a launch creates (and must tag owned), and existing ones it only references.
_CREATED_TYPES = ("fleet", "instance", "volume", "network-interface", "launch-template", "spot-instances-request")
_SHARED_REFERENCED = ("subnet", "security-group")  # may be RAM-shared from another account
_PUBLIC_REFERENCED = ("image", "snapshot")  # AMI and snapshot ARNs carry no account


def instance_profile_prefix(cluster_name: str) -> str:
    """Name prefix of the instance profiles the EC2 adapter creates (``adapters/aws/nodeclass.py``)."""
    return f"nodesmith_{cluster_name}_"


def cluster_tag_key(cluster_name: str) -> str:
    """The tag key Kubernetes and Karpenter use to mark a cluster's resources."""
    return f"kubernetes.io/cluster/{cluster_name}"


def _ec2_arn(resource_type: str, *, account: str) -> str:
    return f"arn:{Aws.PARTITION}:ec2:{Aws.REGION}:{account}:{resource_type}/*"


class NodesmithPermissions(Construct):
    """The two IAM policies of Nodesmith; the stack attaches each to the role that needs it.

    Props (keyword-only):

    ``cluster_name``
        Plain string (not a token): it becomes part of the tag condition keys.
    ``cluster_arn``
        The EKS cluster ARN (for ``eks:DescribeCluster``).
    ``node_role_arn``
        The role the launched nodes run as (the only role ``iam:PassRole`` allows).

    Attributes:

    ``reconcile_policy``
        Reads, launch, tag, terminate, launch-template cleanup, pricing, AMI parameters, PassRole
        of the node role, Nodesmith's own instance profiles, DescribeCluster.
    ``interruption_policy``
        The same launch statements (the interruption Lambda launches replacement capacity for the
        pods of interrupted nodes through the reconcile scheduler, within the same owned-tag and
        node-role conditions), reads, tagging and termination of owned instances; it deletes no
        launch templates (garbage collection is the reconcile Lambda's).
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

        read = iam.PolicyStatement(
            sid="RegionalEc2Reads",
            actions=list(DESCRIBE_ACTIONS),
            resources=["*"],
            conditions={"StringEquals": {"aws:RequestedRegion": Aws.REGION}},
        )
        describe_cluster = iam.PolicyStatement(
            sid="DescribeThisCluster",
            actions=["eks:DescribeCluster"],
            resources=[cluster_arn],
        )
        owned_resource = {"StringEquals": {f"aws:ResourceTag/{tag_key}": CLUSTER_TAG_VALUE}}
        owned_request = {"StringEquals": {f"aws:RequestTag/{tag_key}": CLUSTER_TAG_VALUE}}

        def on_owned(sid: str, actions: Sequence[str], kind: str) -> iam.PolicyStatement:
            """``actions`` on this account's EC2 resources of ``kind`` tagged owned."""
            return iam.PolicyStatement(
                sid=sid, actions=list(actions), resources=[_ec2_arn(kind, account=account)], conditions=owned_resource
            )

        tag_owned = on_owned("TagOwnedInstances", ["ec2:CreateTags"], "instance")
        terminate_owned = on_owned("TerminateOwnedInstances", ["ec2:TerminateInstances"], "instance")
        delete_owned_templates = on_owned("DeleteOwnedLaunchTemplates", ["ec2:DeleteLaunchTemplate"], "launch-template")
        launch_with_owned_template = on_owned("LaunchWithOwnedLaunchTemplates", _LAUNCH_ACTIONS, "launch-template")

        launch_with_referenced = iam.PolicyStatement(
            sid="LaunchWithReferencedResources",
            actions=list(_LAUNCH_ACTIONS),
            resources=[
                *(_ec2_arn(kind, account="*") for kind in _SHARED_REFERENCED),
                *(_ec2_arn(kind, account="") for kind in _PUBLIC_REFERENCED),
            ],
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
            resources=[f"arn:{Aws.PARTITION}:ssm:{Aws.REGION}::parameter/aws/service/eks/optimized-ami/*"],
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

        # The interruption Lambda launches replacements with the same scoping; only the reconcile
        # Lambda garbage-collects launch templates.
        shared = [
            read,
            describe_cluster,
            launch_with_referenced,
            launch_with_owned_template,
            create_owned,
            tag_on_create,
            tag_owned,
            terminate_owned,
            pass_node_role,
            create_profiles,
            read_profiles,
            manage_profiles,
            eks_ami_parameters,
            pricing,
        ]
        self.reconcile_policy = iam.Policy(self, "ReconcilePolicy", statements=[*shared, delete_owned_templates])
        self.interruption_policy = iam.Policy(self, "InterruptionPolicy", statements=shared)
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
                ["Resource::arn:<AWS::Partition>:ssm:<AWS::Region>::parameter/aws/service/eks/optimized-ami/*"],
                "Read-only access to the public EKS optimized AMI parameters of this region, one path prefix "
                "whose leaves vary by Kubernetes version, AMI family and architecture.",
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
