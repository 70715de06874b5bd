"""Launch templates carry AL2023 nodeadm user data with the NodeClaim's labels and taints, and IMDSv2."""

from __future__ import annotations

import base64
import email
import re
from typing import Any

import boto3
import yaml
from ec2_support import CLUSTER, REGION

from nodesmith.adapters.aws.launch_template import JoinCluster, LaunchTemplates, LaunchTemplateSpec, render_user_data
from nodesmith.core.model import Taint

CA = base64.b64encode(b"-----BEGIN CERTIFICATE-----\nfake\n").decode()


def parts(user_data: str) -> list[tuple[str, str]]:
    message = email.message_from_string(user_data)
    assert message.get_content_type() == "multipart/mixed"
    return [(p.get_content_type(), p.get_payload()) for p in message.walk() if not p.is_multipart()]


def node_config(user_data: str) -> dict[str, Any]:
    configs = [body for kind, body in parts(user_data) if kind == "application/node.eks.aws"]
    return dict(yaml.safe_load(configs[-1]))


def render(**overrides: Any) -> str:
    args: dict[str, Any] = {
        "labels": {
            "karpenter.sh/nodepool": "default",
            "karpenter.sh/capacity-type": "spot",
            "team": "payments",
            "kubernetes.io/arch": "amd64",  # kubelet may not set it: NodeRestriction
            "node-role.kubernetes.io/worker": "",
        },
        "taints": (Taint(key="dedicated", value="gpu", effect="NoSchedule"), Taint(key="startup", effect="NoExecute")),
    }
    args.update(overrides)
    cluster = JoinCluster(
        name=CLUSTER, endpoint="https://ABC.gr7.us-east-1.eks.amazonaws.com", ca=CA, cidr="172.20.0.0/16"
    )
    return render_user_data(cluster, **args)


def test_node_config_names_the_cluster_and_registers_labels_and_taints() -> None:
    config = node_config(render())
    assert config["apiVersion"] == "node.eks.aws/v1alpha1"
    assert config["kind"] == "NodeConfig"
    assert config["spec"]["cluster"] == {
        "name": CLUSTER,
        "apiServerEndpoint": "https://ABC.gr7.us-east-1.eks.amazonaws.com",
        "certificateAuthority": CA,
        "cidr": "172.20.0.0/16",
    }
    kubelet = config["spec"]["kubelet"]
    assert kubelet["flags"] == [
        "--node-labels=karpenter.sh/capacity-type=spot,karpenter.sh/nodepool=default,team=payments"
    ]
    assert kubelet["config"]["registerWithTaints"] == [
        {"key": "dedicated", "value": "gpu", "effect": "NoSchedule"},
        {"key": "startup", "effect": "NoExecute"},
    ]
    assert "maxPods" not in kubelet["config"]  # nodeadm derives the ENI limit per type itself


def test_ec2nodeclass_kubelet_settings_pass_through() -> None:
    kubelet = {"maxPods": 110, "systemReserved": {"cpu": "100m"}, "containerLogMaxSize": "50Mi", "clusterDNS": []}
    config = node_config(render(kubelet=kubelet))["spec"]["kubelet"]["config"]
    assert config["maxPods"] == 110
    assert config["systemReserved"] == {"cpu": "100m"}
    assert config["containerLogMaxSize"] == "50Mi"
    assert "clusterDNS" not in config
    cel = node_config(render(kubelet={"maxPods": "self.cpu * 8"}))["spec"]["kubelet"]["config"]
    assert "maxPods" not in cel


def test_custom_user_data_runs_before_the_generated_node_config() -> None:
    shell = render(custom_user_data="#!/bin/bash\necho hello > /etc/motd\n")
    assert [kind for kind, _ in parts(shell)] == ["text/x-shellscript", "application/node.eks.aws"]
    assert "echo hello" in parts(shell)[0][1]
    yaml_config = (
        "apiVersion: node.eks.aws/v1alpha1\nkind: NodeConfig\n"
        "spec:\n  instance:\n    localStorage:\n      strategy: RAID0\n"
    )
    assert [kind for kind, _ in parts(render(custom_user_data=yaml_config))] == ["application/node.eks.aws"] * 2
    mime = render(custom_user_data=render(labels={"from": "user"}, taints=()))
    assert [kind for kind, _ in parts(mime)] == ["application/node.eks.aws"] * 2


def spec(**overrides: Any) -> LaunchTemplateSpec:
    args: dict[str, Any] = {
        "cluster_name": CLUSTER,
        "nodeclass_name": "default",
        "image_id": "ami-0123456789abcdef0",
        "instance_profile": "KarpenterNodeProfile",
        "security_group_ids": ("sg-0123456789abcdef0",),
        "user_data": render(),
        "capacity_type": "spot",
        "spec": {"amiFamily": "AL2023"},
        "tags": {"kubernetes.io/cluster/test-cluster": "owned", "team": "payments"},
    }
    args.update(overrides)
    return LaunchTemplateSpec(**args)


def test_template_requires_imdsv2_and_gets_the_default_encrypted_root_volume(aws: None) -> None:
    ec2 = boto3.client("ec2", region_name=REGION)
    name = LaunchTemplates(ec2=ec2).ensure(spec=spec())
    assert re.fullmatch(rf"nodesmith/{CLUSTER}/[0-9a-f]{{16}}", name)
    data = ec2.describe_launch_template_versions(LaunchTemplateName=name)["LaunchTemplateVersions"][0][
        "LaunchTemplateData"
    ]
    assert data["MetadataOptions"] == {
        "HttpEndpoint": "enabled",
        "HttpProtocolIpv6": "disabled",
        "HttpPutResponseHopLimit": 1,
        "HttpTokens": "required",
        "InstanceMetadataTags": "disabled",
    }
    assert data["BlockDeviceMappings"] == [
        {"DeviceName": "/dev/xvda", "Ebs": {"VolumeSize": 20, "VolumeType": "gp3", "Encrypted": True}}
    ]
    assert data["IamInstanceProfile"] == {"Name": "KarpenterNodeProfile"}
    assert data["SecurityGroupIds"] == ["sg-0123456789abcdef0"]
    assert data["ImageId"] == "ami-0123456789abcdef0"
    user_data = base64.b64decode(data["UserData"]).decode()
    assert node_config(user_data)["spec"]["cluster"]["name"] == CLUSTER
    assert "--node-labels=" in user_data and "dedicated" in user_data


def test_node_class_block_devices_and_metadata_options_are_used(aws: None) -> None:
    ec2 = boto3.client("ec2", region_name=REGION)
    nodeclass_spec = {
        "blockDeviceMappings": [
            {
                "deviceName": "/dev/xvda",
                "rootVolume": True,
                "ebs": {"volumeSize": "100Gi", "volumeType": "gp3", "iops": 4000},
            }
        ],
        "metadataOptions": {"httpPutResponseHopLimit": 2, "httpProtocolIPv6": "enabled"},
    }
    name = LaunchTemplates(ec2=ec2).ensure(spec=spec(spec=nodeclass_spec))
    data = ec2.describe_launch_template_versions(LaunchTemplateName=name)["LaunchTemplateVersions"][0][
        "LaunchTemplateData"
    ]
    assert data["BlockDeviceMappings"] == [
        {"DeviceName": "/dev/xvda", "Ebs": {"VolumeSize": 100, "VolumeType": "gp3", "Iops": 4000}}
    ]
    assert data["MetadataOptions"]["HttpPutResponseHopLimit"] == 2
    assert data["MetadataOptions"]["HttpProtocolIpv6"] == "enabled"
    assert data["MetadataOptions"]["HttpTokens"] == "required"


def test_ensure_is_idempotent_and_names_follow_content(aws: None) -> None:
    ec2 = boto3.client("ec2", region_name=REGION)
    first = LaunchTemplates(ec2=ec2).ensure(spec=spec())
    # Another process (fresh cache) finds the existing template instead of failing or duplicating.
    assert LaunchTemplates(ec2=ec2).ensure(spec=spec()) == first
    other = LaunchTemplates(ec2=ec2).ensure(spec=spec(user_data=render(labels={"team": "search"})))
    assert other != first
    names = sorted(t["LaunchTemplateName"] for t in ec2.describe_launch_templates()["LaunchTemplates"])
    assert names == sorted([first, other])
    assert sorted(LaunchTemplates(ec2=ec2).delete_all(cluster_name=CLUSTER)) == names
    assert ec2.describe_launch_templates()["LaunchTemplates"] == []


def test_the_primary_interface_carries_prefixes_connection_tracking_and_the_public_address(aws: None) -> None:
    ec2 = boto3.client("ec2", region_name=REGION)
    nodeclass_spec = {
        "amiFamily": "AL2023",
        "ipPrefixCount": 2,
        "connectionTracking": {"tcpEstablishedTimeout": 3600, "udpTimeout": 30},
        "associatePublicIPAddress": False,
    }
    name = LaunchTemplates(ec2=ec2).ensure(spec=spec(spec=nodeclass_spec))
    data = ec2.describe_launch_template_versions(LaunchTemplateName=name)["LaunchTemplateVersions"][0][
        "LaunchTemplateData"
    ]
    [interface] = data["NetworkInterfaces"]
    assert interface["DeviceIndex"] == 0
    assert interface["Groups"] == ["sg-0123456789abcdef0"]
    assert interface["AssociatePublicIpAddress"] is False
    assert interface["Ipv4PrefixCount"] == 2
    assert interface["ConnectionTrackingSpecification"] == {"TcpEstablishedTimeout": 3600, "UdpTimeout": 30}
    assert "SecurityGroupIds" not in data

    plain = LaunchTemplates(ec2=ec2).ensure(spec=spec())
    plain_data = ec2.describe_launch_template_versions(LaunchTemplateName=plain)["LaunchTemplateVersions"][0][
        "LaunchTemplateData"
    ]
    assert "NetworkInterfaces" not in plain_data
    assert plain_data["SecurityGroupIds"] == ["sg-0123456789abcdef0"]


def test_nested_virtualization_is_a_cpu_option_of_the_template(aws: None) -> None:
    ec2 = boto3.client("ec2", region_name=REGION)
    name = LaunchTemplates(ec2=ec2).ensure(
        spec=spec(spec={"amiFamily": "AL2023", "cpuOptions": {"nestedVirtualization": "enabled"}})
    )
    data = ec2.describe_launch_template_versions(LaunchTemplateName=name)["LaunchTemplateVersions"][0][
        "LaunchTemplateData"
    ]
    assert data["CpuOptions"] == {"NestedVirtualization": "enabled"}
