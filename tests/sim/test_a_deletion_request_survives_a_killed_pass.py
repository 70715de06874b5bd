"""A deleting NodeClaim gets its termination request from the reconcile pass's sweep even when whoever first asked
for it was ended before the request reached the termination queue (issue 36,
Lambda faults): the scheduled reconcile handler runs as Lambda runs it, against the embedded AWS and the API
emulator through the real adapters, and is killed at its ``SendMessageBatch``. The NodeClaim's request annotation is
what tells later passes a request is on its way, so it is written only once the queue took the request; a pass
killed before that leaves the NodeClaim to the next pass, which sends it, instead of leaving it deleting with no
request for the stale interval (5 minutes by default). An interruption invocation ended after it annotated and
deleted the NodeClaim, before the taint and the send, leaves a fresh annotation on a node no round tainted: the
next pass sends that request too.
"""

from __future__ import annotations

import json
import time
from typing import TYPE_CHECKING, Any

import pytest
from stepped_world import CLUSTER, NODECLAIMS, Sim, invoke_scheduled, reconcile_function, stepped_sim

from nodesmith.core.termination import REQUESTED_AT_ANNOTATION
from nodesmith.handlers import wiring
from nodesmith.services.termination.requests import request_termination
from nodesmith.sim import aws as embedded_aws
from nodesmith.sim.lambda_runtime import install_function_timeouts, kill_invocation

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

pytestmark = pytest.mark.slow


@pytest.fixture
def sim(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[Sim, str]]:
    """The stepped world with the termination queue the stack would create; yields it and the queue's URL."""
    install_function_timeouts()
    with stepped_sim(tmp_path, monkeypatch) as world:
        queues = embedded_aws.create_queues(cluster_name=CLUSTER)
        monkeypatch.setenv("NODESMITH_TERMINATION_QUEUE_URL", queues.termination_url)
        wiring.reset()
        yield world, queues.termination_url


def kill_at_send() -> None:
    """End the running invocation when the termination queue's client is about to call ``SendMessageBatch``, once."""
    queue: Any = wiring.build_termination_queue(wiring.get_settings())
    fired: list[bool] = []

    def die(**_: Any) -> None:
        if not fired:
            fired.append(True)
            kill_invocation("killed before SendMessageBatch")

    queue._sqs().meta.events.register("before-call.sqs.SendMessageBatch", die)


def queued(sim: Sim, queue_url: str) -> list[str]:
    """The NodeClaims named by the termination requests on the queue."""
    answer = sim.aws.client("sqs").receive_message(QueueUrl=queue_url, MaxNumberOfMessages=10, WaitTimeSeconds=0)
    return [json.loads(m["Body"])["nodeclaim"] for m in answer.get("Messages") or []]


def test_a_deleted_nodeclaim_whose_first_request_was_cut_short_is_requested_by_the_next_pass(
    sim: tuple[Sim, str],
) -> None:
    world, queue_url = sim
    function = reconcile_function()
    world.scale(1)
    world.step()
    world.reconcile()  # launches
    world.step()
    world.reconcile()  # registers
    world.step()
    (claim,) = world.store.objects(NODECLAIMS)
    name = claim["metadata"]["name"]
    world.store.delete(NODECLAIMS, name)  # kubectl delete nodeclaim: its finalizer keeps it, deleting
    assert world.store.snapshot(NODECLAIMS, name)["metadata"].get("deletionTimestamp")

    kill_at_send()
    first = invoke_scheduled(function)
    assert function.stats.killed == 1, first
    assert queued(world, queue_url) == []
    annotations = world.store.snapshot(NODECLAIMS, name)["metadata"].get("annotations") or {}
    assert REQUESTED_AT_ANNOTATION not in annotations  # no request went: none is recorded

    second = invoke_scheduled(function)
    assert isinstance(second, dict) and second["terminations_requested"] == [name], second
    assert queued(world, queue_url) == [name]
    annotations = world.store.snapshot(NODECLAIMS, name)["metadata"].get("annotations") or {}
    assert REQUESTED_AT_ANNOTATION in annotations


def test_a_nodeclaim_an_ended_interruption_left_deleting_and_untainted_is_requested_by_the_next_pass(
    sim: tuple[Sim, str],
) -> None:
    """What an interruption invocation ended after it annotated and deleted the NodeClaim, before it tainted the
    node and sent the request, leaves: a fresh request annotation, and a node no round has tainted."""
    world, queue_url = sim
    world.scale(1)
    world.step()
    world.reconcile()
    world.step()
    world.reconcile()
    world.step()
    (claim,) = world.store.objects(NODECLAIMS)
    name = claim["metadata"]["name"]
    cluster = wiring.build_cluster(wiring.get_settings())
    fresh = cluster.get_nodeclaim(name=name)
    assert fresh is not None
    request_termination(cluster=cluster, nodeclaim=fresh, reason="SpotInterrupted", now=time.time(), deadline=None)
    assert queued(world, queue_url) == []

    out = world.reconcile()

    assert out.terminations_requested == [name]
    assert queued(world, queue_url) == [name]
