"""The synthesized NodesmithStack's least privilege: each role holds exactly what its function calls, destructive
EC2 calls require the cluster's ``owned`` tag, wildcard resources only where AWS offers no resource scope, and
every role gets an EKS access entry bound by the shipped RBAC.

Every test reads the session's one synthesis (``synth`` in ``conftest.py``).
"""

from __future__ import annotations

import json
import re

import pytest
import yaml
from stack_synth import (
    CLUSTER,
    CLUSTER_TAG,
    HANDLERS,
    INTERRUPTION,
    NODE_ROLE,
    RECONCILE,
    TERMINATION,
    Synth,
    actions_of,
    as_list,
    identity_statements,
    lambda_function,
    role_of,
    role_policy_statements,
    termination_queue,
)

pytestmark = pytest.mark.xdist_group("infra-synth")

# --- IAM -------------------------------------------------------------------------------------

_BASE = {"logs:CreateLogStream", "logs:PutLogEvents", "xray:PutTelemetryRecords", "xray:PutTraceSegments"}
_CONSUME = {
    "sqs:ReceiveMessage",
    "sqs:DeleteMessage",
    "sqs:ChangeMessageVisibility",
    "sqs:GetQueueUrl",
    "sqs:GetQueueAttributes",
}
_ROLE_ACTIONS = {
    RECONCILE: _BASE
    | {
        "ec2:DescribeAvailabilityZones", "ec2:DescribeCapacityReservations", "ec2:DescribeImages",
        "ec2:DescribeInstances",
        "ec2:DescribeInstanceTypeOfferings", "ec2:DescribeInstanceTypes", "ec2:DescribeLaunchTemplates",
        "ec2:DescribeSecurityGroups", "ec2:DescribeSpotPriceHistory", "ec2:DescribeSubnets",
        "eks:DescribeCluster", "ec2:CreateFleet", "ec2:RunInstances", "ec2:CreateLaunchTemplate", "ec2:CreateTags",
        "ec2:TerminateInstances", "ec2:DeleteLaunchTemplate", "iam:PassRole", "iam:CreateInstanceProfile",
        "iam:TagInstanceProfile", "iam:GetInstanceProfile", "iam:AddRoleToInstanceProfile",
        "iam:RemoveRoleFromInstanceProfile", "ssm:GetParameter", "pricing:GetProducts",
        "dynamodb:GetItem", "dynamodb:PutItem", "dynamodb:UpdateItem", "dynamodb:DeleteItem", "dynamodb:Query",
        "sqs:SendMessage",
    },
    INTERRUPTION: _BASE
    | _CONSUME
    | {"ec2:DescribeInstances", "dynamodb:PutItem", "sqs:SendMessage", "lambda:InvokeFunction"},
    TERMINATION: _BASE | _CONSUME | {"ec2:DescribeInstances", "ec2:TerminateInstances"},
}  # fmt: skip
"""What each function's code calls (its adapters' boto3 calls), and the grants its logs, traces and event
source need: the role may hold nothing else."""


@pytest.mark.parametrize("handler", HANDLERS)
def test_each_role_holds_exactly_the_actions_its_function_calls(synth: Synth, handler: str) -> None:
    assert actions_of(synth, handler) == _ROLE_ACTIONS[handler]


def test_the_interruption_role_launches_nothing_and_terminates_nothing(synth: Synth) -> None:
    actions = actions_of(synth, INTERRUPTION)
    for forbidden in ("ec2:CreateFleet", "ec2:RunInstances", "ec2:CreateLaunchTemplate", "ec2:CreateTags",
                      "ec2:TerminateInstances", "ec2:DeleteLaunchTemplate", "iam:PassRole",
                      "iam:CreateInstanceProfile", "ssm:GetParameter", "pricing:GetProducts",
                      "eks:DescribeCluster", "dynamodb:UpdateItem", "dynamodb:DeleteItem"):  # fmt: skip
        assert forbidden not in actions


def test_the_termination_role_only_describes_and_terminates(synth: Synth) -> None:
    actions = actions_of(synth, TERMINATION)
    assert {a for a in actions if a.startswith("ec2:")} == {"ec2:DescribeInstances", "ec2:TerminateInstances"}
    assert not {a for a in actions if a.split(":")[0] in ("iam", "dynamodb", "lambda", "ssm", "pricing", "eks")}
    assert "sqs:SendMessage" not in actions


def test_no_allow_statement_has_a_wildcard_action(synth: Synth) -> None:
    for policy, statement in identity_statements(synth):
        for action in as_list(statement["Action"]):
            assert action != "*" and not action.endswith(":*"), f"{policy}: {action}"
            assert "*" not in action, f"{policy}: {action}"


def test_terminate_requires_the_owned_cluster_tag_and_a_nodepool(synth: Synth) -> None:
    terminates = [(p, s) for p, s in identity_statements(synth) if "ec2:TerminateInstances" in as_list(s["Action"])]
    assert len(terminates) == 2  # the reconcile function's (garbage collection, liveness) and the termination's
    for policy, statement in terminates:
        assert as_list(statement["Action"]) == ["ec2:TerminateInstances"], policy
        assert statement["Condition"] == {
            "StringEquals": {f"aws:ResourceTag/{CLUSTER_TAG}": "owned"},
            "StringLike": {"aws:ResourceTag/karpenter.sh/nodepool": "*"},
        }, policy
        assert statement["Resource"]["Fn::Join"][1][-1] == ":instance/*"


def test_delete_launch_template_requires_the_owned_cluster_tag_and_an_ec2nodeclass(synth: Synth) -> None:
    deletes = [(p, s) for p, s in identity_statements(synth) if "ec2:DeleteLaunchTemplate" in as_list(s["Action"])]
    assert len(deletes) == 1
    ((_, statement),) = deletes
    assert as_list(statement["Action"]) == ["ec2:DeleteLaunchTemplate"]
    assert statement["Condition"] == {
        "StringEquals": {f"aws:ResourceTag/{CLUSTER_TAG}": "owned"},
        "StringLike": {"aws:ResourceTag/karpenter.k8s.aws/ec2nodeclass": "*"},
    }
    assert statement["Resource"]["Fn::Join"][1][-1] == ":launch-template/*"


def test_the_launch_templates_the_adapter_creates_carry_the_tags_delete_requires() -> None:
    from nodesmith.adapters.aws.tags import static_tags

    tags = static_tags(cluster_name=CLUSTER, nodeclass_name="default", extra={})
    assert tags[CLUSTER_TAG] == "owned"
    assert tags["karpenter.k8s.aws/ec2nodeclass"] == "default"


def test_no_statement_tags_existing_instances(synth: Synth) -> None:
    # Tags are only ever written by the launch calls that create the resources (ec2:CreateAction).
    for policy, statement in identity_statements(synth):
        if "ec2:CreateTags" not in as_list(statement["Action"]):
            continue
        assert statement["Condition"]["StringEquals"]["ec2:CreateAction"] == [
            "CreateFleet", "RunInstances", "CreateLaunchTemplate",
        ], policy  # fmt: skip
        assert not any("aws:ResourceTag" in key for c in statement["Condition"].values() for key in c), policy


def test_launch_creates_only_resources_tagged_owned_by_the_cluster(synth: Synth) -> None:
    referenced_only = re.compile(r":(image|snapshot|subnet|security-group|capacity-reservation)/\*$")
    creates = {"ec2:CreateFleet", "ec2:RunInstances", "ec2:CreateLaunchTemplate", "ec2:CreateTags"}
    for policy, statement in identity_statements(synth):
        if not set(as_list(statement["Action"])) & creates:
            continue
        tag_conditions = statement.get("Condition", {}).get("StringEquals", {})
        if tag_conditions:
            assert {f"aws:RequestTag/{CLUSTER_TAG}", f"aws:ResourceTag/{CLUSTER_TAG}"} & set(tag_conditions)
            assert all(tag_conditions[k] == "owned" for k in tag_conditions if CLUSTER_TAG in k)
        else:
            # Unconditioned launch statements may only reference existing images, snapshots, subnets and SGs.
            assert set(as_list(statement["Action"])) <= {"ec2:CreateFleet", "ec2:RunInstances"}, policy
            for resource in as_list(statement["Resource"]):
                tail = resource["Fn::Join"][1][-1]
                assert referenced_only.search(tail), (policy, tail)


def test_only_the_reconcile_role_reads_and_launches_into_capacity_reservations(synth: Synth) -> None:
    assert "ec2:DescribeCapacityReservations" in actions_of(synth, RECONCILE)
    for handler in (INTERRUPTION, TERMINATION):
        assert "ec2:DescribeCapacityReservations" not in actions_of(synth, handler)
    into = [s for _, s in identity_statements(synth) if "capacity-reservation/" in json.dumps(s.get("Resource"))]
    assert len(into) == 1
    (statement,) = into
    assert sorted(as_list(statement["Action"])) == ["ec2:CreateFleet", "ec2:RunInstances"]
    (resource,) = as_list(statement["Resource"])
    assert resource["Fn::Join"][1][-1] == ":*:capacity-reservation/*"  # any account's: reservations may be shared


def test_only_the_reconcile_role_may_pass_the_node_role_only_to_ec2(synth: Synth) -> None:
    passes = [(p, s) for p, s in identity_statements(synth) if "iam:PassRole" in as_list(s["Action"])]
    assert len(passes) == 1
    policies = synth.resources("AWS::IAM::Policy")
    assert [policies[policy]["Roles"][0]["Ref"] for policy, _ in passes] == [
        role_of(lambda_function(synth, RECONCILE)[1])
    ]
    for _, statement in passes:
        assert statement["Resource"] == NODE_ROLE
        assert statement["Condition"] == {"StringEquals": {"iam:PassedToService": "ec2.amazonaws.com"}}


def test_the_termination_role_may_set_the_visibility_of_its_own_queue_s_messages(synth: Synth) -> None:
    # the handler's backoff between drain rounds: ChangeMessageVisibilityBatch, authorized by this action
    queue_id, _ = termination_queue(synth)
    _, termination = lambda_function(synth, TERMINATION)
    scopes = [
        s["Resource"]
        for s in role_policy_statements(synth, role_of(termination))
        if s["Effect"] == "Allow" and "sqs:ChangeMessageVisibility" in as_list(s["Action"])
    ]
    assert scopes == [{"Fn::GetAtt": [queue_id, "Arn"]}]


def test_wildcard_resources_are_only_where_aws_offers_no_resource_scope(synth: Synth) -> None:
    allowed = {
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
        "pricing:GetProducts",
        "xray:PutTelemetryRecords",
        "xray:PutTraceSegments",
    }
    for policy, statement in identity_statements(synth):
        if "*" in as_list(statement["Resource"]):
            assert set(as_list(statement["Action"])) <= allowed, policy


def test_cluster_scoped_reads(synth: Synth) -> None:
    describe = [s for _, s in identity_statements(synth) if "eks:DescribeCluster" in as_list(s["Action"])]
    assert describe
    for statement in describe:
        assert statement["Resource"]["Fn::Join"][1][-1] == f":cluster/{CLUSTER}"
    ssm = [s for _, s in identity_statements(synth) if "ssm:GetParameter" in as_list(s["Action"])]
    resources = [r for s in ssm for r in as_list(s["Resource"])]
    assert {r["Fn::Join"][1][-1] for r in resources} == {
        "::parameter/aws/service/eks/optimized-ami/*",
        "::parameter/aws/service/bottlerocket/*",
    }


# --- EKS access ------------------------------------------------------------------------------


def test_every_lambda_role_gets_an_access_entry_bound_by_the_shipped_rbac(synth: Synth) -> None:
    from infra.constructs.cluster_access import CLUSTER_ROLE_MANIFEST, KUBERNETES_GROUP

    entries = synth.resources("AWS::EKS::AccessEntry").values()
    roles = {role_of(lambda_function(synth, h)[1]) for h in HANDLERS}
    assert {e["PrincipalArn"]["Fn::GetAtt"][0] for e in entries} == roles and len(entries) == 3
    assert all(e["ClusterName"] == CLUSTER and e["KubernetesGroups"] == [KUBERNETES_GROUP] for e in entries)
    assert all("AccessPolicies" not in e for e in entries)  # RBAC alone decides what they may do

    documents = list(yaml.safe_load_all(CLUSTER_ROLE_MANIFEST.read_text()))
    role = next(d for d in documents if d["kind"] == "ClusterRole")
    binding = next(d for d in documents if d["kind"] == "ClusterRoleBinding")
    assert binding["roleRef"]["name"] == role["metadata"]["name"]
    assert binding["subjects"] == [{"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": KUBERNETES_GROUP}]
    for rule in role["rules"]:
        assert "*" not in rule["verbs"] and "*" not in rule["resources"], rule
