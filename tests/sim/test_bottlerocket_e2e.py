"""Bottlerocket end to end, through the real reconcile handler on the embedded AWS and Kubernetes: an EC2NodeClass
selecting ``bottlerocket@latest`` reports Bottlerocket's images in its status, and a pending pod runs on a node
launched from one with Bottlerocket's settings as user data; an EC2NodeClass whose AMI family Nodesmith cannot
bootstrap is not ready, says why, and launches nothing."""

from __future__ import annotations

import base64
import tomllib
from typing import TYPE_CHECKING, Any

import pytest
from embedded_world import demo_nodeclass, nodeclass_conditions, running, until

from nodesmith.cli.world import MANIFESTS, EmbeddedWorld

if TYPE_CHECKING:
    from collections.abc import Iterator

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("embedded-world")]

NODECLASSES = "ec2nodeclasses.karpenter.k8s.aws"
NODECLAIMS = "nodeclaims.karpenter.sh"


def nodeclass(**spec: Any) -> dict[str, Any]:
    changed = demo_nodeclass()
    changed["spec"].pop("amiFamily", None)
    changed["spec"].update(spec)
    return changed


@pytest.fixture
def world() -> Iterator[EmbeddedWorld]:
    with EmbeddedWorld(ready_delay=0.0) as w:
        w.apply_file(MANIFESTS / "nodepool.yaml")
        w.apply_file(MANIFESTS / "inflate.yaml")
        yield w


def images(world: EmbeddedWorld, name: str) -> set[str]:
    found = world.client("ec2").describe_images(Filters=[{"Name": "name", "Values": [name]}])["Images"]
    return {i["ImageId"] for i in found}


def test_a_pod_runs_on_a_bottlerocket_node(world: EmbeddedWorld) -> None:
    world.store.apply(nodeclass(amiSelectorTerms=[{"alias": "bottlerocket@latest"}]))
    world.scale(deployment="inflate", replicas=1)

    assert until(world, lambda: running(world) == 1, timeout=60), "the pod never ran"

    bottlerocket = images(world, "bottlerocket-aws-k8s-*")
    status = world.store.get(NODECLASSES, "default")["status"]
    assert {a["id"] for a in status["amis"]} == bottlerocket
    [claim] = world.store.objects(NODECLAIMS)
    assert claim["status"]["imageID"] in bottlerocket
    ec2 = world.client("ec2")
    instance_id = claim["status"]["providerID"].rsplit("/", 1)[1]
    [instance] = ec2.describe_instances(InstanceIds=[instance_id])["Reservations"][0]["Instances"]
    assert instance["ImageId"] == claim["status"]["imageID"]
    attribute = ec2.describe_instance_attribute(InstanceId=instance_id, Attribute="userData")
    settings = tomllib.loads(base64.b64decode(attribute["UserData"]["Value"]).decode())["settings"]["kubernetes"]
    assert settings["node-labels"]["karpenter.sh/nodepool"] == "default"
    assert settings["node-labels"]["karpenter.k8s.aws/ec2nodeclass"] == "default"  # the nodeClassRef, as Karpenter
    [node] = [n for n in world.store.objects("nodes") if n["spec"].get("providerID") == claim["status"]["providerID"]]
    assert node["metadata"]["labels"]["karpenter.k8s.aws/ec2nodeclass"] == "default"


def test_a_family_nodesmith_cannot_bootstrap_launches_nothing_and_says_why(world: EmbeddedWorld) -> None:
    [image] = images(world, "amazon-eks-node-al2023-x86_64-standard-*")
    world.store.apply(nodeclass(amiFamily="AL2", amiSelectorTerms=[{"id": image}]))
    world.scale(deployment="inflate", replicas=1)

    world.reconcile()

    got = nodeclass_conditions(world)
    assert (got["AMIsReady"]["status"], got["AMIsReady"]["reason"]) == ("False", "UnsupportedAMIFamily")
    assert "AL2" in got["AMIsReady"]["message"]
    assert got["Ready"]["status"] == "False"
    assert world.store.objects(NODECLAIMS) == []
