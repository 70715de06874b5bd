"""The embedded AWS answers a CreateFleet repeated with its ClientToken as EC2 does: with the first call's
instances, launching nothing more; another token launches again."""

from __future__ import annotations

from typing import Any

from nodesmith.sim import aws as embedded_aws


def _fleet(ec2: Any, template: str, token: str) -> list[str]:
    answer = ec2.create_fleet(
        ClientToken=token,
        Type="instant",
        TargetCapacitySpecification={"TotalTargetCapacity": 1, "DefaultTargetCapacityType": "on-demand"},
        LaunchTemplateConfigs=[{"LaunchTemplateSpecification": {"LaunchTemplateId": template, "Version": "$Latest"}}],
    )
    return [i for group in answer.get("Instances") or [] for i in group["InstanceIds"]]


def test_a_repeated_client_token_gets_the_first_answer_and_no_second_instance(ec2: Any) -> None:
    image = embedded_aws.register_ami(name="amazon-eks-node-al2023-x86_64-standard-1.31-v20260101")
    template = ec2.create_launch_template(
        LaunchTemplateName="nodes", LaunchTemplateData={"ImageId": image, "InstanceType": "c5.large"}
    )["LaunchTemplate"]["LaunchTemplateId"]

    first = _fleet(ec2, template, "claim-a")
    again = _fleet(ec2, template, "claim-a")  # the first answer was lost: the NodeClaim is launched again
    other = _fleet(ec2, template, "claim-b")

    assert len(first) == 1 and again == first
    assert len(other) == 1 and other != first
    assert sum(len(r["Instances"]) for r in ec2.describe_instances()["Reservations"]) == 2
