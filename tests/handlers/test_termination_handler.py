"""The termination Lambda handler on fakes: a request whose node still drains is reported as a batch item failure
and made visible again after its round's backoff; a node that went is acknowledged and counted terminated by
reason, NodePool and capacity type; malformed and unbacked requests are acknowledged, logged and counted."""

from __future__ import annotations

import json
import threading
from typing import TYPE_CHECKING, Any

import pytest
from handler_support import fakes, points, run_handler

from nodesmith.core.errors import KubernetesError, LaunchError
from nodesmith.core.termination import TERMINATION_REASON_ANNOTATION
from nodesmith.handlers import termination, wiring
from nodesmith.handlers.settings import load_settings

if TYPE_CHECKING:
    from collections.abc import Iterator


A, B = "i-0aaaaaaaaaaaaaaa1", "i-0bbbbbbbbbbbbbbb2"


@pytest.fixture
def world() -> Iterator[dict[str, Any]]:
    clock = fakes.Clock(now=__import__("time").time())
    drifted = {TERMINATION_REASON_ANNOTATION: "Drifted"}
    cluster = fakes.FakeCluster.of(
        clock,
        nodes=[fakes.make_node("node-a", A), fakes.make_node("node-b", B)],
        claims=[
            fakes.make_claim("claim-a", instance_id=A, node="node-a", deleted_at=clock(), annotations=drifted),
            fakes.make_claim("claim-b", instance_id=B, node="node-b", deleted_at=clock(), annotations=drifted),
        ],
        pods=[fakes.make_pod("web", node="node-b")],
    )
    cluster.pdb_blocks["default/web"] = -1
    cloud = fakes.FakeCloud([fakes.make_instance(A, nodeclaim="claim-a"), fakes.make_instance(B, nodeclaim="claim-b")])
    yield {"cluster": cluster, "cloud": cloud}
    wiring.reset()


def invoke(world: dict[str, Any], records: list[dict[str, Any]]) -> tuple[Any, list[Any], list[Any]]:
    settings = load_settings(
        {"NODESMITH_CLUSTER_NAME": fakes.CLUSTER, "NODESMITH_CLUSTER_ENDPOINT": "https://k.invalid"}
    )
    backoff: list[Any] = []
    wiring.reset()
    wiring.set_ports(
        cluster=world["cluster"],
        cloud=world["cloud"],
        settings=settings,
        retry_after=lambda delays: backoff.extend(delays) or len(delays),
    )
    response, docs = run_handler(termination.handler, {"Records": records}, fakes.Context())
    return response, docs, backoff


def request(claim: str, instance_id: str, message_id: str, *, receive_count: int = 1, **kwargs: Any) -> dict[str, Any]:
    body = json.dumps({"nodeclaim": claim, "instanceId": instance_id, "reason": "Drifted", **kwargs})
    return fakes.sqs_record(body, message_id=message_id, queue="termination", receive_count=receive_count)


def test_a_draining_node_comes_back_after_its_backoff_and_an_empty_one_goes(world: dict[str, Any]) -> None:
    records = [
        request("claim-a", A, "m-a"),
        request("claim-b", B, "m-b"),
        request("claim-x", A, "m-x"),
        fakes.sqs_record('{"nodeclaim": "claim-a"}', message_id="m-junk", queue="termination"),
    ]
    response, docs, backoff = invoke(world, records)

    # claim-b still has a pod behind its budget: delivered again, after the round's 2 s
    assert response == {"batchItemFailures": [{"itemIdentifier": "m-b"}]}
    assert backoff == [("rh-m-b", 2)]
    # claim-a's node was empty: gone, and counted by Karpenter's reason
    assert "claim-a" not in world["cluster"].nodeclaims and world["cloud"].instances[A].state == "shutting-down"
    assert points(docs, "NodeClaimsTerminated") == [
        (1.0, {"Reason": "Drifted", "NodePool": "default", "CapacityType": "spot"})
    ]
    assert (1.0, {}) in points(docs, "PodsBlockedByPDB")
    assert points(docs, "TerminationRequestsIgnored") == [(1.0, {"Reason": "nodeclaim_gone"})]
    assert points(docs, "TerminationRequestsMalformed") == [(1.0, {})]
    rounds = [d for d in docs if d.get("message") == "termination round"]
    assert {(d["nodeclaim"], d["status"]) for d in rounds} == {("claim-a", "terminated"), ("claim-b", "draining")}
    # one DescribeInstances for the batch's rounds (EC2 throttles them per account), never one per record
    assert [c for c in world["cloud"].calls if c[0].startswith("get_instance")] == [("get_instances", (A, B))]


def test_a_round_that_fails_comes_back_after_the_backoff_not_the_visibility_timeout(
    world: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given EC2 refusing the batch's DescribeInstances, and the API server failing the cordon of node-b
    cluster, cloud = world["cluster"], world["cloud"]

    def throttled(**_: Any) -> Any:
        raise LaunchError("RequestLimitExceeded: Request limit exceeded.")

    def cordon(*, node_name: str, taint: Any) -> bool:
        if node_name == "node-b":
            raise KubernetesError("patch nodes/node-b: 500 Internal Server Error", status=500)
        return original(node_name=node_name, taint=taint)

    original = cluster.taint_and_cordon
    monkeypatch.setattr(cloud, "get_instances", throttled)
    monkeypatch.setattr(cluster, "taint_and_cordon", cordon)
    records = [request("claim-a", A, "m-a"), request("claim-b", B, "m-b", receive_count=3)]

    response, docs, backoff = invoke(world, records)

    # Then each round described its own instance: claim-a's node went, and claim-b's failed round is delivered
    # again after the backoff of its third delivery (2 s doubled twice), not after the queue's visibility timeout
    assert "claim-a" not in cluster.nodeclaims and cloud.instances[A].state == "shutting-down"
    assert response == {"batchItemFailures": [{"itemIdentifier": "m-b"}]}
    assert backoff == [("rh-m-b", 8)]
    failed = [d for d in docs if d.get("message") == "termination round failed"]
    assert [(d["nodeclaim"], d["retry_after"]) for d in failed] == [("claim-b", 8)] and "500" in failed[0]["error"]


def test_a_round_that_hangs_is_reported_failed_before_the_timeout_and_holds_no_other(
    world: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given the API server never answering the read of claim-b's NodeClaim, and an invocation with 2.5 s left
    cluster = world["cluster"]
    release, original = threading.Event(), cluster.get_nodeclaim

    def hangs(*, name: str) -> Any:
        if name == "claim-b":
            release.wait(30)
        return original(name=name)

    monkeypatch.setattr(cluster, "get_nodeclaim", hangs)
    monkeypatch.setattr(fakes.Context, "get_remaining_time_in_millis", lambda self: 2_500)
    try:
        response, _, backoff = invoke(world, [request("claim-a", A, "m-a"), request("claim-b", B, "m-b")])

        # Then the handler answered while claim-b's round still hung: claim-a's node went, claim-b's request comes
        # back after the backoff, not after the whole batch waited out the queue's visibility timeout
        assert not release.is_set()
        assert "claim-a" not in cluster.nodeclaims
        assert response == {"batchItemFailures": [{"itemIdentifier": "m-b"}]}
        assert backoff == [("rh-m-b", 2)]
    finally:
        release.set()
