"""EC2NodeClass selector terms resolve against EC2 like Karpenter's, and a miss says what missed."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import boto3
import pytest
from ec2_support import CLUSTER, REGION, nodeclass, resolver

from nodesmith.adapters.aws.config import AwsClients, Clocks, NodeLaunchSettings
from nodesmith.adapters.aws.nodeclass import NodeClassResolver, root_volume_bytes, ssm_alias_parameter
from nodesmith.core.errors import NodeClassNotReadyError

if TYPE_CHECKING:
    from nodesmith.sim.aws import SeededAws


def test_discovery_tags_select_one_subnet_per_zone_the_group_and_alias_amis(seeded: SeededAws) -> None:
    resolved = resolver().resolve(nodeclass=nodeclass())
    assert {z: s.id for z, s in resolved.subnets.items()} == dict(seeded.subnets)
    assert all(s.zone_id.startswith("use1-az") for s in resolved.subnets.values())
    assert [g.id for g in resolved.security_groups] == [seeded.security_group_id]
    got = {(i.arch, i.variant): i.id for i in resolved.images}
    assert got == {
        ("amd64", "standard"): seeded.images[("x86_64", "standard")],
        ("amd64", "nvidia"): seeded.images[("x86_64", "nvidia")],
        ("amd64", "neuron"): seeded.images[("x86_64", "neuron")],
        ("arm64", "standard"): seeded.images[("arm64", "standard")],
        ("arm64", "nvidia"): seeded.images[("arm64", "nvidia")],
    }
    assert resolved.root_volume_bytes == 20 * 2**30


def test_the_subnet_with_most_free_addresses_wins_in_a_zone(seeded: SeededAws, ec2: Any) -> None:
    small = ec2.create_subnet(VpcId=seeded.vpc_id, CidrBlock="10.0.192.0/28", AvailabilityZone="us-east-1a")["Subnet"]
    ec2.create_tags(Resources=[small["SubnetId"]], Tags=[{"Key": "karpenter.sh/discovery", "Value": CLUSTER}])
    resolved = resolver().resolve(nodeclass=nodeclass())
    assert resolved.subnets["us-east-1a"].id == seeded.subnets["us-east-1a"]  # the /18, not the /28
    only_small = resolver().resolve(nodeclass=nodeclass(subnet_terms=[{"id": small["SubnetId"]}]))
    assert list(only_small.subnets) == ["us-east-1a"]


def test_wildcard_tag_values_ids_and_names(seeded: SeededAws) -> None:
    resolved = resolver().resolve(
        nodeclass=nodeclass(
            subnet_terms=[{"tags": {"karpenter.sh/discovery": "*"}}],
            sg_terms=[{"name": f"{CLUSTER}-node"}],
            ami_terms=[{"id": seeded.images[("arm64", "standard")]}],
            amiFamily="AL2023",
        )
    )
    assert set(resolved.subnets) == {"us-east-1a", "us-east-1b", "us-east-1c"}
    assert [g.id for g in resolved.security_groups] == [seeded.security_group_id]
    assert [(i.id, i.arch, i.variant) for i in resolved.images] == [(seeded.images[("arm64", "standard")], "arm64", "")]
    by_id = resolver().resolve(nodeclass=nodeclass(sg_terms=[{"id": seeded.security_group_id}]))
    assert [g.id for g in by_id.security_groups] == [seeded.security_group_id]


def test_ami_tags_pick_the_newest_image_per_architecture(seeded: SeededAws, ec2: Any) -> None:
    from moto.ec2.models import ec2_backends

    backend = ec2_backends["123456789012"][REGION]
    older, newer = (backend.amis[seeded.images[("x86_64", v)]] for v in ("nvidia", "standard"))
    older.creation_date = datetime(2026, 1, 1, tzinfo=UTC)
    newer.creation_date = datetime(2026, 2, 1, tzinfo=UTC)
    for image in (older, newer):
        ec2.create_tags(Resources=[image.id], Tags=[{"Key": "team", "Value": "ml"}])
    resolved = resolver().resolve(nodeclass=nodeclass(ami_terms=[{"tags": {"team": "ml"}}], amiFamily="AL2023"))
    assert [(i.id, i.arch) for i in resolved.images] == [(newer.id, "amd64")]


def test_pinned_alias_reads_the_versioned_parameter(seeded: SeededAws) -> None:
    resolved = resolver().resolve(nodeclass=nodeclass(ami_terms=[{"alias": "al2023@v20260101"}]))
    assert seeded.images[("x86_64", "standard")] in {i.id for i in resolved.images}
    assert ssm_alias_parameter(k8s_version="1.31", arch="arm64", variant="standard", version="v20240625") == (
        "/aws/service/eks/optimized-ami/1.31/amazon-linux-2023/arm64/standard/"
        "amazon-eks-node-al2023-arm64-standard-1.31-v20240625/image_id"
    )


def test_nothing_matching_is_one_error_naming_each_selector(seeded: SeededAws) -> None:
    nc = nodeclass(
        subnet_terms=[{"tags": {"karpenter.sh/discovery": "other-cluster"}}],
        sg_terms=[{"id": "sg-0000000000000000"}],
        ami_terms=[{"alias": "al2023@v19990101"}],
    )
    with pytest.raises(NodeClassNotReadyError) as info:
        resolver().resolve(nodeclass=nc)
    message = str(info.value)
    assert message.startswith("EC2NodeClass default is not ready:")
    assert 'subnetSelectorTerms [{"tags":{"karpenter.sh/discovery":"other-cluster"}}]' in message
    assert 'securityGroupSelectorTerms [{"id":"sg-0000000000000000"}]' in message
    assert "alias 'al2023@v19990101': no SSM parameter for Kubernetes 1.31" in message


def test_role_gets_the_configured_profile_or_one_created_for_it(seeded: SeededAws) -> None:
    configured = resolver(instance_profile=seeded.instance_profile, role_for_profile=seeded.node_role_arn)
    assert configured.resolve(nodeclass=nodeclass()).instance_profile == seeded.instance_profile

    iam = boto3.client("iam", region_name=REGION)
    iam.create_role(RoleName="OtherNodeRole", AssumeRolePolicyDocument="{}")
    created = configured.resolve(nodeclass=nodeclass(name="other", role="OtherNodeRole")).instance_profile
    assert created.startswith(f"nodesmith_{CLUSTER}_")
    roles = iam.get_instance_profile(InstanceProfileName=created)["InstanceProfile"]["Roles"]
    assert [r["RoleName"] for r in roles] == ["OtherNodeRole"]
    # Idempotent across processes: a new resolver finds the profile it would create.
    again = resolver().resolve(nodeclass=nodeclass(name="other", role="OtherNodeRole")).instance_profile
    assert again == created
    explicit = resolver().resolve(nodeclass=nodeclass(instanceProfile="MyProfile")).instance_profile
    assert explicit == "MyProfile"


def test_results_are_cached_per_spec_for_a_minute(seeded: SeededAws) -> None:
    now = [0.0]
    r = NodeClassResolver(
        cluster_name=CLUSTER,
        kubernetes_version="1.31",
        clients=AwsClients(ec2=boto3.client("ec2", region_name=REGION), ssm=boto3.client("ssm", region_name=REGION)),
        launch=NodeLaunchSettings(instance_profile="p"),
        clocks=Clocks(monotonic=lambda: now[0]),
    )
    first = r.resolve(nodeclass=nodeclass())
    assert r.resolve(nodeclass=nodeclass()) is first
    assert r.resolve(nodeclass=nodeclass(tags={"team": "a"})) is not first  # another spec
    now[0] += 61
    assert r.resolve(nodeclass=nodeclass()) is not first


def test_root_volume_size_comes_from_the_root_mapping() -> None:
    spec = {
        "blockDeviceMappings": [
            {"deviceName": "/dev/xvdb", "ebs": {"volumeSize": "200Gi"}},
            {"deviceName": "/dev/xvda", "rootVolume": True, "ebs": {"volumeSize": "100Gi"}},
        ]
    }
    assert root_volume_bytes(spec) == 100 * 2**30
    assert (
        root_volume_bytes({"blockDeviceMappings": [{"deviceName": "/dev/xvda", "ebs": {"volumeSize": "50G"}}]})
        == 50 * 10**9
    )
    assert root_volume_bytes({}) == 20 * 2**30


def test_readiness_checks_name_the_part_that_did_not_resolve_with_karpenters_reason(seeded: SeededAws) -> None:
    ready = resolver(instance_profile=seeded.instance_profile).checks(nodeclass=nodeclass())
    assert [(c.type, c.ok) for c in ready] == [
        ("SubnetsReady", True),
        ("SecurityGroupsReady", True),
        ("AMIsReady", True),
        ("InstanceProfileReady", True),
        ("ValidationSucceeded", True),
        ("CapacityReservationsReady", True),
    ]
    broken = resolver(instance_profile=seeded.instance_profile).checks(
        nodeclass=nodeclass(
            subnet_terms=[{"tags": {"karpenter.sh/discovery": "other-cluster"}}],
            ami_terms=[{"alias": "al2023@v19990101"}],
        )
    )
    failed = {c.type: (c.reason, c.message) for c in broken if not c.ok}
    assert set(failed) == {"SubnetsReady", "AMIsReady"}
    reason, message = failed["SubnetsReady"]
    assert reason == "SubnetsNotFound"
    assert message.startswith("SubnetSelector did not match any Subnets")
    assert '{"tags":{"karpenter.sh/discovery":"other-cluster"}}' in message
    assert failed["AMIsReady"][0] == "AMINotFound"
    assert "al2023@v19990101" in failed["AMIsReady"][1]


def test_readiness_checks_leave_out_capacity_reservations_with_the_gate_off(seeded: SeededAws) -> None:
    gate_off = NodeClassResolver(
        cluster_name=CLUSTER,
        kubernetes_version="1.31",
        clients=AwsClients(ec2=boto3.client("ec2", region_name=REGION), ssm=boto3.client("ssm", region_name=REGION)),
        launch=NodeLaunchSettings(instance_profile=seeded.instance_profile, reserved_capacity=False),
    )
    checks = gate_off.checks(nodeclass=nodeclass(sg_terms=[{"id": "sg-0000000000000000"}]))
    assert [c.type for c in checks] == [
        "SubnetsReady",
        "SecurityGroupsReady",
        "AMIsReady",
        "InstanceProfileReady",
        "ValidationSucceeded",
    ]
    [failed] = [c for c in checks if not c.ok]
    assert (failed.type, failed.reason) == ("SecurityGroupsReady", "SecurityGroupsNotFound")


def test_readiness_checks_never_call_a_part_ready_when_the_failure_names_none(
    seeded: SeededAws, monkeypatch: pytest.MonkeyPatch
) -> None:
    unready = resolver(instance_profile=seeded.instance_profile)

    def unnamed(*_: Any) -> None:
        raise NodeClassNotReadyError("EC2NodeClass default is not ready: something")

    monkeypatch.setattr(unready, "subnets", unnamed)
    with pytest.raises(NodeClassNotReadyError, match="something"):
        unready.checks(nodeclass=nodeclass())


def test_resolution_reports_every_selected_subnet_and_the_alias_amis_by_their_names(
    seeded: SeededAws, ec2: Any
) -> None:
    small = ec2.create_subnet(VpcId=seeded.vpc_id, CidrBlock="10.0.192.0/28", AvailabilityZone="us-east-1a")["Subnet"]
    ec2.create_tags(Resources=[small["SubnetId"]], Tags=[{"Key": "karpenter.sh/discovery", "Value": CLUSTER}])
    found = resolver(instance_profile=seeded.instance_profile).resolution(nodeclass=nodeclass())
    assert found.subnets is not None
    assert {s.id for s in found.subnets} == {*seeded.subnets.values(), small["SubnetId"]}
    assert found.images is not None
    names = {(i.arch, i.variant): i.name for i in found.images}
    assert names[("arm64", "nvidia")] == "amazon-eks-node-al2023-arm64-nvidia-1.31-v20260101"
    assert all(i.creation_date for i in found.images)
    assert found.instance_profile == seeded.instance_profile
    assert all(c.ok for c in found.checks)


def test_resolution_of_a_class_that_does_not_resolve_keeps_the_parts_that_did(seeded: SeededAws) -> None:
    found = resolver(instance_profile=seeded.instance_profile).resolution(
        nodeclass=nodeclass(subnet_terms=[{"tags": {"karpenter.sh/discovery": "other-cluster"}}])
    )
    assert found.subnets == ()
    assert [g.id for g in found.security_groups or ()] == [seeded.security_group_id]
    assert len(found.images or ()) == 5
    assert [c.type for c in found.checks if not c.ok] == ["SubnetsReady"]
    unsupported = resolver(instance_profile=seeded.instance_profile).resolution(
        nodeclass=nodeclass(ami_terms=[{"alias": "windows2022@latest"}])
    )
    assert unsupported.images is None  # not told: the status keeps its AMIs, as Karpenter's does
    assert [(c.type, c.reason) for c in unsupported.checks if not c.ok] == [("AMIsReady", "UnsupportedAMIFamily")]
