"""The interruption use case (``services/interruption/service.py``) on fakes: one DescribeInstances per batch; for
our instances, cordon, Karpenter's Events, the termination requested (NodeClaim annotated with the reason and the
deadline counted from our queue's receipt, deleted, one request sent); each interrupted spot offering marked once;
the reconcile function woken once; a repeat of a message already handled sends nothing more, a redelivery does;
rebalance recommendations follow the setting; a request that cannot be sent fails the message."""

from __future__ import annotations

from typing import Any

import interruption_fakes as fakes
import pytest

from nodesmith.core.drain import DISRUPTED_TAINT
from nodesmith.core.interruption import parse_message
from nodesmith.core.termination import (
    REQUESTED_AT_ANNOTATION,
    TERMINATION_REASON_ANNOTATION,
    TERMINATION_TIMESTAMP_ANNOTATION,
)
from nodesmith.core.timestamps import from_rfc3339, to_rfc3339
from nodesmith.services.interruption.service import InterruptionBatch, InterruptionSettings, Received

A, B = "i-0aaaaaaaaaaaaaaa1", "i-0bbbbbbbbbbbbbbb2"


def two_nodes() -> tuple[Any, Any, Any]:
    clock = fakes.Clock()
    cluster = fakes.FakeCluster.of(
        clock,
        nodes=[fakes.make_node("node-a", A), fakes.make_node("node-b", B)],
        claims=[
            fakes.make_claim("claim-a", instance_id=A, node="node-a"),
            fakes.make_claim("claim-b", instance_id=B, node="node-b"),
        ],
        pods=[fakes.make_pod("web", node="node-a")],
    )
    cloud = fakes.FakeCloud([fakes.make_instance(A, nodeclaim="claim-a"), fakes.make_instance(B, nodeclaim="claim-b")])
    return cluster, cloud, fakes.FakeQueue()


def batch(cluster: Any, cloud: Any, queue: Any, bodies: list[dict[str, Any]], **kwargs: Any) -> Any:
    wakes: list[float] = kwargs.pop("wakes", [])
    received = [
        Received(
            f"m-{n}",
            parse_message(__import__("json").dumps(b)),
            received_at=kwargs.get("sent", fakes.NOW - 5),
            redelivered=kwargs.get("redelivered", False),
        )
        for n, b in enumerate(bodies)
    ]
    settings = InterruptionSettings(
        fakes.ACCOUNT, fakes.REGION, kwargs.get("rebalance", "cordon"), clock=lambda: fakes.NOW + 0.5
    )
    out = InterruptionBatch(
        ports=fakes.ports(cluster, cloud, queue, wakes.append), settings=settings, received=received, now=fakes.NOW
    )
    out.prepare()
    return out


def handled(work: Any, *message_ids: str) -> list[Any]:
    """Handle ``message_ids``, then send the batch's requests, as the handler does; their outcomes, in order."""
    outcomes, unsent = work.send({m: work.handle(m) for m in message_ids})
    assert not unsent
    return [outcomes[m] for m in message_ids]


def test_a_burst_is_described_once_cordoned_told_and_handed_to_the_termination_queue() -> None:
    cluster, cloud, queue = two_nodes()
    wakes: list[float] = []
    work = batch(cluster, cloud, queue, [fakes.event(A), fakes.event(B)], wakes=wakes)
    outcomes = handled(work, "m-0", "m-1")

    assert cloud.calls[0] == ("get_instances", (A, B)) and cloud.count("get_instances") == 1
    assert queue.calls == 1  # the batch's requests together
    assert all(o.instances[0].cordoned and o.instances[0].requested for o in outcomes)
    assert cluster.nodes["node-a"].unschedulable and cluster.nodes["node-b"].unschedulable
    assert [r.model_dump(by_alias=True) for r in queue.sent] == [
        {"nodeclaim": "claim-a", "instanceId": A, "reason": "SpotInterrupted"},
        {"nodeclaim": "claim-b", "instanceId": B, "reason": "SpotInterrupted"},
    ]
    for name in ("claim-a", "claim-b"):
        claim = cluster.nodeclaims[name]
        annotations = claim.metadata.annotations
        assert claim.metadata.deletion_timestamp is not None
        assert annotations[TERMINATION_REASON_ANNOTATION] == "SpotInterrupted"
        # two minutes from our queue's receipt (5 s ago), not from the event's own time
        assert from_rfc3339(annotations[TERMINATION_TIMESTAMP_ANNOTATION]) == fakes.NOW - 5 + 120
        assert annotations[REQUESTED_AT_ANNOTATION] == to_rfc3339(fakes.NOW)
    assert [(e[1], e[2]) for e in cluster.events] == [
        ("node-a", "SpotInterrupted"),
        ("node-a", "TerminatingOnInterruption"),
        ("node-b", "SpotInterrupted"),
        ("node-b", "TerminatingOnInterruption"),
    ]
    # nothing drained here: that is the termination function's
    assert cluster.count("evict") == 0 and "default/web" in cluster.pods and cloud.count("terminate") == 0
    # one offering (m5.large, us-west-2a, spot), marked once; one wake for the batch, for a pass after its cordons
    assert [(o.instance_type, o.zone, o.capacity_type) for o in cloud.marked] == [("m5.large", "us-west-2a", "spot")]
    assert wakes == [fakes.NOW + 0.5]


def test_a_repeat_of_a_handled_warning_writes_nothing_and_only_sends_its_request_again() -> None:
    cluster, cloud, queue = two_nodes()
    handled(batch(cluster, cloud, queue, [fakes.event(A)]), "m-0")
    writes = len(cluster.calls)

    repeat = batch(cluster, cloud, queue, [fakes.event(A, event_id="evt-again")])
    outcome = handled(repeat, "m-0")[0].instances[0]
    assert outcome.duplicate and outcome.requested and not outcome.cordoned
    # the same request: the FIFO termination queue drops it when it took the first (one drain per node and reason)
    assert len(queue.sent) == 2 and queue.sent[0].deduplication_id() == queue.sent[1].deduplication_id()
    # prepare's reads, and the annotation that keeps the earliest deadline: no taint, delete or Event again
    assert [c[0] for c in cluster.calls[writes:]] == ["get_nodeclaim", "get_node", "annotate_nodeclaim"]
    assert [e[2] for e in cluster.events].count("SpotInterrupted") == 1

    # SQS delivering the same message again means an earlier attempt may have died before sending: send again
    again = batch(cluster, cloud, queue, [fakes.event(A)], redelivered=True)
    assert handled(again, "m-0")[0].instances[0].requested and len(queue.sent) == 3


class Killed(BaseException):
    """The invocation ended (its timeout, a crash) in the middle of a write sequence."""


def test_a_duplicate_finishes_what_a_delivery_killed_between_its_annotation_and_the_delete_left() -> None:
    cluster, cloud, queue = two_nodes()
    first = batch(cluster, cloud, queue, [fakes.event(A)])

    def killed(**_: Any) -> None:
        raise Killed

    cluster.delete_nodeclaim = killed
    with pytest.raises(Killed):
        first.handle("m-0")
    del cluster.delete_nodeclaim
    claim = cluster.nodeclaims["claim-a"]
    assert REQUESTED_AT_ANNOTATION in claim.metadata.annotations and claim.metadata.deletion_timestamp is None
    assert not cluster.nodes["node-a"].unschedulable and queue.sent == []

    outcome = handled(batch(cluster, cloud, queue, [fakes.event(A, event_id="evt-copy")]), "m-0")[0].instances[0]

    assert not outcome.duplicate and outcome.cordoned and outcome.requested
    assert cluster.nodeclaims["claim-a"].metadata.deletion_timestamp is not None
    node = cluster.nodes["node-a"]
    assert node.unschedulable and any(t.key == "karpenter.sh/disrupted" for t in node.taints)
    assert [r.nodeclaim for r in queue.sent] == ["claim-a"]


def test_a_duplicate_sends_the_request_a_delivery_killed_before_its_send_never_sent() -> None:
    cluster, cloud, queue = two_nodes()
    batch(cluster, cloud, queue, [fakes.event(A)]).handle("m-0")  # cordoned and requested, then killed: no send
    assert queue.sent == [] and cluster.nodes["node-a"].unschedulable

    outcome = handled(batch(cluster, cloud, queue, [fakes.event(A, event_id="evt-copy")]), "m-0")[0].instances[0]

    assert outcome.duplicate and outcome.requested
    assert [r.nodeclaim for r in queue.sent] == ["claim-a"]
    assert cluster.reasons().count("SpotInterrupted") == 1


def test_a_later_repeat_never_moves_the_deadline_later_and_an_earlier_one_moves_it_forward() -> None:
    cluster, cloud, queue = two_nodes()
    batch(cluster, cloud, queue, [fakes.event(A)], sent=fakes.NOW - 5).handle("m-0")
    batch(cluster, cloud, queue, [fakes.event(A)], sent=fakes.NOW).handle("m-0")
    annotations = cluster.nodeclaims["claim-a"].metadata.annotations
    assert from_rfc3339(annotations[TERMINATION_TIMESTAMP_ANNOTATION]) == fakes.NOW - 5 + 120
    batch(cluster, cloud, queue, [fakes.event(A)], sent=fakes.NOW - 30).handle("m-0")
    assert from_rfc3339(annotations[TERMINATION_TIMESTAMP_ANNOTATION]) == fakes.NOW - 30 + 120


@pytest.mark.parametrize(
    ("setting", "cordoned", "tainted", "requested", "events"),
    [
        ("ignore", False, False, False, []),
        ("event", False, False, False, ["SpotRebalanceRecommendation"]),
        ("cordon", True, False, False, ["SpotRebalanceRecommendation"]),
        ("drain", True, True, True, ["SpotRebalanceRecommendation", "TerminatingOnInterruption"]),
    ],
)
def test_a_rebalance_recommendation_follows_the_setting(
    setting: str, cordoned: bool, tainted: bool, requested: bool, events: list[str]
) -> None:
    """``cordon`` only cordons: the ``karpenter.sh/disrupted`` taint says the node is being disrupted, and would
    keep consolidation, drift and expiration away from a node nobody drains."""
    cluster, cloud, queue = two_nodes()
    work = batch(cluster, cloud, queue, [fakes.event(A, kind="rebalance")], rebalance=setting)
    handled(work, "m-0")
    assert cluster.nodes["node-a"].unschedulable is cordoned
    assert (DISRUPTED_TAINT in cluster.nodes["node-a"].taints) is tainted
    assert work.acted is tainted  # the reconcile function is woken only for pods that must move
    assert (len(queue.sent) == 1) is requested
    assert (cluster.nodeclaims["claim-a"].metadata.deletion_timestamp is not None) is requested
    assert cluster.reasons() == events
    if setting == "ignore":
        assert cloud.calls == []  # not even described


def test_a_node_not_registered_yet_has_its_nodeclaim_terminated_and_told() -> None:
    clock = fakes.Clock()
    cluster = fakes.FakeCluster.of(clock, claims=[fakes.make_claim("claim-a", instance_id=A, node=None)])
    cloud, queue = fakes.FakeCloud([fakes.make_instance(A, nodeclaim="claim-a")]), fakes.FakeQueue()
    outcome = handled(batch(cluster, cloud, queue, [fakes.event(A)]), "m-0")[0].instances[0]
    assert outcome.requested and not outcome.cordoned and outcome.node is None
    assert [(e[0], e[1], e[2]) for e in cluster.events] == [
        ("NodeClaim", "claim-a", "SpotInterrupted"),
        ("NodeClaim", "claim-a", "TerminatingOnInterruption"),
    ]


def test_a_scheduled_change_naming_two_instances_handles_both() -> None:
    cluster, cloud, queue = two_nodes()
    health = {
        "version": "0",
        "id": "h-1",
        "detail-type": "AWS Health Event",
        "source": "aws.health",
        "account": fakes.ACCOUNT,
        "time": "2026-11-22T06:00:00Z",
        "region": fakes.REGION,
        "resources": [],
        "detail": {
            "service": "EC2",
            "eventTypeCategory": "scheduledChange",
            "eventTypeCode": "AWS_EC2_RETIREMENT",
            "affectedEntities": [{"entityValue": A}, {"entityValue": B}],
        },
    }
    [outcome] = handled(batch(cluster, cloud, queue, [health]), "m-0")
    assert [i.verdict.reason for i in outcome.instances] == ["InstanceUnhealthy", "InstanceUnhealthy"]
    assert [r.reason for r in queue.sent] == ["InstanceUnhealthy", "InstanceUnhealthy"]
    # no deadline: a scheduled change's drain is bounded by the NodeClaim's terminationGracePeriod only
    assert TERMINATION_TIMESTAMP_ANNOTATION not in cluster.nodeclaims["claim-a"].metadata.annotations


def test_a_request_the_queue_refuses_fails_the_message_so_sqs_delivers_it_again() -> None:
    cluster, cloud, queue = two_nodes()
    work = batch(cluster, cloud, queue, [fakes.event(B), fakes.event(A)])
    queue.refuse_only = {"claim-a"}
    outcomes, unsent = work.send({m: work.handle(m) for m in ("m-0", "m-1")})
    assert unsent == {"m-1"}  # its request is sent again when SQS delivers it again
    assert outcomes["m-0"].instances[0].requested and not outcomes["m-1"].instances[0].requested
    assert cluster.nodeclaims["claim-a"].metadata.deletion_timestamp is not None


def test_a_batch_that_changed_nothing_wakes_nothing_and_marks_nothing() -> None:
    cluster, cloud, queue = two_nodes()
    wakes: list[float] = []
    work = batch(cluster, cloud, queue, [fakes.event(A, account="999999999999")], wakes=wakes)
    assert work.handle("m-0").ignored == "foreign_account"
    assert wakes == [] and cloud.calls == [] and cluster.calls == []


def test_of_two_copies_handled_at_once_exactly_one_requests_the_termination() -> None:
    # Given two invocations that read the same NodeClaim before either acted (SQS delivered a warning twice)
    cluster, cloud, queue = two_nodes()
    first = batch(cluster, cloud, queue, [fakes.event(A)])
    second = batch(cluster, cloud, queue, [fakes.event(A, event_id="evt-copy")])
    # When both act: the second's guarded request is refused, and it finds the first's on reading again
    assert handled(first, "m-0")[0].instances[0].requested
    outcome = handled(second, "m-0")[0].instances[0]
    assert outcome.duplicate and not outcome.requested
    assert [r.nodeclaim for r in queue.sent] == ["claim-a"]
    assert cluster.reasons().count("SpotInterrupted") == 1


def test_the_reconcile_function_is_woken_at_the_first_cordon_even_if_the_batch_then_fails() -> None:
    cluster, cloud, queue = two_nodes()
    order: list[str] = []
    marked = cloud.mark_unavailable
    cloud.mark_unavailable = lambda **kwargs: (order.append("mark"), marked(**kwargs))[-1]

    class Wakes(list[float]):
        def append(self, at: float) -> None:
            order.append("wake")
            super().append(at)

    wakes = Wakes()
    work = batch(cluster, cloud, queue, [fakes.event(A), fakes.event(B)], wakes=wakes)
    assert work.handle("m-0").instances[0].cordoned
    assert wakes == [fakes.NOW + 0.5]  # at once, not when the batch ends
    queue.refuse = True
    work.send({"m-0": work.handle("m-0"), "m-1": work.handle("m-1")})
    assert wakes == [fakes.NOW + 0.5]  # once per batch
    # the interrupted offering (both nodes share it) was marked once, before the wake
    assert order == ["mark", "wake"]
