"""The documented interruption events, end to end in the embedded environment: real-format EC2 and AWS Health
events (``tests/events``, from the AWS documentation) go on EventBridge, through the stack's rules to the
interruption queue, and to the real handler with the real adapters (moto server, Kubernetes API emulator).

Our instance's rebalance recommendation cordons its node (the default ``cordon`` action) without draining it;
every event about an instance of no cluster of ours is acknowledged and leaves it alone; bodies that are not
events, sent straight to the queue, are acknowledged and logged; no record fails and nothing is left on the
queue. Then the spot interruption warning for our instance cordons its node and sends its termination request to
the termination queue, whose handler drains it and removes it: instance terminated, Node and NodeClaim deleted."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from nodesmith.cli.world import MANIFESTS, EmbeddedWorld
from nodesmith.sim.kube.errors import ApiError

if TYPE_CHECKING:
    from collections.abc import Iterator

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("embedded-world")]

EVENTS = Path(__file__).resolve().parents[1] / "events"
DOC_OURS = "i-1234567890abcdef0"  # the instance ids the documented events name (tests/events/README.md)
DOC_FOREIGN = "i-0fedcba9876543210"
DOC_HEALTH = ("i-abcd1111", "i-abcd2222")
DISRUPTED = "karpenter.sh/disrupted"


@pytest.fixture(scope="module")
def world() -> Iterator[EmbeddedWorld]:
    with EmbeddedWorld() as w:
        w.apply_file(MANIFESTS / "nodepool.yaml")
        w.apply_file(MANIFESTS / "inflate.yaml")
        w.scale(deployment="inflate", replicas=2)
        assert _until(w, lambda: _running_pods(w) == 2, timeout=90), "the inflate pods never ran"
        yield w


def _until(world: EmbeddedWorld, done: Any, *, timeout: float) -> bool:
    """Reconcile once a second (the schedule, faster) until ``done()``; False at the timeout."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if done():
            return True
        world.reconcile()
        world.wait_for(done, timeout=1.0)
    return bool(done())


def _running_pods(world: EmbeddedWorld) -> int:
    return sum(
        1
        for p in world.store.objects("pods")
        if (p["metadata"].get("labels") or {}).get("app") == "inflate"
        and (p.get("status") or {}).get("phase") == "Running"
    )


def _put(world: EmbeddedWorld, name: str, ids: dict[str, str]) -> None:
    """Put the documented event ``name`` on the default bus as its service would, its instance ids replaced by
    ``ids`` (EventBridge sets the envelope: id, time, account, region)."""
    text = (EVENTS / name).read_text()
    for documented, real in ids.items():
        text = text.replace(documented, real)
    doc = json.loads(text)
    answer = world.client("events").put_events(
        Entries=[
            {
                "Source": doc["source"],
                "DetailType": doc["detail-type"],
                "Resources": doc.get("resources", []),
                "Detail": json.dumps(doc["detail"]),
            }
        ]
    )
    assert not answer.get("FailedEntryCount"), answer


def _deliver(world: EmbeddedWorld) -> list[dict[str, Any]]:
    """Every batch the event source mapping would invoke until the queue stays empty for 2 s."""
    batches: list[dict[str, Any]] = []
    for _ in range(10):
        got = list(world.deliver_interruptions(wait_seconds=2))
        if not got:
            return batches
        batches += got
    return batches


def _queue_empty(world: EmbeddedWorld) -> bool:
    attributes = world.client("sqs").get_queue_attributes(
        QueueUrl=world.queue_url,
        AttributeNames=["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"],
    )["Attributes"]
    return attributes == {"ApproximateNumberOfMessages": "0", "ApproximateNumberOfMessagesNotVisible": "0"}


def _metric_total(world: EmbeddedWorld, name: str) -> float:
    """The sum of metric ``name`` over the EMF documents the handlers printed."""
    found = 0.0
    for line in world.lambda_log.read_text().splitlines():
        try:
            doc = json.loads(line)
        except ValueError:
            continue
        if isinstance(doc, dict) and "_aws" in doc and name in doc:
            value = doc[name]
            found += sum(value) if isinstance(value, list) else float(value)
    return found


def _ours(world: EmbeddedWorld) -> tuple[str, str, str]:
    """(node name, instance id, NodeClaim name) of a node running an inflate pod."""
    node_name = next(
        p["spec"]["nodeName"]
        for p in world.store.objects("pods")
        if (p["metadata"].get("labels") or {}).get("app") == "inflate" and p["spec"].get("nodeName")
    )
    node = world.store.get("nodes", node_name)
    instance_id = node["spec"]["providerID"].rsplit("/", 1)[1]
    claims = world.store.objects("nodeclaims.karpenter.sh")
    claim = next(c for c in claims if (c.get("status") or {}).get("providerID") == node["spec"]["providerID"])
    return node_name, instance_id, claim["metadata"]["name"]


def _foreign(world: EmbeddedWorld) -> str:
    """An instance in the same account that no cluster tag names (another team's, say)."""
    ec2 = world.client("ec2")
    image = ec2.describe_images(Owners=["amazon"])["Images"][0]["ImageId"]
    return str(
        ec2.run_instances(ImageId=image, MinCount=1, MaxCount=1, InstanceType="m5.large")["Instances"][0]["InstanceId"]
    )


def _exists(world: EmbeddedWorld, resource: str, name: str) -> bool:
    try:
        world.store.get(resource, name)
    except ApiError as exc:
        if exc.code == 404:
            return False
        raise
    return True


def _state(world: EmbeddedWorld, instance_id: str) -> str:
    reservations = world.client("ec2").describe_instances(InstanceIds=[instance_id])["Reservations"]
    return str(reservations[0]["Instances"][0]["State"]["Name"])


def test_documented_events_are_acted_on_for_our_instances_and_acknowledged_for_the_rest(world: EmbeddedWorld) -> None:
    node_name, ours, claim = _ours(world)
    foreign = _foreign(world)
    pods_on_node = {p["metadata"]["uid"] for p in world.store.objects("pods") if p["spec"].get("nodeName") == node_name}

    # When the documented events go on EventBridge: one for our instance, four for the foreign one
    _put(world, "rebalance_recommendation.json", {DOC_OURS: ours})
    _put(world, "spot_interruption_warning_foreign.json", {DOC_FOREIGN: foreign})
    _put(world, "health_scheduled_change_ec2.json", {DOC_HEALTH[0]: foreign, DOC_HEALTH[1]: foreign})
    _put(world, "state_change_stopping.json", {DOC_OURS: foreign, DOC_FOREIGN: foreign})
    # and two bodies that are not events go straight on the queue
    sqs = world.client("sqs")
    sqs.send_message(QueueUrl=world.queue_url, MessageBody=(EVENTS / "broken_body.txt").read_text())
    sqs.send_message(QueueUrl=world.queue_url, MessageBody='{"detail-type": "EC2 Spot Instance Interruption Warning"}')
    batches = _deliver(world)

    # Then every record reached the handler and was acknowledged
    assert sum(b["records"] for b in batches) == 6
    assert sum(b["failures"] for b in batches) == 0
    assert _queue_empty(world)
    assert _metric_total(world, "InterruptionMessagesMalformed") == 2
    assert "malformed message acknowledged" in world.lambda_log.read_text()
    # our node is cordoned and tainted, its pods left where they are (a rebalance recommendation is no notice)
    node = world.store.get("nodes", node_name)
    assert node["spec"].get("unschedulable") is True
    assert any(t["key"] == DISRUPTED and t["effect"] == "NoSchedule" for t in node["spec"].get("taints") or [])
    assert pods_on_node <= {p["metadata"]["uid"] for p in world.store.objects("pods")}
    # the foreign instance is untouched
    assert _state(world, foreign) == "running"
    assert _metric_total(world, "InterruptionMessagesIgnored") >= 3

    # When the spot interruption warning for our instance follows
    _put(world, "spot_interruption_warning.json", {DOC_OURS: ours})
    batches = _deliver(world)

    # Then its node is drained and removed with its NodeClaim, and the instance terminated
    assert sum(b["failures"] for b in batches) == 0
    assert _queue_empty(world)
    for _ in range(60):
        if world.deliver_terminations(wait_seconds=1) == 0 and not _exists(world, "nodes", node_name):
            break
    assert _state(world, ours) in {"shutting-down", "terminated"}
    assert not _exists(world, "nodes", node_name)
    assert not _exists(world, "nodeclaims.karpenter.sh", claim)
    assert _until(world, lambda: _running_pods(world) == 2, timeout=90), "the evicted pods never ran again"
