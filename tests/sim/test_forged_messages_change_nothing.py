"""A message on a queue is a request from someone who may lie: every forged or foreign one is acknowledged, logged
and counted, and changes nothing -- through the real handlers on the embedded AWS and Kubernetes.

Each case sends what a same-account principal allowed ``sqs:SendMessage`` could send, straight to the interruption
or the termination queue, then checks that no node was cordoned, tainted or deleted, no pod evicted or deleted, no
NodeClaim deleted and no instance terminated, that the record was acknowledged (nothing left on the queue, no
failure), and that the ignore reason was logged and counted (``InterruptionMessagesIgnored`` /
``TerminationRequestsIgnored`` by ``Reason``); a capacity reservation interruption warning about a node that runs in
no capacity reservation is one of them. The back-dated spot warning is about our own node, so it is acted
on, but gracefully: its deadline is counted from our queue's receipt, so no pod behind a PodDisruptionBudget is
deleted directly; delivered twice, it still sends one termination request."""

from __future__ import annotations

import json
import time
from typing import TYPE_CHECKING

import pytest
from embedded_world import (
    claim_instance,
    deliver,
    event_body,
    exists,
    log_lines,
    ours,
    queue_empty,
    reasons,
    register_node,
    run_instance,
    running,
    send,
    state,
    until,
    untouched,
)

from nodesmith.cli.world import MANIFESTS, EmbeddedWorld
from nodesmith.core.termination import TERMINATION_TIMESTAMP_ANNOTATION
from nodesmith.core.timestamps import from_rfc3339

if TYPE_CHECKING:
    from collections.abc import Iterator

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("embedded-world")]

DOC = "i-1234567890abcdef0"  # the instance id of the documented events (tests/events/README.md)
OWNED = "kubernetes.io/cluster/demo"


@pytest.fixture(scope="module")
def world() -> Iterator[EmbeddedWorld]:
    from nodesmith.handlers.observability import logger

    level = logger.log_level
    logger.setLevel("INFO")  # the stack's application log level (the demo keeps WARNING)
    with EmbeddedWorld() as w:
        w.apply_file(MANIFESTS / "nodepool.yaml")
        w.apply_file(MANIFESTS / "inflate.yaml")
        w.scale(deployment="inflate", replicas=2)
        assert until(w, lambda: running(w) == 2, timeout=90), "the inflate pods never ran"
        yield w
    logger.setLevel(level)


def _acknowledged(world: EmbeddedWorld, got: tuple[int, int], queue_url: str) -> None:
    records, failures = got
    assert records >= 1 and failures == 0
    assert queue_empty(world, queue_url)


def _interrupt(world: EmbeddedWorld, doc: dict[str, object]) -> None:
    send(world, world.queue_url, doc)
    _acknowledged(world, deliver(world), world.queue_url)


def _visible(world: EmbeddedWorld, queue_url: str) -> int:
    attributes = world.client("sqs").get_queue_attributes(
        QueueUrl=queue_url, AttributeNames=["ApproximateNumberOfMessages"]
    )
    return int(attributes["Attributes"]["ApproximateNumberOfMessages"])


def _terminate(world: EmbeddedWorld, request: dict[str, object] | str) -> None:
    send(world, world.termination_queue_url, request if isinstance(request, str) else json.dumps(request))
    handled = world.deliver_terminations(wait_seconds=1)
    assert handled >= 1
    assert queue_empty(world, world.termination_queue_url)


def test_events_from_another_account_or_region_are_ignored(world: EmbeddedWorld) -> None:
    node, iid, claim = ours(world)
    before = reasons(world, "InterruptionMessagesIgnored")
    _interrupt(world, event_body("spot_interruption_warning.json", {DOC: iid}, account="999999999999"))
    _interrupt(world, event_body("spot_interruption_warning.json", {DOC: iid}, region="eu-west-1"))
    assert untouched(world, node, iid, claim) == []
    counted = reasons(world, "InterruptionMessagesIgnored") - before
    assert counted["foreign_account"] == 1 and counted["foreign_region"] == 1
    assert {line["reason"] for line in log_lines(world, "interruption message ignored")} >= {
        "foreign_account",
        "foreign_region",
    }


def test_a_forged_terminated_state_change_for_a_running_instance_skips_nothing(world: EmbeddedWorld) -> None:
    node, iid, claim = ours(world)
    before = reasons(world, "InterruptionMessagesIgnored")
    _interrupt(world, event_body("state_change_terminated.json", {DOC: iid}))
    assert untouched(world, node, iid, claim) == []
    assert (reasons(world, "InterruptionMessagesIgnored") - before)["state_mismatch"] == 1


def test_a_capacity_reservation_warning_for_an_instance_in_no_reservation_changes_nothing(world: EmbeddedWorld) -> None:
    node, iid, claim = ours(world)  # a spot or on-demand node: EC2 says it runs in no capacity reservation
    before = reasons(world, "InterruptionMessagesIgnored")
    _interrupt(world, event_body("capacity_reservation_interruption_warning.json", {DOC: iid}))
    assert untouched(world, node, iid, claim) == []
    assert (reasons(world, "InterruptionMessagesIgnored") - before)["not_reserved"] == 1


@pytest.mark.parametrize(
    ("tags", "reason"),
    [
        ({OWNED: "shared", "karpenter.sh/nodepool": "default"}, "not_owned"),
        ({OWNED: "owned"}, "no_nodepool_tag"),
        ({OWNED: "owned", "eks:nodegroup-name": "system"}, "no_nodepool_tag"),  # a managed node group's
    ],
    ids=["shared", "no-nodepool-tag", "managed-node-group"],
)
def test_an_instance_that_is_not_ours_is_left_alone(world: EmbeddedWorld, tags: dict[str, str], reason: str) -> None:
    # Given an instance the cluster does not own for Nodesmith, registered as a node with a pod,
    # and even a NodeClaim naming it (so only its tags say it is not ours)
    name = f"forged-{reason.replace('_', '-')}"
    instance = run_instance(world, {**tags, "karpenter.sh/nodeclaim": name})
    iid = instance["InstanceId"]
    node = register_node(world, instance, with_pod=f"{name}-pod")
    claim_instance(world, name, instance, node)
    before = reasons(world, "InterruptionMessagesIgnored")

    # When a spot warning and a scheduled change name it
    _interrupt(world, event_body("spot_interruption_warning.json", {DOC: iid}))
    _interrupt(world, event_body("health_scheduled_change_ec2.json", {"i-abcd1111": iid, "i-abcd2222": iid}))

    # Then nothing is done, and why is counted
    assert untouched(world, node, iid, name) == []
    assert (reasons(world, "InterruptionMessagesIgnored") - before)[reason] == 2


def test_forged_termination_requests_change_nothing(world: EmbeddedWorld) -> None:
    node, iid, claim = ours(world)
    mng = run_instance(world, {OWNED: "owned", "eks:nodegroup-name": "system"})
    mng_node = register_node(world, mng, with_pod="system-pod")
    foreign = run_instance(world, {"team": "data"})
    # one of our NodeClaims really is being deleted (a consolidation, say), so only the request's ids can lie
    going = run_instance(world, {OWNED: "owned", "karpenter.sh/nodepool": "default", "karpenter.sh/nodeclaim": "going"})
    claim_instance(world, "going", going, register_node(world, going))
    world.store.delete("nodeclaims.karpenter.sh", "going")
    before = reasons(world, "TerminationRequestsIgnored")

    # a managed node group's instance, named with a NodeClaim that does not exist
    _terminate(world, {"nodeclaim": "system-ng", "instanceId": mng["InstanceId"], "reason": "SpotInterrupted"})
    # the deleting NodeClaim with an instance that is not its own (the managed node group's, another team's)
    _terminate(world, {"nodeclaim": "going", "instanceId": mng["InstanceId"], "reason": "Drifted"})
    _terminate(world, {"nodeclaim": "going", "instanceId": foreign["InstanceId"], "reason": "SpotInterrupted"})
    # our running instance and its NodeClaim, with a lying reason: nothing asked for its termination
    _terminate(world, {"nodeclaim": claim, "instanceId": iid, "reason": "SpotInterrupted"})
    # a request carrying facts it may not carry (a deadline): refused as malformed
    _terminate(world, {"nodeclaim": claim, "instanceId": iid, "reason": "SpotInterrupted", "deadline": 0})

    assert untouched(world, node, iid, claim) == []
    assert untouched(world, mng_node, mng["InstanceId"]) == []
    assert state(world, foreign["InstanceId"]) == "running"
    counted = reasons(world, "TerminationRequestsIgnored") - before
    assert counted == {"nodeclaim_gone": 1, "instance_mismatch": 2, "not_deleting": 1}
    assert {line["reason"] for line in log_lines(world, "termination request ignored")} >= {
        "nodeclaim_gone",
        "instance_mismatch",
        "not_deleting",
    }
    malformed = log_lines(world, "malformed message acknowledged")
    assert any("deadline" in line["reason"] for line in malformed)


def test_a_back_dated_spot_warning_drains_gracefully_from_our_receipt(world: EmbeddedWorld) -> None:
    # Given our node's pods, with a grace period, behind a PodDisruptionBudget that allows no eviction
    node, iid, claim = ours(world)
    on_node = [p for p in world.store.pods_on(node) if (p["metadata"].get("labels") or {}).get("app") == "inflate"]
    assert on_node
    world.store.apply({
        "apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
        "metadata": {"name": "inflate", "namespace": "default"},
        "spec": {"minAvailable": 2, "selector": {"matchLabels": {"app": "inflate"}}},
    })  # fmt: skip

    # When a spot warning for it arrives claiming it was sent ten minutes ago, and SQS delivers it twice
    old = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() - 600))
    sent = time.time()
    _interrupt(world, event_body("spot_interruption_warning.json", {DOC: iid}, time=old))
    _interrupt(world, event_body("spot_interruption_warning.json", {DOC: iid}, time=old))

    # Then the node is cordoned and its termination requested, with the deadline two minutes after our receipt
    assert world.store.get("nodes", node)["spec"].get("unschedulable") is True
    nodeclaim = world.store.get("nodeclaims.karpenter.sh", claim)
    assert nodeclaim["metadata"].get("deletionTimestamp")
    deadline = from_rfc3339(nodeclaim["metadata"]["annotations"][TERMINATION_TIMESTAMP_ANNOTATION])
    assert deadline is not None and sent + 115 <= deadline <= time.time() + 121
    # once: the duplicate found the termination already requested for the same reason
    assert _visible(world, world.termination_queue_url) == 1
    posted = [e["reason"] for e in world.store.objects("events") if e["involvedObject"].get("name") == node]
    assert posted.count("SpotInterrupted") == 1 and posted.count("TerminatingOnInterruption") == 1
    # and a drain round evicts through the Eviction API only: the budget holds, no pod is deleted directly
    assert world.deliver_terminations() >= 1
    assert all(not p["metadata"].get("deletionTimestamp") for p in world.store.pods_on(node) if p in on_node)
    assert {p["metadata"]["uid"] for p in on_node} <= {p["metadata"]["uid"] for p in world.store.objects("pods")}
    assert state(world, iid) == "running"

    # When the budget is lifted, the drain finishes and the node goes
    world.store.delete("poddisruptionbudgets.policy", "inflate", namespace="default")
    assert until(world, lambda: not exists(world, "nodes", node), timeout=90)
    assert state(world, iid) in {"shutting-down", "terminated"}
    assert not exists(world, "nodeclaims.karpenter.sh", claim)
    assert until(world, lambda: running(world) == 2, timeout=90), "the evicted pods never ran again"
