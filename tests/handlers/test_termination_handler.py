"""The termination Lambda handler on fakes: a request whose node still drains is reported as a batch item failure
and made visible again after its round's backoff; a node that went is acknowledged and counted terminated by
reason, NodePool and capacity type; malformed and unbacked requests are acknowledged, logged and counted."""

from __future__ import annotations

import contextlib
import importlib.util
import io
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from nodesmith.core.termination import TERMINATION_REASON_ANNOTATION
from nodesmith.handlers import termination, wiring
from nodesmith.handlers.observability import logger
from nodesmith.handlers.settings import load_settings

if TYPE_CHECKING:
    from collections.abc import Iterator


def _load() -> Any:
    """tests/services/interruption_fakes.py, loaded by path (the test folders are not packages)."""
    name = "nodesmith_tests_interruption_fakes"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(
            name, Path(__file__).parents[1] / "services" / "interruption_fakes.py"
        )
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


fakes = _load()
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
    out = io.StringIO()
    handler = logger.registered_handler
    stream, handler.stream = handler.stream, out  # type: ignore[attr-defined]
    try:
        with contextlib.redirect_stdout(out):
            response = termination.handler({"Records": records}, fakes.Context())
    finally:
        handler.stream = stream  # type: ignore[attr-defined]
    docs = [json.loads(line) for line in out.getvalue().splitlines() if line.startswith("{")]
    return response, docs, backoff


def request(claim: str, instance_id: str, message_id: str, **kwargs: Any) -> dict[str, Any]:
    body = json.dumps({"nodeclaim": claim, "instanceId": instance_id, "reason": "Drifted", **kwargs})
    return fakes.sqs_record(body, message_id=message_id, queue="termination")


def points(docs: list[dict[str, Any]], name: str) -> list[tuple[float, dict[str, str]]]:
    found = []
    for doc in docs:
        if "_aws" in doc and name in doc:
            dims = {d: doc[d] for d in doc["_aws"]["CloudWatchMetrics"][0]["Dimensions"][0] if d != "service"}
            found += [(float(v), dims) for v in (doc[name] if isinstance(doc[name], list) else [doc[name]])]
    return found


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
