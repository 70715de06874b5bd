"""A Bottlerocket EC2NodeClass against the embedded EC2: ``bottlerocket@...`` aliases resolve through Bottlerocket's
SSM parameters (standard, NVIDIA and Neuron images per architecture), the ephemeral storage is the data volume's,
a launch gets Bottlerocket's two default volumes and its settings TOML, and families without a bootstrap leave the
class not ready instead of launching nodes that would never join."""

from __future__ import annotations

import base64
import tomllib
from typing import TYPE_CHECKING, Any

import pytest
from ec2_support import CLUSTER, nodeclass, resolver, seeded_provider

from nodesmith.adapters.aws.nodeclass import root_volume_bytes
from nodesmith.core.errors import LaunchError, NodeClassNotReadyError
from nodesmith.core.ports import LaunchRequest
from nodesmith.sim.aws import SeededAws, write_price_table

if TYPE_CHECKING:
    from pathlib import Path

GIB = 2**30
BOTTLEROCKET = [{"alias": "bottlerocket@latest"}]


@pytest.mark.parametrize("version", ["latest", "v1.46.0", "1.46.0"])
def test_a_bottlerocket_alias_resolves_every_architecture_and_variant(seeded: SeededAws, version: str) -> None:
    resolved = resolver().resolve(nodeclass=nodeclass(ami_terms=[{"alias": f"bottlerocket@{version}"}]))
    images = seeded.bottlerocket_images
    assert {(i.arch, i.variant): i.id for i in resolved.images} == {
        ("amd64", "standard"): images[("x86_64", "standard")],
        ("amd64", "neuron"): images[("x86_64", "standard")],  # Bottlerocket's standard x86_64 image boots Neuron
        ("amd64", "nvidia"): images[("x86_64", "nvidia")],
        ("arm64", "standard"): images[("arm64", "standard")],
        ("arm64", "nvidia"): images[("arm64", "nvidia")],
    }
    assert all(i.name.startswith("bottlerocket-aws-k8s-1.31") for i in resolved.images)
    assert resolved.root_volume_bytes == 20 * GIB  # /dev/xvdb, the data volume


def test_a_bottlerocket_release_nobody_published_leaves_the_amis_not_ready(seeded: SeededAws) -> None:
    with pytest.raises(NodeClassNotReadyError, match="no SSM parameter") as failed:
        resolver().resolve(nodeclass=nodeclass(ami_terms=[{"alias": "bottlerocket@v1.2.3"}]))
    assert "/aws/service/bottlerocket/aws-k8s-1.31/" in str(failed.value)


@pytest.mark.parametrize(
    ("terms", "family"),
    [([{"alias": "al2@latest"}], "AL2"), ([{"alias": "windows2022@latest"}], "Windows2022")],
)
def test_a_family_without_a_bootstrap_is_not_ready_and_says_why(
    seeded: SeededAws, terms: list[dict[str, Any]], family: str
) -> None:
    parts = resolver().resolution(nodeclass=nodeclass(ami_terms=terms))
    [(kind, reason, message)] = [(c.type, c.reason, c.message) for c in parts.checks if not c.ok]
    assert (kind, reason) == ("AMIsReady", "UnsupportedAMIFamily")
    assert family in message and "never join" in message


def test_bottlerocket_ephemeral_storage_is_the_data_volume() -> None:
    def spec(*mappings: dict[str, Any]) -> dict[str, Any]:
        return {"amiFamily": "Bottlerocket", "blockDeviceMappings": list(mappings)}

    os_volume = {"deviceName": "/dev/xvda", "ebs": {"volumeSize": "4Gi"}}
    data_volume = {"deviceName": "/dev/xvdb", "ebs": {"volumeSize": "100Gi"}}
    assert root_volume_bytes(spec(os_volume, data_volume)) == 100 * GIB
    assert root_volume_bytes(spec(os_volume)) == 20 * GIB  # the default data volume
    assert root_volume_bytes(spec({**os_volume, "rootVolume": True}, data_volume)) == 4 * GIB
    assert root_volume_bytes({"amiFamily": "AL2023", "blockDeviceMappings": [data_volume]}) == 20 * GIB
    custom = {"amiFamily": "Custom", "blockDeviceMappings": [os_volume, data_volume]}
    assert root_volume_bytes(custom) == 100 * GIB  # Karpenter: a Custom AMI's last mapping


def test_a_bottlerocket_launch_boots_its_image_with_two_volumes_and_its_settings(
    seeded: SeededAws, ec2: Any, tmp_path: Path
) -> None:
    cloud = seeded_provider(
        seeded, types=("m5.large",), price_table=write_price_table(path=tmp_path / "prices.json", source=None)
    )
    nc = nodeclass(ami_terms=BOTTLEROCKET, kubelet={"maxPods": 58})
    types = tuple(cloud.instance_types(nodeclass=nc))
    result = cloud.create(
        request=LaunchRequest(
            nodeclaim_name="default-br001", nodepool_name="default", nodeclass=nc, instance_types=types,
            capacity_types=frozenset({"on-demand"}), zones=frozenset({"us-east-1a"}), client_token="default-br001",
            labels={"team": "search"},
        )
    )  # fmt: skip

    assert result.image_id == seeded.bottlerocket_images[("x86_64", "standard")]
    versions = ec2.describe_launch_template_versions(LaunchTemplateName=result.launch_template_name)
    data = versions["LaunchTemplateVersions"][0]["LaunchTemplateData"]
    assert [(m["DeviceName"], m["Ebs"]["VolumeSize"]) for m in data["BlockDeviceMappings"]] == [
        ("/dev/xvda", 4),
        ("/dev/xvdb", 20),
    ]
    settings = tomllib.loads(base64.b64decode(data["UserData"]).decode())["settings"]["kubernetes"]
    assert settings["cluster-name"] == CLUSTER
    assert settings["max-pods"] == 58
    assert settings["node-labels"]["team"] == "search"
    assert settings["node-labels"]["karpenter.sh/capacity-type"] == "on-demand"


def test_connection_tracking_and_nested_virtualization_narrow_the_types_a_class_launches(
    seeded: SeededAws, tmp_path: Path
) -> None:
    cloud = seeded_provider(
        seeded,
        types=("m4.large", "m5.large", "c7i.large"),
        price_table=write_price_table(path=tmp_path / "prices.json", source=None),
    )

    def launchable(nc: Any) -> set[str]:
        return {it.name for it in cloud.instance_types(nodeclass=nc) if any(o.available for o in it.offerings)}

    assert launchable(nodeclass()) == {"m4.large", "m5.large", "c7i.large"}
    # Karpenter compatibility.go: connection tracking needs the Nitro System (m4 is Xen) ...
    assert launchable(nodeclass(connectionTracking={"udpTimeout": 30})) == {"m5.large", "c7i.large"}
    # ... and nested virtualization a processor that reports it (EC2 ProcessorInfo.SupportedFeatures).
    assert launchable(nodeclass(cpuOptions={"nestedVirtualization": "enabled"})) == {"c7i.large"}
    assert launchable(nodeclass(cpuOptions={"nestedVirtualization": "disabled"})) == {
        "m4.large",
        "m5.large",
        "c7i.large",
    }


def test_user_data_bottlerocket_cannot_read_fails_the_launch_naming_the_class(
    seeded: SeededAws, tmp_path: Path
) -> None:
    cloud = seeded_provider(
        seeded, types=("m5.large",), price_table=write_price_table(path=tmp_path / "prices.json", source=None)
    )
    nc = nodeclass(ami_terms=BOTTLEROCKET, userData="#!/bin/bash\necho not toml\n")
    with pytest.raises(
        LaunchError, match="user data for EC2NodeClass default: userData is not Bottlerocket TOML"
    ) as failed:
        cloud.create(
            request=LaunchRequest(
                nodeclaim_name="default-br002", nodepool_name="default", nodeclass=nc,
                instance_types=tuple(cloud.instance_types(nodeclass=nc)), capacity_types=frozenset({"on-demand"}),
                zones=frozenset({"us-east-1a"}), client_token="default-br002",
            )
        )  # fmt: skip
    assert failed.value.code == "InvalidUserData"


def test_kubelet_settings_bottlerocket_would_drop_leave_the_class_not_ready_and_say_which(seeded: SeededAws) -> None:
    kubelet = {"maxPods": 58, "podsPerCore": 4, "containerLogMaxSize": "50Mi", "clusterDNS": ["10.0.0.10", "10.0.0.11"]}
    parts = resolver().resolution(nodeclass=nodeclass(ami_terms=BOTTLEROCKET, kubelet=kubelet))
    [(kind, reason, message)] = [(c.type, c.reason, c.message) for c in parts.checks if not c.ok]
    assert (kind, reason) == ("ValidationSucceeded", "UnsupportedKubeletConfiguration")
    assert "silently dropped: containerLogMaxSize, podsPerCore" in message
    assert "clusterDNS" in message and "2 were set" in message

    # AL2023 passes every kubelet field through; Bottlerocket takes the fields Karpenter maps.
    assert all(c.ok for c in resolver().resolution(nodeclass=nodeclass(kubelet=kubelet)).checks)
    mapped = {"maxPods": 58, "clusterDNS": ["10.0.0.10"], "evictionHard": {"memory.available": "5%"}}
    assert all(c.ok for c in resolver().resolution(nodeclass=nodeclass(ami_terms=BOTTLEROCKET, kubelet=mapped)).checks)
