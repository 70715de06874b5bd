"""Kubernetes API access for the Nodesmith Lambda roles, through EKS access entries.

Each role gets an access entry that maps it to the Kubernetes group :data:`KUBERNETES_GROUP`; no
EKS access policy is associated, so the role can do nothing until the ClusterRole and binding in
``infra/rbac/nodesmith-clusterrole.yaml`` are applied (``kubectl apply -f``). That file holds only
the verbs Nodesmith uses. The cluster's authentication mode must include ``API``
(``API`` or ``API_AND_CONFIG_MAP``) for access entries to take effect.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from aws_cdk import aws_eks as eks
from aws_cdk import aws_iam as iam
from constructs import Construct

if TYPE_CHECKING:
    from collections.abc import Mapping

__all__ = ["CLUSTER_ROLE_MANIFEST", "KUBERNETES_GROUP", "ClusterAccess"]

KUBERNETES_GROUP = "nodesmith"
"""Group the access entries put the Lambda roles in; the shipped ClusterRoleBinding binds it."""

CLUSTER_ROLE_MANIFEST = Path(__file__).resolve().parents[1] / "rbac" / "nodesmith-clusterrole.yaml"
"""The RBAC to apply to the cluster: ClusterRole ``nodesmith`` and its binding to the group."""


class ClusterAccess(Construct):
    """One ``AWS::EKS::AccessEntry`` (type ``STANDARD``) per role, in group ``nodesmith``.

    Props (keyword-only):

    ``cluster_name``
        The EKS cluster that already exists (not created by this stack).
    ``roles``
        Construct id -> IAM role to admit (the Lambda execution roles).

    Attribute: ``entries`` (id -> ``eks.CfnAccessEntry``).
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        cluster_name: str,
        roles: Mapping[str, iam.IRole],
    ) -> None:
        super().__init__(scope, construct_id)
        self.entries: dict[str, eks.CfnAccessEntry] = {
            entry_id: eks.CfnAccessEntry(
                self,
                entry_id,
                cluster_name=cluster_name,
                principal_arn=role.role_arn,
                type="STANDARD",
                kubernetes_groups=[KUBERNETES_GROUP],
            )
            for entry_id, role in roles.items()
        }
