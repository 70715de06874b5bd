"""An EC2NodeClass's resolved status end to end, through the real reconcile handler on the embedded AWS and
Kubernetes: after a pass ``status.subnets``, ``securityGroups``, ``amis`` and ``instanceProfile`` say what EC2, SSM
and IAM have, in Karpenter's orders; a pass that finds nothing new writes nothing; a subnet selector that stops
matching removes ``status.subnets`` and keeps the other parts."""

from __future__ import annotations

import copy
from typing import TYPE_CHECKING, Any

import pytest
from embedded_world import demo_nodeclass

from nodesmith.adapters.aws.amis import ssm_alias_parameter
from nodesmith.cli.world import MANIFESTS, EmbeddedWorld

if TYPE_CHECKING:
    from collections.abc import Iterator

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("embedded-world")]

NODECLASSES = "ec2nodeclasses.karpenter.k8s.aws"
ALIAS_VARIANTS = {"x86_64": ("standard", "nvidia", "neuron"), "arm64": ("standard", "nvidia")}


@pytest.fixture
def world() -> Iterator[EmbeddedWorld]:
    with EmbeddedWorld(ready_delay=0.0) as w:
        w.apply_file(MANIFESTS / "nodepool.yaml")
        yield w


def status(world: EmbeddedWorld) -> dict[str, Any]:
    return dict(world.store.get(NODECLASSES, "default").get("status") or {})


def discovery(world: EmbeddedWorld) -> list[dict[str, Any]]:
    return [{"Name": "tag:karpenter.sh/discovery", "Values": [world.cluster_name]}]


def test_the_resolved_parts_match_what_aws_has_and_an_unchanged_pass_writes_nothing(world: EmbeddedWorld) -> None:
    ec2, ssm = world.client("ec2"), world.client("ssm")
    world.reconcile()
    got = status(world)

    subnets = ec2.describe_subnets(Filters=discovery(world))["Subnets"]
    subnets.sort(key=lambda s: (-s["AvailableIpAddressCount"], s["SubnetId"]))
    assert got["subnets"] == [
        {"id": s["SubnetId"], "zone": s["AvailabilityZone"], "zoneID": s["AvailabilityZoneId"]} for s in subnets
    ]
    groups = sorted(
        ec2.describe_security_groups(Filters=discovery(world))["SecurityGroups"], key=lambda g: g["GroupId"]
    )
    assert got["securityGroups"] == [{"id": g["GroupId"], "name": g["GroupName"]} for g in groups]

    by_id = {a["id"]: a for a in got["amis"]}
    for arch, variants in ALIAS_VARIANTS.items():
        for variant in variants:
            name = ssm_alias_parameter(k8s_version="1.31", arch=arch, variant=variant, version="latest")
            image_id = ssm.get_parameter(Name=name)["Parameter"]["Value"]
            [image] = ec2.describe_images(ImageIds=[image_id])["Images"]
            assert by_id[image_id]["name"] == image["Name"]
            kube_arch = {"x86_64": "amd64", "arm64": "arm64"}[arch]
            assert {"key": "kubernetes.io/arch", "operator": "In", "values": [kube_arch]} in by_id[image_id][
                "requirements"
            ]
    assert len(got["amis"]) == 5
    gpu = [
        a["id"]
        for a in got["amis"]
        if {"key": "karpenter.k8s.aws/instance-gpu-count", "operator": "Exists"} in a["requirements"]
    ]
    assert len(gpu) == 2

    profile = world.client("iam").get_instance_profile(InstanceProfileName=got["instanceProfile"])["InstanceProfile"]
    assert [r["RoleName"] for r in profile["Roles"]] == [demo_nodeclass()["spec"]["role"]]

    version = world.store.get(NODECLASSES, "default")["metadata"]["resourceVersion"]
    world.reconcile()
    assert world.store.get(NODECLASSES, "default")["metadata"]["resourceVersion"] == version


def test_a_subnet_selector_matching_nothing_removes_the_subnets_and_keeps_the_other_parts(
    world: EmbeddedWorld,
) -> None:
    world.reconcile()
    before = status(world)
    broken = copy.deepcopy(demo_nodeclass())
    broken["spec"]["subnetSelectorTerms"] = [{"tags": {"karpenter.sh/discovery": "no-such-cluster"}}]
    world.store.apply(broken)

    world.reconcile()

    after = status(world)
    assert "subnets" not in after
    for part in ("securityGroups", "amis", "instanceProfile"):
        assert after[part] == before[part], part
