"""The embedded AWS launches a fleet's instances into their launch template's security groups, as EC2 does, spot
and on-demand, whether the template names them in ``SecurityGroupIds`` or on its primary network interface (the
form Nodesmith writes when an EC2NodeClass sets ``associatePublicIPAddress``). Instances in the VPC's default group
instead would be drifted (``SecurityGroupDrift``) the moment they are described."""

from __future__ import annotations

from typing import Any

import pytest

from nodesmith.sim import aws as embedded_aws


def _group(ec2: Any, name: str) -> str:
    vpc = ec2.describe_vpcs()["Vpcs"][0]["VpcId"]
    return str(ec2.create_security_group(GroupName=name, Description=name, VpcId=vpc)["GroupId"])


@pytest.mark.parametrize("capacity_type", ["spot", "on-demand"])
@pytest.mark.parametrize("form", ["SecurityGroupIds", "NetworkInterfaces"])
def test_a_fleet_instance_is_in_its_template_groups(ec2: Any, capacity_type: str, form: str) -> None:
    groups = sorted([_group(ec2, "nodes"), _group(ec2, "extra")])
    image = embedded_aws.register_ami(name="amazon-eks-node-al2023-x86_64-standard-1.31-v20260101")
    data: dict[str, Any] = {"ImageId": image, "InstanceType": "c5.large"}
    if form == "SecurityGroupIds":
        data["SecurityGroupIds"] = groups
    else:
        data["NetworkInterfaces"] = [{"DeviceIndex": 0, "AssociatePublicIpAddress": False, "Groups": groups}]
    template = ec2.create_launch_template(LaunchTemplateName="nodes", LaunchTemplateData=data)["LaunchTemplate"]

    subnet = ec2.describe_subnets()["Subnets"][0]
    answer = ec2.create_fleet(  # as the EC2 adapter asks: one override per offering, its subnet and type
        Type="instant",
        TargetCapacitySpecification={"TotalTargetCapacity": 2, "DefaultTargetCapacityType": capacity_type},
        LaunchTemplateConfigs=[{
            "LaunchTemplateSpecification": {"LaunchTemplateId": template["LaunchTemplateId"], "Version": "$Latest"},
            "Overrides": [{"InstanceType": "c5.large", "SubnetId": subnet["SubnetId"],
                           "AvailabilityZone": subnet["AvailabilityZone"]}],
        }],
    )  # fmt: skip
    ids = [i for group in answer["Instances"] for i in group["InstanceIds"]]
    described = [i for r in ec2.describe_instances(InstanceIds=ids)["Reservations"] for i in r["Instances"]]

    assert len(described) == 2
    assert all(sorted(g["GroupId"] for g in i["SecurityGroups"]) == groups for i in described)
