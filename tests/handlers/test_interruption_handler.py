"""The interruption Lambda handler on fakes: a batch's records are parsed, judged against what EC2 and the cluster
say, acted on, and reported one by one (powertools partial batch responses).

Malformed bodies are acknowledged, logged and counted; a record whose work raises is logged and is the only one
SQS delivers again; our account and region are those of the queue the records came from; the rebalance setting
reaches the service from its environment variable; every instance's log line carries ``event_id``,
``instance_id``, ``node`` and ``nodeclaim``; the metrics count messages by kind, ignored ones by reason, cordoned
nodes, queue age and the records acknowledged."""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any

import pytest
from handler_support import fakes, points, run_handler

from nodesmith.core.errors import KubernetesError
from nodesmith.handlers import interruption, wiring
from nodesmith.handlers.settings import load_settings

if TYPE_CHECKING:
    from collections.abc import Iterator


A, B = "i-0aaaaaaaaaaaaaaa1", "i-0bbbbbbbbbbbbbbb2"


class Failing(fakes.FakeCluster):  # type: ignore[misc,name-defined]
    """A cluster whose patch of ``node-b`` (of the nodes in ``failing``) fails (an API server answering 503)."""

    failing: frozenset[str] = frozenset({"node-b"})

    def taint_and_cordon(self, *, node_name: str, taint: Any) -> bool:
        if node_name in self.failing:
            raise KubernetesError(f"patch node {node_name}: 503 Service Unavailable", status=503)
        return bool(super().taint_and_cordon(node_name=node_name, taint=taint))


@pytest.fixture
def world() -> Iterator[dict[str, Any]]:
    clock = fakes.Clock()
    cluster = Failing(clock=clock)
    for name, iid in (("a", A), ("b", B)):
        cluster.nodes[f"node-{name}"] = fakes.make_node(f"node-{name}", iid)
        cluster.nodeclaims[f"claim-{name}"] = fakes.make_claim(f"claim-{name}", instance_id=iid, node=f"node-{name}")
    cloud = fakes.FakeCloud([fakes.make_instance(A, nodeclaim="claim-a"), fakes.make_instance(B, nodeclaim="claim-b")])
    queue = fakes.FakeQueue()
    yield {"cluster": cluster, "cloud": cloud, "queue": queue}
    wiring.reset()


def invoke(world: dict[str, Any], records: list[dict[str, Any]], *, rebalance: str = "cordon") -> tuple[Any, list[Any]]:
    settings = load_settings(
        {
            "NODESMITH_CLUSTER_NAME": fakes.CLUSTER,
            "NODESMITH_CLUSTER_ENDPOINT": "https://k.invalid",
            "NODESMITH_REBALANCE_ACTION": rebalance,
        }
    )
    wiring.reset()
    wiring.set_ports(cluster=world["cluster"], cloud=world["cloud"], queue=world["queue"], settings=settings)
    return run_handler(interruption.handler, {"Records": records}, fakes.Context())


def test_a_batch_is_reported_record_by_record(world: dict[str, Any]) -> None:
    records = [
        fakes.sqs_record(fakes.event(A), message_id="m-a", sent=fakes.NOW - 3),
        fakes.sqs_record(fakes.event(B), message_id="m-b"),  # its node cannot be patched
        fakes.sqs_record("{not json", message_id="m-junk"),
        fakes.sqs_record(fakes.event(A, region="eu-west-1", event_id="evt-elsewhere"), message_id="m-elsewhere"),
    ]
    response, docs = invoke(world, records)

    # only the record whose work failed comes back
    assert response == {"batchItemFailures": [{"itemIdentifier": "m-b"}]}
    assert [r.nodeclaim for r in world["queue"].sent] == ["claim-a"]
    assert world["cluster"].nodes["node-a"].unschedulable and not world["cluster"].nodes["node-b"].unschedulable
    # what a platform team reads on its dashboard
    assert points(docs, "InterruptionMessagesMalformed") == [(1.0, {})]
    assert (1.0, {"Reason": "foreign_region"}) in points(docs, "InterruptionMessagesIgnored")
    assert sum(v for v, _ in points(docs, "NodesCordoned")) == 1
    assert points(docs, "InterruptionMessagesAcknowledged") == [(3.0, {})]
    assert (1.0, {"MessageType": "spot_interrupted"}) in points(docs, "InterruptionMessagesReceived")
    ages = [v for v, _ in points(docs, "InterruptionQueueAgeSeconds")]
    assert ages and max(ages) >= 3  # from SentTimestamp, not the event's time
    # the instance's line carries the keys that tie one interruption together
    handled = [d for d in docs if d.get("message") == "interruption handled"]
    assert [(d["event_id"], d["instance_id"], d["node"], d["nodeclaim"]) for d in handled] == [
        (f"evt-{A}", A, "node-a", "claim-a")
    ]
    assert [d["reason"] for d in docs if d.get("message") == "malformed message acknowledged"]
    # the record that comes back says why, with the event it carried
    failed = [d for d in docs if d.get("message") == "interruption message failed"]
    assert [(d["message_id"], d["event_id"], d["level"]) for d in failed] == [("m-b", f"evt-{B}", "WARNING")]
    assert "503 Service Unavailable" in failed[0]["error"]


def test_the_rebalance_setting_comes_from_the_environment(world: dict[str, Any]) -> None:
    invoke(world, [fakes.sqs_record(fakes.event(A, kind="rebalance"), message_id="m-1")], rebalance="event")
    assert not world["cluster"].nodes["node-a"].unschedulable
    assert world["cluster"].reasons() == ["SpotRebalanceRecommendation"]
    invoke(world, [fakes.sqs_record(fakes.event(A, kind="rebalance"), message_id="m-2")], rebalance="drain")
    assert [r.reason for r in world["queue"].sent] == ["SpotRebalanceRecommendation"]


def test_our_account_is_the_queues(world: dict[str, Any]) -> None:
    # an event claiming the function's account but sent to a queue of another account is not ours
    record = fakes.sqs_record(fakes.event(A), message_id="m-1")
    record["eventSourceARN"] = "arn:aws:sqs:us-west-2:210987654321:nodesmith-interruption"
    response, docs = invoke(world, [record])
    assert response == {"batchItemFailures": []}
    assert (1.0, {"Reason": "foreign_account"}) in points(docs, "InterruptionMessagesIgnored")
    assert world["queue"].sent == [] and world["cloud"].calls == []


def test_two_copies_of_a_message_in_one_batch_are_handled_once(world: dict[str, Any]) -> None:
    # SQS delivers at least once and Lambda's batching window gathers several receives: a message and a copy of it
    # that SQS counts as received again land in one batch
    records = [
        fakes.sqs_record(fakes.event(A), message_id="m-a"),
        fakes.sqs_record(fakes.event(A), message_id="m-a", receive_count=2),
    ]
    response, docs = invoke(world, records)

    assert response == {"batchItemFailures": []}
    assert [r.nodeclaim for r in world["queue"].sent] == ["claim-a"]  # one termination request
    assert world["cluster"].reasons().count("SpotInterrupted") == 1
    assert points(docs, "InterruptionMessagesAcknowledged") == [(2.0, {})]


def test_the_batch_sends_its_requests_together_and_a_refused_one_comes_back(world: dict[str, Any]) -> None:
    world["cluster"].failing = frozenset()
    world["queue"].refuse_only = {"claim-b"}
    records = [fakes.sqs_record(fakes.event(A), message_id="m-a"), fakes.sqs_record(fakes.event(B), message_id="m-b")]
    response, docs = invoke(world, records)

    assert world["queue"].calls == 1  # one SendMessageBatch for the batch, not one per node
    assert response == {"batchItemFailures": [{"itemIdentifier": "m-b"}]}  # SQS delivers it again
    assert [r.nodeclaim for r in world["queue"].sent] == ["claim-a"]
    requested = {d["nodeclaim"]: d["termination_requested"] for d in docs if d.get("message") == "interruption handled"}
    assert requested == {"claim-a": True, "claim-b": False}
    assert points(docs, "InterruptionMessagesAcknowledged") == [(1.0, {})]


def test_the_termination_is_requested_before_the_node_is_tainted(world: dict[str, Any]) -> None:
    # a karpenter.sh/disrupted taint from the interruption function always has its request behind it, so a disruption
    # pass never takes it for one nothing covers: when the taint fails (or the invocation dies at it) the NodeClaim is
    # already deleting, and the message comes back to finish the job
    response, _ = invoke(world, [fakes.sqs_record(fakes.event(B), message_id="m-b")])
    assert response == {"batchItemFailures": [{"itemIdentifier": "m-b"}]}
    assert ("delete_nodeclaim", "claim-b") in world["cluster"].calls
    assert not world["cluster"].nodes["node-b"].unschedulable


def test_a_record_that_hangs_holds_no_other_records_request(
    world: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given the API server never answering the cordon of node-b, and an invocation with 2.5 s left
    cluster, release = world["cluster"], threading.Event()
    cluster.failing = frozenset()
    original = cluster.taint_and_cordon

    def hangs(*, node_name: str, taint: Any) -> bool:
        if node_name == "node-b":
            release.wait(30)
        return bool(original(node_name=node_name, taint=taint))

    monkeypatch.setattr(cluster, "taint_and_cordon", hangs)
    monkeypatch.setattr(fakes.Context, "get_remaining_time_in_millis", lambda self: 2_500)
    try:
        records = [
            fakes.sqs_record(fakes.event(A), message_id="m-a"),
            fakes.sqs_record(fakes.event(B), message_id="m-b"),
        ]
        response, _ = invoke(world, records)

        # Then the handler answered while node-b's cordon still hung: node-a's termination request went, and only
        # node-b's warning comes back
        assert not release.is_set()
        assert [r.nodeclaim for r in world["queue"].sent] == ["claim-a"]
        assert response == {"batchItemFailures": [{"itemIdentifier": "m-b"}]}
    finally:
        release.set()
