"""The interruption and termination handlers on the embedded AWS with its fault layer on (issue 36): SQS delivering
every message a second time (same ``MessageId`` and ``SentTimestamp``, a new receipt handle) or late, and EC2
throttling and failing calls, change neither what is done nor how often -- one termination request, one drain, one
termination per interrupted node, no pod evicted twice, a spot warning's deadline two minutes from when our queue
received it -- through the real handlers and Lambda's SQS event source."""

from __future__ import annotations

import time
from collections import Counter
from typing import TYPE_CHECKING

import pytest
from embedded_world import deliver, event_body, exists, ours, put_event, running, send, state, until

from nodesmith.cli.world import MANIFESTS, EmbeddedWorld
from nodesmith.core.termination import TERMINATION_TIMESTAMP_ANNOTATION
from nodesmith.core.timestamps import from_rfc3339
from nodesmith.sim.aws_faults import FaultPlan, SqsFaults, fault_counts, set_faults

if TYPE_CHECKING:
    from collections.abc import Iterator

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("embedded-world")]

DOC = "i-1234567890abcdef0"  # the instance id of the documented events (tests/events/README.md)


@pytest.fixture(scope="module")
def world() -> Iterator[EmbeddedWorld]:
    with EmbeddedWorld() as w:
        w.apply_file(MANIFESTS / "nodepool.yaml")
        w.apply_file(MANIFESTS / "inflate.yaml")
        w.scale(deployment="inflate", replicas=2)
        assert until(w, lambda: running(w) == 2, timeout=90), "the inflate pods never ran"
        yield w


@pytest.fixture
def faulty(world: EmbeddedWorld) -> Iterator[EmbeddedWorld]:
    assert world.aws is not None
    try:
        yield world
    finally:
        set_faults(world.aws, None)


def _visible(world: EmbeddedWorld, queue_url: str) -> int:
    attributes = world.client("sqs").get_queue_attributes(
        QueueUrl=queue_url, AttributeNames=["ApproximateNumberOfMessages"]
    )
    return int(attributes["Attributes"]["ApproximateNumberOfMessages"])


def _events(world: EmbeddedWorld, name: str) -> list[str]:
    return [e["reason"] for e in world.store.objects("events") if e["involvedObject"].get("name") == name]


def _evictions(world: EmbeddedWorld) -> Counter[str]:
    return Counter(
        e["involvedObject"].get("uid") or e["involvedObject"]["name"]
        for e in world.store.objects("events")
        if e["reason"] == "Evicted"
    )


def _interrupt_and_finish(world: EmbeddedWorld, node: str, iid: str, claim: str) -> tuple[int, int]:
    """A spot warning for ``iid`` through EventBridge; every interruption batch delivered; then terminations and
    passes until the node is gone and both pods run again. Returns (records, failures) of the interruption queue."""
    put_event(world, event_body("spot_interruption_warning.json", {DOC: iid}))
    got = deliver(world)
    assert world.store.get("nodes", node)["spec"].get("unschedulable") is True
    assert until(world, lambda: not exists(world, "nodes", node), timeout=120), "the node was never removed"
    assert not exists(world, "nodeclaims.karpenter.sh", claim)
    assert state(world, iid) in {"shutting-down", "terminated"}
    assert until(world, lambda: running(world) == 2, timeout=120), "the evicted pods never ran again"
    return got


def test_every_message_delivered_twice_still_drains_and_terminates_once(faulty: EmbeddedWorld) -> None:
    assert faulty.aws is not None
    node, iid, claim = ours(faulty)
    evicted_before = _evictions(faulty)
    set_faults(faulty.aws, FaultPlan(sqs=SqsFaults(duplicate=1.0)))

    put_event(faulty, event_body("spot_interruption_warning.json", {DOC: iid}))
    records, failures = deliver(faulty)

    assert (records, failures) == (2, 0)  # the warning and its duplicate, both acknowledged
    assert _visible(faulty, faulty.termination_queue_url) == 1  # one termination request
    posted = _events(faulty, node)
    assert posted.count("SpotInterrupted") == 1 and posted.count("TerminatingOnInterruption") == 1

    assert until(faulty, lambda: not exists(faulty, "nodes", node), timeout=120), "the node was never removed"
    assert not exists(faulty, "nodeclaims.karpenter.sh", claim)
    assert state(faulty, iid) in {"shutting-down", "terminated"}
    assert until(faulty, lambda: running(faulty) == 2, timeout=120), "the evicted pods never ran again"
    evicted = _evictions(faulty) - evicted_before
    assert evicted and max(evicted.values()) == 1  # no pod evicted twice
    # the warning's copy only: the termination queue is FIFO and delivers each request once
    assert fault_counts(faulty.aws).by_kind["sqs_duplicate"] == 1


def test_throttled_and_failing_ec2_calls_do_not_stop_an_interruption(faulty: EmbeddedWorld) -> None:
    assert faulty.aws is not None
    node, iid, claim = ours(faulty)
    set_faults(faulty.aws, FaultPlan(seed=36, throttle={"ec2:*": 0.3}, server_error={"ec2:*": 0.1}))

    records, failures = _interrupt_and_finish(faulty, node, iid, claim)

    assert (records, failures) == (1, 0)
    counts = fault_counts(faulty.aws).by_kind
    assert counts.get("throttle", 0) + counts.get("internal_error", 0) + counts.get("unavailable", 0) > 0


def test_a_late_spot_warning_keeps_the_deadline_of_when_the_queue_received_it(faulty: EmbeddedWorld) -> None:
    assert faulty.aws is not None
    node, iid, claim = ours(faulty)
    set_faults(faulty.aws, FaultPlan(sqs=SqsFaults(delay=1.0, delay_seconds=3)))
    sent = time.time()
    send(faulty, faulty.queue_url, event_body("spot_interruption_warning.json", {DOC: iid}))  # as EventBridge does

    assert faulty.wait_for(lambda: deliver(faulty)[0] == 1, timeout=30), "the warning was never delivered"

    assert fault_counts(faulty.aws).by_kind["sqs_delayed"] >= 1  # the warning (the termination request may be too)
    annotations = faulty.store.get("nodeclaims.karpenter.sh", claim)["metadata"]["annotations"]
    deadline = from_rfc3339(annotations[TERMINATION_TIMESTAMP_ANNOTATION])
    # two minutes from our queue's receipt (SentTimestamp, the annotation in whole seconds), not from the delivery
    # three seconds later
    assert deadline is not None and sent + 115 <= deadline < sent + 122.5
    set_faults(faulty.aws, None)
    assert until(faulty, lambda: not exists(faulty, "nodes", node), timeout=120), "the node was never removed"
    assert until(faulty, lambda: running(faulty) == 2, timeout=120), "the evicted pods never ran again"
