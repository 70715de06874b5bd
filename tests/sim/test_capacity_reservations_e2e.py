"""Capacity reservations end to end, through the real reconcile and termination handlers on the embedded AWS and
Kubernetes: a pod lands in the On-Demand Capacity Reservation its EC2NodeClass selects (labelled ``reserved`` with the
reservation's id and type, the EC2NodeClass's ``status.capacityReservations`` written); when the reservation turns
out full at launch (``ReservationCapacityExceeded``) the NodeClaim pinned to it fails and the pass, solving again,
falls back to spot; a Capacity Block's node is
drained and terminated once the block is within 40 minutes of its end, its pod running again elsewhere; and a node in
an interruptible ODCR is labelled so, and drained and removed when EC2 warns that the reservation's owner reclaims
it."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

import pytest
from embedded_world import app_pods, deliver, event_body, put_event, running, state, until

from nodesmith.cli.world import MANIFESTS, EmbeddedWorld
from nodesmith.sim.aws_capacity_reservations import add_capacity_block, set_end_time, set_interruptible

if TYPE_CHECKING:
    from collections.abc import Iterator

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("embedded-world")]

CLAIMS = "nodeclaims.karpenter.sh"
RESERVATION_ID = "karpenter.k8s.aws/capacity-reservation-id"
RESERVATION_TYPE = "karpenter.k8s.aws/capacity-reservation-type"
CAPACITY_TYPE = "karpenter.sh/capacity-type"
INTERRUPTIBLE = "karpenter.k8s.aws/capacity-reservation-interruptible"


def _pool(terms: list[dict[str, Any]]) -> list[dict[str, Any]]:
    pool: dict[str, Any] = {
        "apiVersion": "karpenter.sh/v1",
        "kind": "NodePool",
        "metadata": {"name": "default"},
        "spec": {
            "template": {
                "spec": {
                    "requirements": [
                        {"key": "karpenter.k8s.aws/instance-family", "operator": "In", "values": ["m5", "c5"]},
                        {
                            "key": "karpenter.sh/capacity-type",
                            "operator": "In",
                            "values": ["reserved", "spot", "on-demand"],
                        },
                    ],
                    "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
                }
            },
            "disruption": {"consolidationPolicy": "WhenEmpty", "consolidateAfter": "Never"},
        },
    }
    nodeclass: dict[str, Any] = {
        "apiVersion": "karpenter.k8s.aws/v1",
        "kind": "EC2NodeClass",
        "metadata": {"name": "default"},
        "spec": {
            "role": "KarpenterNodeRole-demo",
            "amiSelectorTerms": [{"alias": "al2023@latest"}],
            "subnetSelectorTerms": [{"tags": {"karpenter.sh/discovery": "demo"}}],
            "securityGroupSelectorTerms": [{"tags": {"karpenter.sh/discovery": "demo"}}],
            "capacityReservationSelectorTerms": terms,
        },
    }
    return [pool, nodeclass]


@pytest.fixture
def world() -> Iterator[EmbeddedWorld]:
    with EmbeddedWorld(ready_delay=0.0) as w:
        w.apply_file(MANIFESTS / "inflate.yaml")
        yield w


def _odcr(world: EmbeddedWorld, *, count: int, zone: str = "us-east-1a") -> str:
    answer = world.client("ec2").create_capacity_reservation(
        InstanceType="m5.large", InstancePlatform="Linux/UNIX", AvailabilityZone=zone, InstanceCount=count,
        InstanceMatchCriteria="targeted",
        TagSpecifications=[{"ResourceType": "capacity-reservation", "Tags": [{"Key": "team", "Value": "ml"}]}],
    )  # fmt: skip
    return str(answer["CapacityReservation"]["CapacityReservationId"])


def _apply(world: EmbeddedWorld, terms: list[dict[str, Any]]) -> None:
    for doc in _pool(terms):
        world.store.apply(doc)


def _claims(world: EmbeddedWorld) -> list[dict[str, Any]]:
    return [c for c in world.store.objects(CLAIMS) if (c.get("status") or {}).get("providerID")]


def _labels(claim: dict[str, Any]) -> dict[str, str]:
    return dict(claim["metadata"].get("labels") or {})


def _take_slot(world: EmbeddedWorld, reservation: str, zone: str) -> None:
    """Someone else launches into the reservation (a workload outside the cluster)."""
    ec2 = world.client("ec2")
    image = ec2.describe_images(Filters=[{"Name": "name", "Values": ["amazon-eks-node-al2023-x86_64-standard-*"]}])
    ec2.create_launch_template(
        LaunchTemplateName="outside",
        LaunchTemplateData={
            "ImageId": image["Images"][0]["ImageId"],
            "CapacityReservationSpecification": {
                "CapacityReservationPreference": "capacity-reservations-only",
                "CapacityReservationTarget": {"CapacityReservationId": reservation},
            },
        },
    )
    answer = ec2.create_fleet(
        Type="instant",
        TargetCapacitySpecification={"TotalTargetCapacity": 1, "DefaultTargetCapacityType": "on-demand"},
        LaunchTemplateConfigs=[
            {
                "LaunchTemplateSpecification": {"LaunchTemplateName": "outside", "Version": "$Latest"},
                "Overrides": [{"InstanceType": "m5.large", "AvailabilityZone": zone}],
            }
        ],
    )
    assert answer["Instances"], answer


def _moved_off(world: EmbeddedWorld, instance_id: str, pod_node: str) -> bool:
    """The instance is going or gone and the one app pod runs again, on another node."""
    pods = app_pods(world)
    return (
        state(world, instance_id) in ("shutting-down", "terminated")
        and len(pods) == 1
        and (pods[0].get("status") or {}).get("phase") == "Running"
        and pods[0]["spec"].get("nodeName") != pod_node
    )


def test_a_pod_lands_in_the_reservation_and_falls_back_to_spot_when_it_is_full(world: EmbeddedWorld) -> None:
    reservation = _odcr(world, count=2)
    _apply(world, [{"tags": {"team": "ml"}}])
    world.scale(deployment="inflate", replicas=1)
    assert until(world, lambda: running(world) == 1, timeout=60), "the pod never ran"

    (claim,) = _claims(world)
    labels = _labels(claim)
    assert labels[CAPACITY_TYPE] == "reserved"
    assert (labels[RESERVATION_ID], labels[RESERVATION_TYPE]) == (reservation, "default")
    assert labels["node.kubernetes.io/instance-type"] == "m5.large"
    assert labels["topology.kubernetes.io/zone"] == "us-east-1a"
    status = world.store.get("ec2nodeclasses.karpenter.k8s.aws", "default")["status"]["capacityReservations"]
    assert [(s["id"], s["instanceType"], s["availabilityZone"], s["state"]) for s in status] == [
        (reservation, "m5.large", "us-east-1a", "active")
    ]

    _take_slot(world, reservation, "us-east-1a")  # Nodesmith still counts one slot free (described < 1 min ago)
    world.scale(deployment="inflate", replicas=2)
    assert until(world, lambda: running(world) == 2, timeout=60), "the second pod never ran"
    second = next(c for c in _claims(world) if c["metadata"]["name"] != claim["metadata"]["name"])
    assert _labels(second)[CAPACITY_TYPE] == "spot"
    assert RESERVATION_ID not in _labels(second)
    # The NodeClaim planned on the reservation's last slot was pinned to it (as Karpenter's), its launch found the
    # reservation full, and the pass solved the pod again knowing the reservation full: on spot.
    failed = [e for e in world.store.objects("events") if e.get("reason") == "InsufficientCapacityError"]
    [pinned] = [e["involvedObject"]["name"] for e in failed]
    assert pinned not in (claim["metadata"]["name"], second["metadata"]["name"])


def test_a_capacity_block_node_is_drained_before_the_block_ends(world: EmbeddedWorld) -> None:
    block = add_capacity_block(
        instance_type="m5.large", zone="us-east-1b", count=1, end=datetime.now(UTC) + timedelta(hours=3)
    )
    _apply(world, [{"id": block}])
    world.scale(deployment="inflate", replicas=1)
    assert until(world, lambda: running(world) == 1, timeout=60), "the pod never ran"
    (claim,) = _claims(world)
    assert (_labels(claim)[RESERVATION_ID], _labels(claim)[RESERVATION_TYPE]) == (block, "capacity-block")
    instance_id = claim["status"]["providerID"].rsplit("/", 1)[-1]
    pod_node = app_pods(world)[0]["spec"]["nodeName"]

    set_end_time(block, datetime.now(UTC) + timedelta(minutes=35))  # the block is now within 40 minutes of its end

    assert until(world, lambda: _moved_off(world, instance_id, pod_node), timeout=90), (
        "the block's node was not drained and replaced"
    )
    (replacement,) = _claims(world)
    assert _labels(replacement)[CAPACITY_TYPE] in ("spot", "on-demand")  # an expiring block takes no launch


def test_an_interruptible_reservations_node_is_drained_when_its_owner_reclaims_it(world: EmbeddedWorld) -> None:
    reservation = _odcr(world, count=1)
    set_interruptible(reservation)
    _apply(world, [{"tags": {"team": "ml"}}])
    world.scale(deployment="inflate", replicas=1)
    assert until(world, lambda: running(world) == 1, timeout=60), "the pod never ran"
    (claim,) = _claims(world)
    labels = _labels(claim)
    assert (labels[CAPACITY_TYPE], labels[RESERVATION_ID], labels[INTERRUPTIBLE]) == ("reserved", reservation, "true")
    instance_id = claim["status"]["providerID"].rsplit("/", 1)[-1]
    pod_node = app_pods(world)[0]["spec"]["nodeName"]

    put_event(world, event_body("capacity_reservation_interruption_warning.json", {"i-1234567890abcdef0": instance_id}))
    assert deliver(world) == (1, 0)

    assert until(world, lambda: _moved_off(world, instance_id, pod_node), timeout=90), (
        "the reclaimed node was not drained and replaced"
    )
    reasons = {e.get("reason") for e in world.store.objects("events")}
    assert {"CapacityReservationInstanceInterrupted", "TerminatingOnInterruption"} <= reasons
