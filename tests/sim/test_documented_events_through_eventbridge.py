"""The documented interruption events, end to end in the embedded environment: real-format EC2 and AWS Health
events (``tests/events``, from the AWS documentation) go on EventBridge, through the stack's rules to the
interruption queue, and to the real handler with the real adapters (moto server, Kubernetes API emulator).

Our instance's rebalance recommendation cordons its node (the default ``cordon`` action) without draining it;
every event about an instance of no cluster of ours is acknowledged and leaves it alone; bodies that are not
events, sent straight to the queue, are acknowledged and logged; no record fails and nothing is left on the
queue. Then the spot interruption warning for our instance cordons its node and sends its termination request to
the termination queue, whose handler drains it and removes it: instance terminated, Node and NodeClaim deleted."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest
from embedded_world import (
    EVENTS,
    deliver,
    event_body,
    exists,
    metric_total,
    ours,
    put_event,
    queue_empty,
    run_instance,
    running,
    state,
    until,
)

from nodesmith.cli.world import MANIFESTS, EmbeddedWorld

if TYPE_CHECKING:
    from collections.abc import Iterator

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("embedded-world")]

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
        assert until(w, lambda: running(w) == 2, timeout=90), "the inflate pods never ran"
        yield w


def test_documented_events_are_acted_on_for_our_instances_and_acknowledged_for_the_rest(world: EmbeddedWorld) -> None:
    node_name, ours_id, claim = ours(world)
    foreign = run_instance(world, {"team": "data"})["InstanceId"]
    pods_on_node = {p["metadata"]["uid"] for p in world.store.pods_on(node_name)}

    # When the documented events go on EventBridge: one for our instance, four for the foreign one
    put_event(world, event_body("rebalance_recommendation.json", {DOC_OURS: ours_id}))
    put_event(world, event_body("spot_interruption_warning_foreign.json", {DOC_FOREIGN: foreign}))
    put_event(world, event_body("health_scheduled_change_ec2.json", {DOC_HEALTH[0]: foreign, DOC_HEALTH[1]: foreign}))
    put_event(world, event_body("state_change_stopping.json", {DOC_OURS: foreign, DOC_FOREIGN: foreign}))
    # and two bodies that are not events go straight on the queue
    sqs = world.client("sqs")
    sqs.send_message(QueueUrl=world.queue_url, MessageBody=(EVENTS / "broken_body.txt").read_text())
    sqs.send_message(QueueUrl=world.queue_url, MessageBody='{"detail-type": "EC2 Spot Instance Interruption Warning"}')
    records, failures = deliver(world)

    # Then every record reached the handler and was acknowledged
    assert (records, failures) == (6, 0)
    assert queue_empty(world, world.queue_url)
    assert metric_total(world, "InterruptionMessagesMalformed") == 2
    assert "malformed message acknowledged" in world.lambda_log.read_text()
    # our node is cordoned, not tainted as disrupted, its pods left where they are (a rebalance recommendation is
    # no notice)
    node = world.store.get("nodes", node_name)
    assert node["spec"].get("unschedulable") is True
    assert not any(t["key"] == DISRUPTED for t in node["spec"].get("taints") or [])
    assert pods_on_node <= {p["metadata"]["uid"] for p in world.store.objects("pods")}
    # the foreign instance is untouched
    assert state(world, foreign) == "running"
    assert metric_total(world, "InterruptionMessagesIgnored") >= 3

    # When the spot interruption warning for our instance follows
    put_event(world, event_body("spot_interruption_warning.json", {DOC_OURS: ours_id}))
    assert deliver(world)[1] == 0
    assert queue_empty(world, world.queue_url)

    # Then the termination handler drains its node and removes it with its NodeClaim, and terminates the instance
    assert until(world, lambda: not exists(world, "nodes", node_name), timeout=90)
    assert state(world, ours_id) in {"shutting-down", "terminated"}
    assert not exists(world, "nodeclaims.karpenter.sh", claim)
    assert until(world, lambda: running(world) == 2, timeout=90), "the evicted pods never ran again"
